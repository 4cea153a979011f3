"""Engine KV pools. hf-cb: our solve against transformers 5.17's own PagedAttentionMemoryHandler run on CPU for the
same config and the same available bytes (the handler only does arithmetic; its get_available_memory is given the
figure), so blocks and max_batch_tokens must agree exactly. vLLM / SGLang / TensorRT-LLM: properties of the rule
(the logged startup figures are tests/test_serve_startup_logs.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from estimator.model.inputs import PlanInputs
from estimator.model.presets import get_preset
from estimator.serve.engines import EngineConfig, resolve_config
from estimator.serve.memory import engine_memory, hf_cb_memory

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from transformers.generation.configuration_utils import ContinuousBatchingConfig  # noqa: E402
from transformers.generation.continuous_batching.cache import (  # noqa: E402
    PagedAttentionMemoryHandler,
    group_layers_by_attn_type,
)
from transformers.generation.continuous_batching.initialization import (  # noqa: E402
    resolve_continuous_batching_config,
)
from transformers.generation.continuous_batching.utils import WorkloadHints  # noqa: E402

GIB = 1 << 30


def hf_config(name: str):
    """A transformers config with the preset's shape (Llama or Gemma-2 classes: full or alternating layers)."""
    spec = get_preset(name)
    windows = spec.window_per_layer
    common = dict(hidden_size=spec.hidden, num_attention_heads=spec.q_heads, num_key_value_heads=spec.kv_heads,
                  num_hidden_layers=spec.layers, intermediate_size=spec.ffn, vocab_size=spec.vocab,
                  head_dim=spec.head_dim)
    if any(w is not None for w in windows):
        cfg = transformers.Gemma2Config(**common, sliding_window=max(w for w in windows if w),
                                        layer_types=["sliding_attention" if w else "full_attention"
                                                     for w in windows])
    else:
        cfg = transformers.LlamaConfig(**common)
    cfg._attn_implementation = "paged|sdpa"
    return cfg


def transformers_solve(cfg, available: int, *, num_blocks=None, max_batch_tokens=None, block_size=256,
                       requests=200, prompt=2048, output=128):
    cb = ContinuousBatchingConfig(num_blocks=num_blocks, max_batch_tokens=max_batch_tokens, block_size=block_size)
    cb = resolve_continuous_batching_config(cfg, cb, WorkloadHints(max_prompt_length=prompt,
                                                                    max_generated_length=output,
                                                                    num_requests=requests), False)

    class Handler(PagedAttentionMemoryHandler):
        def get_available_memory(self):
            return available

    groups, types = group_layers_by_attn_type(cfg)
    return Handler(cfg, cb, torch.bfloat16, types, len(groups[0])).infer_max_batch_tokens_and_num_blocks()


def ours(name: str, available: int, **knobs):
    plan = PlanInputs(model=get_preset(name), seq_len=2048 + 128, gpu="h200")
    config = resolve_config(EngineConfig(engine="hf-cb", **knobs), 2048 + 128, num_requests=200,
                            hint_tokens=2048 + 128)
    mem = hf_cb_memory(plan, config, available)
    return mem.max_batch_tokens, mem.num_blocks


@pytest.mark.parametrize("name", ["llama-3-8b", "llama-2-7b", "qwen2.5-7b", "gemma-2-9b", "llama-3-70b"])
@pytest.mark.parametrize("available_gib", [20, 60, 123.4])
def test_hf_cb_solve_matches_transformers(name, available_gib):
    available = int(available_gib * GIB)
    assert ours(name, available) == transformers_solve(hf_config(name), available)


@pytest.mark.parametrize("knobs", [{"num_blocks": 1000}, {"max_batch_tokens": 2048}, {"max_batch_tokens": 512},
                                   {"block_size": 64}, {"num_blocks": 300, "max_batch_tokens": 1024}])
def test_hf_cb_fixed_knobs_match_transformers(knobs):
    available = 40 * GIB
    assert ours("llama-3-8b", available, **knobs) == transformers_solve(hf_config("llama-3-8b"), available, **knobs)


def test_hf_cb_footprint_over_memory_is_an_error():
    with pytest.raises(ValueError, match="^num_blocks: "):
        ours("llama-3-8b", 4 * GIB, num_blocks=100_000, max_batch_tokens=1024)


def test_hf_cb_mask_is_counted_and_can_exceed_the_cache():
    """The dense (1, 1, M, N + M) mask of paged|sdpa: M·(N + M)·2 bytes; on a 2-layer Llama-3 shape (8 KiB of
    cache per token) it is larger than the KV pool (16 KiB per cache page at M = 8192)."""
    model = replace(get_preset("llama-3-8b"), layers=2, window_per_layer=None)
    plan = PlanInputs(model=model, seq_len=4096, gpu="h200")
    config = resolve_config(EngineConfig(engine="hf-cb", num_blocks=64, max_batch_tokens=8192), 4096)
    mem = engine_memory(plan, config)
    N = 64 * 256
    assert mem.mask_bytes == 8192 * (N + 8192) * 2
    assert mem.mask_bytes > mem.kv_cache_bytes
    flash = engine_memory(replace(plan, backend="flash-attn"), config)
    assert flash.mask_bytes == 0


