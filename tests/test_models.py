"""Golden tests for model presets and the Hugging Face config reader.

Parameter counts: the published totals each preset cites (Hugging Face safetensors counts on the model pages;
torchvision `weights.meta["num_params"]` for the ViTs). KV cache per token: 2 (k and v) · layers · kv_heads ·
head_dim · bits / 8, the figure the Llama model cards' GQA arithmetic gives.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from estimator.model.specs import PRESETS, ModelSpec, from_hf_config, get_preset

DATA = Path(__file__).parent / "data"

PUBLISHED_PARAMS = {
    "llama-2-7b": 6_738_415_616,  # meta-llama/Llama-2-7b-hf
    "llama-2-13b": 13_015_864_320,  # meta-llama/Llama-2-13b-hf
    "llama-2-70b": 68_976_648_192,  # meta-llama/Llama-2-70b-hf
    "llama-3-8b": 8_030_261_248,  # meta-llama/Meta-Llama-3-8B
    "llama-3-70b": 70_553_706_496,  # meta-llama/Meta-Llama-3-70B
    "mistral-7b": 7_241_732_096,  # mistralai/Mistral-7B-v0.1
    "qwen2.5-7b": 7_615_616_512,  # Qwen/Qwen2.5-7B
    "gemma-2-9b": 9_241_705_984,  # google/gemma-2-9b
    "vit-l-16": 304_326_632,  # torchvision ViT_L_16_Weights.IMAGENET1K_V1
    "vit-h-14": 632_045_800,  # torchvision ViT_H_14_Weights.IMAGENET1K_SWAG_LINEAR_V1
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_preset_parameter_count_is_exact(name):
    assert get_preset(name).params == PUBLISHED_PARAMS[name]


def test_every_preset_is_covered_and_cites_a_source():
    assert set(PRESETS) == set(PUBLISHED_PARAMS)
    for spec in PRESETS.values():
        assert f"{PUBLISHED_PARAMS[spec.name]:,}" in spec.source


def test_llama_2_7b_by_hand():
    # 32 layers · (4·4096² attention + 3·4096·11008 SwiGLU + 2·4096 RMSNorm) + 2·32000·4096 + 4096
    per_layer = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    assert get_preset("llama-2-7b").params == 32 * per_layer + 2 * 32000 * 4096 + 4096


def test_what_each_architectural_detail_is_worth():
    qwen = get_preset("qwen2.5-7b")
    assert qwen.params - replace(qwen, qkv_bias=False).params == 28 * (3584 + 2 * 512)  # q/k/v biases
    gemma = get_preset("gemma-2-9b")
    assert replace(gemma, tied_embeddings=False).params - gemma.params == 256000 * 3584
    assert gemma.params - replace(gemma, norms_per_layer=2).params == 42 * 2 * 3584  # pre/post norms
    # head_dim 256 is explicit: hidden / heads would be 224 and lose 42·2·(16·32 + 2·8·32)·3584 parameters
    assert gemma.head_dim == 256 and gemma.hidden // gemma.q_heads == 224


def test_windows_per_layer():
    gemma = get_preset("gemma-2-9b")
    assert gemma.window_per_layer[:4] == (4096, None, 4096, None)
    assert sum(w is None for w in gemma.window_per_layer) == 21
    assert get_preset("llama-3-8b").window_per_layer == (None,) * 32


def test_encoders_have_native_tokens():
    assert get_preset("vit-l-16").native_tokens == 14 * 14 + 1
    assert get_preset("vit-h-14").native_tokens == 16 * 16 + 1


def test_aliases_and_unknown_preset():
    assert get_preset("Llama3-8B") is PRESETS["llama-3-8b"]
    with pytest.raises(ValueError, match="preset: unknown model 'gpt-5'.*llama-2-7b"):
        get_preset("gpt-5")


@pytest.mark.parametrize("changes, message", [
    (dict(kv_heads=5), "kv_heads: q_heads \\(32\\) must be divisible by kv_heads \\(5\\)"),
    (dict(layers=0), "layers: must be at least 1"),
    (dict(hidden="wide"), "hidden: expected a positive integer"),
    (dict(kind="seq2seq"), "kind: unknown value"),
    (dict(window_per_layer=(4096,) * 3), "window_per_layer: has 3 entries for 32 layers"),
    (dict(window_per_layer=(0,) * 32), "window_per_layer: must be at least 1"),
])
def test_inconsistent_architecture_is_a_clear_error(changes, message):
    with pytest.raises(ValueError, match=message):
        replace(get_preset("llama-3-8b"), **changes)


def test_encoder_needs_a_patch_grid():
    with pytest.raises(ValueError, match="patch_size: 15 does not divide image_size 224"):
        replace(get_preset("vit-l-16"), patch_size=15)


@pytest.mark.parametrize("file, preset", [("llama-3-8b.config.json", "llama-3-8b"),
                                          ("gemma-2-9b.config.json", "gemma-2-9b"),
                                          ("qwen2.5-7b.config.json", "qwen2.5-7b"),
                                          ("vit-large-patch16-224.config.json", "vit-l-16")])
def test_hf_config_reproduces_the_preset(file, preset):
    spec = from_hf_config(DATA / file)
    ref = get_preset(preset)
    assert spec.params == ref.params
    for field in ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "ffn", "vocab", "kind", "gated_ffn",
                  "tied_embeddings", "window_per_layer"):
        assert getattr(spec, field) == getattr(ref, field), field


def test_hf_config_dict_and_layer_types():
    cfg = {"model_type": "gemma3_text", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
           "num_key_value_heads": 1, "head_dim": 64, "intermediate_size": 1024, "vocab_size": 1000,
           "sliding_window": 512, "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                                                  "full_attention"]}
    spec = from_hf_config(cfg, name="tiny")
    assert spec.window_per_layer == (512, 512, 512, None)
    assert spec.tied_embeddings and spec.kv_heads == 1


@pytest.mark.parametrize("file, message", [
    ("malformed.config.json", "is not valid JSON"),
    ("mixtral.config.json", "mixture-of-experts"),
    ("does-not-exist.json", "file not found"),
])
def test_bad_config_files_are_one_line_errors(file, message):
    with pytest.raises(ValueError, match=message) as info:
        from_hf_config(DATA / file)
    assert "\n" not in str(info.value)


def test_config_missing_key_and_bad_heads():
    with pytest.raises(ValueError, match="config: missing 'intermediate_size'"):
        from_hf_config({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10})
    with pytest.raises(ValueError, match="kv_heads"):
        from_hf_config({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                        "num_key_value_heads": 3, "intermediate_size": 128, "vocab_size": 10})
    with pytest.raises(ValueError, match="JSON object"):
        from_hf_config([1, 2])  # type: ignore[arg-type]


def test_spec_is_frozen():
    spec = get_preset("llama-2-7b")
    with pytest.raises(AttributeError):
        spec.layers = 3  # type: ignore[misc]
    assert isinstance(spec, ModelSpec)


def test_config_values_of_the_wrong_type_are_named():
    base = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
            "vocab_size": 10}
    with pytest.raises(ValueError, match="config max_window_layers: expected a whole number"):
        from_hf_config({**base, "sliding_window": 8, "max_window_layers": "q"})
    with pytest.raises(ValueError, match="config sliding_window: expected a positive integer"):
        from_hf_config({**base, "sliding_window": "big"})
    with pytest.raises(ValueError, match="max_positions: expected a positive integer"):
        from_hf_config({**base, "max_position_embeddings": "x"})
    qwen_like = from_hf_config({**base, "sliding_window": 8, "use_sliding_window": True, "max_window_layers": 1})
    assert qwen_like.window_per_layer == (None, 8)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_tensor_parallel_shards_cover_the_model(name):
    spec = get_preset(name)
    assert spec.params_per_gpu(1) == spec.params
    for tp in (2, 4, 8):
        if spec.q_heads % tp:
            continue
        shard = spec.params_per_gpu(tp)
        assert shard < spec.params / tp * 1.2  # only norms, some biases and encoder embeddings are replicated
        assert shard * tp >= spec.params  # copies (kv heads when tp > kv_heads, replicated parts) never lose any
