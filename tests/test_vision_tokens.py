"""Tokens per image against each family's own rule and against transformers 5.17 itself where it runs here."""

import pytest

from estimator.model.vision_tokens import (
    image_tokens,
    pan_and_scan_crops,
    parse_image_size,
    qwen_vl_grid,
    qwen_vl_windows,
    smart_resize,
    swin_stages,
    vit_tokens,
)


def test_vit_floors_partial_patches():
    assert vit_tokens(224, 224, 16) == 197
    assert vit_tokens(1024, 1024, 14) == 73 * 73 + 1  # ViT-H/14 at 1024 px
    assert vit_tokens(2048, 2048, 16) == 16385
    with pytest.raises(ValueError, match="image_size"):
        vit_tokens(10, 10, 16)


def test_vit_patch_conv_matches_torch():
    torch = pytest.importorskip("torch")
    conv = torch.nn.Conv2d(3, 4, kernel_size=14, stride=14)
    out = conv(torch.zeros(1, 3, 1024, 1000))
    assert out.shape[2] * out.shape[3] + 1 == vit_tokens(1024, 1000, 14)


def test_swin_stages_224_and_padding():
    s = swin_stages(224, 224)
    assert [x.tokens for x in s] == [3136, 784, 196, 49]
    assert [x.windows for x in s] == [64, 16, 4, 1]
    assert s[-1].shifted is False  # 7x7 grid = one window, no shift
    big = swin_stages(1536, 1536)
    assert [(x.height, x.padded_height) for x in big] == [(384, 385), (192, 196), (96, 98), (48, 49)]


def test_swin_matches_transformers_grid():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    cfg = transformers.SwinConfig(embed_dim=8, depths=[1, 1, 1, 1], num_heads=[1, 1, 1, 1], image_size=224)
    model = transformers.SwinModel(cfg).eval()
    with torch.no_grad():
        out = model(torch.zeros(1, 3, 300, 260), output_hidden_states=True)
    grids = [h.shape[1] for h in out.hidden_states]
    assert grids[:4] == [x.tokens for x in swin_stages(300, 260)]


def test_smart_resize_matches_transformers():
    pil = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
    for h, w in ((1344, 1344), (448, 448), (2000, 300), (50, 50), (1080, 1920), (4000, 4000)):
        assert smart_resize(h, w) == pil.smart_resize(h, w, 28, 56 * 56, 28 * 28 * 1280)


def test_qwen_vl_tokens():
    t = image_tokens("qwen2_vl", 1344, 1344)
    assert (t.vision_tokens, t.lm_tokens) == (70 * 70, 70 * 70 // 4 + 2)  # 1344² px > max_pixels: 980 x 980
    gh, gw = qwen_vl_grid(1344, 1344)
    assert gh * gw == t.vision_tokens and t.vision_tokens % 4 == 0
    assert t.lm_tokens == gh * gw // 4 + 2
    assert image_tokens("qwen2_vl", 448, 448).vision_tokens == 32 * 32
    # max_pixels bounds the grid: 28*28*1280 px at most
    assert image_tokens("qwen2_vl", 4000, 4000).vision_tokens * 14 * 14 <= 28 * 28 * 1280


def test_qwen25_windows_cover_every_patch():
    gh, gw = qwen_vl_grid(1000, 700)
    sizes = qwen_vl_windows(gh, gw)
    assert sum(sizes) == gh * gw and max(sizes) == 64


def test_fixed_resolution_families():
    assert image_tokens("llava", 1344, 1344).lm_tokens == 576
    assert image_tokens("llava", 1344, 1344).vision_tokens == 577
    assert image_tokens("paligemma", 448, 448, tower_image_size=448).lm_tokens == 1024
    g = image_tokens("gemma3", 1000, 1000)
    assert (g.vision_tokens, g.lm_tokens) == (4096, 258)
    wide = image_tokens("gemma3", 896, 2688, pan_and_scan=True)
    assert wide.crops == 4 and wide.vision_tokens == 4 * 4096  # 3 crops + the whole image


def test_pan_and_scan_rule():
    assert pan_and_scan_crops(896, 896) == 0  # square: not activated
    assert pan_and_scan_crops(500, 1200) == 2
    assert pan_and_scan_crops(300, 3000) == 4  # capped at max crops
    assert pan_and_scan_crops(200, 300) == 0  # crops would be under 256 px


def test_parse_image_size():
    assert parse_image_size("1024") == (1024, 1024)
    assert parse_image_size("768x1344") == (768, 1344)
    for bad in ("0", "abc", "12x", "99999", True):
        with pytest.raises(ValueError, match="image_size"):
            parse_image_size(bad)
    with pytest.raises(ValueError, match="family"):
        image_tokens("blip", 10, 10)


def test_docs_show_the_current_token_table():
    from pathlib import Path

    from estimator.model.vision_tokens import token_table

    doc = (Path(__file__).resolve().parents[1] / "docs" / "vision.md").read_text(encoding="utf-8")
    assert token_table() in doc, "docs/vision.md is out of date: paste `python -m estimator.model.vision_tokens`"
