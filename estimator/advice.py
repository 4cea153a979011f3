"""The advisor: walks the decision tree (`estimator/decision_tree.py`) for one plan and explains each step with
numbers from our own estimator.

Every `expected_effect` is computed by re-running the estimator with the change applied
(`dataclasses.replace` on `PlanInputs`, then `make_plan`; or on the layer's `AttentionCall`, then
`estimate_call`), never by a rule of thumb. Each `Advice` keeps the exact figures: `bytes_before/after`
(what `bytes_metric` names) and `time_ms_before/after` (what `time_metric` names). Text shows GiB = 2**30.

Sources: the seeds ../shared/seeds/000 (decision tree, 40% rule, checkpointing +20–30%, P99 decode),
003 (SDPA backend choice) and 004 (eager attention, masked_fill_), checked against PyTorch 2.11
(../shared/reference/sdpa-internals.md); where a seed is out of date the advice says so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .config import KV_DTYPE_BITS, AttentionCall
from .decision_tree import ADVICE_ORDER
from .hardware import CATALOG, get_gpu

FUSED = ("cudnn", "flash", "efficient")
ATTENTION_BOTTLENECK_SHARE = 0.40  # seed 000 §4: "profile 确认 attention >40% forward 再投入"
# Trigger thresholds below are JUDGEMENTS of this project (no source gives them); tests pin their behaviour.
KV_DOMINATES_SHARE = 0.30  # KV bytes / (KV + weights) bytes read per decode step at which the cache matters
KV_SEQUENCE_SHARE = 0.05  # one sequence's KV cache above 5% of the GPU limits concurrency
KV_QUANT_DTYPE = "int8"  # the KV dtype the quantization advice re-runs the plan with (payload only, no scales)
TP_STATE_SHARE = 0.5  # over budget at batch 1 with the model state above half the GPU: shard the weights first


@dataclass(frozen=True, kw_only=True)
class Advice:
    """One recommendation: `why` holds the numbers that triggered it, `expected_effect` the re-run estimate."""

    id: str
    title: str
    why: str
    expected_effect: str
    change: tuple[tuple[str, object], ...] = ()  # what was changed to compute the effect, e.g. (("backend", "auto"),)
    bytes_metric: str = "total_bytes per GPU"
    bytes_before: int | None = None
    bytes_after: int | None = None
    time_metric: str = ""
    time_ms_before: float | None = None
    time_ms_after: float | None = None

    def __post_init__(self) -> None:
        if self.id not in ADVICE_ORDER:
            raise ValueError(f"id: {self.id!r} is not a node of the decision tree")
        for field in ("bytes_before", "bytes_after"):
            value = getattr(self, field)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ValueError(f"{field}: expected a non-negative int of bytes, got {value!r}")

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["change"] = {k: _plain(v) for k, v in self.change}
        return out


def _plain(value):
    """JSON-friendly form of a changed value (a ModelSpec becomes its name and changed head counts)."""
    if dataclasses.is_dataclass(value):
        return {"name": value.name, "q_heads": value.q_heads, "kv_heads": value.kv_heads,
                "head_dim": value.head_dim}
    return value


def gib(n_bytes: int | float | None) -> str:
    """Bytes as GiB (2**30) text; MiB below 1 GiB."""
    if n_bytes is None:
        return "n/a"
    if abs(n_bytes) < 2**30:
        return f"{n_bytes / 2**20:,.1f} MiB"
    return f"{n_bytes / 2**30:,.2f} GiB"


def ms(time_ms: float | None) -> str:
    if time_ms is None:
        return "n/a"
    return f"{time_ms:,.1f} ms" if time_ms >= 1 else f"{time_ms:,.3f} ms"


# --- what the plan and the estimator are asked ----------------------------------------------------------------


def attention_call(inputs, **changes) -> AttentionCall:
    """The attention call that one GPU runs for the plan's widest layer, as `plan.py` models it: batch per replica,
    heads split by tp; a global layer is (seq_len × seq_len), causal for decoders; a windowed layer a dense
    (seq_len × min(seq_len, w)) band; under context parallel one (seq_len/cp)² ring block, not causal.
    Forward for inference, forward_backward for training. `changes` override fields."""
    windows = inputs.windows
    span = inputs.seq_len if None in windows else min(inputs.seq_len, max(windows))
    q_len, kv_len = inputs.seq_len, span
    causal = inputs.model.kind == "decoder" and span == inputs.seq_len
    if inputs.cp > 1:
        q_len, kv_len, causal = inputs.tokens_per_gpu, min(span, inputs.tokens_per_gpu), False
    fields = dict(batch=inputs.batch_per_gpu, q_heads=inputs.q_heads_per_gpu, kv_heads=inputs.kv_heads_per_gpu,
                  head_dim=inputs.model.head_dim, q_len=q_len, kv_len=kv_len, dtype=inputs.dtype, causal=causal,
                  mask="none", mode="forward_backward" if inputs.mode == "training" else "forward",
                  backend=inputs.backend)
    fields.update(changes)
    return AttentionCall(**fields)


class _Context:
    """The base plan and memoised re-runs of the estimator with one change applied."""

    def __init__(self, inputs, make_plan, estimate_call, torch_version: str, mask: str, cached_len: int):
        self.inputs = inputs
        self.gpu = get_gpu(inputs.gpu)
        self._make_plan, self._estimate = make_plan, estimate_call
        self.torch_version = torch_version
        self._plans: dict = {}
        self.base = self.plan(solve=True)
        if self.base is None:
            raise ValueError("inputs: the plan cannot be computed for these inputs")
        # SDPA refuses is_causal together with attn_mask: a given dense mask replaces the causal flag
        self.call = attention_call(inputs, mask=mask, **({"causal": False} if mask != "none" else {}))
        self.decoder = inputs.model.kind == "decoder"
        if cached_len:
            if not 0 < cached_len < self.call.kv_len:
                raise ValueError(f"cached_len: must be between 0 and seq_len per GPU ({self.call.kv_len}), "
                                 f"got {cached_len}")
            self.call = dataclasses.replace(self.call, q_len=self.call.kv_len - cached_len)
        self.est = self.estimate(self.call)
        self.training = inputs.mode == "training"
        self.sharded: dict = {}  # the tensor-parallel change, once advised: later effects are also shown with it

    def plan(self, solve: bool = False, **changes) -> dict | None:
        """`make_plan(replace(inputs, **changes), solve=solve).to_dict()`, or None when the change is not a valid
        plan. `solve` also fills max_batch and max_seq_len (about 50 more budget evaluations)."""
        key = (solve, tuple(sorted((k, repr(v)) for k, v in changes.items())))
        if key not in self._plans:
            try:
                plan = self._make_plan(dataclasses.replace(self.inputs, **changes), solve=solve)
                self._plans[key] = plan.to_dict()
            except ValueError:
                self._plans[key] = None
        return self._plans[key]

    def estimate(self, call: AttentionCall, gpu=None):
        return self._estimate(call, gpu or self.gpu, self.torch_version)

    def time_ms(self, plan: dict) -> float:
        """The time the advice compares: one training step, or the prefill."""
        if self.training and plan.get("step_time_ms") is not None:
            return float(plan["step_time_ms"])
        return float(plan["prefill_time_ms"])

    @property
    def time_metric(self) -> str:
        return "step_time_ms" if self.training and "step_time_ms" in self.base else "prefill_time_ms"

    def selected(self) -> str:
        """The backend the layer's attention runs: eager as asked, else what the estimator selects."""
        return "eager" if self.call.backend == "eager" else self.est.selected_backend

    def model_state_bytes(self, plan: dict) -> int:
        return plan["weights_bytes"] + plan["gradient_bytes"] + plan["optimizer_bytes"]


