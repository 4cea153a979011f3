"""Vision families for `validation.hf_models`: ViT and Swin image classifiers and the Qwen2-VL, LLaVA-1.5, Gemma-3
and PaliGemma vision-language models, built from configs in code (random weights, nothing downloaded), and the inputs
one case feeds them. Self-contained like hf_models: torch, transformers, stdlib (no estimator/ imports).

Case columns used here (besides hf_models' own):
  image_size  pixels, square ("1024") or "HxW"; ViT: the config's image_size is set to it (learned positions for
              that grid, as a model fine-tuned at that resolution has); Swin: the pixel_values size; Qwen2-VL: the
              image before the processor's smart_resize (transformers' own function computes the grid); LLaVA-1.5,
              Gemma-3, PaliGemma: ignored (their processors resize every image to the tower's resolution).
  images      images per sequence (VLMs; encoders: 1 image per batch entry)
  trainable   training only: all | lm (vision tower frozen: projector + language model) | projector
  seq_len     VLMs: text tokens per sequence (the image tokens come on top); encoders: ignored (recorded from the
              grid as vision_tokens).
  layers      VLMs: language-model layers (the tower stays as published); ViT: encoder layers; Swin: ignored.
Recorded: vision_tokens (per image, into the tower's first block), lm_tokens (the language model's sequence).
Gemma-3 and PaliGemma get the token_type_ids their processors return (1 on image tokens for Gemma-3; PaliGemma: 0 on
the prefix, here the image tokens, 1 on the text), so the language model builds the mask that runs in use: image
tokens attend bidirectionally within their block (transformers 5.17 gemma3/modeling_gemma3.py
create_masks_for_vision_model, paligemma/modeling_paligemma.py block_sequence_ids).
"""

from __future__ import annotations

import copy
import json

import torch

