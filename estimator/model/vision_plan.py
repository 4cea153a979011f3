"""Image plans: `vision_plan(VisionRequest)` dispatches to Swin (estimator/model/vision_swin.py) or a
vision-language model (estimator/model/vision_vlm.py) and runs the solvers (largest batch; largest text tokens for
a VLM). The request, the parts and the joining rule live in estimator/model/vision_parts.py."""

from __future__ import annotations

from dataclasses import replace

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
    max_batch = _largest(lambda x: build(replace(req, base=replace(req.base, batch=x)),
                                         request_tokens(req)).fits, req.base.batch, 1 << 16)
    max_seq = None
    if isinstance(m, VisionLanguageSpec):
        max_seq = _largest(lambda x: _try(build, replace(req, text_tokens=x)), max(1, req.text_tokens), 1 << 22)
    return replace(plan, max_batch=max_batch, max_seq_len=max_seq)


def _try(build, req: VisionRequest) -> bool:
    try:
        return build(req, request_tokens(req)).fits
    except ValueError:
        return False


def _largest(fits, start: int, high: int) -> int:
    """Largest x in [1, high] with fits(x) (monotone), galloping from `start`; 0 when 1 does not fit."""
    if not fits(1):
        return 0
    ok, bad = 1, None
    x = max(1, start)
    if fits(x):
        ok = x
        while bad is None:
            nxt = min(ok * 2, high)
            if nxt == ok:
                return ok
            if fits(nxt):
                ok = nxt
            else:
                bad = nxt
    else:
        bad = x
    while bad - ok > 1:
        mid = (ok + bad) // 2
        ok, bad = (mid, bad) if fits(mid) else (ok, mid)
    return ok
