"""Advice on the KV cache (a quantised cache, MLA's latent layout, fewer KV heads), each effect re-planned by the
estimator with its decode time, and kept under the plan's sharding (split from estimator/advice/plan_rules.py)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from estimator.advice.core import (
    KV_DOMINATES_SHARE,
    KV_QUANT_DTYPE,
    KV_SEQUENCE_SHARE,
    Advice,
    _Context,
    _plan_advice,
    ms,
)
from estimator.call.config import DTYPE_BITS, KV_DTYPE_BITS
from estimator.report.explain import decode_split_ms
from estimator.units import gib

if TYPE_CHECKING:
    from estimator.model.budget import Plan


def _kv_rules(ctx: _Context) -> list[Advice]:
    """KV cache dominating decode (inference, decoders): quantize it; fewer KV heads for MHA models."""
    base, inputs = ctx.base, ctx.inputs
    if ctx.training or inputs.model.kind != "decoder" or base.kv_cache_bytes == 0:
        return []
    kv, weights = base.kv_cache_bytes, base.weights_bytes
    decode_share = kv / (kv + weights)
    per_sequence = base.kv_cache_bytes_per_sequence or base.kv_cache_bytes_per_token * inputs.seq_len
    if decode_share < KV_DOMINATES_SHARE and per_sequence < KV_SEQUENCE_SHARE * base.capacity_bytes:
        return []
    why = (f"KV cache {gib(kv)} per GPU ({gib(per_sequence)} per {inputs.seq_len:,}-token sequence, "
           f"{base.kv_cache_bytes_per_token:,} bytes per token) against weights {gib(weights)}: "
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
    if model.mla and inputs.kv_layout == "per-head":
        after = ctx.plan(solve=True, kv_layout="latent")
        if after is not None:
            advice = _plan_advice(
                ctx, "mla-latent-cache", "Cache MLA's latent, not per-head k and v",
                why + f" The model uses latent attention: per token and layer it needs only c_kv + the rope key "
                f"({model.kv_lora_rank + model.qk_rope_head_dim} elements) instead of {model.kv_heads} heads × "
                f"({model.head_dim} + {model.v_head}) decompressed (as transformers 5.17, vLLM and SGLang cache it).",
                "kv_layout per-head → latent.", after, kv_layout="latent")
            out.append(_with_sharding(ctx, _with_decode(advice, base, after), kv_layout="latent"))
    if model.kv_heads == model.q_heads and model.q_heads > 1 and not model.mla:
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


def _with_decode(advice: Advice, base: Plan, after: Plan) -> Advice:
    if base.decode_time_ms_per_token is None or after.decode_time_ms_per_token is None:
        return advice
    extra = (f" Decode {ms(base.decode_time_ms_per_token)} → {ms(after.decode_time_ms_per_token)} per token")
    host_ms, gpu_ms = decode_split_ms(after)
    if ms(base.decode_time_ms_per_token) == ms(after.decode_time_ms_per_token):
        if host_ms > gpu_ms:
            extra += (f" (unchanged: a decode step here is host-bound, {ms(host_ms)} of kernel launches against "
                      f"{ms(gpu_ms)} of GPU work, so reading fewer bytes does not shorten it)")
        elif after.inputs.kv_dtype not in DTYPE_BITS:
            extra += (f" (unchanged: transformers' quantized cache dequantizes to {after.inputs.dtype} before "
                      "attention (cache_utils.py QuantizedLayer.update), so decode attention reads as many bytes "
                      "as before; the gain is memory)")
    if base.max_batch is not None and after.max_batch is not None and (base.max_batch or after.max_batch):
        extra += f"; concurrent sequences that fit {base.max_batch:,} → {after.max_batch:,}"
    return dataclasses.replace(advice, expected_effect=advice.expected_effect + extra + ".")


def _with_sharding(ctx: _Context, advice: Advice, **changes) -> Advice:
    """When tensor parallel is advised too, add this change's effect on top of it (both re-run with the solver)."""
    if not ctx.sharded:
        return advice
    sharded, both = ctx.plan(solve=True, **ctx.sharded), ctx.plan(solve=True, **ctx.sharded, **changes)
    if sharded is None or both is None:
        return advice
    text = (f" With tp={ctx.sharded['tp']} as well: total per GPU {gib(sharded.total_bytes)} → "
            f"{gib(both.total_bytes)}")
    if sharded.max_batch is not None and both.max_batch is not None:
        text += f", concurrent sequences that fit {sharded.max_batch:,} → {both.max_batch:,}"
    return dataclasses.replace(advice, expected_effect=advice.expected_effect + text + ".")