VISION_FAMILIES: dict[str, dict] = {
    # https://huggingface.co/google/vit-large-patch16-224/blob/main/config.json (id2label: 1000 classes)
    "vit-l-16": {"model_type": "vit", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                 "intermediate_size": 4096, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
                 "attention_probs_dropout_prob": 0.0, "layer_norm_eps": 1e-12, "image_size": 224, "patch_size": 16,
                 "num_channels": 3, "qkv_bias": True, "num_labels": 1000},
    # https://huggingface.co/google/vit-huge-patch14-224-in21k/blob/main/config.json (with a 1000-class head)
    "vit-h-14": {"model_type": "vit", "hidden_size": 1280, "num_hidden_layers": 32, "num_attention_heads": 16,
                 "intermediate_size": 5120, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
                 "attention_probs_dropout_prob": 0.0, "layer_norm_eps": 1e-12, "image_size": 224, "patch_size": 14,
                 "num_channels": 3, "qkv_bias": True, "num_labels": 1000},
    # https://huggingface.co/microsoft/swin-base-patch4-window7-224/blob/main/config.json
    "swin-b": {"model_type": "swin", "embed_dim": 128, "depths": [2, 2, 18, 2], "num_heads": [4, 8, 16, 32],
               "window_size": 7, "image_size": 224, "patch_size": 4, "num_channels": 3, "mlp_ratio": 4.0,
               "qkv_bias": True, "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
               "drop_path_rate": 0.1, "layer_norm_eps": 1e-05, "num_labels": 1000},
    # https://huggingface.co/microsoft/swin-large-patch4-window7-224/blob/main/config.json
    "swin-l": {"model_type": "swin", "embed_dim": 192, "depths": [2, 2, 18, 2], "num_heads": [6, 12, 24, 48],
               "window_size": 7, "image_size": 224, "patch_size": 4, "num_channels": 3, "mlp_ratio": 4.0,
               "qkv_bias": True, "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
               "drop_path_rate": 0.1, "layer_norm_eps": 1e-05, "num_labels": 1000},
    # https://huggingface.co/Qwen/Qwen2-VL-2B-Instruct/blob/main/config.json
    "qwen2-vl-2b": {
        "model_type": "qwen2_vl", "image_token_id": 151655, "video_token_id": 151656,
        "vision_start_token_id": 151652, "vision_end_token_id": 151653, "tie_word_embeddings": True,
        "text_config": {"model_type": "qwen2_vl_text", "hidden_size": 1536, "intermediate_size": 8960,
                        "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
                        "hidden_act": "silu", "max_position_embeddings": 32768, "rms_norm_eps": 1e-06,
                        "rope_theta": 1000000.0, "vocab_size": 151936, "tie_word_embeddings": True,
                        "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 28,
                        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}},
        "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                          "hidden_size": 1536, "hidden_act": "quick_gelu", "patch_size": 14, "spatial_merge_size": 2,
                          "temporal_patch_size": 2},
    },
    # https://huggingface.co/Qwen/Qwen2.5-VL-3B-Instruct/blob/main/config.json (text fields under text_config, as
    # transformers 5.17's Qwen2_5_VLConfig nests them; vision_config as published: windows of 112 px, four
    # full-attention blocks)
    "qwen2.5-vl-3b": {
        "model_type": "qwen2_5_vl", "image_token_id": 151655, "video_token_id": 151656,
        "vision_start_token_id": 151652, "vision_end_token_id": 151653, "tie_word_embeddings": True,
        "text_config": {"model_type": "qwen2_5_vl_text", "hidden_size": 2048, "intermediate_size": 11008,
                        "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 2,
                        "hidden_act": "silu", "max_position_embeddings": 128000, "rms_norm_eps": 1e-06,
                        "rope_theta": 1000000.0, "vocab_size": 151936, "tie_word_embeddings": True,
                        "use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 70,
                        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}},
        "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
                          "num_heads": 16, "in_chans": 3, "out_hidden_size": 2048, "patch_size": 14,
                          "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
                          "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2,
                          "temporal_patch_size": 2},
    },
    # https://huggingface.co/llava-hf/llava-1.5-7b-hf/blob/main/config.json
    "llava-1.5-7b": {
        "model_type": "llava", "image_token_index": 32000, "projector_hidden_act": "gelu",
        "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "image_seq_length": 576,
        "tie_word_embeddings": False,
        "text_config": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
                        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                        "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "vocab_size": 32064,
                        "tie_word_embeddings": False},
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096,
                          "num_hidden_layers": 24, "num_attention_heads": 16, "image_size": 336, "patch_size": 14,
                          "projection_dim": 768, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-05},
    },
    # https://huggingface.co/google/gemma-3-4b-it/blob/main/config.json (text fields the file leaves out are
    # Gemma3TextConfig's defaults in transformers 5.17, written out here)
    "gemma-3-4b": {
        "model_type": "gemma3", "boi_token_index": 255999, "eoi_token_index": 256000, "image_token_index": 262144,
        "mm_tokens_per_image": 256,
        "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
                        "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                        "query_pre_attn_scalar": 256, "sliding_window": 1024, "vocab_size": 262208,
                        "rope_scaling": {"factor": 8.0, "rope_type": "linear"}},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "image_size": 896,
                          "intermediate_size": 4304, "num_attention_heads": 16, "num_hidden_layers": 27,
                          "patch_size": 14, "vision_use_head": False},
    },
    # https://huggingface.co/google/paligemma-3b-pt-224/blob/main/config.json
    "paligemma-3b-224": {
        "model_type": "paligemma", "image_token_index": 257152, "projection_dim": 2048, "hidden_size": 2048,
        "text_config": {"model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384,
                        "num_hidden_layers": 18, "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
                        "vocab_size": 257216},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
                          "num_hidden_layers": 27, "num_attention_heads": 16, "image_size": 224, "patch_size": 14,
                          "projection_dim": 2048},
    },
}
_TINY = {
    "vit": {"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "num_labels": 10},
    "swin": {"embed_dim": 16, "num_heads": [1, 2, 2, 4], "depths": [1, 1, 2, 1], "num_labels": 10},
    "qwen2_vl": {"text_config": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                                 "num_key_value_heads": 2, "rope_scaling": {"type": "mrope",
                                                                            "mrope_section": [2, 3, 3]}},
                 "vision_config": {"depth": 2, "embed_dim": 32, "num_heads": 2, "hidden_size": 64}},
    "qwen2_5_vl": {"text_config": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                                   "num_key_value_heads": 2, "rope_scaling": {"type": "mrope",
                                                                              "mrope_section": [2, 3, 3]}},
                   "vision_config": {"depth": 4, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                                     "out_hidden_size": 64, "fullatt_block_indexes": [1, 3]}},
    "llava": {"text_config": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                              "num_key_value_heads": 4},
              "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3,
                                "num_attention_heads": 2}},
    "gemma3": {"mm_tokens_per_image": 4,
               "text_config": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                               "num_key_value_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 16,
                               "sliding_window": 16, "num_hidden_layers": 6},
               "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                 "num_attention_heads": 2, "image_size": 56}},
    "paligemma": {"projection_dim": 64, "hidden_size": 64,
                  "text_config": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                                  "num_key_value_heads": 1, "head_dim": 16},
                  "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                    "num_attention_heads": 2, "image_size": 56, "projection_dim": 64}},
}


