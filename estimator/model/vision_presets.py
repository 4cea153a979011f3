"""Named image models: Swin-B/L and two vision-language models, each with the public config it was read from and
the parameter count transformers 5.17 allocates for it (tests/test_vision_plan.py checks every one; the counts
were also measured on the H200, validation/data/h200_hf_vision.csv n_params)."""

from __future__ import annotations

from estimator.model.presets import PRESETS
from estimator.model.specs import ModelSpec
from estimator.model.vision import SwinSpec, VisionLanguageSpec, VisionTower

_HF = "https://huggingface.co/{}/blob/main/config.json"

VISION_PRESETS: dict[str, object] = {
    "swin-b": SwinSpec(name="swin-b", embed_dim=128, depths=(2, 2, 18, 2), heads=(4, 8, 16, 32),
                       source=_HF.format("microsoft/swin-base-patch4-window7-224") + ": 87,768,224 parameters"),
    "swin-l": SwinSpec(name="swin-l", embed_dim=192, depths=(2, 2, 18, 2), heads=(6, 12, 24, 48),
                       source=_HF.format("microsoft/swin-large-patch4-window7-224") + ": 196,532,476 parameters"),
    "qwen2-vl-2b": VisionLanguageSpec(
        name="qwen2-vl-2b", family="qwen2_vl",
        tower=VisionTower(kind="qwen2_vl", layers=32, hidden=1280, heads=16, ffn=5120, temporal_patch=2, merge=2),
        lm=ModelSpec(name="qwen2-vl-2b language model", layers=28, hidden=1536, q_heads=12, kv_heads=2,
                     head_dim=128, ffn=8960, vocab=151936, tied_embeddings=True, qkv_bias=True,
                     max_positions=32768, source=_HF.format("Qwen/Qwen2-VL-2B-Instruct")),
        source=_HF.format("Qwen/Qwen2-VL-2B-Instruct") + ": 2,208,985,600 parameters"),
    "llava-1.5-7b": VisionLanguageSpec(
        name="llava-1.5-7b", family="llava",
        tower=VisionTower(kind="clip", layers=24, hidden=1024, heads=16, ffn=4096, image_size=336),
        lm=ModelSpec(name="llava-1.5-7b language model", layers=32, hidden=4096, q_heads=32, kv_heads=32,
                     head_dim=128, ffn=11008, vocab=32064, max_positions=4096,
                     source=_HF.format("llava-hf/llava-1.5-7b-hf")),
        source=_HF.format("llava-hf/llava-1.5-7b-hf") + ": 7,063,427,072 parameters"),
}


def get_vision_preset(name: str):
    """A Swin or vision-language preset by name (case-insensitive), or None when the name is not one."""
    key = str(name).strip().lower().replace("_", "-")
    return VISION_PRESETS.get(key)


assert not set(VISION_PRESETS) & set(PRESETS)
