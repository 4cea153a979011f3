"""Tokens per image, by each family's own processor and model rule in transformers 5.17 (the files named below are
under transformers/models/ of that release). Pure arithmetic: no torch, no transformers import.

  ViT        (H // p)·(W // p) + 1: ViTPatchEmbeddings is a Conv2d of kernel = stride = p, so a partial patch at the
             edge is dropped (floored grid: ViT-H/14 at 1024 px runs 73 x 73 patches), plus ViTEmbeddings' class
             token (vit/modeling_vit.py). Positions are learned for the config's image_size; another size
             interpolates them (`interpolate_pos_encoding=True`) without changing the count.
  Swin       stage 0: ceil(H/4) x ceil(W/4) (SwinPatchEmbeddings.maybe_pad pads the pixels to a multiple of the
             patch); each stage pads its grid to a multiple of the window (SwinLayer.maybe_pad) and attends inside
             windows of window² tokens; SwinPatchMerging pads to even and halves each side between stages; a stage
             whose grid is not larger than the window uses one window of that size and no shift
             (SwinLayer.set_shift_and_window_size) (swin/modeling_swin.py).
  Qwen2-VL / Qwen2.5-VL  smart_resize to multiples of patch·merge = 28 px with min_pixels 56·56 and max_pixels
             28·28·1280 (qwen2_vl/image_processing_qwen2_vl.py smart_resize, Qwen2VLImageProcessor.size); the tower
             sees (h/14)·(w/14) patches, the merger maps each 2 x 2 block to one language-model token
             (Qwen2VLProcessor: image_grid_thw.prod() // merge_size**2); <|vision_start|> and <|vision_end|> around
             them. Qwen2.5-VL windows: window_size 112 px = 8 x 8 patches (64), full attention in
             fullatt_block_indexes (qwen2_5_vl/modeling_qwen2_5_vl.py get_window_index).
  Gemma-3    every image (and every pan-and-scan crop) resized to 896 px: SigLIP's 64 x 64 = 4,096 patches, an
             AvgPool2d to mm_tokens_per_image = 256 (gemma3/modeling_gemma3.py Gemma3MultiModalProjector); boi/eoi
             around them (gemma3/processing_gemma3.py). Pan-and-scan (gemma3/image_processing_gemma3.py pan_and_scan)
             adds crops when the aspect ratio reaches 1.2, as google/gemma-3-4b-it's preprocessor_config.json sets
             it (min crop 256 px, at most 4 crops).
  PaliGemma  (image_size / 14)² image tokens: 256 at 224 px, 1,024 at 448, 4,096 at 896 (the processor's
             image_seq_length, paligemma/processing_paligemma.py; SigLIP patch 14).
  LLaVA-1.5  every image resized to 336 px: CLIP ViT-L/14 runs 24² + 1 = 577 tokens, the "default" feature
             select strategy drops the class token: 576 language-model tokens (llava/modeling_llava.py
             get_image_features; LlavaConfig.image_seq_length 576).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_IMAGE_PIXELS_SIDE = 1 << 15  # 32,768 px a side: far past any processor's bound, small enough to stay bounded
FAMILIES = ("vit", "swin", "qwen2_vl", "qwen2_5_vl", "gemma3", "paligemma", "llava")


def parse_image_size(value, field: str = "image_size") -> tuple[int, int]:
    """'1024' -> (1024, 1024); '768x1344' -> (768, 1344) (height x width); an int -> square."""
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected pixels (S or HxW), got {value!r}")
    if isinstance(value, int):
        hw = (value, value)
    else:
        text = str(value).strip().lower().replace("×", "x")
        h, sep, w = text.partition("x")
        try:
            hw = (int(h), int(w) if sep else int(h))
        except ValueError:
            raise ValueError(f"{field}: expected pixels as S or HxW (e.g. 1024 or 768x1344), got {value!r}") from None
    for side in hw:
        if not 1 <= side <= MAX_IMAGE_PIXELS_SIDE:
            raise ValueError(f"{field}: each side must be 1..{MAX_IMAGE_PIXELS_SIDE} pixels, got {value!r}")
    return hw


@dataclass(frozen=True, kw_only=True)
class SwinStage:
    """One Swin stage as transformers runs it: the token grid, the window grid padded to it, the window side."""

    height: int  # tokens
    width: int
    window: int  # tokens a side (clamped to the grid when the grid is not larger than the window)
    shifted: bool  # whether its odd blocks shift (shift 0 when the grid is not larger than the window)
    padded_height: int  # grid padded to a multiple of the window
    padded_width: int

    @property
    def tokens(self) -> int:
        return self.height * self.width

    @property
    def windows(self) -> int:
        return (self.padded_height // self.window) * (self.padded_width // self.window)


@dataclass(frozen=True, kw_only=True)
class ImageTokens:
    """Tokens one image costs: into the vision tower's first block, and into the language model."""

    family: str
    height: int  # pixels the tower sees (after the processor's resize)
    width: int
    vision_tokens: int  # per image into the tower (all crops; ViT: with the class token)
    lm_tokens: int  # per image into the language model, markers included (0 for an encoder alone)
    crops: int = 1  # tower passes per image (Gemma-3 pan-and-scan: crops + the whole image)
    rule: str = ""

    def __post_init__(self) -> None:
        if self.vision_tokens < 1 or self.lm_tokens < 0 or self.crops < 1:
            raise ValueError("vision_tokens: an image costs at least one token")


