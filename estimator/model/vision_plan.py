"""Image plans: `vision_plan(VisionRequest)` dispatches to Swin (estimator/model/vision_swin.py) or a
vision-language model (estimator/model/vision_vlm.py) and runs the solvers (largest batch; largest text tokens for
a VLM). The request, the parts and the joining rule live in estimator/model/vision_parts.py."""

from __future__ import annotations

from dataclasses import replace

from estimator.model.solve import largest_fitting
from estimator.model.vision import SwinSpec, VisionLanguageSpec
from estimator.model.vision_parts import MAX_IMAGES, VisionPlan, VisionRequest, request_tokens
from estimator.model.vision_swin import swin_plan
from estimator.model.vision_vlm import vlm_plan

__all__ = ["MAX_IMAGES", "VisionPlan", "VisionRequest", "request_tokens", "vision_plan"]


def vision_plan(req: VisionRequest, *, solve: bool = True) -> VisionPlan:
    """The plan; with `solve`, the largest text tokens (VLM) or batch that fit."""
    tokens = request_tokens(req)
    m = req.model
    if not isinstance(m, (VisionLanguageSpec, SwinSpec)):
        raise ValueError("model: a ViT encoder is planned by make_plan at the image's tokens (vit_inputs)")
    build = vlm_plan if isinstance(m, VisionLanguageSpec) else swin_plan
    plan = build(req, tokens)
    if not solve or not plan.supported:
        return plan
    # the largest x in [1, high] that fits, galloping from the request's own (0 when 1 does not fit)
    max_batch = largest_fitting(lambda x: build(replace(req, base=replace(req.base, batch=x)),
                                                request_tokens(req)).fits, 1, 1 << 16, req.base.batch)
    max_seq = None
    if isinstance(m, VisionLanguageSpec):
        max_seq = largest_fitting(lambda x: _try(build, replace(req, text_tokens=x)), 1, 1 << 22,
                                  max(1, req.text_tokens))
    return replace(plan, max_batch=max_batch, max_seq_len=max_seq)


def _try(build, req: VisionRequest) -> bool:
    try:
        return build(req, request_tokens(req)).fits
    except ValueError:
        return False
