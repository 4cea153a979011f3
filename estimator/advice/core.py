"""The advisor's vocabulary: the `Advice` record, the per-plan context that asks the plan and the estimator,
and the helpers that turn a before/after pair into an advice item (the rules: estimator/advice/*_rules.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from estimator.advice.tree import ADVICE_ORDER
from estimator.call.backends import PRIORITY_CUDNN_FIRST
from estimator.call.config import AttentionCall
from estimator.call.registry import SDPA_FUSED
from estimator.hardware import get_gpu
from estimator.model.layer_attention import attention_call, priced_attention_call
from estimator.units import gib

if TYPE_CHECKING:
    from estimator.model.budget import Plan

# the fused kernels SDPA can pick, in the order torch 2.11 tries them on sm90 and newer (how the advice lists them)
FUSED = tuple(b for b in PRIORITY_CUDNN_FIRST if b in SDPA_FUSED)
ATTENTION_BOTTLENECK_SHARE = 0.40  # invest in attention only once a profile shows it above 40% of the forward
# Trigger thresholds below are JUDGEMENTS of this project (no source gives them); tests pin their behaviour.
KV_DOMINATES_SHARE = 0.30  # KV bytes / (KV + weights) bytes read per decode step at which the cache matters
KV_SEQUENCE_SHARE = 0.05  # one sequence's KV cache above 5% of the GPU limits concurrency
KV_QUANT_DTYPE = "int8"  # the KV dtype the quantization advice re-runs the plan with (payload only, no scales)
TP_STATE_SHARE = 0.5  # over budget at batch 1 with the model state above half the GPU: shard the weights first
EXPERTS_DOMINATE_SHARE = 0.5  # routed-expert parameters / all parameters above which expert parallelism is advised


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
    # the whole plan re-run with `change` (kernel advice, whose bytes/time fields are per layer call, too)
    plan_bytes_after: int | None = None
    plan_time_ms_after: float | None = None

    def __post_init__(self) -> None:
        if self.id not in ADVICE_ORDER:
            raise ValueError(f"id: {self.id!r} is not a node of the decision tree")
        for field in ("bytes_before", "bytes_after", "plan_bytes_after"):
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


def ms(time_ms: float | None) -> str:
    if time_ms is None:
        return "n/a"
    return f"{time_ms:,.1f} ms" if time_ms >= 1 else f"{time_ms:,.3f} ms"


# --- what the plan and the estimator are asked ----------------------------------------------------------------


def replan_changes(inputs, changes: dict) -> dict:
    """`changes` as a user re-running `plan` with those flags makes them: a new dtype carries along what followed
    the old one, the KV-cache dtype (when it was the dtype) and, in training, the precision recipe (the same
    recipe in the new dtype: bf16-mixed -> 16-mixed, bf16-true -> 16-true; else the dtype's default), since
    PlanInputs derives the compute dtype from the recipe and would otherwise undo the change."""
    from estimator.model.recipes import DEFAULT_PRECISION, PRECISIONS

    out = dict(changes)
    new = out.get("dtype")
    if new is None or new == inputs.dtype:
        return out
    if "kv_dtype" not in out and inputs.kv_dtype == inputs.dtype:
        out["kv_dtype"] = new
    if inputs.mode == "training" and "precision" not in out:
        recipe = (inputs.precision or "").partition("-")[2]
        same = [p for p, r in PRECISIONS.items() if r.compute_dtype == new and p.partition("-")[2] == recipe]
        out["precision"] = same[0] if same else DEFAULT_PRECISION[new]
    return out


def advised_call(inputs, mask: str = "none") -> AttentionCall:
    """The widest layer's attention call as the plan prices it (estimator/model/layer_attention.py
    `priced_attention_call`: a window through SDPA is the dense bool-masked (seq_len × seq_len) call with k and v
    repeated to every query head, not a (seq_len × window) band; through eager the full causal scores; through
    flex a BlockMask), one ring block under context parallel as the plan's memory is. `mask` is a dense mask the
    user passes on top (bool or float): SDPA refuses is_causal together with attn_mask, so it replaces the causal
    flag."""
    call = priced_attention_call(inputs)
    if inputs.cp > 1:  # one (n/cp × min(span, n/cp)) ring block, not causal: the plan's memory call
        ring = attention_call(inputs)
        call = dataclasses.replace(call, q_len=ring.q_len, kv_len=ring.kv_len, causal=ring.causal)
    if mask != "none":
        call = dataclasses.replace(call, mask=mask, causal=False)
    return call


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
        self.call = advised_call(inputs, mask)
        self.window_mask = mask == "none" and self.call.mask != "none"  # the mask is the window's, not the user's
        self.decoder = inputs.model.kind == "decoder"
        if cached_len:
            if not 0 < cached_len < self.call.kv_len:
                raise ValueError(f"cached_len: must be between 0 and seq_len per GPU ({self.call.kv_len}), "
                                 f"got {cached_len}")
            self.call = dataclasses.replace(self.call, q_len=self.call.kv_len - cached_len)
        self.est = self.estimate(self.call)
        self.training = inputs.mode == "training"
        self.sharded: dict = {}  # the tensor-parallel change, once advised: later effects are also shown with it

    def plan(self, solve: bool = False, **changes) -> Plan | None:
        """`make_plan(replace(inputs, **changes), solve=solve)`, or None when the change is not a valid plan.
        `solve` also fills max_batch and max_seq_len (about 50 more budget evaluations)."""
        changes = replan_changes(self.inputs, changes)
        key = (solve, tuple(sorted((k, repr(v)) for k, v in changes.items())))
        if key not in self._plans:
            try:
                self._plans[key] = self._make_plan(dataclasses.replace(self.inputs, **changes), solve=solve)
            except ValueError:
                self._plans[key] = None
        return self._plans[key]

    def estimate(self, call: AttentionCall, gpu=None):
        return self._estimate(call, gpu or self.gpu, self.torch_version)

    def time_ms(self, plan: Plan) -> float:
        """The time the advice compares: one training step, or the prefill."""
        return float(plan.step_time_ms if self.training else plan.prefill_time_ms)

    @property
    def time_metric(self) -> str:
        return "step_time_ms" if self.training else "prefill_time_ms"

    def selected(self) -> str:
        """The backend the layer's attention runs: eager as asked, else what the estimator selects."""
        return "eager" if self.call.backend == "eager" else self.est.selected_backend

    def model_state_bytes(self, plan: Plan) -> int:
        return plan.weights_bytes + plan.gradient_bytes + plan.optimizer_bytes


