"""The plan for one measured row of a vision family (`validation.model.hf_vision`): the ViT as an encoder plan at the
image's tokens, Swin and the vision-language models through `estimator.model.vision_plan`, built from the very config
the model was measured with. Used by `validation.model_report`."""

from __future__ import annotations

from estimator.model.hf_config import from_hf_config
from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.vision import swin_from_hf, vlm_from_hf
from estimator.model.vision_plan import VisionRequest, vision_plan
from estimator.model.vision_tokens import parse_image_size
from validation.model.hf_vision import vision_config

BACKEND_OF = {"sdpa": "auto", "eager": "eager", "flex_attention": "flex"}
TRAINABLE_OF = {"all": "all", "lm": "tower-frozen", "projector": "projector"}


def vision_plan_row(row: dict):
    """The plan (a budget `Plan` for ViT, a `VisionPlan` otherwise) of one measured vision row."""
    layers = int(row["layers"]) if str(row.get("layers", "")).strip() else None
    cfg = vision_config(row["family"], layers, row.get("overrides") or None, False, row.get("image_size") or None)
    training = row["mode"] == "train"
    kw = dict(precision=row["precision"], optimizer=row["optimizer"]) if training else dict(dtype="bfloat16")
    common = dict(batch=int(row["batch"]), mode="training" if training else "inference",
                  backend=BACKEND_OF[row["attn_implementation"]], gpu="h200", **kw)
    name = f"{row['family']} ({row['image_size']} px)"
    if cfg["model_type"] == "vit":
        model = from_hf_config(cfg, name=name)
        return make_plan(PlanInputs(model=model, seq_len=model.native_tokens, **common), solve=False)
    hw = parse_image_size(row.get("image_size") or 224)
    if cfg["model_type"] == "swin":
        spec = swin_from_hf(cfg, name)
        base = PlanInputs(model=spec.stage_spec(0), seq_len=1, **common)
        return vision_plan(VisionRequest(model=spec, base=base, image_size=hw), solve=False)
    spec = vlm_from_hf(cfg, name)
    base = PlanInputs(model=spec.lm, seq_len=1, **common)
    images = int(row.get("images") or 1)
    trainable = str(row.get("trainable") or "all")
    if trainable not in TRAINABLE_OF:
        raise ValueError(f"trainable: expected one of {', '.join(TRAINABLE_OF)}, got {trainable!r}")
    return vision_plan(VisionRequest(model=spec, base=base, image_size=hw, images=images,
                                     text_tokens=int(row["seq_len"]),
                                     trainable=TRAINABLE_OF[trainable]), solve=False)