def vit_tokens(height: int, width: int, patch: int, cls_token: bool = True) -> int:
    """(H // p)·(W // p) (+ 1 class token): the Conv2d patch embedding floors a partial edge patch."""
    if patch < 1 or height < patch or width < patch:
        raise ValueError(f"image_size: {height}x{width} px is smaller than one {patch}-px patch")
    return (height // patch) * (width // patch) + int(cls_token)


def swin_stages(height: int, width: int, patch: int = 4, window: int = 7, stages: int = 4) -> tuple[SwinStage, ...]:
    """The grid of every stage (transformers 5.17 swin/modeling_swin.py: maybe_pad, set_shift_and_window_size,
    SwinPatchMerging)."""
    gh, gw = -(-height // patch), -(-width // patch)
    out = []
    for i in range(stages):
        if i:
            gh, gw = -(-gh // 2), -(-gw // 2)  # SwinPatchMerging pads odd sides to even, then halves
        w, shifted = window, True
        if min(gh, gw) <= window:
            w, shifted = min(gh, gw), False
        out.append(SwinStage(height=gh, width=gw, window=w, shifted=shifted,
                             padded_height=-(-gh // w) * w, padded_width=-(-gw // w) * w))
    return tuple(out)


def smart_resize(height: int, width: int, factor: int = 28, min_pixels: int = 56 * 56,
                 max_pixels: int = 28 * 28 * 1280) -> tuple[int, int]:
    """Qwen2-VL's resize (transformers 5.17 qwen2_vl/image_processing_qwen2_vl.py smart_resize, same arithmetic;
    min/max pixels = Qwen2VLImageProcessor.size shortest_edge / longest_edge)."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"image_size: aspect ratio must be below 200, got {height}x{width}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen_vl_grid(height: int, width: int, patch: int = 14, merge: int = 2, min_pixels: int = 56 * 56,
                 max_pixels: int = 28 * 28 * 1280) -> tuple[int, int]:
    """Patch grid (h, w) of one image after smart_resize."""
    h, w = smart_resize(height, width, patch * merge, min_pixels, max_pixels)
    return h // patch, w // patch


def qwen_vl_windows(grid_h: int, grid_w: int, merge: int = 2, window_px: int = 112, patch: int = 14) -> list[int]:
    """Qwen2.5-VL: patches in each attention window of a windowed block (get_window_index: windows of
    window_px / patch / merge merged tokens a side, the grid padded to whole windows, padding dropped)."""
    side = window_px // merge // patch  # merged tokens a window side (4)
    lh, lw = grid_h // merge, grid_w // merge
    sizes = []
    for r in range(0, lh, side):
        for c in range(0, lw, side):
            sizes.append(min(side, lh - r) * min(side, lw - c) * merge * merge)
    return sizes


def pan_and_scan_crops(height: int, width: int, min_crop: int = 256, max_crops: int = 4,
                       min_ratio: float = 1.2) -> int:
    """Crops Gemma-3's pan_and_scan adds for one image (0 when it does not activate)."""
    long, short = max(height, width), min(height, width)
    if long / short < min_ratio:
        return 0
    n = int(math.floor(long / short + 0.5))
    n = min(int(math.floor(long / min_crop)), n)
    n = min(max_crops, max(2, n))
    crop_long, crop_short = math.ceil(long / n), short
    if min(crop_long, crop_short) < min_crop:
        return 0
    return n


def image_tokens(family: str, height: int, width: int, *, patch: int = 14, tower_image_size: int = 0,
                 pooled_tokens: int = 256, pan_and_scan: bool = False, merge: int = 2,
                 min_pixels: int = 56 * 56, max_pixels: int = 28 * 28 * 1280) -> ImageTokens:
    """Tokens of one image of height x width pixels for `family` (see the module docstring). `tower_image_size`:
    the resolution the processor resizes every image to (LLaVA 336, Gemma-3 896, PaliGemma 224/448/896)."""
    if family not in FAMILIES:
        raise ValueError(f"family: {family!r} has no image-token rule; known: {', '.join(FAMILIES)}")
    if family == "vit":
        n = vit_tokens(height, width, patch)
        return ImageTokens(family=family, height=height, width=width, vision_tokens=n, lm_tokens=0,
                           rule=f"({height}//{patch})·({width}//{patch}) + 1 class token")
    if family == "swin":
        first = swin_stages(height, width, patch)[0]
        return ImageTokens(family=family, height=height, width=width, vision_tokens=first.tokens, lm_tokens=0,
                           rule=f"ceil({height}/{patch})·ceil({width}/{patch}), halved a side per stage")
    if family in ("qwen2_vl", "qwen2_5_vl"):
        gh, gw = qwen_vl_grid(height, width, patch, merge, min_pixels, max_pixels)
        return ImageTokens(family=family, height=gh * patch, width=gw * patch, vision_tokens=gh * gw,
                           lm_tokens=gh * gw // (merge * merge) + 2,
                           rule=f"smart_resize to {gh * patch}x{gw * patch} px: {gh}x{gw} patches, "
                                f"{merge}x{merge} merge, + vision_start/end")
    side = tower_image_size or {"llava": 336, "gemma3": 896, "paligemma": 224}[family]
    grid = side // patch
    if family == "llava":
        return ImageTokens(family=family, height=side, width=side, vision_tokens=grid * grid + 1,
                           lm_tokens=grid * grid, rule=f"resized to {side} px: {grid}² patches (class token dropped)")
    if family == "paligemma":
        return ImageTokens(family=family, height=side, width=side, vision_tokens=grid * grid, lm_tokens=grid * grid,
                           rule=f"resized to {side} px: ({side}/{patch})² tokens")
    crops = 1 + (pan_and_scan_crops(height, width) if pan_and_scan else 0)
    return ImageTokens(family=family, height=side, width=side, vision_tokens=crops * grid * grid,
                       lm_tokens=crops * (pooled_tokens + 2), crops=crops,
                       rule=f"{crops} x {side}-px image(s): {grid}² patches pooled to {pooled_tokens}, + boi/eoi")


TABLE_SIZES = ((224, 224), (336, 336), (448, 448), (896, 896), (1024, 1024), (1344, 1344), (2048, 2048),
               (1080, 1920))


def token_table() -> str:
    """The Markdown table of docs/vision.md: tokens per image for common resolutions, per family (regenerate with
    `python -m estimator.model.vision_tokens`)."""
    head = "| family (rule) | " + " | ".join(f"{h}x{w}" for h, w in TABLE_SIZES) + " |"
    rows = [head, "|---|" + "---|" * len(TABLE_SIZES)]

    def row(label, fn):
        cells = []
        for h, w in TABLE_SIZES:
            try:
                cells.append(fn(h, w))
            except ValueError:
                cells.append("-")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")

    row("ViT-B/16, ViT-L/16: (H//16)(W//16) + 1", lambda h, w: f"{vit_tokens(h, w, 16):,}")
    row("ViT-H/14, CLIP ViT-L/14: (H//14)(W//14) + 1", lambda h, w: f"{vit_tokens(h, w, 14):,}")
    row("Swin (patch 4, window 7): stage-1 tokens / windows", lambda h, w: (
        f"{swin_stages(h, w)[0].tokens:,} / {swin_stages(h, w)[0].windows:,}"))

    def qwen(h, w):
        t = image_tokens("qwen2_vl", h, w)
        return f"{t.vision_tokens:,} / {t.lm_tokens:,}"

    row("Qwen2-VL, Qwen2.5-VL: tower patches / LM tokens (smart_resize, 2x2 merge, +2 markers)", qwen)
    row("Gemma-3: tower patches / LM tokens (896 px, pooled to 256, +boi/eoi)",
        lambda h, w: f"{image_tokens('gemma3', h, w).vision_tokens:,} / {image_tokens('gemma3', h, w).lm_tokens:,}")
    row("Gemma-3 with pan-and-scan: crops + 1 images",
        lambda h, w: f"{image_tokens('gemma3', h, w, pan_and_scan=True).lm_tokens:,}")
    row("PaliGemma-224 / -448 / -896 (fixed per checkpoint)",
        lambda h, w: "256 / 1,024 / 4,096")
    row("LLaVA-1.5: tower / LM tokens (336 px, class token dropped)", lambda h, w: "577 / 576")
    return "\n".join(rows)


if __name__ == "__main__":
    print(token_table())