def _plan_advice(ctx: _Context, advice_id: str, title: str, why: str, effect: str, after: Plan | None,
                 **changes) -> Advice:
    """An Advice whose effect is the whole plan re-run with `changes` applied (`after` = that plan)."""
    before = ctx.base
    text = effect
    if after is not None:
        text += (f" Total per GPU {gib(before.total_bytes)} → {gib(after.total_bytes)} "
                 f"({'fits' if after.fits else 'does not fit'} in {gib(after.capacity_bytes)}); "
                 f"{ctx.time_metric} {ms(ctx.time_ms(before))} → {ms(ctx.time_ms(after))}"
                 f"{_percent(ctx.time_ms(before), ctx.time_ms(after))}.")
    return Advice(id=advice_id, title=title, why=why, expected_effect=text,
                  change=tuple(replan_changes(ctx.inputs, changes).items()),
                  bytes_before=before.total_bytes, bytes_after=None if after is None else after.total_bytes,
                  time_metric=ctx.time_metric, time_ms_before=ctx.time_ms(before),
                  time_ms_after=None if after is None else ctx.time_ms(after),
                  plan_bytes_after=None if after is None else after.total_bytes,
                  plan_time_ms_after=None if after is None else ctx.time_ms(after))


def changes_text(changes) -> str:
    """(field, value) pairs as a reader writes them: 'dtype float16 and backend auto'."""
    parts = [f"{k.replace('_', ' ')} {getattr(v, 'name', v)}" for k, v in changes]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1] if parts else "no change"


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
    after_text = (f"peak {gib(est_after.peak_extra_bytes)}, {ms(est_after.time_ms)} per call, "
                  f"{ms(_times(est_after.time_ms, layers))} over {layers} layers")
    if not est.supported:  # nothing to compare with: say what runs now and what the change makes of it
        text = (f"{effect} Attention per layer: backend {call.backend} cannot run the call now; after the change "
                f"{est_after.selected_backend} runs it: {after_text}.")
    else:
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
