"""What a plan is asked (`PlanInputs`) and the per-GPU sizes derived from it: the vocabulary every other module of
the model room shares (the attention call each layer makes is priced in estimator/model/layer_attention.py).

Notation in formula comments: b batch per data-parallel replica, n tokens per GPU (seq_len / cp), H hidden,
F ffn / tp, hq and hk query and kv heads per GPU (/ tp), d head_dim, V vocab / tp, es element bytes.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

from estimator.call.backends import DEFAULT_TORCH, check_torch_version
from estimator.call.config import (
    KV_DTYPE_BITS,
    MAX_SEQ_LEN,
    check_positive_int,
    normalize_dtype,
    optional_float,
    parse_bool,
)
from estimator.call.registry import BACKENDS
from estimator.hardware import GPU, get_gpu
from estimator.model.recipes import DEFAULT_PRECISION, OPTIMIZERS, PRECISIONS, Precision
from estimator.model.specs import KV_LAYOUTS, ModelSpec

MODES = ("inference", "training")
FINETUNES = ("full", "lora", "qlora")  # estimator/model/finetune.py
LORA_TARGETS = ("attention", "mlp", "all")
CHECKPOINTING = ("none", "selective", "full", "hf")
LOGITS = ("last", "all")
# The smallest --gemm-efficiency / --hbm-efficiency taken: 1 % of the datasheet peak. Below it a plan's times are no
# estimate of a working GPU (and 1e-308 priced every GEMM at Infinity ms).
MIN_EFFICIENCY = 0.01
KV_ALIASES = {"fp8": "float8", "e4m3": "float8", "e5m2": "float8", "float8_e4m3fn": "float8",
              "float8_e5m2": "float8", "q8": "int8", "q4": "int4"}

# CUBLAS_WORKSPACE_BYTES: 32 MiB per (thread, stream) once a GEMM ran (sdpa-internals.md §0.4, measured);
# CUDA_CONTEXT_BYTES: what PyTorch cannot hand out (context, kernel images), measured on the H200.
# Both come from the attention estimator so that the plan and estimate_call agree.


NOT_ECHOED = {"echoed": False}  # PlanInputs field metadata: left out of `Plan.to_dict()["inputs"]`


@dataclass(frozen=True, kw_only=True)
class PlanInputs:
    """One planning question. Change one input with `dataclasses.replace(inputs, ...)`, then `make_plan`."""

    model: ModelSpec
    seq_len: int  # tokens per sequence (encoders: patches + class token)
    batch: int = 1  # sequences in the whole job (split over data-parallel replicas)
    dtype: str = "bfloat16"  # weights and activations
    kv_dtype: str | None = None  # KV-cache storage (inference); None = dtype
    mode: str = "inference"  # inference (prefill keeping the KV cache, then decode) | training (one AdamW step)
    checkpointing: str = "none"  # training: none | selective (attention core recomputed) | full (per layer) | hf
    # (Hugging Face's model.gradient_checkpointing_enable(): every decoder layer re-run in backward, its input kept)
    precision: str | None = None  # training recipe (estimator/model/recipes.py); None: from dtype (bf16 -> bf16-mixed)
    optimizer: str = "adamw"  # training: adamw (torch foreach) | adamw-fused | sgd (momentum) | adamw-8bit
    window: int | None = None  # sliding window for every layer; None = the model's own per-layer windows
    backend: str = "auto"  # SDPA backend, or eager (hand-written attention)
    gpu: str = "h100-sxm"  # catalog name
    gpus: int | None = None  # total GPUs; None = tp·cp; the rest is data parallelism
    tp: int = 1  # tensor parallel: heads, FFN and vocabulary split
    cp: int = 1  # context parallel: the sequence split (ring attention)
    torch_version: str = DEFAULT_TORCH
    logits: str = "last"  # inference: logits for the last position only, or for all positions
    sequence_parallel: bool = False  # training with tp > 1: norms and residual-stream tensors split tp ways too
    micro_batch: int | None = None  # training: sequences per replica per forward/backward (gradient accumulation)
    zero: int = 0  # training: ZeRO stage over the data-parallel replicas (1 optimizer, 2 + gradients, 3 + weights)
    persistent_grads: bool = False  # training: gradients stay allocated between steps (zero_grad(set_to_none=False))
    kv_layout: str = "hf"  # KV cache: hf (as transformers 5.17 stores it) | latent (MLA c_kv + rope key) | per-head
    ep: int = 1  # expert parallel: each MoE layer's routed experts split ep ways (within the GPUs of a replica set)
    # training: full | lora (peft LoRA on a frozen base) | qlora (LoRA over a bitsandbytes NF4 base);
    # estimator/model/finetune.py
    finetune: str = "full"
    lora_rank: int = 16  # LoRA: the adapters' rank r
    lora_targets: str = "all"  # LoRA: attention (q, k, v, o) | mlp (gate, up, down) | all
    compile: bool = False  # training: each decoder layer under torch.compile (time only; memory as eager)
    # Not echoed in the plan's JSON `inputs` (docs/contract.md §3 keeps its keys):
    # GPUs one node joins by NVLink/PCIe; groups past it communicate over the network
    gpus_per_node: int = field(default=8, metadata=NOT_ECHOED)
    # kernel calibration JSON (python -m validation calibrate); None: the H200's
    calibration: str | None = field(default=None, metadata=NOT_ECHOED)
    # overrides: every GEMM at this fraction of the datasheet peak, every streaming kernel at this fraction of HBM
    gemm_efficiency: float | None = field(default=None, metadata=NOT_ECHOED)
    hbm_efficiency: float | None = field(default=None, metadata=NOT_ECHOED)

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
        if self.mode == "training":
            default = "bf16-true" if str(self.finetune).strip().lower() == "qlora" else DEFAULT_PRECISION[self.dtype]
            precision = default if self.precision is None else str(self.precision).strip().lower()
            if precision not in PRECISIONS:
                raise ValueError(f"precision: unknown value {self.precision!r}; expected one of "
                                 f"{', '.join(PRECISIONS)}")
            object.__setattr__(self, "precision", precision)
            object.__setattr__(self, "dtype", PRECISIONS[precision].compute_dtype)
        else:
            object.__setattr__(self, "precision", None)
        for name, allowed in (("finetune", FINETUNES), ("lora_targets", LORA_TARGETS)):
            value = str(getattr(self, name)).strip().lower()
            if value not in allowed:
                raise ValueError(f"{name}: unknown value {getattr(self, name)!r}; expected one of {', '.join(allowed)}")
            object.__setattr__(self, name, value)
        object.__setattr__(self, "lora_rank", check_positive_int("lora_rank", self.lora_rank, 1 << 16))
        if not isinstance(self.compile, bool):
            object.__setattr__(self, "compile", parse_bool("compile", self.compile))
        optimizer = str(self.optimizer).strip().lower()
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer: unknown value {self.optimizer!r}; expected one of {', '.join(OPTIMIZERS)}")
        object.__setattr__(self, "optimizer", optimizer)
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
        layout = str(self.kv_layout).strip().lower()
        if layout not in KV_LAYOUTS:
            raise ValueError(f"kv_layout: unknown value {self.kv_layout!r}; expected one of {', '.join(KV_LAYOUTS)}")
        object.__setattr__(self, "kv_layout", layout)
        object.__setattr__(self, "ep", check_positive_int("ep", self.ep, 1 << 14))
        object.__setattr__(self, "gpus_per_node", check_positive_int("gpus_per_node", self.gpus_per_node, 1024))
        for name in ("gemm_efficiency", "hbm_efficiency"):
            value = optional_float(name, getattr(self, name), f"a number in [{MIN_EFFICIENCY:g}, 1]")
            if value is not None and not MIN_EFFICIENCY <= value <= 1:  # also NaN; 1e-308 would price in Infinity
                raise ValueError(f"{name}: expected a fraction of the datasheet peak in [{MIN_EFFICIENCY:g}, 1], "
                                 f"got {value!r}")
            object.__setattr__(self, name, value)
        if self.calibration is not None:
            object.__setattr__(self, "calibration", str(self.calibration))
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
        if self.ep > 1 and (not self.model.experts or self.model.experts % self.ep or gpus % self.ep):
            raise ValueError(f"ep: {self.ep} must divide the model's routed experts ({self.model.experts}) and the "
                             f"{gpus} GPUs")
        m = self.model
        if m.q_heads % tp:
            raise ValueError(f"tp: {tp} does not divide the {m.q_heads} query heads")
        if m.kv_heads % tp and tp % m.kv_heads:
            raise ValueError(f"tp: {tp} neither divides nor is a multiple of the {m.kv_heads} kv heads")
        if cp > self.seq_len:
            raise ValueError(f"cp: {cp} GPUs cannot split a sequence of {self.seq_len} tokens")
        check_finetune(self)
        if self.precision == "fp8" and get_gpu(self.gpu).compute_capability < (8, 9):
            raise ValueError(f"precision: fp8 training needs FP8 tensor cores (compute capability 8.9 or newer); "
                             f"{self.gpu} has {'.'.join(map(str, get_gpu(self.gpu).compute_capability))}")

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
    def recipe(self) -> Precision | None:
        """The training precision recipe (None for inference)."""
        return PRECISIONS[self.precision] if self.precision else None

    @property
    def windows(self) -> tuple[int | None, ...]:
        return (self.window,) * self.model.layers if self.window is not None else self.model.window_per_layer


# The one home of the plan's defaults: the CLI's flags and the app's form derive theirs from these.
PLAN_INPUT_DEFAULTS: dict = {f.name: f.default for f in fields(PlanInputs) if f.default is not MISSING}
# The inputs `Plan.to_dict()` echoes, in field order (the model is echoed apart, by name)
ECHOED_INPUTS: tuple[str, ...] = tuple(f.name for f in fields(PlanInputs)
                                       if f.name != "model" and f.metadata.get("echoed", True))


def check_finetune(inputs: PlanInputs) -> None:
    """ValueError naming the field where a LoRA/QLoRA plan is asked of a model or layout it does not model."""
    if inputs.finetune == "full":
        return
    m = inputs.model
    what = "LoRA" if inputs.finetune == "lora" else "QLoRA"
    if inputs.mode != "training":
        raise ValueError(f"finetune: {what} is a training recipe; give --mode training")
    if m.kind != "decoder" or m.experts or m.mla or m.fused_qkv or m.fused_gate_up:
        raise ValueError(f"finetune: {what} is modelled for dense decoders with separate q/k/v and MLP "
                         f"projections (not {m.name})")
    if inputs.tp > 1 or inputs.ep > 1:
        raise ValueError(f"finetune: {what} is modelled without tensor or expert parallelism (tp = ep = 1)")
    if inputs.finetune == "qlora" and inputs.precision != "bf16-true":
        raise ValueError("precision: QLoRA computes in bf16 over a bf16 model (bf16-true); "
                         f"got {inputs.precision}")
    if inputs.precision in ("bf16-master", "16-mixed", "fp8"):
        raise ValueError(f"precision: {what} is modelled with bf16-true, 16-true, bf16-mixed or 32-true, "
                         f"not {inputs.precision}")


def gpu_of(inputs: PlanInputs) -> GPU:
    return get_gpu(inputs.gpu)


# --- per-GPU sizes --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sizes:
    """Per-GPU tensor sizes in bytes that the activation formulas share."""

    b: int  # sequences per GPU at a time
    n: int  # tokens per GPU
    F: int  # FFN width per GPU
    V: int  # output width per GPU (vocabulary / tp, or classes)
    es: int  # element bytes of the compute dtype (matmul inputs and outputs, attention)
    q: int  # b·n·hq·d·es
    kv: int  # k and v of the new tokens: 2·b·n·hk·d·es
    resid: int  # b·n·H·rs, one residual-stream tensor
    rs: int  # element bytes of the residual stream (fp32 under autocast, else es)
    autocast: bool  # fp32 weights under torch.autocast: each linear casts its own copy of its fp32 input
