"""Whole-model capacity plan: the per-GPU memory budget, FLOPs and time of a prefill (inference) or of one
mixed-precision AdamW step (training), built on the attention estimator (`estimate_call`).

All byte figures are per GPU and exact ints; FLOP figures are for the whole model (all GPUs together).
Every assumption a figure rests on is listed in `Plan.assumptions`; docs/plan.md explains them.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, fields
from functools import partial

from estimator.call.attention import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES
from estimator.call.config import KV_DTYPE_BITS, element_bytes
from estimator.model.activations import inference_activations, largest_allocation_bytes, training_peak
from estimator.model.assumptions import assumptions
from estimator.model.finetune import trainable_params
from estimator.model.inputs import ECHOED_INPUTS, PlanInputs, Sizes, gpu_of
from estimator.model.layer_attention import LayerAttention, attention_layers
from estimator.model.state import model_state
from estimator.model.time import plan_flops, plan_times
from estimator.units import cdiv, gib

# The budget's rows, by the stable key code finds them with (the label is what a user reads, and may change).
COMPONENT_KEYS = ("weights", "gradients", "optimizer_state", "optimizer_step", "activations", "weight_casts",
                  "kv_cache", "cublas_workspace", "cuda_context")

_verdict_gib = partial(gib, mib_below_1gib=False, grouping=False)  # the verdict's style: '1256.75 GiB'
FIT_STATUSES = ("fits", "does not fit", "cannot run")


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The one verdict every surface shows (page banner and metrics, CLI table, JSON, advice, workbook).

    A plan fits when total + allocator reserve <= capacity: the reserve is the step's largest single block, kept
    free because near the limit PyTorch's caching allocator runs out in fragments (activations.
    largest_allocation_bytes). Headroom is what is left after both; short by is its negative."""

    status: str
    total_bytes: int
    capacity_bytes: int
    allocator_reserve_bytes: int
    reason: str = ""  # cannot run: why the backend asked for cannot run the call

    def __post_init__(self) -> None:
        if self.status not in FIT_STATUSES:
            raise ValueError(f"status: expected one of {', '.join(FIT_STATUSES)}, got {self.status!r}")
        for name in ("total_bytes", "capacity_bytes", "allocator_reserve_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name}: expected a non-negative int of bytes, got {value!r}")
        fits = self.total_bytes + self.allocator_reserve_bytes <= self.capacity_bytes
        if self.status != "cannot run" and fits != (self.status == "fits"):
            raise ValueError(f"status: {self.status!r} contradicts total + reserve vs capacity")

    @property
    def fits(self) -> bool:
        return self.status == "fits"

    @property
    def headroom_bytes(self) -> int:
        """Capacity minus total minus the allocator reserve: >= 0 exactly when the plan fits."""
        return self.capacity_bytes - self.total_bytes - self.allocator_reserve_bytes

    @property
    def short_by_bytes(self) -> int:
        """How much more memory the plan needs to fit (0 when it fits): the negative of the headroom."""
        return max(0, -self.headroom_bytes)

    def text(self, fmt=_verdict_gib) -> str:
        """The verdict as one sentence, sizes written by `fmt` (bytes -> text): the same words on every surface."""
        if self.status == "cannot run":
            return self.reason
        total, capacity, reserve = fmt(self.total_bytes), fmt(self.capacity_bytes), fmt(self.allocator_reserve_bytes)
        if self.fits:
            return (f"fits: {total} of {capacity} per GPU, {reserve} kept free for the largest block; "
                    f"headroom {fmt(self.headroom_bytes)}")
        if self.total_bytes <= self.capacity_bytes:
            return (f"does not fit: {total} needed of {capacity} per GPU, but the step's largest block ({reserve}) "
                    f"needs that much more free: near the limit the caching allocator runs out in fragments; "
                    f"short by {fmt(self.short_by_bytes)}")
        return (f"does not fit: {total} needed + {reserve} kept free for the largest block, {capacity} per GPU; "
                f"short by {fmt(self.short_by_bytes)}")