def is_vision(family: str) -> bool:
    return family in VISION_FAMILIES


def _merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def parse_image_size(value) -> tuple[int, int]:
    """'1024' -> (1024, 1024); '768x1344' -> (768, 1344) (height x width)."""
    text = str(value).strip().lower()
    h, sep, w = text.partition("x")
    try:
        hw = (int(h), int(w) if sep else int(h))
    except ValueError:
        raise ValueError(f"image_size: expected pixels (S or HxW), got {value!r}") from None
    if min(hw) < 1:
        raise ValueError(f"image_size: expected positive pixels, got {value!r}")
    return hw


def vision_config(name: str, layers: int | None = None, overrides: dict | str | None = None, tiny: bool = False,
                  image_size=None) -> dict:
    """The family's config dict with the tiny shrink, the layer count (VLM: text layers; ViT: encoder layers),
    the ViT image size and `overrides` (merged into nested dicts) applied."""
    cfg = copy.deepcopy(VISION_FAMILIES[name])
    mt = cfg["model_type"]
    if tiny:
        cfg = _merge(cfg, _TINY[mt])
    if layers is not None:
        if "text_config" in cfg:
            cfg["text_config"]["num_hidden_layers"] = int(layers)
            if "max_window_layers" in cfg["text_config"]:
                cfg["text_config"]["max_window_layers"] = int(layers)
        elif mt == "vit":
            cfg["num_hidden_layers"] = int(layers)
    if mt == "vit" and image_size not in (None, ""):
        h, w = parse_image_size(image_size)
        cfg["image_size"] = h if h == w else [h, w]
    if overrides:
        cfg = _merge(cfg, json.loads(overrides) if isinstance(overrides, str) else overrides)
    return cfg


def to_hf_config(cfg: dict):
    from transformers import AutoConfig

    kwargs = {k: v for k, v in cfg.items() if k != "model_type"}
    return AutoConfig.for_model(cfg["model_type"], **kwargs)


def build(cfg: dict, attn_implementation: str, dtype):
    """The model class a user fine-tunes or serves: *ForImageClassification / *ForConditionalGeneration."""
    from transformers import (
        AutoModelForImageClassification,
        Gemma3ForConditionalGeneration,
        LlavaForConditionalGeneration,
        PaliGemmaForConditionalGeneration,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLForConditionalGeneration,
    )

    hf = to_hf_config(cfg)
    cls = {"vit": AutoModelForImageClassification, "swin": AutoModelForImageClassification,
           "qwen2_vl": Qwen2VLForConditionalGeneration,
           "qwen2_5_vl": Qwen2_5_VLForConditionalGeneration, "llava": LlavaForConditionalGeneration,
           "gemma3": Gemma3ForConditionalGeneration, "paligemma": PaliGemmaForConditionalGeneration}[cfg["model_type"]]
    if cls is AutoModelForImageClassification:
        return cls.from_config(hf, attn_implementation=attn_implementation, dtype=dtype)
    return cls._from_config(hf, attn_implementation=attn_implementation, dtype=dtype)


