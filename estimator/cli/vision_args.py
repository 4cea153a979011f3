"""The image flags of `plan` and `advise` (docs/contract.md §3, "Images"): `--image-size S|HxW`, `--images K`,
`--trainable {all,tower-frozen,projector}`, `--pan-and-scan`; and the dispatch of a Swin or vision-language model
(a preset or a config.json) to the vision plan. A ViT encoder stays a plain plan whose n comes from the image."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from estimator.model.inputs import PlanInputs
from estimator.model.specs import ModelSpec
from estimator.model.vision import (
    TRAINABLE,
    SwinSpec,
    VisionLanguageSpec,
    is_vision_language,
    swin_from_hf,
    vlm_from_hf,
)
from estimator.model.vision_plan import MAX_IMAGES, VisionRequest
from estimator.model.vision_presets import VISION_PRESETS, get_vision_preset
from estimator.model.vision_tokens import image_tokens, parse_image_size
from estimator.textfile import MAX_CONFIG_BYTES, read_json_limited


def add_image_arguments(parser: argparse.ArgumentParser) -> None:
    img = parser.add_argument_group("images (vision encoders and vision-language models)")
    img.add_argument("--image-size", default=None, metavar="S|HxW",
                     help="image pixels, square S or HxW; a vision encoder then takes its tokens from it")
    img.add_argument("--images", default=None, help="images per sequence (default 1 when --image-size is given)")
    img.add_argument("--trainable", default="all",
                     help=f"vision-language training: {', '.join(TRAINABLE)} (what the step updates; the rest frozen)")
    img.add_argument("--pan-and-scan", action="store_true", help="Gemma-3: crop wide images (pan and scan)")
    img.add_argument("--text-only", action="store_true",
                     help="a vision-language config: plan its language model alone (the plan says so)")


def _images(args) -> int:
    if args.images is None:
        return 1
    text = str(args.images).strip()
    if not text.isdigit() or not 0 <= int(text) <= MAX_IMAGES:
        raise ValueError(f"--images: expected 0..{MAX_IMAGES} images per sequence, got {args.images!r}")
    return int(text)


def _image_size(args):
    return None if args.image_size is None else parse_image_size(args.image_size, "--image-size")


def load_image_model(args):
    """The Swin or vision-language model the flags name (a preset or a config.json), or None for every other."""
    if args.preset:
        preset = get_vision_preset(args.preset)
        if preset is not None and args.config:
            raise ValueError("--preset: give either --preset or --config, not both")
        return preset
    if not args.config or args.text_only:
        return None
    path = Path(args.config)
    cfg = read_json_limited(path, MAX_CONFIG_BYTES, "config")
    if not isinstance(cfg, dict):
        return None
    label = path.parent.name or path.stem
    if str(cfg.get("model_type") or "").lower() == "swin":
        return swin_from_hf(cfg, label)
    if is_vision_language(cfg):
        return vlm_from_hf(cfg, label)
    return None


def vision_request(args, base_inputs) -> VisionRequest | None:
    """A VisionRequest when the flags name a Swin or a vision-language model; None otherwise. `base_inputs(model,
    seq_len)` builds the PlanInputs of the workload flags (cli.plan.inputs_from_args' fields)."""
    model = load_image_model(args)
    if model is None:
        if args.trainable != "all":
            raise ValueError("--trainable: applies to a vision-language model (tower-frozen, projector)")
        return None
    arch = [f for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab") if getattr(args, f)]
    if arch:
        raise ValueError(f"--{arch[0].replace('_', '-')}: architecture overrides do not apply to "
                         f"{model.name} (a {'Swin' if isinstance(model, SwinSpec) else 'vision-language'} model)")
    if isinstance(model, SwinSpec):
        if args.seq_len is not None:
            raise ValueError("--seq-len: a Swin's tokens come from the image (--image-size); leave --seq-len out")
        base = base_inputs(model.stage_spec(0), 1)
        text = 0
    else:
        text = 0 if args.seq_len is None else args.seq_len
        base = base_inputs(model.lm, 1)
        from estimator.call.config import check_positive_int

        text = check_positive_int("--seq-len", text, 1 << 22) if text else 0
    if args.window is not None:
        raise ValueError("--window: a sliding window over every layer does not apply to an image model")
    images = _images(args)
    return VisionRequest(model=model, base=base, image_size=_image_size(args), images=images, text_tokens=text,
                         trainable=str(args.trainable).strip().lower(), pan_and_scan=bool(args.pan_and_scan))


def text_only_note(model: ModelSpec) -> str | None:
    """The assumption a --text-only plan of a vision-language file carries (None for a text model's file)."""
    if "vision-language file only" not in model.source:
        return None
    return ("Text model only (--text-only): " + model.source.split("; ", 1)[1] + "; no image tokens are counted")


def encoder_tokens(model: ModelSpec, args) -> tuple[int | None, int]:
    """(seq_len, images) of a ViT encoder from --image-size / --images: (H//p)(W//p) + 1 (None: no image size)."""
    size = _image_size(args)
    images = _images(args)
    if size is None:
        return None, images
    if model.kind != "encoder":
        raise ValueError(f"--image-size: {model.name} is a text model; images apply to a vision encoder or a "
                         "vision-language config")
    if args.seq_len is not None:
        raise ValueError("--seq-len: a vision encoder's tokens come from --image-size; give one of them")
    if not model.patch_size > 1:
        raise ValueError("--image-size: the architecture flags give no patch size; use a preset or a ViT config")
    return image_tokens("vit", *size, patch=model.patch_size).vision_tokens, images


def encoder_token_dict(inputs: PlanInputs, args) -> dict:
    """The JSON `tokens` of an encoder plan."""
    size = _image_size(args)
    m = inputs.model
    hw = list(size) if size else [m.image_size, m.image_size]
    return {"vision_encoder": inputs.seq_len, "language_model": 0, "text": 0, "images": _images(args),
            "image_size": hw, "rule": f"({hw[0]}//{m.patch_size})·({hw[1]}//{m.patch_size}) + 1 class token"}


def preset_names() -> list[str]:
    return list(VISION_PRESETS)


def with_batch(req: VisionRequest, batch: int) -> VisionRequest:
    return replace(req, base=replace(req.base, batch=batch))


__all__ = ["add_image_arguments", "vision_request", "encoder_tokens", "encoder_token_dict", "VisionLanguageSpec"]
