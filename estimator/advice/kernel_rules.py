"""The advisor's kernel rules: one layer's attention call (eager → SDPA, fused kernels, why flash cannot run,
head-dim padding, GQA expansion on the math path), each effect from `estimate_call` re-run with the change.

The call is the one the plan prices (estimator/advice/core.py `advised_call`): with a sliding window through SDPA
the dense bool-masked (seq_len × seq_len) call, never the (seq_len × window) band. That mask is the window's, so
no rule here advises dropping it (the window rules do: run it through flex)."""

from __future__ import annotations

import dataclasses

from estimator.advice.core import (
    FUSED,
    Advice,
    _call_advice,
    _Context,
    _plan_advice,
    changes_text,
    ms,
    replan_changes,
)
from estimator.call.config import AttentionCall
from estimator.hardware import CATALOG
from estimator.units import gib

# --- kernel rules (one layer's attention call) -------------------------------------------------------------------


def _flash_blockers(ctx: _Context, call: AttentionCall) -> list[str]:
    """Which contract §4 reasons keep flash from this call (PyTorch 2.11 `can_use_flash_attention`,
    cuda/sdp_utils.cpp): fp32, head_dim > 256, any attn_mask, sm < 80, is_causal with q_len ≠ kv_len."""
    found = []
    if call.dtype == "float32":
        found.append("dtype")
    if call.head_dim > 256:
        found.append("head-dim")
    if call.mask != "none":
        found.append("mask")
    if ctx.gpu.sm < 80:
        found.append("gpu")
    if call.causal and call.q_len != call.kv_len and call.mask == "none":
        found.append("causal")
    return found


def _with_plan(ctx: _Context, advice: Advice, **changes) -> Advice:
    """Append the whole plan re-run with `changes` to a kernel advice's effect (its numeric fields stay per call)."""
    after = ctx.plan(**changes)
    if after is None:
        return advice
    changes = replan_changes(ctx.inputs, changes)  # as `plan` with these flags: what followed the dtype follows
    merged = dict(advice.change) | changes
    return dataclasses.replace(advice, change=tuple(merged.items()), plan_bytes_after=after.total_bytes,
                               plan_time_ms_after=ctx.time_ms(after), expected_effect=advice.expected_effect + (
        f" Whole plan with {changes_text(changes.items())}: total per GPU {gib(ctx.base.total_bytes)} → "
        f"{gib(after.total_bytes)} ({'fits' if after.fits else 'does not fit'}), {ctx.time_metric} "
        f"{ms(ctx.time_ms(ctx.base))} → {ms(ctx.time_ms(after))}."))


def _half_dtype(ctx: _Context) -> str:
    return "bfloat16" if ctx.gpu.sm >= 80 else "float16"