def parts(model) -> dict:
    """tower / projector / lm modules of a VLM (transformers 5.17 attribute names)."""
    inner = model.model
    if hasattr(inner, "visual"):  # Qwen2-VL: the merger is the projector
        return {"tower": [inner.visual.patch_embed, inner.visual.blocks], "projector": [inner.visual.merger],
                "lm": [inner.language_model, model.lm_head]}
    return {"tower": [inner.vision_tower], "projector": [inner.multi_modal_projector],
            "lm": [inner.language_model, model.lm_head]}


def set_trainable(model, cfg: dict, trainable: str) -> None:
    """all | lm (tower frozen) | projector (tower and LM frozen): requires_grad on each part's parameters."""
    if trainable not in ("all", "lm", "projector"):
        raise ValueError(f"unknown trainable {trainable!r} (all, lm, projector)")
    for p in model.parameters():
        p.requires_grad_(True)
    if trainable == "all":
        return
    if cfg["model_type"] in ("vit", "swin"):
        raise ValueError("trainable lm/projector applies to vision-language models")
    frozen = ["tower"] + (["lm"] if trainable == "projector" else [])
    for part in frozen:
        for mod in parts(model)[part]:
            for p in mod.parameters():
                p.requires_grad_(False)


def _qwen_grid(cfg: dict, hw: tuple[int, int]) -> tuple[int, int]:
    """Patch grid (h, w) of one image, by the Qwen2-VL image processor's own smart_resize (transformers 5.17
    models/qwen2_vl/image_processing_pil_qwen2_vl.py, a copy of image_processing_qwen2_vl.smart_resize; default
    min/max pixels 56*56 and 28*28*1280)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize  # no torchvision needed

    p, m = cfg["vision_config"]["patch_size"], cfg["vision_config"]["spatial_merge_size"]
    h, w = smart_resize(hw[0], hw[1], factor=p * m, min_pixels=56 * 56, max_pixels=28 * 28 * 1280)
    return h // p, w // p


def tokens(cfg: dict, case: dict) -> tuple[int, int]:
    """(vision tokens per image into the tower, language-model tokens per sequence) of the case."""
    mt = cfg["model_type"]
    hw = parse_image_size(case.get("image_size") or 224)
    images = int(case.get("images") or 1)
    if mt == "vit":
        p = cfg["patch_size"]
        return (hw[0] // p) * (hw[1] // p) + 1, 0
    if mt == "swin":
        p = cfg["patch_size"]
        return -(-hw[0] // p) * -(-hw[1] // p), 0
    if mt in ("qwen2_vl", "qwen2_5_vl"):
        gh, gw = _qwen_grid(cfg, hw)
        m = cfg["vision_config"]["spatial_merge_size"]
        return gh * gw, case["seq_len"] + images * (gh * gw // (m * m) + 2)  # + vision_start / vision_end
    v = cfg["vision_config"]
    n = (v["image_size"] // v["patch_size"]) ** 2
    if mt == "gemma3":
        return n, case["seq_len"] + images * (cfg["mm_tokens_per_image"] + 2)  # + boi / eoi
    if mt == "paligemma":
        return n, case["seq_len"] + images * n
    return n + 1, case["seq_len"] + images * n  # LLaVA "default": the CLS feature dropped


def make_inputs(model, cfg: dict, case: dict, dev, train: bool) -> dict:
    """The forward's keyword arguments for one case (random pixels and token ids)."""
    mt = cfg["model_type"]
    b = case["batch"]
    dtype = next(model.parameters()).dtype
    device = dev.device
    hw = parse_image_size(case.get("image_size") or 224)
    if mt in ("vit", "swin"):
        if mt == "vit":
            size = cfg["image_size"] if isinstance(cfg["image_size"], list) else [cfg["image_size"]] * 2
            hw = tuple(size)
        kw = {"pixel_values": torch.randn(b, cfg.get("num_channels", 3), *hw, device=device, dtype=dtype)}
        if train:
            kw["labels"] = torch.randint(0, cfg["num_labels"], (b,), device=device)
        return kw
    images = int(case.get("images") or 1)
    text = case["seq_len"]
    vocab = cfg["text_config"]["vocab_size"]
    if mt in ("qwen2_vl", "qwen2_5_vl"):
        gh, gw = _qwen_grid(cfg, hw)
        v = cfg["vision_config"]
        m, p, t = v["spatial_merge_size"], v["patch_size"], v["temporal_patch_size"]
        per = gh * gw // (m * m)
        segs, types = [], []
        for _ in range(images):
            segs += [[cfg["vision_start_token_id"]], [cfg["image_token_id"]] * per, [cfg["vision_end_token_id"]]]
            types += [[0], [1] * per, [0]]
        ids = torch.tensor([x for s in segs for x in s], device=device)
        tt = torch.tensor([x for s in types for x in s], device=device, dtype=torch.int32)
        body = torch.randint(0, 151000, (b, text), device=device)
        input_ids = torch.cat([ids.expand(b, -1), body], dim=1)
        mm = torch.cat([tt.expand(b, -1), torch.zeros(b, text, device=device, dtype=torch.int32)], dim=1)
        kw = {"input_ids": input_ids, "mm_token_type_ids": mm,
              "pixel_values": torch.randn(b * images * gh * gw, 3 * t * p * p, device=device, dtype=dtype),
              "image_grid_thw": torch.tensor([[1, gh, gw]] * (b * images), device=device)}
    elif mt in ("gemma3", "paligemma"):
        v = cfg["vision_config"]
        if mt == "gemma3":  # boi, the pooled image tokens, eoi per image; token_type_ids 1 on the image tokens
            per = cfg["mm_tokens_per_image"]
            one = [cfg["boi_token_index"]] + [cfg["image_token_index"]] * per + [cfg["eoi_token_index"]]
            types = [0] + [1] * per + [0]
        else:  # the image tokens lead (PaliGemma's prefix); the text is the suffix
            one = [cfg["image_token_index"]] * (v["image_size"] // v["patch_size"]) ** 2
            types = [0] * len(one)
        ids = torch.tensor(one * images, device=device).expand(b, -1)
        body = torch.randint(0, 255000, (b, text), device=device)
        tt = torch.tensor(types * images, device=device).expand(b, -1)
        body_type = 0 if mt == "gemma3" else 1
        kw = {"input_ids": torch.cat([ids, body], dim=1),
              "token_type_ids": torch.cat([tt, torch.full((b, text), body_type, device=device)], dim=1),
              "pixel_values": torch.randn(b * images, 3, v["image_size"], v["image_size"], device=device,
                                          dtype=dtype)}
    else:  # llava
        v = cfg["vision_config"]
        n = (v["image_size"] // v["patch_size"]) ** 2
        img = torch.full((b, images * n), cfg["image_token_index"], device=device)
        body = torch.randint(0, cfg["image_token_index"], (b, text), device=device)
        kw = {"input_ids": torch.cat([img, body], dim=1),
              "pixel_values": torch.randn(b * images, 3, v["image_size"], v["image_size"], device=device,
                                          dtype=dtype)}
    if train:
        kw["labels"] = kw["input_ids"]
    else:
        kw.update(use_cache=True, logits_to_keep=1)
    del vocab
    return kw
