"""Shared test helpers and the hypothesis profile.

- The hypothesis profile "ci" (40 examples, no deadline) is loaded for every property test.
- Small fakes of `make_plan` and `estimate_call` for the advisor's rule tests: PyTorch 2.11 eligibility
  (docs/sdpa-internals.md) with deliberately simple byte and time formulas, so that each rule can be driven
  into and out of its trigger. The scenario tests use the real estimator.
- `check_effect`: the numbers in an advice are the estimator's own, re-run with `advice.change`.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import fields, replace
from types import SimpleNamespace

import pytest
from hypothesis import settings

from estimator.advice.core import advised_call
from estimator.advice.plan_rules import eager_forward_peak_bytes
from estimator.call.attention import estimate_call
from estimator.call.backends import DEFAULT_TORCH
from estimator.call.config import DTYPE_BITS, KV_DTYPE_BITS
from estimator.hardware import get_gpu
from estimator.model.budget import Component, Plan
from estimator.model.plan import make_plan

settings.register_profile("ci", max_examples=40, deadline=None)
settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _restore_main_module():
    """Streamlit's AppTest runs a page as `__main__` and leaves it there; a multiprocessing `spawn` child (the
    validation runner's) then re-runs that page as its main module and dies. Each test gets back the real one."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


def reasons_for(call, gpu) -> dict[str, tuple[str, ...]]:
    es_ok = call.dtype in ("float16", "bfloat16")
    flash, eff, cudnn = [], [], []
    if not es_ok:
        flash.append("dtype float32")
        cudnn.append("dtype float32")
    if call.mask != "none":
        flash.append("attn_mask")
    if call.head_dim > 256:
        flash.append("head_dim > 256")
    if gpu.sm < 80:
        flash.append("sm < 80")
        cudnn.append("sm < 80")
    if call.causal and call.q_len != call.kv_len:
        flash.append("causal q_len != kv_len")
    if call.head_dim % (8 if es_ok else 4):
        eff.append("head_dim % 8")
    if call.head_dim % 8 or call.head_dim > 128:
        cudnn.append("head_dim")
    if call.kv_heads != call.q_heads:
        eff.append("GQA")
    flex = ("dense attn_mask",) if call.mask in ("bool", "float") else ()
    return {"cudnn": tuple(cudnn), "flash": tuple(flash), "efficient": tuple(eff), "math": (), "flex": flex}