def fit_verdict(*, total_bytes: int, capacity_bytes: int, allocator_reserve_bytes: int,
                cannot_run: str = "") -> Verdict:
    """The verdict of a budget: cannot run (with `cannot_run`, the reason), fits, or does not fit."""
    if cannot_run:
        status = "cannot run"
    else:
        status = "fits" if total_bytes + allocator_reserve_bytes <= capacity_bytes else "does not fit"
    return Verdict(status=status, total_bytes=total_bytes, capacity_bytes=capacity_bytes,
                   allocator_reserve_bytes=allocator_reserve_bytes, reason=cannot_run)


@dataclass(frozen=True, kw_only=True)
class Component:
    """One row of the memory budget: its stable `key` (one of COMPONENT_KEYS), the `label` shown and exported, and
    its bytes per GPU."""

    key: str
    label: str
    bytes: int

    def __post_init__(self) -> None:
        if self.key not in COMPONENT_KEYS:
            raise ValueError(f"key: unknown budget component {self.key!r}; expected one of {', '.join(COMPONENT_KEYS)}")
        if not self.label:
            raise ValueError(f"label: budget component {self.key!r} needs a label")
        if not isinstance(self.bytes, int) or isinstance(self.bytes, bool) or self.bytes < 0:
            raise ValueError(f"bytes: budget component {self.key!r} needs a non-negative int, got {self.bytes!r}")


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The answer. `to_dict()` has every key of docs/contract.md §3 (bytes per GPU as ints)."""

    inputs: PlanInputs
    supported: bool
    verdict: str
    selected_backend: str
    params: int
    params_per_gpu: int
    weights_bytes: int
    kv_cache_bytes: int
    kv_cache_bytes_per_token: int
    kv_cache_bytes_per_sequence: int
    attention_scores_bytes: int
    textbook_scores_bytes: int
    activation_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    workspace_bytes: int
    total_bytes: int
    capacity_bytes: int
    allocator_reserve_bytes: int  # kept free for the largest single block: fits = total + reserve <= capacity
    fits: bool
    prefill_flops: int
    prefill_executed_flops: int
    training_step_flops: int
    decode_flops_per_token: int | None
    prefill_time_ms: float
    step_time_ms: float
    # the step the chosen stack really runs (Hugging Face generate: a new cache length every step, so + one cuDNN
    # graph build per growing-cache layer shape where SDPA runs decode on cuDNN; decode_time.decode_regimes)
    decode_time_ms_per_token: float | None
    decode_first_pass_ms_per_token: float | None  # = decode_time_ms_per_token (the name earlier plans used)
    prefill_tokens_per_s: float
    decode_tokens_per_s: float | None
    attention_share: float
    ffn_share: float
    expert_ffn_share: float  # MoE layers' router, routed top-k experts and shared experts (ffn_share: dense MLPs)
    embedding_share: float
    other_share: float
    flops_shares: dict[str, float] = field(hash=False)
    components: tuple[Component, ...]
    activation_detail: dict[str, int] = field(hash=False)
    assumptions: tuple[str, ...]
    decode_steady_ms_per_token: float | None = None  # every cache length seen before in the process
    decode_forced_flash_ms_per_token: float | None = None  # single-token calls forced to flash (None: flash can't)
    decode_static_cache_ms_per_token: float | None = None  # HF StaticCache: one key length, one graph
    decode_static_compiled_ms_per_token: float | None = None  # the StaticCache step under torch.compile (CUDA graphs)
    decode_first_step_ms: float | None = None  # a fresh process's first step (its first cuDNN build of the shape)
    decode_graph_builds_per_step: int | None = None  # cuDNN graphs generate builds each step
    communication_time_ms: float = 0.0  # exposed communication of the step (training) or prefill (model/comm.py)
    communication: dict = field(default_factory=dict, hash=False)  # per kind (tp, cp, dp), links, decode per token
    time_split: dict = field(default_factory=dict, hash=False)  # ms per kernel class per phase (step_time.py)
    time_model: dict = field(default_factory=dict, hash=False)  # GPU the constants were measured on, error band
    trainable_params: int = 0  # parameters the optimizer updates per GPU (LoRA/QLoRA: the adapters; 0 for inference)
    max_seq_len: int | None = None  # filled by make_plan's solvers
    max_batch: int | None = None

    @property
    def fit(self) -> Verdict:
        """The plan's verdict (status, headroom, short by, the reserve as its own figure), from the same function
        that set `verdict` and `fits`."""
        return fit_verdict(total_bytes=self.total_bytes, capacity_bytes=self.capacity_bytes,
                           allocator_reserve_bytes=self.allocator_reserve_bytes,
                           cannot_run="" if self.supported else self.verdict)

    def component_bytes(self, key: str) -> int:
        """The bytes of the budget row with this key; 0 when the plan has no such row (e.g. no KV cache when
        training)."""
        if key not in COMPONENT_KEYS:
            raise ValueError(f"key: unknown budget component {key!r}; expected one of {', '.join(COMPONENT_KEYS)}")
        return sum(c.bytes for c in self.components if c.key == key)

    def to_dict(self) -> dict:
        """The plan as JSON-ready data (export and CLI only; code reads the attributes): every field in order, then
        `components` as {component, bytes}, the echoed `inputs` (with the model's name) and the `model`."""
        out = {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)
               if f.name not in ("inputs", "components")}
        out["assumptions"] = list(self.assumptions)
        out["components"] = [{"component": c.label, "bytes": c.bytes} for c in self.components]
        out["inputs"] = self.echoed_inputs()
        out["model"] = {**asdict(self.inputs.model), "params": self.inputs.model.params}
        fit = self.fit
        out["fit_status"] = fit.status  # fits / does not fit / cannot run
        out["headroom_bytes"] = None if fit.status == "cannot run" else fit.headroom_bytes  # after the reserve
        return out

    def echoed_inputs(self) -> dict:
        """The inputs as the plan's JSON echoes them (docs/contract.md §3): PlanInputs' fields, the model by name."""
        return {**{k: getattr(self.inputs, k) for k in ECHOED_INPUTS}, "model": self.inputs.model.name}


