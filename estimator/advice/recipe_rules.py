"""Advice on the training recipe: the precision (which dtype holds the weights, gradients and optimizer state) and
the optimizer (its state and its step's temporaries), each effect computed by re-running the plan with the change.
Bytes per parameter come from estimator/model/recipes.py."""

from __future__ import annotations

from estimator.advice.core import Advice, _Context, _plan_advice, gib

# what the precision rule proposes, from each recipe: (target, the trade in words)
PRECISION_MOVES = {
    "bf16-mixed": ("bf16-true", "bf16-true keeps weights, gradients and AdamW's moments in bf16 (8 instead of 16 bytes "
                                "per parameter, no autocast weight copies) but drops the fp32 weights: small updates "
                                "round away in bf16 (use Kahan summation or stochastic rounding for long runs)"),
    "16-mixed": ("bf16-true", "bf16-true keeps weights, gradients and AdamW's moments in bf16 (8 instead of 16 bytes "
                              "per parameter) but drops the fp32 weights; it also needs no loss scaling"),
    "32-true": ("bf16-mixed", "bf16-mixed keeps the fp32 weights and optimizer state and computes in bf16 under "
                              "autocast: activations and matmuls at half the bytes, the same convergence in practice"),
    "bf16-master": ("bf16-true", "bf16-true drops the fp32 master weights and keeps the moments in bf16 (8 instead of "
                                 "16 bytes per parameter); the updates then round in bf16"),
}


def rule_precision(ctx: _Context) -> list[Advice]:
    """Training that does not fit: the cheaper precision recipe, with its trade."""
    inputs, base = ctx.inputs, ctx.base
    if not ctx.training or base.fits or not base.supported or inputs.precision not in PRECISION_MOVES:
        return []
    target, trade = PRECISION_MOVES[inputs.precision]
    after = ctx.plan(precision=target)
    if after is None or after.total_bytes >= base.total_bytes:
        return []
    return [_plan_advice(
        ctx, "precision", f"Train in {target}",
        f"Total per GPU {gib(base.total_bytes)} exceeds {gib(base.capacity_bytes)}; the {inputs.precision} "
        f"recipe holds weights {gib(base.weights_bytes)}, gradients {gib(base.gradient_bytes)} and "
        f"optimizer state {gib(base.optimizer_bytes)}. {trade[0].upper() + trade[1:]}.",
        f"precision {inputs.precision} → {target}.", after, precision=target)]


def rule_optimizer(ctx: _Context) -> list[Advice]:
    """Training whose optimizer state or step temporaries matter: fused AdamW, then 8-bit AdamW."""
    inputs, base = ctx.inputs, ctx.base
    if not ctx.training or base.fits or not base.supported:
        return []
    step = base.component_bytes("optimizer_step")
    out = []
    if inputs.optimizer == "adamw" and step:
        after = ctx.plan(optimizer="adamw-fused")
        if after is not None and after.total_bytes < base.total_bytes:
            out.append(_plan_advice(
                ctx, "optimizer", "Use fused AdamW (torch.optim.AdamW(..., fused=True))",
                f"The peak is the optimizer step: the default foreach AdamW allocates one parameter-sized "
                f"temporary ({gib(step)}, exp_avg_sq's square root) on top of every gradient and both moments; "
                "the fused kernel updates in place.",
                "optimizer adamw → adamw-fused.", after, optimizer="adamw-fused"))
            return out
    if inputs.optimizer in ("adamw", "adamw-fused") and base.optimizer_bytes > 0.25 * base.capacity_bytes:
        after = ctx.plan(optimizer="adamw-8bit")
        if after is not None and after.total_bytes < base.total_bytes:
            out.append(_plan_advice(
                ctx, "optimizer", "Use 8-bit AdamW (bitsandbytes AdamW8bit)",
                f"The optimizer state is {gib(base.optimizer_bytes)}, "
                f"{base.optimizer_bytes / base.capacity_bytes:.0%} of the GPU. bitsandbytes keeps both moments "
                "in 8 bits with an fp32 scale per 256 values (about 2 bytes per parameter instead of 8 in fp32); "
                "modelled from its source and measured on the H200.",
                f"optimizer {inputs.optimizer} → adamw-8bit.", after, optimizer="adamw-8bit"))
    return out


RULES = (rule_precision, rule_optimizer)
