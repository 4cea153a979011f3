"""`linear-attention` / `hybrid-architecture`: offered when an inference plan does not fit, attention dominates
and a window does not fit either; their numbers are the linear-attention what-if of the plan, set beside the
window and fewer-tokens alternatives, with the quality caveat and no accuracy figure."""

from __future__ import annotations

import re

import pytest

from estimator.advice.plan_rules import advise
from estimator.advice.tree import ADVICE_ORDER, render_tree
from estimator.model.inputs import PlanInputs
from estimator.model.linear_attention import QUALITY_CAVEAT, linear_whatif
from estimator.model.plan import make_plan
from estimator.model.presets import get_preset
from tests.conftest import check_effect

LONG = PlanInputs(model=get_preset("llama-3.1-8b"), seq_len=1 << 20, gpu="h200")


@pytest.fixture(scope="module")
def long_advice():
    return {a.id: a for a in advise(LONG)}


def test_offered_with_the_whatif_numbers_beside_the_alternatives(long_advice):
    for advice_id in ("linear-attention", "hybrid-architecture"):
        item = long_advice[advice_id]
        check_effect(LONG, {"mask": "none", "cached_len": 0}, item)
        assert item.bytes_after < item.bytes_before and item.time_ms_after < item.time_ms_before
        assert "window of 4,096 through flex" in item.why and "longest sequence that fits" in item.why
        assert QUALITY_CAVEAT in item.expected_effect
        assert not re.search(r"\d+(\.\d+)?\s*%\s*(accuracy|perplexity|quality)", item.expected_effect)
    plan = make_plan(LONG)
    performer = linear_whatif(plan, "performer", 256)
    assert performer.kv_cache_bytes == 32 * 8 * (256 * 128 + 256) * 2  # fixed state, every layer, not per token
    assert ADVICE_ORDER.index("reduce-seq-len") < ADVICE_ORDER.index("linear-attention") \
        < ADVICE_ORDER.index("context-parallel")


@pytest.mark.parametrize("inputs", [PlanInputs(model=get_preset("llama-3.1-8b"), seq_len=8192, gpu="h200"),
                                    PlanInputs(model=get_preset("llama-3.1-8b"), seq_len=65536, gpu="h200",
                                               mode="training")],
                         ids=["fits", "training"])
def test_not_offered_when_it_fits_or_when_training(inputs):
    ids = {a.id for a in advise(inputs)}
    assert not ids & {"linear-attention", "hybrid-architecture"}


def test_hybrid_keeps_the_softmax_layers_cache():
    plan = make_plan(LONG)
    hybrid = linear_whatif(plan, "performer", 128, softmax_every=4)
    state = 24 * 8 * (128 * 128 + 128) * 2
    assert hybrid.kv_cache_bytes == plan.kv_cache_bytes * 8 // 32 + state
    linformer = linear_whatif(plan, "linformer", 256)
    assert linformer.kv_cache_bytes == plan.kv_cache_bytes  # causal decoding re-projects the whole cache
    assert linformer.extra_weight_bytes == 32 * 2 * 256 * (1 << 20) * 2  # E and F grow with n


@pytest.mark.parametrize("kw,field", [({"kind": "nystrom", "rank": 64}, "kind"), ({"kind": "performer", "rank": 0},
                                                                                   "rank")])
def test_whatif_refuses_bad_input(kw, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        linear_whatif(make_plan(LONG, solve=False), **kw)
    training = make_plan(PlanInputs(model=get_preset("llama-3.1-8b"), seq_len=4096, gpu="h200", mode="training"),
                         solve=False)
    with pytest.raises(ValueError, match="^mode:"):
        linear_whatif(training, "performer", 256)


def test_tree_has_the_branch():
    text = render_tree()
    assert "attention dominates and a window is not enough" in text
    assert "[linear-attention, hybrid-architecture]" in text


def test_hybrid_model_advice_is_re_planned():
    """A Mamba2 prefill that does not fit on the torch fallback: the fused kernels (not priced), a smaller
    chunk_size and the longest sequence that fits, each a re-plan of the same model."""
    from dataclasses import replace

    from estimator.advice.hybrid_rules import hybrid_advice
    from estimator.model.hybrid import hybrid_from_hf_config
    from estimator.model.hybrid_plan import hybrid_plan

    spec = hybrid_from_hf_config({"model_type": "mamba2", "num_hidden_layers": 2})
    items = hybrid_advice(spec, mode="prefill", seq_len=6_000, batch=2, dtype="bfloat16", gpu="h200")
    ids = [a.id for a in items]
    assert ids[0] == "mamba-fast-kernels" and items[0].bytes_after is None
    assert {"mamba-chunk-size", "reduce-batch", "reduce-seq-len"} <= set(ids)
    chunk = next(a for a in items if a.id == "mamba-chunk-size")
    c = dict(chunk.change)["chunk_size"]
    again = hybrid_plan(replace(spec, mixer=replace(spec.mixer, chunk=c)), seq_len=6_000, batch=2, gpu="h200")
    assert chunk.bytes_after == again.total_bytes < chunk.bytes_before
    seq = next(a for a in items if a.id == "reduce-seq-len")
    L = dict(seq.change)["seq_len"]
    assert hybrid_plan(spec, seq_len=L, batch=2, gpu="h200").fits and L < 6_000