def budget(inputs: PlanInputs, *, times: bool = True) -> Plan:
    """Memory, FLOPs and time of the plan without the solvers. Per-GPU bytes, whole-model FLOPs.

    `times=False` leaves the time model out (every time field NaN, or None where it may be None): for callers that
    read only the memory budget and the verdict, such as the workbook's grid of n and batch (estimator/report/
    grid.py), where the time model is half the cost of each grid point."""
    return _budget(inputs, attention_layers(inputs), timed=True, times=times)


def memory_fits(inputs: PlanInputs) -> bool:
    """budget(inputs).fits without the FLOPs and times (which the verdict does not read): what the solvers ask
    some 20-90 times per answer, at a fraction of the cost (bench/bench_plan.py)."""
    return _budget(inputs, attention_layers(inputs, timed=False), timed=False)


def _budget(inputs: PlanInputs, attn: list[LayerAttention], *, timed: bool, times: bool = True):
    """The plan of budget() (timed; `times` as there), or only its memory verdict, `fits` (not timed)."""
    m, gpu = inputs.model, gpu_of(inputs)
    z = _sizes(inputs)
    training = inputs.mode == "training"
    unsupported = [a for a in attn if not a.memory.supported or not a.timing.supported
                   or (a.forward_timing is not None and not a.forward_timing.supported)]
    selected = attn[-1].memory.selected_backend if not unsupported else "none"  # the longest-span layers'
    params_gpu = inputs.model.params_per_gpu(inputs.tp, inputs.ep)
    weights, grads, optimizer = model_state(inputs)
    kv_bits = KV_DTYPE_BITS[inputs.kv_dtype]
    per_token_bits, seq_bits = _kv_cache_bits(inputs, kv_bits)
    kv_cache = 0 if training else cdiv(seq_bits * z.b, 8)

    scores_live = textbook = 0
    detail: dict[str, int] = {}
    activations = 0
    peak = {"activations": 0, "weight_casts": 0, "gradients": grads, "optimizer_step": 0}  # training, at the peak
    if not unsupported:
        scores_live, textbook = _scores_bytes(inputs, attn)
        if training:
            peak, detail = training_peak(inputs, attn, z, grads)
            activations = detail["backward_peak_activations_bytes"]  # the activations at their own peak
        else:
            activations, detail = inference_activations(inputs, attn, z, kv_bits)

    if training:
        workspace = 2 * CUBLAS_WORKSPACE_BYTES  # forward thread and autograd thread
        components = _training_components(weights, grads, optimizer, peak, workspace,
                                          at_step="peak_phase_optimizer_step" in detail)
    else:
        workspace = CUBLAS_WORKSPACE_BYTES
        components = (Component(key="weights", label="weights", bytes=weights),
                      Component(key="kv_cache", label="kv cache", bytes=kv_cache),
                      Component(key="activations", label="activations (peak layer)", bytes=activations),
                      Component(key="cublas_workspace", label="cuBLAS workspace", bytes=workspace),
                      Component(key="cuda_context", label="CUDA context", bytes=CUDA_CONTEXT_BYTES))
    total = sum(c.bytes for c in components)
    capacity = gpu.memory_bytes
    # the caching allocator needs room for the largest single block on top of the peak (see the function)
    reserve = 0 if unsupported else largest_allocation_bytes(inputs, attn, z)
    fit = fit_verdict(total_bytes=total, capacity_bytes=capacity, allocator_reserve_bytes=reserve,
                      cannot_run=_unsupported_verdict(inputs, unsupported) if unsupported else "")
    if not timed:
        return fit.fits

    flops = plan_flops(inputs, attn, unsupported=bool(unsupported))
    times = plan_times(inputs, attn, gpu, params_gpu, weights, kv_cache, flops, unsupported=bool(unsupported)) \
        if times else dict(UNTIMED)
    return Plan(
        inputs=inputs, supported=not unsupported, verdict=fit.text(), selected_backend=selected, params=m.params,
        params_per_gpu=params_gpu, trainable_params=trainable_params(inputs) if training else 0,
        weights_bytes=weights, kv_cache_bytes=kv_cache,
        kv_cache_bytes_per_token=cdiv(per_token_bits, 8), kv_cache_bytes_per_sequence=cdiv(seq_bits, 8),
        attention_scores_bytes=scores_live, textbook_scores_bytes=textbook, activation_bytes=activations,
        gradient_bytes=grads, optimizer_bytes=optimizer, workspace_bytes=workspace, total_bytes=total,
        capacity_bytes=capacity, allocator_reserve_bytes=reserve, fits=fit.fits, prefill_flops=flops["forward"],
        prefill_executed_flops=flops["forward_executed"], training_step_flops=flops["step"],
        decode_flops_per_token=flops["decode"], flops_shares=flops["shares"], components=components,
        activation_detail=detail, assumptions=assumptions(inputs), **times)


