"""Advice for fine-tuning that does not fit: the ladder people climb (full fine-tuning -> LoRA -> QLoRA ->
activation checkpointing -> 8-bit AdamW -> a smaller micro-batch), each rung re-planned with every change before it
(estimator/model/finetune.py has the mechanism), with its memory and its step time, until one fits."""

from __future__ import annotations

from estimator.advice.core import Advice, _Context, _plan_advice, gib, ms


def _rungs(inputs) -> list[tuple[str, str, dict]]:
    """The ladder's rungs that apply from `inputs`: (short name, the change in words, the PlanInputs fields it
    sets), applied cumulatively."""
    rungs: list[tuple[str, str, dict]] = []
    if inputs.finetune == "full" and inputs.precision not in ("fp8", "bf16-master", "16-mixed"):
        rungs.append(("LoRA", "LoRA (peft, rank 16, every projection; the base frozen)", {"finetune": "lora"}))
    if inputs.finetune != "qlora" and inputs.precision not in ("fp8", "bf16-master", "16-mixed"):
        rungs.append(("QLoRA", "QLoRA (NF4 base with double quantisation, bf16 compute)",
                      {"finetune": "qlora", "precision": "bf16-true"}))
    if inputs.checkpointing in ("none", "selective"):
        rungs.append(("checkpointing", "activation checkpointing (HF gradient_checkpointing_enable)",
                      {"checkpointing": "hf"}))
    if inputs.optimizer in ("adamw", "adamw-fused"):
        rungs.append(("8-bit AdamW", "8-bit AdamW (bitsandbytes AdamW8bit)", {"optimizer": "adamw-8bit"}))
    share = -(-inputs.batch // inputs.dp)
    micro = inputs.batch_per_gpu
    while micro > 1 and len(rungs) < 12:
        micro = max(1, micro // 2)
        rungs.append((f"micro-batch {micro}", f"micro-batch {micro} (gradient accumulation over "
                      f"{-(-share // micro)} passes)",
                      {"micro_batch": micro}))
    return rungs


def rule_finetune_ladder(ctx: _Context) -> list[Advice]:
    """Training that does not fit: climb the fine-tuning ladder until a rung fits; every rung's plan is shown."""
    inputs, base = ctx.inputs, ctx.base
    if not ctx.training or base.fits or not base.supported or inputs.model.kind != "decoder":
        return []
    changes: dict = {}
    lines, names, fitting, after = [], [], None, None
    for name, words, change in _rungs(inputs):
        trial = {**changes, **change}
        plan = ctx.plan(**trial)
        if plan is None:  # the model or layout is not modelled for this rung (e.g. LoRA on a MoE): skip it
            continue
        changes, after = trial, plan
        names.append(name)
        lines.append(f"+ {words}: {gib(plan.total_bytes)} ({'fits' if plan.fits else 'does not fit'}), "
                     f"{ctx.time_metric} {ms(ctx.time_ms(plan))}")
        if plan.fits:
            fitting = plan
            break
    if not lines:
        return []
    why = (f"Total per GPU {gib(base.total_bytes)} exceeds {gib(base.capacity_bytes)}. Each rung re-planned with "
           f"the ones before it: " + "; ".join(lines) + "."
           + ("" if fitting else " No rung of the ladder fits: more GPUs (ZeRO, tensor parallel) or a shorter "
              "sequence are next."))
    effect = ("changes " + ", ".join(f"{k} {v}" for k, v in changes.items()) + ".")
    if "QLoRA" in names and "LoRA" in names:  # QLoRA is LoRA over a quantised base
        names.remove("LoRA")
    return [_plan_advice(ctx, "finetune-ladder", "Fine-tune with " + " + ".join(names),
                         why, effect, fitting or after, **changes)]


RULES = (rule_finetune_ladder,)
