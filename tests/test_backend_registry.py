"""The backend registry (estimator/call/registry.py): one record per backend, duplicates refused, and every room's
per-backend table keyed by exactly the registered names."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimator.call import backends, memory, op_chain, registry, timing
from estimator.call.allocator import MIN_BLOCK_BYTES, CachingAllocator, block_bytes
from estimator.call.config import AttentionCall
from estimator.call.shapes import Calls


def test_a_name_is_registered_once():
    before = registry.names()
    with pytest.raises(ValueError, match="'flash' is registered twice"):
        registry.register(registry.get("flash"))
    with pytest.raises(ValueError, match="'math' has its memory timeline registered twice"):
        registry.register_timeline("math")(memory.math_timeline)
    with pytest.raises(ValueError, match="'sparse' is not registered"):
        registry.register_timeline("sparse")(memory.math_timeline)
    assert registry.names() == before


def test_a_record_that_contradicts_itself_is_refused():
    flash = registry.get("flash")
    with pytest.raises(ValueError, match="^op_chain: "):
        dataclasses.replace(flash, op_chain=True)
    with pytest.raises(ValueError, match="^flops: "):
        dataclasses.replace(flash, flops=registry.FlopsRule(counted="bmm", executed="all"))
    with pytest.raises(ValueError, match="^error_band: "):
        dataclasses.replace(flash, error_band=(0.01, 0.02))
    with pytest.raises(ValueError, match="^name: "):
        dataclasses.replace(flash, name="auto")
    with pytest.raises(ValueError, match="^executed: "):
        registry.FlopsRule(counted="sdpa", executed="some")


def test_the_lists_derived_from_the_records():
    assert registry.BACKENDS == ("auto", "math", "flash", "efficient", "cudnn", "eager", "flex", "flash-attn")
    assert registry.SDPA_BACKENDS == ("math", "flash", "efficient", "cudnn")
    # two meanings of "fused": one tiled kernel (timing, FLOPs), and the fused kernels SDPA can pick (advice)
    assert registry.FUSED == ("flash", "efficient", "cudnn", "flex", "flash-attn")
    assert registry.SDPA_FUSED == ("flash", "efficient", "cudnn")
    assert registry.OP_CHAIN == ("math", "eager")
    from estimator.advice.core import FUSED

    assert FUSED == ("cudnn", "flash", "efficient")  # listed in the order torch tries them on Hopper


def test_every_room_keys_its_table_by_the_registered_names():
    names = set(registry.names())
    assert all(registry.has_timeline(name) for name in names)
    c = Calls.from_call(AttentionCall(batch=1, q_heads=4, kv_heads=4, head_dim=64, q_len=256, kv_len=256))
    assert set(backends.eligibility(c, 90)) == set(registry.names(always_runs=False))
    assert set(backends.PRIORITY_DEFAULT) == set(backends.PRIORITY_CUDNN_FIRST) == set(registry.SDPA_BACKENDS)
    assert set(op_chain.CHAINS) == set(registry.OP_CHAIN)
    own_fit = {b for b in names if registry.get(b).priced_as is None}
    # flex is priced by its Triton kernels' own configs and rates (estimator/call/flex_time.py), not by a fit
    assert {name for name, _ in timing.FIT_FACTORS} == own_fit - {"flex"}


def test_a_backend_priced_as_another_runs_that_ones_timeline():
    c = Calls.from_call(AttentionCall(batch=2, q_heads=8, kv_heads=2, head_dim=128, q_len=2048, kv_len=2048,
                                      causal=True, mode="forward_backward"))
    assert registry.get("flash-attn").priced_as == "flash"
    fa, flash = (memory.backend_timeline(c, b, 132) for b in ("flash-attn", "flash"))
    assert fa.peak == flash.peak and fa.events_for(None) == flash.events_for(None)


def test_mask_input_decides_the_mask_bytes():
    c = Calls.from_call(AttentionCall(batch=1, q_heads=4, kv_heads=4, head_dim=64, q_len=1024, kv_len=1024,
                                      mask="window:256"))
    sizes = {b: int(c.input_sizes(np.asarray(b, dtype=object))[3]) for b in registry.names()}
    assert sizes["flash-attn"] == 0  # window_size is an argument
    assert sizes["flex"] == 4 * 4 * 8 * 8  # a BlockMask: 4 int32 (1, 8, 8) tensors
    assert {sizes[b] for b in registry.names(mask_input="dense")} == {1024 * 1024}  # the dense bool mask


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 64 * 2**20))
def test_block_bytes_is_the_block_the_allocator_hands_out(nbytes):
    # one home for the allocator's size rules: the counting rule the timelines use (block_bytes) is the size of
    # the block the caching-allocator replay gives a first request
    block = CachingAllocator(capacity_bytes=1 << 40).malloc(nbytes)
    assert block.size == int(block_bytes(np.int64(nbytes)))
    assert block.size % MIN_BLOCK_BYTES == 0


def test_every_backend_and_auto_has_its_chart_style():
    from ui.figures import BACKEND_COLORS, BACKEND_DASHES, BACKEND_MARKERS

    for style in (BACKEND_COLORS, BACKEND_DASHES, BACKEND_MARKERS):
        assert set(style) == set(registry.BACKENDS)