def fake_estimate(call, gpu, torch_version=DEFAULT_TORCH):
    reasons = reasons_for(call, gpu)
    order = ("cudnn", "flash", "efficient", "math") if gpu.sm >= 90 else ("flash", "efficient", "math", "cudnn")
    if call.backend == "eager":
        selected = "eager"
    elif call.backend == "auto":
        selected = next(b for b in order if not reasons[b])
    else:
        selected = call.backend if not reasons[call.backend] else "none"
    es = call.element_bits // 8
    scores = call.batch * call.q_heads * call.q_len * call.kv_len * es
    q_bytes = call.batch * call.q_heads * call.q_len * call.head_dim * es
    p4 = scores * 4 // es
    factor = 2 if call.training else 1
    peak = {"math": 9 * p4 // 4 * factor, "eager": 3 * scores * factor}.get(selected, q_bytes * 4 * factor)
    flops = 4 * call.batch * call.q_heads * call.q_len * call.kv_len * call.head_dim * (3 if call.training else 1)
    rate = gpu.peak_flops_per_s["float32" if selected == "math" else call.dtype]
    return SimpleNamespace(supported=selected != "none", selected_backend=selected, reasons=reasons,
                           peak_extra_bytes=None if selected == "none" else peak, scores_bytes=scores,
                           time_ms=flops / rate * 1e3 * {"cudnn": 0.8, "flash": 1}.get(selected, 2), flops=flops)


def fake_make_plan(inputs, solve=True):
    """A `Plan` of weights, KV cache, activations and the attention peak of one layer, on the fake estimator."""
    from estimator.model.layer_attention import attention_call

    gpu, m = get_gpu(inputs.gpu), inputs.model
    es = DTYPE_BITS[inputs.dtype] // 8
    params = m.params
    weights = params * es // inputs.tp
    training = inputs.mode == "training"
    grads, optim = (params * es // inputs.tp, params * 12 // inputs.tp) if training else (0, 0)
    n, b = inputs.tokens_per_gpu, inputs.batch_per_gpu
    kv_len = min(n, inputs.window or n)
    kv_tok = 2 * m.layers * inputs.kv_heads_per_gpu * m.head_dim * KV_DTYPE_BITS[inputs.kv_dtype] // 8
    kv = 0 if training or m.kind != "decoder" else kv_tok * kv_len * b
    keep = {"none": 16, "selective": 10, "full": 1, "hf": 1}[inputs.checkpointing]
    act = keep * n * b * m.hidden * es * m.layers if training else 0
    est = fake_estimate(attention_call(inputs), gpu)
    attn = est.peak_extra_bytes or 0
    total = weights + grads + optim + kv + act + attn
    ffn_flops = 2 * 3 * m.hidden * m.ffn * n * b
    attn_time = est.time_ms * m.layers
    other_ms = ffn_flops * m.layers / gpu.peak_flops_per_s[inputs.dtype] * 1e3
    prefill = attn_time + other_ms
    step = prefill * (3 + (inputs.checkpointing != "none"))
    decode = (weights + kv) / gpu.hbm_bytes_per_s * 1e3 if m.kind == "decoder" else None
    components = (Component(key="weights", label="weights", bytes=weights),
                  *((Component(key="gradients", label="gradients", bytes=grads),
                     Component(key="optimizer_state", label="optimizer state", bytes=optim)) if training else
                    (Component(key="kv_cache", label="kv cache", bytes=kv),)),
                  Component(key="activations", label="activations", bytes=act + attn))
    return Plan(inputs=inputs, supported=est.supported, verdict="", selected_backend=est.selected_backend,
                params=params, params_per_gpu=params // inputs.tp, weights_bytes=weights, kv_cache_bytes=kv,
                kv_cache_bytes_per_token=kv_tok, kv_cache_bytes_per_sequence=kv_tok * kv_len,
                attention_scores_bytes=est.scores_bytes, textbook_scores_bytes=est.scores_bytes,
                activation_bytes=act, gradient_bytes=grads, optimizer_bytes=optim, workspace_bytes=0,
                total_bytes=total, capacity_bytes=gpu.memory_bytes, allocator_reserve_bytes=0,
                fits=total <= gpu.memory_bytes, prefill_flops=0, prefill_executed_flops=0, training_step_flops=0,
                decode_flops_per_token=0, prefill_time_ms=prefill, step_time_ms=step,
                decode_time_ms_per_token=decode, decode_first_pass_ms_per_token=None, prefill_tokens_per_s=0.0,
                decode_tokens_per_s=None, attention_share=attn_time / prefill, ffn_share=other_ms / prefill,
                expert_ffn_share=0.0, embedding_share=0.0, other_share=0.0, flops_shares={},
                components=components,
                activation_detail={"ffn": act // 2, "attention": act // 2} if act else {}, assumptions=())


def fake_inputs(**kw):
    """A PlanInputs (the real dataclass) with defaults for the fakes."""
    from estimator.model.inputs import PlanInputs
    from estimator.model.presets import get_preset

    model = kw.pop("model", "llama-2-7b")
    if isinstance(model, str):
        model = get_preset(model)
    model = dataclasses.replace(model, **kw.pop("model_changes", {}))
    return PlanInputs(model=model, **{"seq_len": 4096, "gpu": "h100-sxm", **kw})


def check_effect(inputs, options, advice):
    """The numbers in the advice are the estimator's own, re-run with `advice.change`."""
    change = dict(advice.change)
    if not change and advice.bytes_after is None:  # advice without a change to re-run (no fused backend exists)
        assert advice.id == "use-fused-kernel"
        return
    time_key = "step_time_ms" if inputs.mode == "training" else "prefill_time_ms"
    if advice.bytes_metric.startswith("total_bytes per GPU (linear-attention what-if"):
        from estimator.model.linear_attention import linear_whatif

        plan = make_plan(inputs)
        kind, _, rank = change["attention"].partition(":")
        w = linear_whatif(plan, "performer", inputs.model.head_dim, softmax_every=int(rank.split("/")[1])) \
            if kind == "hybrid" else linear_whatif(plan, kind, int(rank))
        assert (advice.bytes_before, advice.bytes_after) == (plan.total_bytes, w.total_bytes)
        assert advice.time_ms_after == pytest.approx(w.time_ms, rel=1e-12)
        return
    if advice.bytes_metric == "total_bytes per GPU":
        assert advice.bytes_before == make_plan(inputs, solve=False).total_bytes
        if change:
            after = make_plan(replace(inputs, **change), solve=False)
            assert advice.bytes_after == after.total_bytes
            assert advice.time_ms_after == pytest.approx(getattr(after, time_key), rel=1e-12)
        return
    call = advised_call(inputs, options["mask"])  # the call the plan prices (a window: its dense-masked call)
    if options["cached_len"]:
        call = replace(call, q_len=call.kv_len - options["cached_len"])
    gpu = get_gpu(inputs.gpu)
    if advice.id == "inplace-masked-fill":
        assert advice.bytes_before == eager_forward_peak_bytes(call, inplace_fill=False)
        assert advice.bytes_after == eager_forward_peak_bytes(call, inplace_fill=True)
        return
    assert advice.bytes_metric == "attention peak_extra_bytes per layer call"
    baseline = replace(call, backend="auto") if advice.id == "pad-head-dim" else call
    assert advice.bytes_before == estimate_call(baseline, gpu, inputs.torch_version).peak_extra_bytes
    call_fields = {f.name for f in fields(call)}  # the plan-only fields a dtype change carries along stay out
    after = estimate_call(replace(call, **{k: v for k, v in change.items() if k in call_fields}),
                          get_gpu(change.get("gpu", inputs.gpu)), inputs.torch_version)
    assert advice.bytes_after == after.peak_extra_bytes
    assert advice.time_ms_after == pytest.approx(after.time_ms, rel=1e-12)
    if advice.plan_bytes_after is not None:  # the whole plan re-run with the change, as its text quotes it
        plan_fields = {f.name for f in fields(inputs)}
        replanned = make_plan(replace(inputs, **{k: v for k, v in change.items() if k in plan_fields}), solve=False)
        assert advice.plan_bytes_after == replanned.total_bytes
        assert advice.plan_time_ms_after == pytest.approx(getattr(replanned, time_key), rel=1e-12)