def _plan_advice(ctx: _Context, advice_id: str, title: str, why: str, effect: str, after: dict | None,
                 **changes) -> Advice:
    """An Advice whose effect is the whole plan re-run with `changes` applied (`after` = that plan)."""
    before = ctx.base
    text = effect
    if after is not None:
        text += (f" Total per GPU {gib(before['total_bytes'])} → {gib(after['total_bytes'])} "
                 f"({'fits' if after['fits'] else 'does not fit'} in {gib(after['capacity_bytes'])}); "
                 f"{ctx.time_metric} {ms(ctx.time_ms(before))} → {ms(ctx.time_ms(after))}"
                 f"{_percent(ctx.time_ms(before), ctx.time_ms(after))}.")
    return Advice(id=advice_id, title=title, why=why, expected_effect=text, change=tuple(changes.items()),
                  bytes_before=before["total_bytes"], bytes_after=None if after is None else after["total_bytes"],
                  time_metric=ctx.time_metric, time_ms_before=ctx.time_ms(before),
                  time_ms_after=None if after is None else ctx.time_ms(after))


def _percent(before: float, after: float) -> str:
    return f" ({(after - before) / before:+.0%})" if before else ""


def _times(time_ms: float | None, count: int) -> float | None:
    return None if time_ms is None else time_ms * count