# The time fields of a plan computed with budget(times=False): not computed, so NaN (None for the optional ones).
_NAN = float("nan")
UNTIMED = {"prefill_time_ms": _NAN, "step_time_ms": _NAN, "decode_time_ms_per_token": None,
           "decode_first_pass_ms_per_token": None, "prefill_tokens_per_s": _NAN, "decode_tokens_per_s": None,
           "attention_share": _NAN, "ffn_share": _NAN, "expert_ffn_share": _NAN, "embedding_share": _NAN,
           "other_share": _NAN, "communication_time_ms": _NAN, "time_model": {"computed": False}}


def _sizes(inputs: PlanInputs) -> Sizes:
    """The per-GPU tensor sizes the activation formulas share (notation in estimator/model/inputs.py)."""
    m = inputs.model
    es, b, n, tp = element_bytes(inputs.dtype), inputs.batch_per_gpu, inputs.tokens_per_gpu, inputs.tp
    hq, hk, d = inputs.q_heads_per_gpu, inputs.kv_heads_per_gpu, m.head_dim
    recipe = inputs.recipe
    rs = recipe.residual_bytes if recipe else es
    return Sizes(b=b, n=n, F=cdiv(m.ffn, tp), V=cdiv(m.vocab, tp) if m.kind == "decoder" else m.vocab, es=es,
                 q=b * n * hq * d * es, kv=2 * b * n * hk * d * es, resid=b * n * m.hidden * rs, rs=rs,
                 autocast=bool(recipe and recipe.autocast))


