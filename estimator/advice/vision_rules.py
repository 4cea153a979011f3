"""Advice for an image plan (Swin or a vision-language model): where the memory goes (vision tower vs language
model) and what to change there, each change re-planned: fewer pixels (Qwen: a smaller max-pixels bound, i.e. a
smaller image), fewer images, a frozen tower, a fused attention kernel in the tower."""

from __future__ import annotations

import math
from dataclasses import replace

from estimator.advice.core import Advice
from estimator.model.vision import VisionLanguageSpec
from estimator.model.vision_plan import VisionPlan, VisionRequest, vision_plan


def _gib(b: int) -> str:
    return f"{b / 2**30:.2f} GiB"


def _replan(req: VisionRequest) -> VisionPlan | None:
    try:
        return vision_plan(req, solve=False)
    except ValueError:
        return None


def vision_advice(plan: VisionPlan) -> list[Advice]:
    req, out = plan.request, []
    split = plan.memory_split_bytes
    tower = split.get("vision tower", 0) + sum(v for k, v in split.items() if k.startswith("stage"))
    lm = split.get("language model", 0)
    vlm = isinstance(req.model, VisionLanguageSpec)
    if plan.fits:
        out.append(Advice(id="fits", title="It fits", why=plan.verdict,
                          expected_effect=f"headroom {_gib(plan.capacity_bytes - plan.total_bytes)} per GPU",
                          bytes_before=plan.total_bytes, bytes_after=plan.total_bytes))
    t = plan.tokens
    where = (f"vision tower {_gib(tower)}, projector {_gib(split.get('projector', 0))}, language model {_gib(lm)}"
             if vlm else ", ".join(f"{k} {_gib(v)}" for k, v in split.items()))
    out.append(Advice(
        id="vision-memory-split", title="Where the memory goes, part by part",
        why=f"{t['vision_encoder']:,} tokens per image into the tower"
            + (f", {t['language_model']:,} into the language model ({t['text']:,} text)" if vlm else "")
            + f"; peak in the {plan.phase} phase; {where}",
        expected_effect="change the part that holds the most: the advice below re-plans each change",
        bytes_before=plan.total_bytes, bytes_after=plan.total_bytes))
    h, w = t["image_size"][:2]  # the pixels the tower sees (after the processor's resize)
    smaller = (max(28, int(h / math.sqrt(2))), max(28, int(w / math.sqrt(2))))
    dynamic = vlm and req.model.family in ("qwen2_vl", "qwen2_5_vl")
    if dynamic or not vlm:
        after = _replan(replace(req, image_size=smaller))
        if after is not None:
            out.append(Advice(
                id="vision-max-pixels" if dynamic else "vision-fewer-pixels",
                title="A smaller max-pixels bound (fewer patches per image)" if dynamic else "Fewer pixels",
                why=f"{h}x{w} px is {t['vision_encoder']:,} tower tokens per image",
                expected_effect=f"at {smaller[0]}x{smaller[1]} px (half the pixels): {after.tokens['vision_encoder']:,}"
                                f" tokens, total {_gib(plan.total_bytes)} -> {_gib(after.total_bytes)}",
                change=(("image_size", f"{smaller[0]}x{smaller[1]}"),),
                bytes_before=plan.total_bytes, bytes_after=after.total_bytes,
                time_ms_before=plan.step_time_ms, time_ms_after=after.step_time_ms))
    if vlm and req.images > 1:
        after = _replan(replace(req, images=req.images - 1))
        if after is not None:
            out.append(Advice(id="vision-fewer-pixels", title="One image fewer per sequence",
                              why=f"{req.images} images x {t.get('image_tokens_per_image', 0):,} image tokens",
                              expected_effect=f"total {_gib(plan.total_bytes)} -> {_gib(after.total_bytes)}",
                              change=(("images", req.images - 1),), bytes_before=plan.total_bytes,
                              bytes_after=after.total_bytes))
    if vlm and req.base.mode == "training" and req.trainable == "all":
        after = _replan(replace(req, trainable="tower-frozen"))
        if after is not None:
            out.append(Advice(id="vision-freeze-tower", title="Freeze the vision tower (--trainable tower-frozen)",
                              why="the tower keeps its activations, gradients and optimizer state while the LM trains",
                              expected_effect=f"total {_gib(plan.total_bytes)} -> {_gib(after.total_bytes)}; the "
                                              "tower then runs as a forward without grad",
                              change=(("trainable", "tower-frozen"),), bytes_before=plan.total_bytes,
                              bytes_after=after.total_bytes))
    tower_plans = [p.plan for p in plan.parts if p.plan is not None and p.name != "language model"]
    slow = [p for p in tower_plans if p.selected_backend in ("math", "eager")]
    if slow and req.base.backend != "auto":
        after = _replan(replace(req, base=replace(req.base, backend="auto")))
        if after is not None:
            out.append(Advice(id="vision-fused-tower", title="A fused attention kernel in the tower (sdpa)",
                              why=f"the tower's attention runs {slow[0].selected_backend}: its scores are materialised",
                              expected_effect=f"total {_gib(plan.total_bytes)} -> {_gib(after.total_bytes)}",
                              change=(("backend", "auto"),), bytes_before=plan.total_bytes,
                              bytes_after=after.total_bytes))
    from estimator.advice.tree import ADVICE_ORDER

    return sorted(out, key=lambda a: ADVICE_ORDER.index(a.id))