def _call_advice(ctx: _Context, advice_id: str, title: str, why: str, effect: str, call_after: AttentionCall,
                 est_after, gpu_after=None, before: tuple[AttentionCall, object] | None = None) -> Advice:
    """An Advice whose effect is one layer's attention call re-estimated (`est_after`) after the change;
    `before` overrides the baseline call and its estimate (default: the plan's own)."""
    call, est = before or (ctx.call, ctx.est)
    layers = ctx.inputs.model.layers
    before_backend = "eager" if call.backend == "eager" else est.selected_backend
    text = (f"{effect} Attention per layer ({before_backend} → {est_after.selected_backend}): peak "
            f"{gib(est.peak_extra_bytes)} → {gib(est_after.peak_extra_bytes)}, time "
            f"{ms(est.time_ms)} → {ms(est_after.time_ms)} per call, {ms(_times(est.time_ms, layers))} → "
            f"{ms(_times(est_after.time_ms, layers))} over {layers} layers.")
    changes = tuple((f, getattr(call_after, f)) for f in ("backend", "dtype", "head_dim", "mask", "causal", "q_len",
                                                          "kv_heads") if getattr(call_after, f) != getattr(ctx.call, f))
    if gpu_after is not None:
        changes += (("gpu", gpu_after.name),)
    return Advice(id=advice_id, title=title, why=why, expected_effect=text, change=changes,
                  bytes_metric="attention peak_extra_bytes per layer call", bytes_before=est.peak_extra_bytes,
                  bytes_after=est_after.peak_extra_bytes, time_metric="attention time_ms per layer call",
                  time_ms_before=est.time_ms, time_ms_after=est_after.time_ms)


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
    what = ", ".join(f"{k}={v}" for k, v in changes.items())
    return dataclasses.replace(advice, expected_effect=advice.expected_effect + (
        f" Whole plan with {what}: total per GPU {gib(ctx.base['total_bytes'])} → {gib(after['total_bytes'])} "
        f"({'fits' if after['fits'] else 'does not fit'}), {ctx.time_metric} {ms(ctx.time_ms(ctx.base))} → "
        f"{ms(ctx.time_ms(after))}."))


def _half_dtype(ctx: _Context) -> str:
    return "bfloat16" if ctx.gpu.sm >= 80 else "float16"