def _kv_cache_bits(inputs: PlanInputs, kv_bits: int) -> tuple[int, int]:
    """(bits per token, bits per sequence) of the KV cache of one sequence (decoders; 0 otherwise).

    Σ_layers hk·(d + dv)·seq_len/cp·kv_bits (MLA under the hf/latent layouts: kv_lora_rank + qk_rope per token,
    ModelSpec.kv_cache_elements_per_token_per_layer), kept in bits until the end."""
    m = inputs.model
    if m.kind != "decoder":
        return 0, 0
    kv_elements = m.kv_cache_elements_per_token_per_layer(inputs.kv_layout, inputs.tp)
    per_token_bits = m.layers * kv_elements * kv_bits
    # Hugging Face's cache holds every prefill token, windowed layers too (see activations.inference_activations)
    return per_token_bits, m.layers * kv_elements * kv_bits * cdiv(inputs.seq_len, inputs.cp)


def _scores_bytes(inputs: PlanInputs, attn: list[LayerAttention]) -> tuple[int, int]:
    """(score matrices the chosen backends materialise, textbook b·h·L·S·es) alive at the peak: every layer's when
    training keeps them all, else the largest layer's."""
    keep_all = inputs.mode == "training" and inputs.checkpointing == "none"
    per_layer = [(a.memory.scores_bytes, a.layers, a.memory.selected_backend in ("math", "eager")) for a in attn]
    textbook = sum(sb * k for sb, k, _ in per_layer) if keep_all else max(sb for sb, _, _ in per_layer)
    live = [(sb, k) for sb, k, mat in per_layer if mat]
    scores_live = 0
    if live:
        scores_live = sum(sb * k for sb, k in live) if keep_all else max(sb for sb, _ in live)
    return scores_live, textbook


def _training_components(weights: int, grads: int, optimizer: int, peak: dict[str, int], workspace: int, *,
                         at_step: bool) -> tuple[Component, ...]:
    """The training step's budget at its peak (`at_step`: the peak is the optimizer step)."""
    grads_label = "gradients" if peak["gradients"] == grads else (
        "gradients (fp32 copies at the optimizer step)" if at_step else "gradients (allocated at the peak)")
    return (Component(key="weights", label="weights", bytes=weights),
            Component(key="gradients", label=grads_label, bytes=peak["gradients"]),
            Component(key="optimizer_state", label="optimizer state", bytes=optimizer),
            Component(key="optimizer_step", label="optimizer step temporaries", bytes=peak["optimizer_step"]),
            Component(key="activations", label="activations (freed before the optimizer step)" if at_step
                      else "activations", bytes=peak["activations"]),
            Component(key="weight_casts", label="16-bit weight copies (autocast)", bytes=peak["weight_casts"]),
            Component(key="cublas_workspace", label="cuBLAS workspaces", bytes=workspace),
            Component(key="cuda_context", label="CUDA context", bytes=CUDA_CONTEXT_BYTES))


def _unsupported_verdict(inputs: PlanInputs, unsupported: list[LayerAttention]) -> str:
    """Why the backend asked for cannot run the first layer it cannot run."""
    est = unsupported[0].timing if not unsupported[0].timing.supported else unsupported[0].memory
    reasons = est.reasons.get(inputs.backend, ()) or tuple(r for rs in est.reasons.values() for r in rs)
    return f"backend {inputs.backend} cannot run this attention call: " + "; ".join(reasons or ("unknown",))
