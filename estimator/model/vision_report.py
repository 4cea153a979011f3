"""The readable table of an image plan: the tokens per modality first, then where the memory and the time go, part
by part (vision tower, projector, language model; or Swin stage by stage)."""

from __future__ import annotations

from estimator.model.vision_plan import VisionPlan


def token_lines(tokens: dict) -> list[str]:
    """Tokens per modality, the way the page and the table show them before anything else."""
    h, w = (tokens.get("image_size") or [0, 0])[:2]
    lines = [f"tokens: vision encoder {tokens['vision_encoder']:,} per image ({h}x{w} px: {tokens.get('rule', '')})"]
    if tokens.get("language_model"):
        lines.append(f"        language model {tokens['language_model']:,} = text {tokens['text']:,} + "
                     f"{tokens['images']} image(s) x {tokens.get('image_tokens_per_image', 0):,}")
    for i, s in enumerate(tokens.get("stages", ()), 1):
        lines.append(f"        stage {i}: {s['grid'][0]}x{s['grid'][1]} = {s['tokens']:,} tokens in {s['windows']:,} "
                     f"windows of {s['window']}x{s['window']}{' (shifted every other block)' if s['shifted'] else ''}")
    return lines


def format_vision_table(plan: VisionPlan) -> str:
    req, base = plan.request, plan.request.base
    lines = [f"{req.model.name}: {base.mode}"
             + (f" ({base.precision}, trainable {req.trainable})" if base.mode == "training" else "")
             + f", batch {base.batch}, {base.dtype}, backend {base.backend}, {base.gpus} x {base.gpu}", ""]
    lines += token_lines(plan.tokens)
    named = [f"{p.name} {p.params:,}" for p in plan.parts if p.params]
    lines += ["", f"parameters {plan.params:,}" + (": " + ", ".join(named) if len(named) > 1 else ""), "",
              "memory per GPU"]
    width = max(28, *(len(name) + 2 for name, _ in plan.components))
    for name, size in (*plan.components, ("total", plan.total_bytes), ("capacity", plan.capacity_bytes)):
        lines.append(f"  {name:<{width}}{size / 2**30:>12.2f} GiB{size:>22,} B")
    lines.append(f"  -> {plan.verdict}")
    lines.append("  by part: " + ", ".join(f"{k} {v / 2**30:.2f} GiB" for k, v in plan.memory_split_bytes.items()))
    lines += ["", "time (estimates)"]
    key = "step" if base.mode == "training" else "prefill"
    lines.append(f"  {key} {plan.step_time_ms if key == 'step' else plan.prefill_time_ms:,.2f} ms: "
                 + ", ".join(f"{k} {v:,.2f} ms" for k, v in plan.time_split_ms.items()))
    for p in plan.parts:
        if p.plan is not None:
            lines.append(f"  {p.name}: attention -> {p.plan.selected_backend}")
    if plan.max_batch is not None:
        lines += ["", f"largest batch: {plan.max_batch:,}"
                  + (f"; largest text tokens at batch {base.batch}: {plan.max_seq_len:,}" if plan.max_seq_len else "")]
    return "\n".join(lines)
