"""Golden tests for model presets and the Hugging Face config reader.

Parameter counts: the published totals each preset cites (Hugging Face safetensors counts on the model pages;
torchvision `weights.meta["num_params"]` for the ViTs). KV cache per token: 2 (k and v) · layers · kv_heads ·
head_dim · bits / 8, the figure the Llama model cards' GQA arithmetic gives.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from estimator.model.hf_config import from_hf_config
from estimator.model.presets import PRESETS, get_preset
from estimator.model.specs import ModelSpec

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
    "llama-3.1-8b": 8_030_261_248,  # meta-llama/Llama-3.1-8B
    "llama-3.1-70b": 70_553_706_496,  # meta-llama/Llama-3.1-70B
    "llama-3.1-405b": 405_853_388_800,  # meta-llama/Llama-3.1-405B
    "qwen2.5-72b": 72_706_203_648,  # Qwen/Qwen2.5-72B
    "phi-3-mini": 3_821_079_552,  # microsoft/Phi-3-mini-4k-instruct
    "gemma-3-12b": 11_766_034_176,  # google/gemma-3-12b-it language model (hub total 12,187,325,040 with vision)
    "gemma-3-27b": 27_009_346_304,  # google/gemma-3-27b-it language model (hub total 27,432,406,640 with vision)
    "mixtral-8x7b": 46_702_792_704,  # mistralai/Mixtral-8x7B-v0.1
    "qwen3-30b-a3b": 30_532_122_624,  # Qwen/Qwen3-30B-A3B
    "qwen1.5-moe-a2.7b": 14_315_784_192,  # Qwen/Qwen1.5-MoE-A2.7B
    "deepseek-v2-lite": 15_706_484_224,  # deepseek-ai/DeepSeek-V2-Lite
    "deepseek-v3": 671_026_419_200,  # deepseek-ai/DeepSeek-V3 main model, checkpoint elements (state_params)
    "gpt-oss-20b": 20_914_757_184,  # openai/gpt-oss-20b (bf16-equivalent count)
    "gpt-oss-120b": 116_829_156_672,  # openai/gpt-oss-120b
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_preset_parameter_count_is_exact(name):
    spec = get_preset(name)
    assert spec.state_params == PUBLISHED_PARAMS[name]
    # parameters() and the checkpoint differ only by DeepSeek-V3's router score-correction buffers
    assert spec.state_params - spec.params == (58 * 256 if name == "deepseek-v3" else 0)


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
    with pytest.raises(ValueError, match="patch_size: 256 is larger than image_size 224"):
        replace(get_preset("vit-l-16"), patch_size=256)
    # transformers floors a partial edge patch (ViTPatchEmbeddings is a stride-p Conv2d): 224 // 15 = 14
    assert replace(get_preset("vit-l-16"), patch_size=15).native_tokens == 14 * 14 + 1


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
    ("unknown-model-type.config.json", "model_type 'rwkv' is not modelled"),
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


# --- mixture of experts, latent attention and the newer families --------------------------------------------

@pytest.mark.parametrize("name, total, active, unit", [
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.1e9),  # Mistral AI: 46.7B total, 12.9B active
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.1e9),  # Qwen3 model card: 30.5B total, 3.3B activated
    ("qwen1.5-moe-a2.7b", 14.3e9, 2.7e9, 0.1e9),  # Qwen1.5-MoE model card: 14.3B total, 2.7B activated
    ("deepseek-v3", 671e9, 37e9, 1e9),  # DeepSeek-V3 README: 671B total, 37B activated
])
def test_active_and_total_parameters_match_the_published_figures(name, total, active, unit):
    """Within one unit of the last published digit (cards round or truncate: 12.88B → 12.9, 3.35B → 3.3)."""
    spec = get_preset(name)
    assert abs(spec.params - total) < unit
    assert abs(spec.active_params_per_token - active) < unit
    assert spec.active_params_per_token < spec.params / 3


def test_active_parameters_by_hand():
    mixtral = get_preset("mixtral-8x7b")
    per_expert = 3 * 4096 * 14336
    assert mixtral.expert_params == 32 * 8 * per_expert
    assert mixtral.params - mixtral.active_params_per_token == 32 * (8 - 2) * per_expert
    assert mixtral.active_params_per_token == 12_879_925_248 and mixtral.moe_layers == 32
    qwen = get_preset("qwen3-30b-a3b")
    assert qwen.active_params_per_token == 3_353_032_704
    assert qwen.params - qwen.active_params_per_token == 48 * 120 * 3 * 2048 * 768
    # gpt-oss and DeepSeek-V2 publish active counts without the input embedding table (a lookup, no GEMM)
    for name, published in (("gpt-oss-20b", 3.61e9), ("gpt-oss-120b", 5.13e9), ("deepseek-v2-lite", 2.4e9)):
        spec = get_preset(name)
        assert round((spec.active_params_per_token - spec.vocab * spec.hidden) / 1e7) == pytest.approx(
            published / 1e7, abs=6), name
    dense = get_preset("llama-3-8b")
    assert dense.active_params_per_token == dense.params and dense.expert_params == 0 and dense.moe_layers == 0


def test_moe_matmul_params_count_the_active_experts():
    mixtral = get_preset("mixtral-8x7b")
    attention = 4096 * (4096 + 2 * 1024) + 4096 * 4096
    assert mixtral.matmul_params_per_layer == attention + 8 * 4096 + 2 * 3 * 4096 * 14336  # router + top-2
    assert mixtral.resident_moe_params_per_layer == 8 * 4096 + 8 * 3 * 4096 * 14336
    ds = get_preset("deepseek-v2-lite")
    by_layer = ds.matmul_params_by_layer
    assert by_layer[0] != by_layer[1] and len(set(by_layer[1:])) == 1  # layer 0 dense, then MoE
    assert ds.matmul_params == sum(by_layer) and ds.matmul_params_per_layer == max(by_layer)
    assert get_preset("llama-2-7b").matmul_params_per_layer == 202_375_168  # unchanged for dense models


def test_mla_kv_cache_per_token_in_both_layouts():
    lite = get_preset("deepseek-v2-lite")
    # per-head: k (16 heads × 192) and v (16 heads × 128) per layer; latent: c_kv 512 + shared rope key 64 per
    # layer; "hf": transformers 5.17 caches the latent (measured, validation/data/h200_hf_archs.csv)
    assert lite.kv_cache_bytes_per_token(16, "per-head") == 27 * (16 * 192 + 16 * 128) * 2 == 276_480
    assert lite.kv_cache_bytes_per_token(16, "hf") == lite.kv_cache_bytes_per_token(16, "latent")
    assert lite.kv_cache_bytes_per_token(16, "latent") == 27 * (512 + 64) * 2 == 31_104
    assert lite.kv_cache_bytes_per_token(8, "latent") == 27 * 576
    v3 = get_preset("deepseek-v3")
    assert v3.kv_cache_bytes_per_token(16, "per-head") == 61 * 128 * 320 * 2 == 4_997_120
    assert v3.kv_cache_bytes_per_token(16, "latent") == 61 * 576 * 2 == 70_272
    llama = get_preset("llama-3-8b")  # GQA: both layouts are 2 · layers · kv_heads · head_dim
    assert llama.kv_cache_bytes_per_token(16, "latent") == llama.kv_cache_bytes_per_token() == 2 * 32 * 8 * 128 * 2
    assert llama.kv_cache_bytes_per_token(4) == 32 * 8 * 128  # int4: half a byte per element
    assert get_preset("vit-l-16").kv_cache_bytes_per_token() == 0
    with pytest.raises(ValueError, match="layout: unknown value 'paged'"):
        lite.kv_cache_bytes_per_token(16, "paged")


def test_mla_attention_widths():
    lite = get_preset("deepseek-v2-lite")
    assert lite.attention_head_widths == (192, 192, 128) and lite.qk_nope_head_dim == 128
    assert lite.attention_widths_per_layer == ((192, 192, 128),) * 27
    assert lite.attention_shape("latent") == {"q_heads": 16, "kv_heads": 1, "q_width": 576, "k_width": 576,
                                              "v_width": 512}
    assert get_preset("llama-3-8b").attention_head_widths == (128, 128, 128)


def test_layer_patterns_of_the_new_families():
    gemma3 = get_preset("gemma-3-27b")
    assert gemma3.window_per_layer[:6] == (1024,) * 5 + (None,)  # 5 local : 1 global
    assert sum(w is None for w in gemma3.window_per_layer) == 62 // 6
    oss = get_preset("gpt-oss-120b")
    assert oss.window_per_layer[:3] == (128, None, 128) and oss.moe_layers == 36
    ds = get_preset("deepseek-v3")
    assert ds.dense_layers == (0, 1, 2) and ds.moe_layers == 58
    assert get_preset("phi-3-mini").fused_qkv and get_preset("phi-3-mini").window_per_layer == (2047,) * 32


def test_what_each_new_detail_is_worth():
    oss = get_preset("gpt-oss-20b")
    assert oss.params - replace(oss, attention_sinks=False).params == 24 * 64
    assert oss.params - replace(oss, router_bias=False).params == 24 * 32
    assert oss.params - replace(oss, expert_bias=False).params == 24 * 32 * (2 * 2880 + 2880)
    qwen = get_preset("qwen3-30b-a3b")
    assert qwen.params - replace(qwen, qk_norm=False).params == 48 * 2 * 128
    moe = get_preset("qwen1.5-moe-a2.7b")
    assert moe.params - replace(moe, shared_expert_gate=False).params == 24 * 2048
    # phi-3's fused projections hold exactly the separate matrices
    phi = get_preset("phi-3-mini")
    assert phi.params == replace(phi, fused_qkv=False, fused_gate_up=False).params


@pytest.mark.parametrize("file, preset", [
    ("mixtral-8x7b.config.json", "mixtral-8x7b"), ("qwen3-30b-a3b.config.json", "qwen3-30b-a3b"),
    ("qwen1.5-moe-a2.7b.config.json", "qwen1.5-moe-a2.7b"), ("deepseek-v2-lite.config.json", "deepseek-v2-lite"),
    ("deepseek-v3.config.json", "deepseek-v3"), ("gemma-3-12b.config.json", "gemma-3-12b"),
    ("gemma-3-27b.config.json", "gemma-3-27b"), ("gpt-oss-20b.config.json", "gpt-oss-20b"),
    ("gpt-oss-120b.config.json", "gpt-oss-120b"), ("phi-3-mini-4k.config.json", "phi-3-mini"),
    ("llama-3.1-405b.config.json", "llama-3.1-405b"), ("qwen2.5-72b.config.json", "qwen2.5-72b"),
])
def test_hf_config_reproduces_the_new_presets(file, preset):
    spec, ref = from_hf_config(DATA / file), get_preset(preset)
    assert spec.params == ref.params and spec.state_params == ref.state_params
    for field in ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "v_head", "ffn", "vocab", "tied_embeddings",
                  "window_per_layer", "experts", "experts_per_token", "moe_ffn", "shared_experts_ffn",
                  "shared_expert_gate", "dense_layers", "router_bias", "expert_bias", "router_score_bias",
                  "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_norm", "attention_sinks", "qkv_bias",
                  "out_bias", "norms_per_layer", "fused_qkv", "fused_gate_up", "query_pre_attn_scalar"):
        assert getattr(spec, field) == getattr(ref, field), field


def test_the_minimal_mixtral_config_is_now_read():
    spec = from_hf_config(DATA / "mixtral.config.json")
    assert spec.experts == 8 and spec.experts_per_token == 2 and spec.params == get_preset("mixtral-8x7b").params


def test_qwen_moe_dense_layers_from_sparse_step_and_mlp_only_layers():
    cfg = {"model_type": "qwen2_moe", "num_hidden_layers": 6, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "num_experts": 4, "num_experts_per_tok": 2,
           "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64, "decoder_sparse_step": 2,
           "mlp_only_layers": [3]}
    spec = from_hf_config(cfg)
    assert spec.dense_layers == (0, 2, 3, 4) and spec.moe_layers == 2 and spec.shared_expert_gate
    assert from_hf_config({**cfg, "model_type": "deepseek_v2", "first_k_dense_replace": 2, "moe_layer_freq": 1,
                           "kv_lora_rank": 16, "q_lora_rank": None, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
                           "v_head_dim": 8, "n_routed_experts": 4}).dense_layers == (0, 1)


@pytest.mark.parametrize("changes, message", [
    (dict(experts_per_token=2), "experts: experts_per_token is set but the model has no experts"),
    (dict(experts=8, experts_per_token=9, moe_ffn=64), "experts_per_token: expected 1..8"),
    (dict(experts=8, experts_per_token=2, moe_ffn=64, dense_layers=(32,)), "dense_layers: 32 is not a layer index"),
    (dict(kv_lora_rank=512, qk_rope_head_dim=128), "qk_rope_head_dim: expected 1..127"),
    (dict(q_lora_rank=64), "kv_lora_rank: q_lora_rank"),
    (dict(v_head_dim=0), "v_head_dim: must be at least 1"),
])
def test_inconsistent_moe_or_mla_is_a_clear_error(changes, message):
    with pytest.raises(ValueError, match=message):
        replace(get_preset("llama-3-8b"), **changes)
