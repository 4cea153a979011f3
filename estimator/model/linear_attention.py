"""What-if: the softmax attention of a planned model replaced by linear attention, priced beside the plan.

  Linformer (Wang et al. 2020, arXiv:2006.04768 §4): K and V projected along the sequence by learned (k × n)
      matrices E, F (one pair per layer, shared by the heads: the paper's "layerwise sharing" keeps one per
      layer), so scores are (n × k): projected K and V (b, kv_heads, k, d) each, scores and their fp32 softmax
      (b, q_heads, n, k), output. FLOPs: 2·2·b·kv_heads·n·k·d (projections) + 2·2·b·q_heads·n·k·d (QKᵀ, PV).
      It is bidirectional: a causal decoder cannot project keys it has not seen, so for decoders the KV cache is
      kept whole (each step re-projects it) and only the prefill's scores shrink.
  Performer (Choromanski et al. 2020, arXiv:2009.14794, FAVOR+ with m random features) in its causal form as a
      prefix sum over chunks of c = 64 tokens (Katharopoulos et al. 2020, arXiv:2006.16236 §3.2): feature maps
      φ(q), φ(k) (b, h, n, m), the intra-chunk (b, h, n/c, c, c) products, one (m × d_v) state per chunk and head
      in the parallel form, the output. FLOPs: 2·2·b·h·n·d·m (feature maps) + 2·2·b·h·n·m·d_v (state and read).
      The cache is a fixed (m × d_v + m) state per kv head and layer instead of k and v per token.
Memory: the plan's own budget with the worst layer's attention call (`estimate_call`'s peak for the backend it
selected) swapped for the linear core, and, inference, the KV cache for the state. Time: the plan's time less its
attention core, plus the linear core's FLOPs at the GPU's dense 16-bit peak (a lower bound: no linear-attention
kernel is measured here; transformers 5.17 ships neither method). Training is not priced (its saved tensors depend
on the implementation).

Quality: both are approximations of softmax attention; this planner has no accuracy figure for either and gives
none. Replacing the attention of a trained model means retraining or at least long fine-tuning.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.call.config import DTYPE_BITS
from estimator.hardware import get_gpu
from estimator.model.budget import Plan
from estimator.model.layer_attention import attention_layers
from estimator.units import cdiv

KINDS = ("linformer", "performer")
PERFORMER_CHUNK = 64
QUALITY_CAVEAT = ("Linear attention approximates softmax attention: quality changes and must be measured on the "
                  "task after retraining (no accuracy figure is given here).")


@dataclass(frozen=True, kw_only=True)
class LinearWhatIf:
    kind: str
    rank: int  # Linformer k, Performer m
    total_bytes: int
    kv_cache_bytes: int
    activation_bytes: int
    extra_weight_bytes: int  # Linformer's E and F
    fits: bool
    time_ms: float  # prefill
    attention_ms_before: float
    attention_ms_after: float
    caveat: str = QUALITY_CAVEAT


def linear_whatif(plan: Plan, kind: str, rank: int, *, softmax_every: int = 0) -> LinearWhatIf:
    """The plan's prefill with the softmax layers' attention replaced by `kind` of `rank` (inference only).
    `softmax_every` = N keeps softmax attention in every N-th layer (a hybrid: Qwen3-Next keeps one in 4, Jamba one
    in 8): those keep their KV cache and their attention call, so the worst layer's attention phase stays."""
    if kind not in KINDS:
        raise ValueError(f"kind: unknown value {kind!r}; expected one of {', '.join(KINDS)}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= 1 << 16:
        raise ValueError(f"rank: expected a whole number in 1..65536 (Linformer k, Performer m), got {rank!r}")
    inputs = plan.inputs
    if inputs.mode != "inference":
        raise ValueError("mode: the linear-attention what-if prices inference (a prefill and its cache); training "
                         "depends on the implementation's saved tensors and is not priced")
    if not plan.supported:
        raise ValueError("backend: the plan cannot run its attention, so there is nothing to replace")
    if isinstance(softmax_every, bool) or not isinstance(softmax_every, int) or softmax_every < 0:
        raise ValueError(f"softmax_every: expected a whole number >= 0, got {softmax_every!r}")
    detail = plan.activation_detail
    missing = [k for k in ("model_level_bytes", "attention_phase_bytes", "ffn_phase_bytes", "logits_phase_bytes")
               if k not in detail]
    if missing:
        raise ValueError(f"plan: the what-if needs the plan's phase detail ({missing[0]} is missing)")
    m = inputs.model
    es = DTYPE_BITS[inputs.dtype] // 8
    b, n = inputs.batch_per_gpu, inputs.tokens_per_gpu
    hq, hk, d, dv = inputs.q_heads_per_gpu, inputs.kv_heads_per_gpu, m.head_dim, m.v_head
    attn = attention_layers(inputs)
    base_call = max(a.memory.peak_extra_bytes for a in attn)
    extra_weights = 0
    if kind == "linformer":
        k = min(rank, n)
        core = 2 * b * hk * k * d * es + b * hq * n * k * (es + 4) + b * hq * n * dv * es
        flops = 4 * b * hk * n * k * d + 4 * b * hq * n * k * d
        extra_weights = m.layers * 2 * k * inputs.seq_len * es  # E and F, (k × n) per layer
        kv_after = plan.kv_cache_bytes  # causal decoding re-projects the whole cache
    else:
        c = PERFORMER_CHUNK
        chunks = cdiv(n, c)
        core = (2 * b * hq * n * rank * es + b * hq * chunks * c * c * 4 + b * hq * chunks * rank * dv * 4
                + b * hq * n * dv * es)
        flops = 4 * b * hq * n * d * rank + 4 * b * hq * n * rank * dv
        kv_after = b * m.layers * hk * (rank * dv + rank) * es if m.kind == "decoder" else 0
    kept = m.layers // softmax_every if softmax_every else 0
    linear_share = (m.layers - kept) / m.layers
    kv_after = kv_after * (m.layers - kept) // m.layers + plan.kv_cache_bytes * kept // m.layers
    extra_weights = extra_weights * (m.layers - kept) // m.layers
    model_level = detail["model_level_bytes"]
    attn_phase = detail["attention_phase_bytes"] - (0 if kept else base_call - core)
    activations = max(attn_phase + model_level, detail["ffn_phase_bytes"] + model_level,
                      detail["logits_phase_bytes"])
    total = (plan.total_bytes - plan.activation_bytes - plan.kv_cache_bytes + activations + kv_after
             + extra_weights)
    gpu = get_gpu(inputs.gpu)
    peak = gpu.peak_flops_per_s[inputs.dtype]
    before = float(plan.time_split.get("prefill", {}).get("attention", 0.0))
    after = (m.layers - kept) * flops / peak * 1e3 + before * (1 - linear_share)  # per GPU: heads already split
    fits = total + plan.allocator_reserve_bytes <= plan.capacity_bytes
    return LinearWhatIf(kind=kind, rank=rank, total_bytes=total, kv_cache_bytes=kv_after,
                        activation_bytes=activations, extra_weight_bytes=extra_weights, fits=fits,
                        time_ms=float(plan.prefill_time_ms) - before + after, attention_ms_before=before,
                        attention_ms_after=after)