def _fused_fix(ctx: _Context) -> tuple[AttentionCall, object] | None:
    """The fewest changes, applied in this order, after which SDPA runs a fused backend: let PyTorch choose,
    16-bit instead of fp32, is_causal instead of a dense mask, head_dim padded to a multiple of 8."""
    steps = [dict(backend="auto"), dict(dtype=_half_dtype(ctx)), dict(mask="none", causal=ctx.decoder),
             dict(head_dim=-(-ctx.call.head_dim // 8) * 8)]
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
           + f" (seed 004: 6 kernels against 1 for a fused backend); one layer's call peaks at "
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
                 "launches a copy kernel (seed 004: 6 → 5 kernels). masked_fill_ overwrites the scores in place; "
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
    """Bytes the out-of-place `scores.masked_fill(...)` allocates (B·Hq·L·S·es, seed 004); 0 with no mask fill."""
    if not (call.causal or call.mask == "bool"):
        return 0
    return call.batch * call.q_heads * call.q_len * call.kv_len * call.element_bits // 8


def eager_forward_peak_bytes(call: AttentionCall, *, inplace_fill: bool) -> int:
    """Peak extra bytes of the eager forward under torch.no_grad(), with the causal/bool mask fill out of
    place (validation/eager.py) or in place (`masked_fill_`, seed 004): `memory.eager_timeline`."""
    from .memory import eager_timeline
    from .shapes import Calls

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
        why = (f"The {selected} path materialises the n² scores: {gib(ctx.est.scores_bytes)} of scores per layer "
               f"(B·H·L·S·element size), a peak of {gib(ctx.est.peak_extra_bytes)} per call. Why no fused backend: "
               + "; ".join(f"{b}: {', '.join(ctx.est.reasons.get(b, ())) or 'can run'}" for b in FUSED) + ".")
        if fix is None:
            out.append(Advice(id="use-fused-kernel", title="Use a fused attention kernel", why=why,
                              expected_effect="No fused backend can run this call even with 16-bit inputs, "
                                              "is_causal and an aligned head_dim; see the reasons.",
                              bytes_before=ctx.est.peak_extra_bytes, bytes_metric="attention peak_extra_bytes "
                              "per layer call", time_metric="attention time_ms per layer call",
                              time_ms_before=ctx.est.time_ms))
        else:
            title = f"Use a fused attention kernel ({fix[1].selected_backend})"
            advice = _call_advice(ctx, "use-fused-kernel", title, why, "With the changes listed in `change`:", *fix)
            plan_changes = {k: v for k, v in advice.change if k in ("backend", "dtype")}
            if len(plan_changes) == len(advice.change):  # a mask or a padded head_dim is not in the plan
                advice = _with_plan(ctx, advice, **plan_changes)
            out.append(advice)
    blockers = _flash_blockers(ctx, ctx.call)
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
            why + " Flash in torch 2.11 takes any head_dim up to 256 (it pads to a multiple of 8 itself; seed 000's "
                  "'pad 80 to 96 for flash' is out of date); efficient has no upper bound but needs head_dim % 8 == 0;"
                  " cuDNN needs head_dim ≤ 128.",
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
        "Flash in torch 2.11 takes any head_dim ≤ 256 and pads to a multiple of 8 itself, so seed 000's "
        "'pad 80 → 96 for flash' is out of date (80 is aligned already); on Hopper with torch 2.11 PyTorch "
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


# --- plan rules (the whole model on one GPU) ---------------------------------------------------------------------


def rule_fits(ctx: _Context) -> list[Advice]:
    base = ctx.base
    if not base["fits"]:
        return []
    headroom = base["capacity_bytes"] - base["total_bytes"]
    limits = []
    if base.get("max_batch"):
        limits.append(f"up to batch {base['max_batch']:,}")
    if base.get("max_seq_len"):
        limits.append(f"up to seq_len {base['max_seq_len']:,}")
    why = (f"Total per GPU {gib(base['total_bytes'])} of {gib(base['capacity_bytes'])} "
           f"({base['total_bytes'] / base['capacity_bytes']:.0%}); attention runs {base['selected_backend']}.")
    return [Advice(id="fits", title=f"It fits, with {gib(headroom)} of headroom", why=why,
                   expected_effect=f"No change needed. Headroom {gib(headroom)}"
                                   + (f"; the estimator fits {' and '.join(limits)}." if limits else "."),
                   bytes_before=base["total_bytes"], bytes_after=base["total_bytes"], time_metric=ctx.time_metric,
                   time_ms_before=ctx.time_ms(base), time_ms_after=ctx.time_ms(base))]


def _shares(base: dict) -> str:
    """The plan's time shares (plan.py `_times`: attention = q/k/v/o projections + core)."""
    whole = "training step" if base.get("inputs", {}).get("mode") == "training" else "forward"
    return (f"attention {base['attention_share']:.1%} (projections and core), FFN {base['ffn_share']:.1%}, "
            f"embedding {base['embedding_share']:.1%} of the {whole} time")


PASSIVE = ("fits", "attention-not-bottleneck", "split-prefill-decode", "log-backend")  # need no profile first


def profile_first(ctx: _Context) -> Advice:
    """Added whenever any other advice changes the kernel, the architecture or the parallelism (seed 000)."""
    base = ctx.base
    return Advice(
        id="profile-first", title="Profile first: measure where the forward time and memory go",
        why=f"Estimated {_shares(base)}; "
            + ("it fits" if base["fits"] else "it does not fit" if base.get("supported", True)
               else f"backend {ctx.inputs.backend} cannot run it")
            + f" and attention runs {ctx.selected()}. Seed 000: profile before choosing kernel, architecture "
              "or parallelism.",
        expected_effect="Confirms which advice below applies: torch.profiler (ProfilerActivity.CUDA) sorted by "
                        "cuda_time_total; at seq_len × 2, attention time should grow about 4× on the math path.",
        bytes_before=base["total_bytes"], bytes_after=base["total_bytes"], time_metric=ctx.time_metric,
        time_ms_before=ctx.time_ms(base), time_ms_after=ctx.time_ms(base))


def rule_not_bottleneck(ctx: _Context) -> list[Advice]:
    base, out = ctx.base, []
    share = base["attention_share"]
    if share < ATTENTION_BOTTLENECK_SHARE and base.get("supported", True):
        time_ms = ctx.time_ms(base)
        out.append(Advice(
            id="attention-not-bottleneck", title="Attention is not the bottleneck: look at the FFN and embedding",
            why=f"Estimated {_shares(base)}: attention is under {ATTENTION_BOTTLENECK_SHARE:.0%} (seed 000: below "
                "that a faster kernel is not worth the effort; reduce FFN width, use fewer FFN/embedding bytes).",
            expected_effect=f"Even an attention kernel taking no time at all would save at most {share:.1%}: "
                            f"{ctx.time_metric} {ms(time_ms)} → {ms(time_ms * (1 - share))} (upper bound).",
            bytes_before=base["total_bytes"], bytes_after=base["total_bytes"], time_metric=ctx.time_metric,
            time_ms_before=time_ms, time_ms_after=time_ms * (1 - share)))
    return out


def _solved(ctx: _Context, field: str, solved_key: str, low: int, high: int) -> tuple[int | None, dict | None]:
    """Largest value in [low, high] of an integer input (batch, seq_len) whose plan fits: the plan's own solver
    result (`max_batch`, `max_seq_len`) when it has one, else a bisection over re-run plans."""
    solved = ctx.base.get(solved_key)
    if solved is not None:
        if not low <= solved <= high:
            return None, None
        after = ctx.plan(**{field: solved})
        return (solved, after) if after is not None and after["fits"] else (None, None)
    best = (None, None)
    while low <= high:
        mid = (low + high) // 2
        plan = ctx.plan(**{field: mid})
        if plan is not None and plan["fits"]:
            best, low = (mid, plan), mid + 1
        else:
            high = mid - 1
    return best


def rule_over_budget(ctx: _Context) -> list[Advice]:
    base, inputs = ctx.base, ctx.inputs
    out: list[Advice] = []
    capacity = base["capacity_bytes"]
    state = ctx.model_state_bytes(base)
    dp = inputs.dp
    if not base.get("supported", True):
        return []  # the forced backend cannot run: the kernel rules explain it, the totals mean nothing yet
    if base["fits"]:
        return _kv_rules(ctx)
    over = base["total_bytes"] - capacity
    why_over = f"Total per GPU {gib(base['total_bytes'])} exceeds {gib(capacity)} by {gib(over)}"
    best = ctx.plan(batch=dp, **({"checkpointing": "full"} if ctx.training else {}),
                    **({"backend": "auto"} if inputs.backend in ("math", "eager") else {}))
    batch_one_over = best is not None and not best["fits"]
    if state > capacity or (batch_one_over and state > TP_STATE_SHARE * capacity):
        tp, gpus, after = _parallel_degree(ctx, "tp")
        if tp is not None:
            parts = (f"weights {gib(base['weights_bytes'])}, gradients {gib(base['gradient_bytes'])}, optimizer "
                     f"{gib(base['optimizer_bytes'])}" if ctx.training else f"weights {gib(base['weights_bytes'])}")
            reason = ("more than one GPU: no kernel or sequence change can fix that" if state > capacity else
                      f"{state / capacity:.0%} of the GPU, and even at batch 1 it does not fit: sharding the "
                      "weights frees the most")
            out.append(_plan_advice(
                ctx, "tensor-parallel", f"Tensor parallel over {tp} GPUs",
                f"{why_over}; the model state alone ({parts}) is {gib(state)}, {reason}."
                + (" (Sharding only the optimizer and gradients, ZeRO/FSDP, is the data-parallel alternative.)"
                   if ctx.training else ""),
                f"Heads, FFN and vocabulary split {tp} ways (tp={tp} on {gpus} GPUs).", after, tp=tp, gpus=gpus))
            ctx.sharded = {"tp": tp, "gpus": gpus}
    if inputs.batch_per_gpu > 1 and state <= capacity:
        batch, after = _solved(ctx, "batch", "max_batch", dp, inputs.batch - 1)
        if batch is not None:
            out.append(_plan_advice(
                ctx, "reduce-batch", f"Reduce the batch to {batch:,}",
                f"{why_over} at batch {inputs.batch:,}, but it fits at batch {batch:,}: over budget only at the "
                "larger batch, so reduce the batch first (seed 000) and accumulate gradients or queue requests.",
                f"Batch {inputs.batch:,} → {batch:,}.", after, batch=batch))
    if ctx.training and inputs.checkpointing != "full":
        out.extend(_checkpointing(ctx, why_over))
    if batch_one_over and state <= capacity:
        out.extend(_sequence_rules(ctx, why_over, best))
    return out + _kv_rules(ctx)


def _checkpointing(ctx: _Context, why_over: str) -> list[Advice]:
    """Where the activations are, from the plan re-run with each checkpointing level: selective recomputes the
    attention core (Korthikanti et al. 2022 §4.2), full recomputes the whole layer, FFN included. The cheapest
    level that fits is advised, else full."""
    base, current = ctx.base, ctx.inputs.checkpointing
    levels = {level: ctx.plan(checkpointing=level) for level in ("selective", "full") if level != current}
    levels = {k: v for k, v in levels.items() if v is not None}
    if not levels:
        return []
    level = next((k for k, v in levels.items() if v["fits"]), list(levels)[-1])
    saved = "; ".join(f"{k} (recompute the {'attention core' if k == 'selective' else 'whole layer, FFN too'}) "
                      f"saves {gib(base['total_bytes'] - v['total_bytes'])}" for k, v in levels.items())
    return [_plan_advice(
        ctx, "activation-checkpointing", f"Activation checkpointing ({level})",
        f"{why_over}; training activations are {gib(base['activation_bytes'])} per GPU. Checkpoint where the "
        f"activations are (seed 000): {saved}. Seed 000 expects 20–30% more step time; the estimate below "
        "counts the recomputation.",
        f"checkpointing {current} → {level}.", levels[level], checkpointing=level)]


def _parallel_degree(ctx: _Context, field: str) -> tuple[int | None, int | None, dict | None]:
    """Smallest tp (or cp) of 2, 4, 8, 16, 32, 64 × the current one whose plan fits, else the largest valid one:
    (degree, gpus, plan). The job's GPUs are reused when they divide (fewer data-parallel replicas), else
    more GPUs keep the replicas."""
    inputs = ctx.inputs
    last = (None, None, None)
    for degree in (d * getattr(inputs, field) for d in (2, 4, 8, 16, 32, 64)):
        group = degree * (inputs.cp if field == "tp" else inputs.tp)
        gpus = inputs.gpus if inputs.gpus % group == 0 else group * inputs.dp
        plan = ctx.plan(**{field: degree}, gpus=gpus)
        if plan is None:
            continue
        last = (degree, gpus, plan)
        if plan["fits"]:
            break
    return last


def _sequence_rules(ctx: _Context, why_over: str, best: dict) -> list[Advice]:
    """Still over budget at batch 1 (with a fused kernel and full checkpointing where they apply)."""
    inputs, out = ctx.inputs, []
    why = (f"{why_over}, and even at batch 1{' with full checkpointing' if ctx.training else ''} and a fused "
           f"kernel it needs {gib(best['total_bytes'])}: the sequence itself is the problem (seed 000: batch=1 "
           "still OOM is a kernel/architecture problem).")
    windows = inputs.windows
    span = inputs.seq_len if None in windows else min(inputs.seq_len, max(windows))  # widest attention now
    window = min(4096, 1 << max(6, (inputs.seq_len // 4).bit_length() - 1))
    after = ctx.plan(window=window) if window < span else None
    if after is not None:
        now = "global attention" if span == inputs.seq_len else f"a widest window of {span:,}"
        out.append(_plan_advice(
            ctx, "window-attention", f"Window attention ({window:,} tokens)",
            why + " A window of w tokens makes attention O(n·w) instead of O(n²) (Swin, Mistral) and bounds the "
                  "KV cache; it changes the model (fine-tune).",
            f"{now} → a window of {window:,} on every layer.", after, window=window))
    seq, after = _solved(ctx, "seq_len", "max_seq_len", inputs.cp, inputs.seq_len - 1)
    if seq is not None:
        shorter = ("fewer patches (patch merging, a larger patch, a lower resolution)"
                   if inputs.model.kind == "encoder" else "a shorter context (truncate, chunk, retrieve)")
        out.append(_plan_advice(ctx, "reduce-seq-len", f"Reduce the sequence to {seq:,} tokens", why +
                                f" The longest sequence that fits is {seq:,}: {shorter}.",
                                f"seq_len {inputs.seq_len:,} → {seq:,}.", after, seq_len=seq))
    cp, gpus, after = _parallel_degree(ctx, "cp")
    if cp is not None:
        out.append(_plan_advice(
            ctx, "context-parallel", f"Context parallel over {cp} GPUs",
            why + " Context parallel (ring attention) splits the sequence, its activations and KV cache across "
                  "GPUs; it composes with flash/cuDNN.",
            f"cp {inputs.cp} → {cp} on {gpus} GPUs.", after, cp=cp, gpus=gpus))
    return out


def _kv_rules(ctx: _Context) -> list[Advice]:
    """KV cache dominating decode (inference, decoders): quantize it; fewer KV heads for MHA models."""
    base, inputs = ctx.base, ctx.inputs
    if ctx.training or inputs.model.kind != "decoder" or base["kv_cache_bytes"] == 0:
        return []
    kv, weights = base["kv_cache_bytes"], base["weights_bytes"]
    decode_share = kv / (kv + weights)
    per_sequence = base.get("kv_cache_bytes_per_sequence") or base["kv_cache_bytes_per_token"] * inputs.seq_len
    if decode_share < KV_DOMINATES_SHARE and per_sequence < KV_SEQUENCE_SHARE * base["capacity_bytes"]:
        return []
    why = (f"KV cache {gib(kv)} per GPU ({gib(per_sequence)} per {inputs.seq_len:,}-token sequence, "
           f"{base['kv_cache_bytes_per_token']:,} bytes per token) against weights {gib(weights)}: "
           f"{decode_share:.0%} of the bytes each decode step reads, and it caps the concurrent sequences.")
    out = []
    if KV_DTYPE_BITS[inputs.kv_dtype] > 8:
        after = ctx.plan(solve=True, kv_dtype=KV_QUANT_DTYPE)
        if after is not None:
            grouped = (f" The model already shares KV heads (GQA: {inputs.model.q_heads} query heads on "
                       f"{inputs.model.kv_heads} KV heads), so quantization is the remaining lever."
                       if inputs.model.kv_heads < inputs.model.q_heads else "")
            advice = _plan_advice(ctx, "kv-cache-quantization", f"Quantize the KV cache ({KV_QUANT_DTYPE})",
                                  why + grouped, f"kv_dtype {inputs.kv_dtype} → {KV_QUANT_DTYPE}.", after,
                                  kv_dtype=KV_QUANT_DTYPE)
            out.append(_with_sharding(ctx, _with_decode(advice, base, after), kv_dtype=KV_QUANT_DTYPE))
    model = inputs.model
    if model.kv_heads == model.q_heads and model.q_heads > 1:
        group = next((g for g in (8, 4, 2) if model.q_heads % g == 0), 1)
        grouped_model = dataclasses.replace(model, kv_heads=model.q_heads // group, name=f"{model.name}-gqa{group}")
        after = ctx.plan(solve=True, model=grouped_model)
        if after is not None and group > 1:
            advice = _plan_advice(ctx, "gqa", f"Use GQA ({model.q_heads} → {model.q_heads // group} KV heads)",
                                  why + " The model is multi-head (one KV head per query head); GQA/MQA shrink the "
                                  "cache with the kernel unchanged (an architecture change: uptraining).",
                                  f"kv_heads {model.kv_heads} → {grouped_model.kv_heads}.", after,
                                  model=grouped_model)
            out.append(_with_sharding(ctx, _with_decode(advice, base, after), model=grouped_model))
    return out


def _with_decode(advice: Advice, base: dict, after: dict) -> Advice:
    if base.get("decode_time_ms_per_token") is None or after.get("decode_time_ms_per_token") is None:
        return advice
    extra = (f" Decode {ms(base['decode_time_ms_per_token'])} → {ms(after['decode_time_ms_per_token'])} per token")
    if base.get("max_batch") is not None and after.get("max_batch") is not None and (base["max_batch"]
                                                                                       or after["max_batch"]):
        extra += f"; concurrent sequences that fit {base['max_batch']:,} → {after['max_batch']:,}"
    return dataclasses.replace(advice, expected_effect=advice.expected_effect + extra + ".")


def _with_sharding(ctx: _Context, advice: Advice, **changes) -> Advice:
    """When tensor parallel is advised too, add this change's effect on top of it (both re-run with the solver)."""
    if not ctx.sharded:
        return advice
    sharded, both = ctx.plan(solve=True, **ctx.sharded), ctx.plan(solve=True, **ctx.sharded, **changes)
    if sharded is None or both is None:
        return advice
    text = (f" With tp={ctx.sharded['tp']} as well: total per GPU {gib(sharded['total_bytes'])} → "
            f"{gib(both['total_bytes'])}")
    if sharded.get("max_batch") is not None and both.get("max_batch") is not None:
        text += f", concurrent sequences that fit {sharded['max_batch']:,} → {both['max_batch']:,}"
    return dataclasses.replace(advice, expected_effect=advice.expected_effect + text + ".")


def rule_operate(ctx: _Context) -> list[Advice]:
    base, inputs, out = ctx.base, ctx.inputs, []
    same = dict(bytes_before=base["total_bytes"], bytes_after=base["total_bytes"], time_metric=ctx.time_metric,
                time_ms_before=ctx.time_ms(base), time_ms_after=ctx.time_ms(base))
    if not ctx.training and inputs.model.kind == "decoder" and base.get("decode_time_ms_per_token") is not None:
        out.append(Advice(
            id="split-prefill-decode", title="Measure prefill and decode separately; hold the SLA on P99 decode",
            why="Prefill is compute-bound and O(n²) in attention; decode is bandwidth-bound and reads the weights "
                "and the whole KV cache per token (seed 000: the serving SLA is P99 decode latency, not a prefill "
                "benchmark; a training step time is neither).",
            expected_effect=f"Estimated prefill {ms(base['prefill_time_ms'])} for {inputs.batch:,} × "
                            f"{inputs.seq_len:,} tokens; decode {ms(base['decode_time_ms_per_token'])} per token "
                            "at the end of the context (the slowest step, the one P99 sees). Report both, measured "
                            "on production sequence lengths.", **same))
    backend = base["selected_backend"]
    hopper = ctx.gpu.sm >= 90 and inputs.dtype != "float32"
    out.append(Advice(
        id="log-backend", title="Log the attention backend at step 0",
        why=f"The estimator expects {backend} here. A silent fallback to math is the failure seed 000 §9 describes; "
            + ("on Hopper with torch 2.11 PyTorch prefers cuDNN over flash for fp16/bf16 (the seeds assume flash; "
               "out of date). " if hopper else "")
            + "Log torch._fused_sdp_choice(q, k, v, ...) or the profiler's kernel name "
              "(flash_fwd, fmha_cutlassF, cudnn ... sdpa, or aten::bmm for math) at the first step.",
        expected_effect="No memory or time change: it catches a fallback before it costs a run.", **same))
    return out


RULES = (rule_fits, rule_not_bottleneck, rule_eager, rule_fused, rule_over_budget, rule_operate)


def advise(inputs, *, mask: str = "none", cached_len: int = 0, make_plan=None, estimate_call=None,
           torch_version: str | None = None) -> list[Advice]:
    """Advice for one plan, most important first (the decision tree's pre-order).

    Two properties of the attention call that the plan does not price can be given: `mask` (a dense
    (batch, 1, q_len, kv_len) bool or float mask passed to SDPA) and `cached_len` (tokens already in the KV
    cache, as in chunked prefill: the call is causal with q_len = seq_len - cached_len < kv_len). The kernel
    rules use them; the plan's totals do not include them. `make_plan` / `estimate_call` default to the
    estimator's own; tests may pass others."""
    if make_plan is None:
        from .plan import make_plan
    if estimate_call is None:
        from .attention import estimate_call
    ctx = _Context(inputs, make_plan, estimate_call, torch_version or getattr(inputs, "torch_version", "2.11"),
                   mask, int(cached_len))
    found: dict[str, Advice] = {}
    for rule in RULES:
        for advice in rule(ctx):
            found.setdefault(advice.id, advice)
    if any(advice_id not in PASSIVE for advice_id in found):
        found["profile-first"] = profile_first(ctx)
    return sorted(found.values(), key=lambda a: ADVICE_ORDER.index(a.id))