def _fused_fix(ctx: _Context) -> tuple[AttentionCall, object] | None:
    """The fewest changes, applied in this order, after which SDPA runs a fused backend: let PyTorch choose,
    16-bit instead of fp32, is_causal instead of a dense mask (not a window's: that would drop the window),
    head_dim padded to a multiple of 8."""
    steps = [dict(backend="auto"), dict(dtype=_half_dtype(ctx)), dict(mask="none", causal=ctx.decoder),
             dict(head_dim=-(-ctx.call.head_dim // 8) * 8)]
    if ctx.window_mask:
        del steps[2]
    call = ctx.call
    for step in steps:
        call = dataclasses.replace(call, **step)
        est = ctx.estimate(call)
        if est.supported and est.selected_backend in FUSED:
            return call, est
    return None


def rule_eager(ctx: _Context) -> list[Advice]:
    if ctx.call.backend != "eager":
        return []
    out = []
    after = ctx.plan(backend="auto")
    sdpa = ctx.estimate(dataclasses.replace(ctx.call, backend="auto"))
    call = ctx.call
    extras = [text for text, present in (
        ("K and V copied to every query head (repeat_interleave)", call.kv_heads < call.q_heads),
        ("a second copy from the out-of-place mask fill", call.causal or call.mask != "none"),
        ("an fp32 softmax upcast", call.dtype != "float32")) if present]
    why = (f"Attention runs hand-written (eager): it materialises the (B, H, L, S) scores in {call.dtype}"
           + "".join(f", {text}" for text in extras)
           + f" (6 kernels against 1 for a fused backend); one layer's call peaks at "
             f"{gib(ctx.est.peak_extra_bytes)} above its inputs.")
    advice = _plan_advice(ctx, "eager-to-sdpa", "Replace the hand-written attention by scaled_dot_product_attention",
                          why, f"SDPA selects {sdpa.selected_backend} here (per layer {gib(ctx.est.peak_extra_bytes)} "
                               f"→ {gib(sdpa.peak_extra_bytes)}).", after, backend="auto")
    out.append(advice)
    inplace = _inplace_saving_bytes(ctx.call)
    if not ctx.training and inplace:
        before = eager_forward_peak_bytes(ctx.call, inplace_fill=False)
        after = eager_forward_peak_bytes(ctx.call, inplace_fill=True)
        copy_ms = 2 * inplace / ctx.gpu.hbm_bytes_per_s * 1e3  # the removed copy reads and writes the scores
        est = ctx.est
        peak_text = (f"the layer's peak {gib(before)} → {gib(after)}" if after < before else
                     f"the layer's peak stays {gib(before)} (it is set by the fp32 softmax, not by this copy)")
        out.append(Advice(
            id="inplace-masked-fill", title="In inference, fill the mask in place: scores.masked_fill_(...)",
            why=(f"The out-of-place masked_fill allocates one more {gib(inplace)} scores tensor per layer and "
                 "launches a copy kernel (6 → 5 kernels). masked_fill_ overwrites the scores in place; "
                 "it breaks autograd, so only under torch.no_grad() (inference), never in training."),
            expected_effect=(f"One fewer (B, H, L, S) allocation of {gib(inplace)} and one fewer kernel per layer; "
                             f"{peak_text}; about {ms(copy_ms)} less per call (the copy's read and write at "
                             f"{ctx.gpu.hbm_bytes_per_s / 1e12:.2f} TB/s) of the estimated {ms(est.time_ms)}."),
            bytes_metric="eager forward peak_extra_bytes per layer call (memory.py timeline, fill in place)",
            bytes_before=before, bytes_after=after, time_metric="attention time_ms per layer call",
            time_ms_before=est.time_ms, time_ms_after=max(0.0, est.time_ms - copy_ms),
            change=(("masked_fill", "in place"),)))
    return out


def _inplace_saving_bytes(call: AttentionCall) -> int:
    """Bytes the out-of-place `scores.masked_fill(...)` allocates (B·Hq·L·S·es); 0 with no mask fill."""
    if not (call.causal or call.mask == "bool"):
        return 0
    return call.batch * call.q_heads * call.q_len * call.kv_len * call.element_bits // 8


def eager_forward_peak_bytes(call: AttentionCall, *, inplace_fill: bool) -> int:
    """Peak extra bytes of the eager forward under torch.no_grad(), with the causal/bool mask fill out of
    place (validation/call/eager.py) or in place (`masked_fill_`): `memory.eager_timeline`."""
    from estimator.call.memory import eager_timeline
    from estimator.call.shapes import Calls

    c = Calls.from_call(dataclasses.replace(call, mode="forward"))
    return int(eager_timeline(c, inplace_fill=inplace_fill).peak)


def rule_fused(ctx: _Context) -> list[Advice]:
    """use-fused-kernel, flash-ineligible-*, pad-head-dim and math-gqa-expansion."""
    out: list[Advice] = []
    selected = ctx.selected()
    sdpa_selected = ctx.estimate(dataclasses.replace(ctx.call, backend="auto")).selected_backend
    on_math = selected == "math" or (selected == "eager" and sdpa_selected == "math") or selected == "none"
    fix = _fused_fix(ctx)
    flash_reasons = "; ".join(ctx.est.reasons.get("flash", ())) or "none"
    if on_math:
        blocked = {b: ", ".join(ctx.est.reasons.get(b, ())) for b in FUSED}
        runnable = [b for b in FUSED if not blocked[b]]
        if ctx.call.backend in ("math", "eager") and runnable:  # forced: say so, not 'why no fused backend'
            reason = (f"the backend is forced to {ctx.call.backend}; {', '.join(runnable)} could run this call"
                      + "".join(f"; {b} cannot: {blocked[b]}" for b in FUSED if blocked[b]))
        else:
            reason = "Why no fused backend: " + "; ".join(f"{b}: {blocked[b] or 'can run'}" for b in FUSED)
        why = (f"The {selected} path materialises the n² scores: {gib(ctx.est.scores_bytes)} of scores per layer "
               f"(B·H·L·S·element size), a peak of {gib(ctx.est.peak_extra_bytes)} per call. {reason[0].upper()}"
               f"{reason[1:]}.")
        if fix is None:
            tried = ("16-bit inputs and an aligned head_dim (the window's dense mask kept)" if ctx.window_mask
                     else "16-bit inputs, is_causal and an aligned head_dim")
            out.append(Advice(id="use-fused-kernel", title="Use a fused attention kernel", why=why,
                              expected_effect=f"No fused backend can run this call even with {tried}; see the "
                                              "reasons.",
                              bytes_before=ctx.est.peak_extra_bytes, bytes_metric="attention peak_extra_bytes "
                              "per layer call", time_metric="attention time_ms per layer call",
                              time_ms_before=ctx.est.time_ms))
        else:
            title = f"Use a fused attention kernel ({fix[1].selected_backend})"
            moved = [(f, getattr(fix[0], f)) for f in ("backend", "dtype", "mask", "causal", "head_dim")
                     if getattr(fix[0], f) != getattr(ctx.call, f)]
            advice = _call_advice(ctx, "use-fused-kernel", title, why, f"With {changes_text(moved)}:", *fix)
            plan_changes = {k: v for k, v in advice.change if k in ("backend", "dtype")}
            if len(plan_changes) == len(advice.change):  # a mask or a padded head_dim is not in the plan
                advice = _with_plan(ctx, advice, **plan_changes)
            out.append(advice)
    blockers = [b for b in _flash_blockers(ctx, ctx.call) if not (b == "mask" and ctx.window_mask)]
    if on_math or "dtype" in blockers:
        for blocker in blockers:
            advice = _flash_blocker_advice(ctx, blocker, flash_reasons)
            if advice is not None:
                out.append(advice)
    pad = _pad_head_dim(ctx)
    if pad is not None:
        out.append(pad)
    if selected in ("math", "eager") and ctx.call.kv_heads < ctx.call.q_heads:
        out.append(_gqa_expansion(ctx, selected, fix))
    return out


def _flash_blocker_advice(ctx: _Context, blocker: str, flash_reasons: str) -> Advice | None:
    call = ctx.call
    why = f"Flash cannot run this call (estimator: {flash_reasons})."
    if blocker == "dtype":
        half = _half_dtype(ctx)
        after_call = dataclasses.replace(call, dtype=half, backend="auto")
        advice = _call_advice(
            ctx, "flash-ineligible-dtype", f"Run attention in {half}: fp32 rules out flash and cuDNN",
            why + " Flash and cuDNN take fp16/bf16 only; fp32 runs efficient (no GQA in torch 2.11) or math, "
                  "at the fp32 (non-tensor-core) rate.",
            f"In {half} SDPA selects {ctx.estimate(after_call).selected_backend}.", after_call,
            ctx.estimate(after_call))
        return _with_plan(ctx, advice, dtype=half, backend="auto")
    if blocker == "head-dim":
        others = [b for b in ("efficient", "cudnn") if not ctx.est.reasons.get(b)]
        after_call = dataclasses.replace(call, backend=others[0] if others else "auto", head_dim=call.head_dim
                                         if others else 256)
        return _call_advice(
            ctx, "flash-ineligible-head-dim", f"head_dim {call.head_dim} > 256: flash cannot run it",
            why + " Flash in torch 2.11 takes any head_dim up to 256 (it pads to a multiple of 8 itself; the common "
                  "advice 'pad 80 to 96 for flash' is out of date); efficient has no upper bound but needs "
                  "head_dim % 8 == 0; cuDNN needs head_dim ≤ 128.",
            ("Efficient can run it as is." if others else "No fused backend takes it: the estimate is for a model "
             "with head_dim 256 (an architecture change)."), after_call, ctx.estimate(after_call))
    if blocker == "mask":
        after_call = dataclasses.replace(call, mask="none", causal=ctx.decoder, backend="auto")
        return _call_advice(
            ctx, "flash-ineligible-mask", "Replace the dense mask by is_causal=True" if ctx.decoder else
            "Drop the dense mask",
            why + f" Any attn_mask rules out flash; a dense ({call.batch}, 1, {call.q_len}, {call.kv_len}) "
                  f"{call.mask} mask also costs its own bytes and, on the math path, a converted additive copy.",
            ("If the mask is the causal mask, pass is_causal=True and no mask." if ctx.decoder else
             "If the mask only hides padding, pack or bucket sequences of equal length and pass no mask."),
            after_call, ctx.estimate(after_call))
    if blocker == "gpu":
        newer = sorted((g for g in CATALOG.values() if g.sm >= 80 and g.memory_bytes >= ctx.gpu.memory_bytes),
                       key=lambda g: (g.memory_bytes, g.name))
        if not newer:
            return None
        after_call = dataclasses.replace(call, backend="auto")
        advice = _call_advice(
            ctx, "flash-ineligible-gpu", f"{ctx.gpu.label} is sm{ctx.gpu.sm}: no flash (needs sm80+)",
            why + " Flash and cuDNN need Ampere (sm80) or newer; efficient runs on sm50+ (fp16/fp32, no bf16).",
            f"On the nearest sm80+ GPU in the catalog ({newer[0].label}):", after_call,
            ctx.estimate(after_call, newer[0]), gpu_after=newer[0])
        return _with_plan(ctx, advice, gpu=newer[0].name, backend="auto")
    if blocker == "causal":
        after_call = dataclasses.replace(call, backend="auto")
        alt = ctx.estimate(after_call)
        return _call_advice(
            ctx, "flash-ineligible-causal", "is_causal with q_len ≠ kv_len rules out flash",
            why + f" Flash's is_causal needs q_len == kv_len (here {call.q_len} and {call.kv_len}); efficient "
                  "and cuDNN accept it.", f"PyTorch selects {alt.selected_backend}.", after_call, alt)
    return None


def _pad_head_dim(ctx: _Context) -> Advice | None:
    """head_dim % 8 != 0: efficient and cuDNN refuse it and flash copies q, k, v to a padded head_dim on every call
    (attention.cpp pad_last_dim<8>). Advised when the estimator says the call with head_dim rounded up to a multiple
    of 8 (`auto`) runs a fused backend instead of math, or is faster or has a lower peak. The baseline is what SDPA
    selects now (`auto`), also for eager and forced backends."""
    call = dataclasses.replace(ctx.call, backend="auto")
    if call.head_dim % 8 == 0 or call.head_dim > 256:
        return None
    est_now = ctx.estimate(call)
    padded = dataclasses.replace(call, head_dim=-(-call.head_dim // 8) * 8)
    est = ctx.estimate(padded)
    if not est.supported or est.selected_backend not in FUSED:
        return None
    if est_now.supported and est_now.selected_backend in FUSED and not (
            est.time_ms < est_now.time_ms or est.peak_extra_bytes < est_now.peak_extra_bytes):
        return None
    now = est_now.selected_backend
    gain = (f"so that {est.selected_backend} can run" if est.selected_backend != now else
            f"so that {now} needs no per-call padding copies")
    return _call_advice(
        ctx, "pad-head-dim", f"Pad head_dim {call.head_dim} → {padded.head_dim} {gain}",
        f"head_dim {call.head_dim} is not a multiple of 8: efficient and cuDNN refuse it "
        f"(efficient: {', '.join(est_now.reasons.get('efficient', ())) or 'can run'}; cuDNN: "
        f"{', '.join(est_now.reasons.get('cudnn', ())) or 'can run'}), so SDPA runs {now}"
        + (", which copies q, k and v to a padded head_dim on every call" if now == "flash" else "") + ". "
        "Flash in torch 2.11 takes any head_dim ≤ 256 and pads to a multiple of 8 itself, so the common "
        "advice 'pad 80 → 96 for flash' is out of date (80 is aligned already); on Hopper with torch 2.11 PyTorch "
        "prefers cuDNN over flash when cuDNN can run.",
        f"Pad in the weights: zero columns in W_q, W_k, W_v (head_dim {call.head_dim} → {padded.head_dim}) and zero "
        f"rows in W_o, keeping the softmax scale 1/sqrt({call.head_dim}); the estimate is the padded call "
        "(padding q, k, v per call instead would add their copies back).", padded, est, before=(call, est_now))


def _gqa_expansion(ctx: _Context, selected: str, fix) -> Advice:
    """Math and eager copy K and V to q_heads: 2·B·Hq·S·D·es bytes (math: es = 4 after the fp32 upcast;
    attention.cpp pre_process_group_query_attention_input; eager: repeat_interleave in the input dtype)."""
    call = ctx.call
    es_bytes = 4 if selected == "math" else call.element_bits // 8
    copies = 2 * call.batch * call.q_heads * call.kv_len * call.head_dim * es_bytes
    why = (f"GQA ({call.q_heads} query heads on {call.kv_heads} KV heads): the {selected} path copies K and V to "
           f"{call.q_heads} heads with repeat_interleave, {gib(copies)} per layer call "
           f"(2·B·Hq·S·D·{es_bytes} bytes). Flash and cuDNN read the grouped K/V directly; efficient has no GQA "
           "in torch 2.11.")
    if fix is None or fix[1].selected_backend == "efficient":
        after_call = dataclasses.replace(call, backend="math", kv_heads=call.q_heads)
        return _call_advice(ctx, "math-gqa-expansion", f"GQA on the {selected} path expands K and V", why,
                            "No fused GQA backend runs here; the math path with ungrouped K/V is shown for "
                            "comparison.", after_call, ctx.estimate(after_call))
    return _call_advice(ctx, "math-gqa-expansion", f"GQA on the {selected} path expands K and V", why,
                        f"On {fix[1].selected_backend} the copies disappear.", *fix)
