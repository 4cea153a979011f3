"""The advisor's kernel rules price the attention call the plan runs (estimator/advice/core.py `advised_call`):
with a sliding window through SDPA that is the dense bool-masked (seq_len × seq_len) call with k and v repeated to
every query head (estimator/model/layer_attention.py), not the (seq_len × window) band; and no kernel advice drops
the window's mask to reach a fused backend (that would drop the window)."""

from __future__ import annotations

import dataclasses

import pytest

from estimator.advice.core import FUSED, advised_call
from estimator.advice.plan_rules import advise
from estimator.model.inputs import PlanInputs
from estimator.model.layer_attention import attention_call, attention_layers
from estimator.model.presets import get_preset

PER_CALL = "attention peak_extra_bytes per layer call"
WINDOWED = {
    # fp32 with GQA: the band (no mask, 8 KV heads) would run math; the dense-masked call (32 heads) runs efficient
    "mistral fp32 h100": dict(model="mistral-7b", seq_len=32768, gpu="h100-sxm", dtype="float32"),
    "mistral fp16 t4": dict(model="mistral-7b", seq_len=16384, gpu="t4", dtype="float16"),
    "vit window 49 fp32 t4": dict(model="vit-l-16", seq_len=4096, batch=8, window=49, gpu="t4", dtype="float32"),
    "mistral training bf16": dict(model="mistral-7b", seq_len=8192, gpu="h100-sxm", mode="training"),
    "mistral fp32 cp 2": dict(model="mistral-7b", seq_len=32768, gpu="h100-sxm", dtype="float32", cp=2, gpus=2),
}


def make(model, **kw) -> PlanInputs:
    return PlanInputs(model=get_preset(model), **kw)


@pytest.mark.parametrize("case", WINDOWED)
def test_kernel_advice_prices_the_call_the_plan_runs(case):
    inputs = make(**WINDOWED[case])
    widest = attention_layers(inputs)[-1].memory  # the plan's own estimate of its widest layer's call
    items = advise(inputs)
    ids = [a.id for a in items]
    per_call = [a for a in items if a.bytes_metric == PER_CALL and a.id != "pad-head-dim"]  # pad: its own baseline
    for item in per_call:
        assert item.bytes_before == widest.peak_extra_bytes, (item.id, item.bytes_before, widest.peak_extra_bytes)
        assert item.time_ms_before == pytest.approx(widest.time_ms, rel=1e-12), item.id
    if widest.selected_backend in FUSED:
        assert "use-fused-kernel" not in ids and "math-gqa-expansion" not in ids
    profile = next(a for a in items if a.id == "profile-first")
    assert f"attention runs {widest.selected_backend}" in profile.why
    # the window's mask is not the user's to drop: no advice replaces it by is_causal
    assert "flash-ineligible-mask" not in ids
    assert not any(dict(a.change).get("mask") == "none" for a in per_call), ids


def test_the_fp32_window_runs_efficient_not_math():
    """mistral-7b fp32 on an H100: the plan runs efficient (dense mask, k/v repeated); the advice says the same."""
    inputs = make(**WINDOWED["mistral fp32 h100"])
    call = advised_call(inputs)
    assert (call.q_len, call.kv_len, call.mask, call.kv_heads) == (32768, 32768, "bool", inputs.q_heads_per_gpu)
    items = {a.id: a for a in advise(inputs)}
    assert "use-fused-kernel" not in items
    assert "flash-ineligible-dtype" in items and "(efficient →" in items["flash-ineligible-dtype"].expected_effect


@pytest.mark.parametrize("kw", [dict(model="llama-3-8b", seq_len=8192), dict(model="llama-3-8b", seq_len=8192,
                                                                                 mode="training"),
                                dict(model="llama-3-8b", seq_len=30000, cp=4, gpus=4),
                                dict(model="llama-3-8b", seq_len=4096, backend="eager"),
                                dict(model="gemma-2-9b", seq_len=20000)])  # a global layer is the widest
@pytest.mark.parametrize("mask", ["none", "bool", "float"])
def test_without_a_window_the_advised_call_is_the_plain_call(kw, mask):
    inputs = make(gpu="h100-sxm", **kw)
    expected = attention_call(inputs, mask=mask, **({"causal": False} if mask != "none" else {}))
    assert advised_call(inputs, mask) == expected


def test_a_user_mask_on_a_windowed_plan_is_the_dense_call_with_that_mask():
    inputs = make(**WINDOWED["mistral fp32 h100"])
    assert advised_call(inputs, "float") == dataclasses.replace(advised_call(inputs), mask="float", causal=False)