@pytest.mark.parametrize("engine", ["hf-cb", "vllm", "sglang", "trtllm"])
def test_more_memory_never_fewer_blocks(engine):
    plan = PlanInputs(model=get_preset("llama-3-8b"), seq_len=4096, gpu="h200")
    previous = 0
    for fraction in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95):
        mem = engine_memory(plan, resolve_config(EngineConfig(engine=engine, memory_fraction=fraction), 4096))
        assert mem.num_blocks >= previous
        assert mem.kv_cache_bytes <= mem.capacity_bytes
        previous = mem.num_blocks
    bigger = engine_memory(replace(plan, gpu="h100-sxm"), resolve_config(EngineConfig(engine=engine), 4096))
    assert bigger.num_blocks < mem.num_blocks or engine == "sglang"


@pytest.mark.parametrize("engine", ["hf-cb", "vllm", "sglang", "trtllm"])
def test_weights_that_do_not_fit_are_one_line(engine):
    plan = PlanInputs(model=get_preset("llama-3-70b"), seq_len=4096, gpu="l4")
    with pytest.raises(ValueError) as info:
        engine_memory(plan, resolve_config(EngineConfig(engine=engine), 4096))
    assert "\n" not in str(info.value) and str(info.value).split(":")[0] in ("gpu", "memory_fraction")


def test_sliding_window_groups_cap_blocks_per_request():
    plan = PlanInputs(model=get_preset("gemma-2-9b"), seq_len=8192, gpu="h200")
    mem = engine_memory(plan, resolve_config(EngineConfig(engine="hf-cb"), 8192))
    assert (mem.full_groups, mem.sliding_groups, mem.window) == (1, 1, 4096)
    assert mem.blocks_for(8192) == 32 + 16  # 32 blocks of the full group, the sliding one capped at 4096 / 256
    assert mem.blocks_for(100) == 2


def test_tensor_parallel_splits_kv_heads():
    one = engine_memory(PlanInputs(model=get_preset("llama-3-70b"), seq_len=4096, gpu="h200", tp=2),
                        resolve_config(EngineConfig(engine="vllm"), 4096))
    four = engine_memory(PlanInputs(model=get_preset("llama-3-70b"), seq_len=4096, gpu="h200", tp=4),
                         resolve_config(EngineConfig(engine="vllm"), 4096))
    assert four.kv_bytes_per_token * 2 == one.kv_bytes_per_token
    assert four.weights_bytes < one.weights_bytes
    assert four.kv_cache_tokens > one.kv_cache_tokens


def test_hf_cb_allocates_one_mask_per_layer_type_present():
    """The solve counts two masks when a sliding group exists; the engine allocates one per layer type present
    (transformers 5.17 input_outputs.py): two for Gemma-2 (full and sliding), one for Mistral (every layer slides)."""
    for name, expected in (("gemma-2-9b", 2), ("mistral-7b", 1), ("llama-3-8b", 1)):
        plan = PlanInputs(model=get_preset(name), seq_len=4096, gpu="h200")
        mem = engine_memory(plan, resolve_config(EngineConfig(engine="hf-cb", num_blocks=100,
                                                              max_batch_tokens=1024), 4096))
        assert mem.mask_bytes == expected * 1024 * (100 * 256 + 1024) * 2


@pytest.mark.parametrize("name, layers, measured_mib", [
    ("llama-3.1-8b", None, 129.49), ("mistral-7b", None, 129.49), ("qwen2.5-7b", None, 129.36),
    ("llama-3.1-8b", 16, 65.74), ("phi-3-mini", None, 1.62), ("gemma-2-9b", None, 0.84),
    ("mixtral-8x7b", 8, 33.37)])
def test_weights_allocator_slack_matches_the_h200(name, layers, measured_mib):
    """Reserved minus allocated after loading, as serve-gpu measured it on the H200
    (validation/data/h200_serve_heldout_summary.csv: reserved_before_bytes - weights_bytes, one row per model;
    mixtral-8x7b at 8 layers, its fused 3-D expert tensors: h200_serve_heldout4_summary.csv): within 0.5 MiB."""
    from estimator.serve.weights import weights_allocator_bytes

    model = get_preset(name)
    if layers:
        model = replace(model, layers=layers, window_per_layer=None)
    allocated, reserved = weights_allocator_bytes(PlanInputs(model=model, seq_len=1024, gpu="h200"))
    assert (reserved - allocated) / 2**20 == pytest.approx(measured_mib, abs=0.5)
