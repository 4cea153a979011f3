"""Advice past windows: replace softmax attention by linear attention (`linear-attention`) or keep it in a few
layers only (`hybrid-architecture`, the Qwen3-Next / Jamba pattern). Offered for an inference plan that does not
fit, whose attention dominates (over 40% of the forward time, or a KV cache holding half the budget), when the
window alternative does not fit either. The effects are `estimator.model.linear_attention.linear_whatif` of the
plan (no transformers model implements either method, so nothing here is a re-plan; the bytes metric says so),
and the text sets them beside the window and fewer-tokens alternatives. No accuracy figure is given."""

from __future__ import annotations

from estimator.advice.core import ATTENTION_BOTTLENECK_SHARE, Advice, _Context, gib, ms
from estimator.model.linear_attention import QUALITY_CAVEAT, linear_whatif

WHATIF_METRIC = "total_bytes per GPU (linear-attention what-if, not a re-plan)"
RANK = 256  # Linformer k / Performer m of the what-if: the papers' usual setting (Linformer k = 256, Performer
#             m = 256 in their long-sequence experiments)
HYBRID_SOFTMAX_EVERY = 4  # Qwen3-Next: full attention in every 4th layer (transformers 5.17 Qwen3NextConfig
#                           layer_types: 3 linear_attention, 1 full_attention)
KV_SHARE = 0.5  # a KV cache holding half the budget counts as attention dominating (judgement; tests pin it)


def _window_alternative(ctx: _Context):
    """The window alternative of the sequence rules (a window of min(4096, n/4) through flex), or None."""
    inputs = ctx.inputs
    windows = inputs.windows
    span = inputs.seq_len if None in windows else min(inputs.seq_len, max(windows))
    window = min(4096, 1 << max(6, (inputs.seq_len // 4).bit_length() - 1))
    return (window, ctx.plan(window=window, backend="flex")) if window < span else (window, None)


def _beside(ctx: _Context, window: int, after_window) -> str:
    base = ctx.base
    parts = []
    if after_window is not None:
        parts.append(f"a window of {window:,} through flex: {gib(after_window.total_bytes)} "
                     f"({'fits' if after_window.fits else 'does not fit'})")
    if base.max_seq_len:
        parts.append(f"the longest sequence that fits as it is: {base.max_seq_len:,} tokens")
    return ("Beside it: " + "; ".join(parts) + ". ") if parts else ""


def rule_linear(ctx: _Context) -> list[Advice]:
    inputs, base = ctx.inputs, ctx.base
    if inputs.mode != "inference" or base.fits or not base.supported:
        return []
    kv_share = base.kv_cache_bytes / base.total_bytes if base.total_bytes else 0.0
    if base.attention_share < ATTENTION_BOTTLENECK_SHARE and kv_share < KV_SHARE:
        return []
    window, after_window = _window_alternative(ctx)
    if after_window is not None and after_window.fits:
        return []  # a window is enough: window-attention says so
    kind = "performer" if inputs.model.kind == "decoder" else "linformer"
    try:
        linear = linear_whatif(base, kind, RANK)
        hybrid = linear_whatif(base, "performer", inputs.model.head_dim, softmax_every=HYBRID_SOFTMAX_EVERY) \
            if inputs.model.kind == "decoder" and inputs.model.layers >= HYBRID_SOFTMAX_EVERY else None
    except ValueError:
        return []  # the plan lacks what the what-if needs (a plan from another estimator)
    why = (f"The plan does not fit ({gib(base.total_bytes)} of {gib(base.capacity_bytes)}); attention is "
           f"{base.attention_share:.0%} of the forward time and the KV cache {kv_share:.0%} of the budget, and a "
           f"window is not enough. " + _beside(ctx, window, after_window))
    what = {"performer": f"Performer (FAVOR+, m = {RANK} random features; causal prefix-sum form): the KV cache "
                         "becomes a fixed (m × head_dim) state per kv head and layer",
            "linformer": f"Linformer (K and V projected to k = {RANK} rows along the sequence): scores n × k "
                         "instead of n × n; bidirectional, so an encoder's attention"}[kind]
    out = [_whatif_advice(ctx, "linear-attention", f"Linear attention ({kind}, rank {RANK})", why,
                          f"{what}. {QUALITY_CAVEAT}", linear, (("attention", f"{kind}:{RANK}"),))]
    if hybrid is not None:
        d = inputs.model.head_dim
        out.append(_whatif_advice(
            ctx, "hybrid-architecture",
            f"A hybrid: softmax attention in 1 of {HYBRID_SOFTMAX_EVERY} layers", why,
            f"Keep softmax attention in every {HYBRID_SOFTMAX_EVERY}th layer and give the others a fixed-state "
            f"linear layer (a gated DeltaNet or Mamba2 layer, as Qwen3-Next and Bamba do; priced here as a "
            f"(head_dim × head_dim) = ({d} × {d}) state per head with fused kernels: on a machine without them "
            "transformers' torch fallback allocates far more, see docs/hybrids.md). The KV cache keeps only the "
            f"softmax layers. {QUALITY_CAVEAT}", hybrid, (("attention", f"hybrid:1/{HYBRID_SOFTMAX_EVERY}"),)))
    return out


def _whatif_advice(ctx: _Context, advice_id: str, title: str, why: str, effect: str, w, change) -> Advice:
    base = ctx.base
    text = (f"{effect} What-if total per GPU {gib(base.total_bytes)} → {gib(w.total_bytes)} "
            f"({'fits' if w.fits else 'does not fit'} in {gib(base.capacity_bytes)}); KV cache "
            f"{gib(base.kv_cache_bytes)} → {gib(w.kv_cache_bytes)}; prefill {ms(base.prefill_time_ms)} → "
            f"{ms(w.time_ms)} (attention {ms(w.attention_ms_before)} → {ms(w.attention_ms_after)} at the GPU's "
            "dense peak: a lower bound, no linear-attention kernel is measured).")
    return Advice(id=advice_id, title=title, why=why, expected_effect=text, change=change,
                  bytes_metric=WHATIF_METRIC, bytes_before=base.total_bytes, bytes_after=w.total_bytes,
                  time_metric="prefill_time_ms", time_ms_before=float(base.prefill_time_ms), time_ms_after=w.time_ms)


RULES = (rule_linear,)
