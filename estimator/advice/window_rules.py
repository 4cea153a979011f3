"""Advice on sliding windows and FlexAttention: a window only pays off through a kernel that skips the blocks it
masks out (flex_attention with a BlockMask, or flash-attn's window_size). Hugging Face passes a window to SDPA
as a dense (batch, 1, q, kv) mask and to eager as a float mask added to the full scores, so through either it
saves nothing (transformers 5.17 masking_utils; measured on the H200, validation/data/h200_hf_windows_*.csv)."""

from __future__ import annotations

from estimator.advice.core import Advice, _Context, _plan_advice, gib

# The TorchDynamo limit after which a function that keeps being recompiled runs unfused
# (torch/_dynamo/config.py recompile_limit, 8 in PyTorch 2.11).
RECOMPILE_LIMIT = 8


def _windowed(ctx: _Context) -> bool:
    return any(w is not None and w < ctx.inputs.seq_len for w in ctx.inputs.windows)


def rule_flex_window(ctx: _Context) -> list[Advice]:
    """A model with windows (or --window) run through SDPA or eager: re-plan through flex."""
    inputs = ctx.inputs
    if inputs.backend == "flex" or not _windowed(ctx):
        return []
    after = ctx.plan(backend="flex")
    base = ctx.base
    if after is None or not after.supported:
        return []
    if after.total_bytes >= base.total_bytes and ctx.time_ms(after) >= ctx.time_ms(base):
        return []
    through = "eager (a float mask added to full scores)" if inputs.backend == "eager" else \
        "SDPA (a dense bool mask: flash cannot run it, every score block is still computed)"
    return [_plan_advice(
        ctx, "flex-window", "Run the window through FlexAttention",
        f"This plan's sliding window goes through {through}, so it saves neither memory nor FLOPs. "
        "torch.nn.attention.flex_attention with a BlockMask (Hugging Face attn_implementation=\"flex_attention\") "
        "computes only the blocks inside the window; flash-attn's window_size does the same (not modelled: it "
        "cannot be installed where we measure).",
        f"backend {inputs.backend} → flex.", after, backend="flex")]


def rule_flex_recompile(ctx: _Context) -> list[Advice]:
    """Planned through flex: what the unfused fallback would cost at this n, and how to avoid it."""
    inputs = ctx.inputs
    if inputs.backend != "flex":
        return []
    fallback = ctx.plan(backend="math")
    base = ctx.base
    if fallback is None or not fallback.supported:
        return []
    cost = (f"At this seq_len the unfused path needs {gib(fallback.total_bytes)} per GPU against "
            f"{gib(base.total_bytes)} fused ({'still fits' if fallback.fits else 'does not fit'} in "
            f"{gib(fallback.capacity_bytes)}).")
    return [Advice(
        id="flex-recompile", title="Keep FlexAttention compiled (recompile limit)",
        why=f"flex_attention is fast only compiled; Hugging Face compiles it per shape, and after TorchDynamo's "
            f"recompile limit ({RECOMPILE_LIMIT} by default) a function runs unfused, materialising the score "
            "matrix like SDPA's math path. With transformers 5.17 and PyTorch 2.11 we did not see the fallback "
            "on an H200 over nine prefill shapes (automatic dynamic shapes; validation/data/h200_hf_windows_b.csv); "
            "other versions or many distinct shapes can reach it. " + cost,
        expected_effect="Compile with dynamic shapes (torch.compile(..., dynamic=True)), pad sequence lengths to a "
                        "few buckets, or raise torch._dynamo.config.recompile_limit; log recompiles "
                        "(TORCH_LOGS=recompiles) at the start of a run.",
        change=(("backend", "math"),),  # the unfused fallback the numbers are for, not a change to make
        bytes_before=base.total_bytes, bytes_after=fallback.total_bytes, time_metric=ctx.time_metric,
        time_ms_before=ctx.time_ms(base), time_ms_after=ctx.time_ms(fallback),
        plan_bytes_after=fallback.total_bytes, plan_time_ms_after=ctx.time_ms(fallback))]


RULES = (rule_flex_window, rule_flex_recompile)
