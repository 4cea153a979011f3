"""Whole-model capacity plan: the per-GPU memory budget, FLOPs and time of a prefill (inference) or of one
mixed-precision AdamW step (training), built on the attention estimator (`estimate_call`).

All byte figures are per GPU and exact ints; FLOP figures are for the whole model (all GPUs together).
Notation in formula comments: b batch per data-parallel replica, n tokens per GPU (seq_len / cp), H hidden,
F ffn / tp, hq and hk query and kv heads per GPU (/ tp), d head_dim, V vocab / tp, es element bytes.
Every assumption a figure rests on is listed in `Plan.assumptions`; docs/plan.md explains them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from .attention import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES, estimate_call
from .backends import check_torch_version
from .config import (
    BACKENDS,
    KV_DTYPE_BITS,
    MAX_SEQ_LEN,
    AttentionCall,
    check_positive_int,
    normalize_dtype,
    parse_bool,
)
from .hardware import GPU, get_gpu
from .models import ModelSpec
from .plan_time import (  # noqa: F401 - HBM_EFFICIENCY is part of the plan API
    GEMM_EFFICIENCY,
    HBM_EFFICIENCY,
    ceil_div,
    element_bytes,
    plan_flops,
    plan_times,
    safe_share,
)

MODES = ("inference", "training")
CHECKPOINTING = ("none", "selective", "full")
LOGITS = ("last", "all")
KV_ALIASES = {"fp8": "float8", "e4m3": "float8", "e5m2": "float8", "float8_e4m3fn": "float8",
              "float8_e5m2": "float8", "q8": "int8", "q4": "int4"}

# CUBLAS_WORKSPACE_BYTES: 32 MiB per (thread, stream) once a GEMM ran (sdpa-internals.md §0.4, measured);
# CUDA_CONTEXT_BYTES: what PyTorch cannot hand out (context, kernel images), measured on the H200.
# Both come from the attention estimator so that the plan and estimate_call agree.


@dataclass(frozen=True, kw_only=True)
class PlanInputs:
    """One planning question. Change one input with `dataclasses.replace(inputs, ...)`, then `make_plan`."""

    model: ModelSpec
    seq_len: int  # tokens per sequence (encoders: patches + class token)
    batch: int = 1  # sequences in the whole job (split over data-parallel replicas)
    dtype: str = "bfloat16"  # weights and activations
    kv_dtype: str | None = None  # KV-cache storage (inference); None = dtype
    mode: str = "inference"  # inference (prefill keeping the KV cache, then decode) | training (one AdamW step)
    checkpointing: str = "none"  # training: none | selective (attention core recomputed) | full (per layer)
    window: int | None = None  # sliding window for every layer; None = the model's own per-layer windows
    backend: str = "auto"  # SDPA backend, or eager (hand-written attention)
    gpu: str = "h100-sxm"  # catalog name
    gpus: int | None = None  # total GPUs; None = tp·cp; the rest is data parallelism
    tp: int = 1  # tensor parallel: heads, FFN and vocabulary split
    cp: int = 1  # context parallel: the sequence split (ring attention)
    torch_version: str = "2.11"
    logits: str = "last"  # inference: logits for the last position only, or for all positions
    sequence_parallel: bool = False  # training with tp > 1: norms and residual-stream tensors split tp ways too
    micro_batch: int | None = None  # training: sequences per replica per forward/backward (gradient accumulation)
    persistent_grads: bool = False  # training: gradients stay allocated between steps (zero_grad(set_to_none=False))
    zero: int = 0  # training: ZeRO stage over the data-parallel replicas (1 optimizer, 2 + gradients, 3 + weights)

    def __post_init__(self) -> None:
        if not isinstance(self.model, ModelSpec):
            raise ValueError("model: expected a ModelSpec (use a preset, the architecture flags or --config)")
        object.__setattr__(self, "seq_len", check_positive_int("seq_len", self.seq_len, MAX_SEQ_LEN))
        object.__setattr__(self, "batch", check_positive_int("batch", self.batch, 1 << 20))
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        kv = self.dtype if self.kv_dtype is None else self.kv_dtype
        kv = KV_ALIASES.get(str(kv).strip().lower(), kv)
        object.__setattr__(self, "kv_dtype", normalize_dtype(kv, field="kv_dtype", allowed=KV_DTYPE_BITS))
        for name, allowed in (("mode", MODES), ("checkpointing", CHECKPOINTING), ("backend", BACKENDS),
                              ("logits", LOGITS)):
            value = str(getattr(self, name)).strip().lower()
            if value not in allowed:
                raise ValueError(f"{name}: unknown value {getattr(self, name)!r}; expected one of {', '.join(allowed)}")
            object.__setattr__(self, name, value)
        if self.micro_batch is not None:
            object.__setattr__(self, "micro_batch", check_positive_int("micro_batch", self.micro_batch, 1 << 20))
        if str(self.zero).strip() not in ("0", "1", "2", "3"):
            raise ValueError(f"zero: expected a ZeRO stage 0, 1, 2 or 3, got {self.zero!r}")
        object.__setattr__(self, "zero", int(str(self.zero).strip()))
        if not isinstance(self.persistent_grads, bool):
            object.__setattr__(self, "persistent_grads", parse_bool("persistent_grads", self.persistent_grads))
        if not isinstance(self.sequence_parallel, bool):
            object.__setattr__(self, "sequence_parallel", parse_bool("sequence_parallel", self.sequence_parallel))
        if self.window is not None:
            object.__setattr__(self, "window", check_positive_int("window", self.window, MAX_SEQ_LEN))
        get_gpu(self.gpu)  # ValueError listing the catalog
        object.__setattr__(self, "torch_version", check_torch_version(self.torch_version))
        tp = check_positive_int("tp", self.tp, 1024)
        cp = check_positive_int("cp", self.cp, 1024)
        gpus = tp * cp if self.gpus is None else check_positive_int("gpus", self.gpus, 1 << 16)
        object.__setattr__(self, "tp", tp)
        object.__setattr__(self, "cp", cp)
        object.__setattr__(self, "gpus", gpus)
        if gpus % (tp * cp):
            raise ValueError(f"gpus: {gpus} is not a multiple of tp·cp = {tp * cp}")
        m = self.model
        if m.q_heads % tp:
            raise ValueError(f"tp: {tp} does not divide the {m.q_heads} query heads")
        if m.kv_heads % tp and tp % m.kv_heads:
            raise ValueError(f"tp: {tp} neither divides nor is a multiple of the {m.kv_heads} kv heads")
        if cp > self.seq_len:
            raise ValueError(f"cp: {cp} GPUs cannot split a sequence of {self.seq_len} tokens")

    # Per-GPU shapes (properties, not stored fields).
    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.cp)

    @property
    def batch_per_gpu(self) -> int:
        """Sequences one GPU holds activations for at a time: its replica's share, or one micro-batch."""
        share = -(-self.batch // self.dp)
        if self.mode == "training" and self.micro_batch is not None:
            return min(share, self.micro_batch)
        return share

    @property
    def accumulation_steps(self) -> int:
        """Forward/backward passes per optimizer step (gradient accumulation over micro-batches)."""
        share = -(-self.batch // self.dp)
        return -(-share // self.batch_per_gpu)

    @property
    def tokens_per_gpu(self) -> int:
        return -(-self.seq_len // self.cp)

    @property
    def q_heads_per_gpu(self) -> int:
        return self.model.q_heads // self.tp

    @property
    def kv_heads_per_gpu(self) -> int:
        """kv heads / tp; when tp exceeds kv_heads each GPU keeps a copy of one kv head (Megatron-style)."""
        return max(1, self.model.kv_heads // self.tp)

    @property
    def windows(self) -> tuple[int | None, ...]:
        return (self.window,) * self.model.layers if self.window is not None else self.model.window_per_layer


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The answer. `to_dict()` has every key of ../shared/contract.md §3 (bytes per GPU as ints)."""

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
    fits: bool
    prefill_flops: int
    prefill_executed_flops: int
    training_step_flops: int
    decode_flops_per_token: int | None
    prefill_time_ms: float
    step_time_ms: float
    decode_time_ms_per_token: float | None
    prefill_tokens_per_s: float
    decode_tokens_per_s: float | None
    attention_share: float
    ffn_share: float
    embedding_share: float
    other_share: float
    flops_shares: dict[str, float] = field(hash=False)
    components: tuple[tuple[str, int], ...]
    activation_detail: dict[str, int] = field(hash=False)
    assumptions: tuple[str, ...]
    max_seq_len: int | None = None  # filled by make_plan's solvers
    max_batch: int | None = None

    def to_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k not in ("inputs", "components")}
        out["components"] = [{"component": c, "bytes": b} for c, b in self.components]
        inp = self.inputs
        out["inputs"] = {k: getattr(inp, k) for k in ("seq_len", "batch", "dtype", "kv_dtype", "mode",
                                                       "checkpointing", "window", "backend", "gpu", "gpus",
                                                       "tp", "cp", "torch_version", "logits",
                                                       "sequence_parallel", "micro_batch", "zero",
                                                       "persistent_grads")}
        out["inputs"]["model"] = inp.model.name
        out["model"] = {**asdict(inp.model), "params": inp.model.params}
        out["assumptions"] = list(self.assumptions)
        return out



def make_plan(inputs: PlanInputs, *, solve: bool = True) -> Plan:
    """The full plan; with `solve`, also the largest seq_len (at this batch) and batch (at this seq_len) that fit."""
    plan = budget(inputs)
    if not solve:
        return plan
    from .solve import max_batch, max_seq_len  # solve.py searches over budget()

    return replace(plan, max_seq_len=max_seq_len(inputs), max_batch=max_batch(inputs))


# --- parameters and weights --------------------------------------------------------------------------------

def matmul_params_per_layer(m: ModelSpec) -> int:
    """Weights that take part in a GEMM per token (ModelSpec.matmul_params_per_layer)."""
    return m.matmul_params_per_layer


def params_per_gpu(inputs: PlanInputs) -> int:
    """Parameters one GPU holds under the plan's tensor parallelism (ModelSpec.params_per_gpu)."""
    return inputs.model.params_per_gpu(inputs.tp)


def model_state(inputs: PlanInputs) -> tuple[int, int, int]:
    """(weights, gradients, optimizer state) bytes per GPU. Training: 16-bit weights and gradients, fp32 master
    weights and two fp32 moments = 2 + 2 + 12 B/param (fp32 training 4 + 4 + 8; Rajbhandari et al. 2020, ZeRO
    §3.1); ZeRO stage z shards the optimizer (z ≥ 1), gradients (z ≥ 2) and weights (z = 3) over the
    data-parallel replicas. Stage 3 adds the gathered weights of two layers (the current and the prefetched)."""
    es = element_bytes(inputs.dtype)
    params = params_per_gpu(inputs)
    if inputs.mode != "training":
        return params * es, 0, 0
    dp, z, m = inputs.dp, inputs.zero, inputs.model
    weights = params * es if z < 3 else ceil_div(params * es, dp) + 2 * (params // m.layers) * es
    grads = params * es if z < 2 else ceil_div(params * es, dp)
    optimizer = params * (12 if es < 4 else 8)
    return weights, grads, optimizer if z < 1 else ceil_div(optimizer, dp)


# --- attention per layer type, from the lead's estimator ---------------------------------------------------

@dataclass(frozen=True)
class _LayerAttention:
    window: int | None
    layers: int  # how many layers have this window
    span: int  # keys each query sees: min(seq_len, window)
    memory: object  # CallEstimate of the call one GPU runs (one ring block under cp)
    timing: object  # CallEstimate of the whole-sequence call of one tensor-parallel shard
    forward_timing: object | None  # training: the forward-only call (forward time, recompute)


def _attention_layers(inputs: PlanInputs) -> list[_LayerAttention]:
    """One estimate_call per distinct window. Window w: the call is modelled with kv_len = min(seq_len, w) and
    no causal flag (every query sees a dense band of w keys): an assumption, since SDPA has no native window."""
    m, gpu = inputs.model, gpu_of(inputs)
    mode = "forward" if inputs.mode == "inference" else "forward_backward"
    out = []
    for window in sorted(set(inputs.windows), key=lambda w: (w is None, w or 0)):
        span = inputs.seq_len if window is None else min(inputs.seq_len, window)
        causal = m.kind == "decoder" and span == inputs.seq_len

        def call(q_len, kv_len, causal_flag, call_mode=mode):
            # the estimator counts FLOPs in int64: refuse shapes whose backward count (10·B·H·L·S·D) would wrap
            if 16 * inputs.batch_per_gpu * inputs.q_heads_per_gpu * q_len * kv_len * m.head_dim >= 2**63:
                raise ValueError(f"seq_len: {inputs.seq_len:,} tokens at batch {inputs.batch} is past what the "
                                 "attention estimator can count (int64 FLOPs)")
            return estimate_call(AttentionCall(
                batch=inputs.batch_per_gpu, q_heads=inputs.q_heads_per_gpu, kv_heads=inputs.kv_heads_per_gpu,
                head_dim=m.head_dim, q_len=q_len, kv_len=kv_len, dtype=inputs.dtype, causal=causal_flag,
                mode=call_mode, backend=inputs.backend), gpu, inputs.torch_version)

        timing = call(inputs.seq_len, span, causal)
        if inputs.cp == 1:
            memory = timing
        else:  # ring attention: one (n/cp × n/cp) block at a time, off-diagonal blocks dense
            memory = call(inputs.tokens_per_gpu, min(span, inputs.tokens_per_gpu), False)
        fwd = call(inputs.seq_len, span, causal, "forward") if inputs.mode == "training" else None
        out.append(_LayerAttention(window, inputs.windows.count(window), span, memory, timing, fwd))
    return out


# --- the budget ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Sizes:
    """Per-GPU tensor sizes in bytes that the activation formulas share."""

    b: int  # sequences per GPU at a time
    n: int  # tokens per GPU
    F: int  # FFN width per GPU
    V: int  # output width per GPU (vocabulary / tp, or classes)
    es: int  # element bytes
    q: int  # b·n·hq·d·es
    kv: int  # k and v of the new tokens: 2·b·n·hk·d·es
    resid: int  # b·n·H·es, one residual-stream tensor


def budget(inputs: PlanInputs) -> Plan:
    """Memory, FLOPs and time of the plan without the solvers. Per-GPU bytes, whole-model FLOPs."""
    m, gpu = inputs.model, gpu_of(inputs)
    es, b, n, tp = element_bytes(inputs.dtype), inputs.batch_per_gpu, inputs.tokens_per_gpu, inputs.tp
    hq, hk, d = inputs.q_heads_per_gpu, inputs.kv_heads_per_gpu, m.head_dim
    z = _Sizes(b=b, n=n, F=ceil_div(m.ffn, tp), V=ceil_div(m.vocab, tp) if m.kind == "decoder" else m.vocab, es=es,
               q=b * n * hq * d * es, kv=2 * b * n * hk * d * es, resid=b * n * m.hidden * es)
    training = inputs.mode == "training"
    attn = _attention_layers(inputs)
    unsupported = [a for a in attn if not a.memory.supported or not a.timing.supported
                   or (a.forward_timing is not None and not a.forward_timing.supported)]
    selected = attn[-1].memory.selected_backend if not unsupported else "none"  # the longest-span layers'
    verdict = ""
    if unsupported:
        est = unsupported[0].timing if not unsupported[0].timing.supported else unsupported[0].memory
        reasons = est.reasons.get(inputs.backend, ()) or tuple(r for rs in est.reasons.values() for r in rs)
        verdict = f"backend {inputs.backend} cannot run this attention call: " + "; ".join(reasons or ("unknown",))

    params_gpu = params_per_gpu(inputs)
    weights, grads, optimizer = model_state(inputs)
    # KV cache (decoder inference): Σ_layers 2·hk·d·min(seq_len, w)/cp·b·kv_bits/8, kept in bits until the end.
    kv_bits = KV_DTYPE_BITS[inputs.kv_dtype]
    decoder = m.kind == "decoder"
    per_token_bits = m.layers * 2 * hk * d * kv_bits if decoder else 0
    seq_bits = sum(a.layers * 2 * hk * d * kv_bits * ceil_div(a.span, inputs.cp) for a in attn) if decoder else 0
    kv_cache = 0 if training else ceil_div(seq_bits * b, 8)

    scores_live = textbook = 0
    detail: dict[str, int] = {}
    activations, grads_live = 0, grads
    if not unsupported:
        # textbook b·h·L·S·es of what is alive at the peak: every layer's when training keeps them all
        keep_all = training and inputs.checkpointing == "none"
        per_layer = [(a.memory.scores_bytes, a.layers, a.memory.selected_backend in ("math", "eager")) for a in attn]
        textbook = sum(sb * k for sb, k, _ in per_layer) if keep_all else max(sb for sb, _, _ in per_layer)
        live = [(sb, k) for sb, k, mat in per_layer if mat]
        if live:
            scores_live = sum(sb * k for sb, k in live) if keep_all else max(sb for sb, _ in live)
        if training:
            activations, grads_live, detail = _training_peak(inputs, attn, z, grads)
        else:
            activations, detail = _inference_activations(inputs, attn, z, kv_bits)

    if training:
        workspace = 2 * CUBLAS_WORKSPACE_BYTES  # forward thread and autograd thread
        grads_name = "gradients" if grads_live == grads else "gradients (allocated at the peak)"
        components = (("weights", weights), (grads_name, grads_live), ("optimizer state", optimizer),
                      ("activations", activations), ("cuBLAS workspaces", workspace),
                      ("CUDA context", CUDA_CONTEXT_BYTES))
    else:
        workspace = CUBLAS_WORKSPACE_BYTES
        components = (("weights", weights), ("kv cache", kv_cache), ("activations (peak layer)", activations),
                      ("cuBLAS workspace", workspace), ("CUDA context", CUDA_CONTEXT_BYTES))
    total = sum(c for _, c in components)
    capacity = gpu.memory_bytes
    fits = not unsupported and total <= capacity
    if not unsupported:
        verdict = (f"fits: {total / 2**30:.2f} GiB of {capacity / 2**30:.2f} GiB per GPU" if fits else
                   f"does not fit: {total / 2**30:.2f} GiB needed, {capacity / 2**30:.2f} GiB per GPU")

    flops = plan_flops(inputs, attn, unsupported=bool(unsupported))
    times = plan_times(inputs, attn, gpu, params_gpu, weights, kv_cache, flops, unsupported=bool(unsupported))
    return Plan(
        inputs=inputs, supported=not unsupported, verdict=verdict, selected_backend=selected, params=m.params,
        params_per_gpu=params_gpu, weights_bytes=weights, kv_cache_bytes=kv_cache,
        kv_cache_bytes_per_token=ceil_div(per_token_bits, 8), kv_cache_bytes_per_sequence=ceil_div(seq_bits, 8),
        attention_scores_bytes=scores_live, textbook_scores_bytes=textbook, activation_bytes=activations,
        gradient_bytes=grads, optimizer_bytes=optimizer, workspace_bytes=workspace, total_bytes=total,
        capacity_bytes=capacity, fits=fits, prefill_flops=flops["forward"],
        prefill_executed_flops=flops["forward_executed"], training_step_flops=flops["step"],
        decode_flops_per_token=flops["decode"], flops_shares=flops["shares"], components=components,
        activation_detail=detail, assumptions=_assumptions(inputs), **times)


def _inference_activations(inputs: PlanInputs, attn: list[_LayerAttention], z: _Sizes,
                           kv_bits: int) -> tuple[int, dict[str, int]]:
    """Prefill without grad: the worst of the attention phase and the FFN phase over layers, or the logits.
    Both phases measured to the byte on a HF LlamaDecoderLayer (tests/data/hf_layer_inference_peak.csv)."""
    m = inputs.model
    cp_buffer = z.kv if inputs.cp > 1 else 0  # ring attention receives the next kv block while computing
    attn_phase = 0
    for a in attn:
        cache_layer = 2 * z.b * ceil_div(a.span, inputs.cp) * inputs.kv_heads_per_gpu * m.head_dim * kv_bits // 8
        transient_kv = z.kv if m.kind == "encoder" else max(0, z.kv - cache_layer)  # decoders: k, v are the cache
        # layer input + the normed input (the attention module's argument, alive until it returns) + q + the call
        attn_phase = max(attn_phase, 2 * z.resid + z.q + transient_kv + a.memory.peak_extra_bytes + cp_buffer)
    # layer input (the caller still holds it) + the new residual + the normed input + gate, up, act·up (SwiGLU)
    # or fc1, act (GELU)
    ffn_phase = 3 * z.resid + (3 if m.gated_ffn else 2) * z.b * z.n * z.F * z.es
    rows = z.b * (z.n if inputs.logits == "all" and m.kind == "decoder" else 1)
    logits_phase = z.resid + rows * z.V * (z.es + 4)  # logits in dtype, then .float() (HF generate)
    model_level = _model_level_bytes(inputs, z)
    detail = {"attention_phase_bytes": attn_phase, "ffn_phase_bytes": ffn_phase, "logits_phase_bytes": logits_phase,
              "model_level_bytes": model_level}
    return max(attn_phase + model_level, ffn_phase + model_level, logits_phase), detail


def _model_level_bytes(inputs: PlanInputs, z: _Sizes) -> int:
    """Alive while the layers run, outside any layer: the embedding output (HF's model forward keeps
    `inputs_embeds` referenced) and, for decoders (RoPE assumed), the cos/sin tables (n·head_dim each) and the
    int64 position ids. Measured on whole HF models, tests/data/hf_model_prefill_peak.csv."""
    if inputs.model.kind != "decoder":
        return z.resid
    return z.resid + 2 * z.n * inputs.model.head_dim * z.es + z.n * 8


def _training_peak(inputs: PlanInputs, attn: list[_LayerAttention], z: _Sizes,
                   grads: int) -> tuple[int, int, dict[str, int]]:
    """(activations, gradients allocated, detail) at the peak of a training step.

    Gradients stay resident with `persistent_grads`, across micro-batches (accumulation) and under ZeRO ≥ 2
    (sharded buffers); otherwise
    (`zero_grad(set_to_none=True)`, PyTorch's default) they are allocated during backward, head first, layer by
    layer, embedding last, while each layer's saved activations are freed: the peak is then the largest of the
    loss backward (no gradients yet), the first layer's backward, the last layer's backward and the end.
    Checked against a Hugging Face Llama on the H200 (validation/data/h200_hf_llama.csv)."""
    m, es = inputs.model, z.es
    activations, detail = _training_activations(inputs, attn, z)
    if inputs.persistent_grads or inputs.accumulation_steps > 1 or inputs.zero >= 2 or grads == 0:
        return activations, grads, detail
    fixed = detail["model_level_bytes"] + detail["gradient_buffers_bytes"]
    stored, transient = detail["stored_layers_bytes"], detail["backward_transient_bytes"]
    tp = inputs.tp
    if m.kind == "decoder":
        head, emb = -(-m.vocab // tp) * m.hidden, (0 if m.tied_embeddings else -(-m.vocab // tp) * m.hidden)
    else:
        head, emb = m.head_params, m.embedding_params
    head_grad = (head + m.norm_params) * es
    layer_grad = max(0, grads - head_grad - emb * es) // m.layers
    phases = [("loss", fixed + stored + detail["logits_phase_bytes"], 0),
              ("top layer backward", fixed + stored + transient, head_grad),
              ("bottom layer backward", fixed + stored // m.layers + transient,
               head_grad + (m.layers - 1) * layer_grad),
              ("end of backward", detail["model_level_bytes"], grads)]
    name, act, live = max(phases, key=lambda p: p[1] + p[2])
    return act, live, {**detail, "peak_phase_" + name.replace(" ", "_"): act + live}


def _training_activations(inputs: PlanInputs, attn: list[_LayerAttention], z: _Sizes) -> tuple[int, dict[str, int]]:
    """Stored activations of every layer (Korthikanti et al. 2022 §4, generalised; checked against a HF
    LlamaDecoderLayer, tests/data/hf_layer_saved_bytes.csv) + the larger of one layer's backward transient
    and the loss backward."""
    m, b, n, es = inputs.model, z.b, z.n, z.es
    # Sequence parallelism (Korthikanti et al. §4.2.2) splits the residual-stream tensors tp ways as well.
    n_sp = ceil_div(n, inputs.tp if inputs.sequence_parallel else 1)
    # Each norm saves: HF RMSNorm its fp32 input, the normalised 16-bit tensor and rsqrt (b·n fp32);
    # LayerNorm its input, mean and rstd (b·n fp32 each).
    if m.norm == "rmsnorm":
        norm_save = m.norms_per_layer * (b * n_sp * m.hidden * (4 + es) + b * n_sp * 4)
    else:
        norm_save = m.norms_per_layer * (b * n_sp * m.hidden * es + 2 * b * n_sp * 4)
    resid_saved = b * n_sp * m.hidden * es  # the normed input that q/k/v (and the FFN) projections save
    ffn_save = resid_saved + (4 if m.gated_ffn else 2) * b * n * z.F * es  # + gate, act, up, product (SwiGLU)
    ffn_grads = 2 * b * n * z.F * es
    stored = transient = 0
    worst: dict[str, int] = {}
    for a in attn:
        est, backend = a.memory, a.memory.selected_backend
        retained = est.forward_retained_bytes or 0
        if backend in ("math", "eager") and inputs.cp > 1:  # every ring block's score matrix is saved
            retained *= inputs.cp
        # q, k, v stay alive because the kernel saves them; math saves fp32 copies instead, and eager with GQA
        # saves its repeated k, v (both inside `retained`)
        qkv_saved = {"math": 0, "eager": z.q if m.q_heads != m.kv_heads else z.q + z.kv}.get(backend, z.q + z.kv)
        none_layer = norm_save + resid_saved + qkv_saved + retained + ffn_save
        if none_layer > sum(worst.values()):
            worst = {"layer_attention_bytes": resid_saved + qkv_saved + retained, "layer_ffn_bytes": ffn_save,
                     "layer_norms_bytes": norm_save, "layer_attention_core_bytes": qkv_saved + retained}
        attn_bwd = max(0, (est.peak_extra_bytes or 0) - retained)
        if inputs.checkpointing == "none":
            layer, bwd = none_layer, max(attn_bwd, ffn_grads)
        elif inputs.checkpointing == "selective":  # attention core recomputed; q, k, v and out kept (§4.2)
            layer = norm_save + resid_saved + z.q + z.kv + z.q + ffn_save
            bwd = max(est.peak_extra_bytes or 0, ffn_grads)
        else:  # full: keep each layer's input, recompute the layer during its backward
            layer, bwd = resid_saved, none_layer + max(attn_bwd, ffn_grads)
        stored += layer * a.layers
        transient = max(transient, bwd)
    rows = b * n if m.kind == "decoder" else b
    # Loss backward: logits (dtype) + the saved fp32 log-softmax + its incoming and outgoing fp32 gradients (the
    # fp32 copy of the logits is gone by then). Measured 14 B/logit bf16, 16 fp32 (tests/data/hf_loss_peak.csv).
    logits_phase = z.resid + rows * z.V * (es + 12)
    model_level = _model_level_bytes(inputs, z)
    grad_buffers = 2 * z.resid  # backward: the gradient flowing into a layer and the residual branch's
    detail = {"stored_layers_bytes": stored, "backward_transient_bytes": transient,
              "logits_phase_bytes": logits_phase, "model_level_bytes": model_level,
              "gradient_buffers_bytes": grad_buffers, **worst}
    return model_level + stored + grad_buffers + max(transient, logits_phase), detail


def _assumptions(inputs: PlanInputs) -> tuple[str, ...]:
    m = inputs.model
    out = ["Bytes are per GPU; FLOPs are for the whole model (PyTorch FlopCounterMode convention).",
           f"Times are roofline estimates: GEMM efficiency {GEMM_EFFICIENCY:.0%} of dense peak (assumed) and "
           f"{HBM_EFFICIENCY:.0%} of HBM bandwidth (H200 decode calls measured 78-87% at a 131k cache), attention "
           "cores from the attention estimator; communication and per-kernel launch overheads are not modelled.",
           f"Counted: a cuBLAS workspace of {CUBLAS_WORKSPACE_BYTES // 2**20} MiB per thread and the CUDA context "
           f"({CUDA_CONTEXT_BYTES:,} B, measured on an H200 with torch 2.11, assumed for every GPU); "
           "not counted: allocator fragmentation and NCCL buffers."]
    if inputs.mode == "inference":
        out.append("Inference = prefill of seq_len tokens keeping the KV cache (payload only, no quantisation "
                   f"scales), logits for {'all positions' if inputs.logits == 'all' else 'the last position'} "
                   "in the model dtype plus an fp32 copy; decode reads all weights and the KV cache once per step.")
    else:
        zero = (f"ZeRO stage {inputs.zero} over {inputs.dp} data-parallel replicas" if inputs.zero else
                "no ZeRO sharding (data-parallel replicas hold full copies)")
        out.append("Training = one mixed-precision AdamW step: 16-bit weights and gradients, fp32 master weights and "
                   "two fp32 moments (2 + 2 + 12 bytes per parameter; fp32 training: 4 + 4 + 8), fused AdamW "
                   f"(no parameter-sized temporaries), {zero}.")
        out.append("Activations per layer follow Korthikanti et al. 2022 (arXiv:2205.05198) §4, generalised to "
                   "GQA and SwiGLU, with the attention core's saved tensors from the attention estimator; "
                   "dropout 0; the loss over every position peaks in its backward at dtype + 12 bytes per logit "
                   "(logits, saved fp32 log-softmax, fp32 gradients in and out; measured on a HF Llama).")
    if any(w is not None for w in inputs.windows):
        out.append("Sliding window w: each windowed layer's attention is modelled as a dense q_len × min(seq_len, w) "
                   "call (a kernel with window support, e.g. flash-attn window_size, or chunked prefill) and its KV "
                   "cache keeps min(seq_len, w) tokens. SDPA has no window argument: through SDPA a window needs a "
                   "dense mask, which rules out flash and makes the math path materialise seq_len².")
    if m.attn_logit_softcap:
        out.append(f"{m.name} soft-caps attention scores (tanh, cap {m.attn_logit_softcap:g}); SDPA's fused kernels "
                   "cannot, so the plan assumes a kernel that can (flash-attn >= 2.6, FlexAttention) or capping "
                   "dropped at inference. The Hugging Face eager path keeps capping and materialises the scores: "
                   "plan it with --backend eager.")
    if inputs.tp > 1:
        sp_text = ("with sequence parallelism the saved norm and residual-stream tensors split tp ways too"
                   if inputs.sequence_parallel and inputs.mode == "training" else
                   "residual stream and norms replicated (no sequence parallelism)")
        out.append("Tensor parallel: heads, FFN columns and vocabulary split (Megatron-LM); kv heads copied when "
                   f"tp exceeds kv_heads; {sp_text}.")
    if inputs.cp > 1:
        out.append("Context parallel: ring attention; each GPU keeps seq_len/cp tokens of activations and KV, runs "
                   "one (seq_len/cp)² block at a time and holds one incoming kv block.")
    if m.max_positions and inputs.seq_len > m.max_positions:
        out.append(f"Note: seq_len {inputs.seq_len:,} exceeds the {m.max_positions:,} positions {m.name} was trained "
                   "for; memory and time are still computed, quality is not implied.")
    if m.kind == "encoder" and m.native_tokens and inputs.seq_len != m.native_tokens:
        out.append(f"Note: {m.name} was trained with {m.native_tokens} tokens; other lengths need an interpolated "
                   "position table (same parameter count) or another patch size.")
    if m.kind == "encoder":
        out.append("Encoder: bidirectional attention, no KV cache, seq_len = patches + class token; the parameter "
                   "count keeps the native-resolution position table.")
    return tuple(out)


def gpu_of(inputs: PlanInputs) -> GPU:
    return get_gpu(inputs.gpu)
