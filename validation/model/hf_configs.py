"""Architecture configs of the families measured by `validation.model.hf_models`, and their builders.

Each entry of FAMILIES holds the architecture fields of a public Hugging Face `config.json`, typed as published
(no hub access here; the source is cited above each entry). Only tokenizer ids, dtype and version stamps are
left out where they play no part in the shapes. Self-contained on purpose: stdlib only (transformers is
imported lazily, by `to_hf_config`).

`family_config(name, layers, overrides, tiny)` applies, in order: the tiny shrink (CPU tests), the layer count
(slicing `layer_types` when the config carries one), then the JSON overrides. `dump_config` writes that dict
(model_type included) so the planner can read exactly what the model was built from.
"""

from __future__ import annotations

import copy
import json
import os

from estimator.files import write_atomic
from validation.model.hf_hybrid import _TINY_HYBRID, HYBRID_FAMILIES, hybrid_layer_kinds, is_hybrid

FAMILIES: dict[str, dict] = {
    # https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
    "llama-3.1-8b": {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu",
        "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
        "max_position_embeddings": 131072, "mlp_bias": False, "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "tie_word_embeddings": False, "use_cache": True, "vocab_size": 128256,
    },
    # https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json
    "qwen2.5-7b": {
        "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
        "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584,
        "initializer_range": 0.02, "intermediate_size": 18944, "max_position_embeddings": 131072,
        "max_window_layers": 28, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False,
        "use_cache": True, "use_sliding_window": False, "vocab_size": 152064,
    },
    # https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json
    "mistral-7b-v0.1": {
        "model_type": "mistral", "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
        "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
        "max_position_embeddings": 32768, "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
        "tie_word_embeddings": False, "use_cache": True, "vocab_size": 32000,
    },
    # https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json
    # (fused qkv_proj / gate_up_proj; note the published sliding_window 2047, which HF applies as a window mask)
    "phi-3-mini-4k": {
        "model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000,
        "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192,
        "max_position_embeddings": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 32, "original_max_position_embeddings": 4096, "pad_token_id": 32000,
        "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
        "sliding_window": 2047, "tie_word_embeddings": False, "use_cache": True, "vocab_size": 32064,
    },
    # https://huggingface.co/google/gemma-2-9b/blob/main/config.json
    "gemma-2-9b": {
        "model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
        "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "initializer_range": 0.02,
        "intermediate_size": 14336, "max_position_embeddings": 8192, "num_attention_heads": 16,
        "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0, "query_pre_attn_scalar": 256,
        "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "sliding_window_size": 4096,
        "use_cache": True, "vocab_size": 256000,
    },
    # https://huggingface.co/google/gemma-3-12b-pt/blob/main/config.json (its "text_config";
    # fields left at Gemma3TextConfig defaults in that file are written out here: vocab_size 262208, rms_norm_eps,
    # rope_theta 1e6, rope_local_base_freq 1e4, max_position_embeddings 131072, sliding_window_pattern 6)
    "gemma-3-12b": {
        "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "attn_logit_softcapping": None, "final_logit_softcapping": None,
        "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3840, "initializer_range": 0.02,
        "intermediate_size": 15360, "max_position_embeddings": 131072, "num_attention_heads": 16,
        "num_hidden_layers": 48, "num_key_value_heads": 8, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000.0, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "rope_theta": 1000000.0, "sliding_window": 1024, "sliding_window_pattern": 6, "use_cache": True,
        "vocab_size": 262208, "tie_word_embeddings": True,
    },
    # https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
    "mixtral-8x7b": {
        "model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 14336, "max_position_embeddings": 32768, "num_attention_heads": 32,
        "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
        "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
        "sliding_window": None, "tie_word_embeddings": False, "use_cache": True, "vocab_size": 32000,
    },
    # https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
    "qwen3-30b-a3b": {
        "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645,
        "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
        "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
        "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128,
        "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": False,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
        "sliding_window": None, "tie_word_embeddings": False, "use_cache": True, "use_sliding_window": False,
        "vocab_size": 151936,
    },
    # https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json (MLA with q_lora_rank null,
    # 2 shared experts, first_k_dense_replace 1; the hub file's auto_map/remote code is not used: HF's deepseek_v2)
    "deepseek-v2-lite": {
        "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False,
        "attention_dropout": 0.0, "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001,
        "ep_size": 1, "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
        "initializer_range": 0.02, "intermediate_size": 10944, "kv_lora_rank": 512, "max_position_embeddings": 163840,
        "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64,
        "n_shared_experts": 2, "norm_topk_prob": False, "num_attention_heads": 16, "num_experts_per_tok": 6,
        "num_hidden_layers": 27, "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": None,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": True,
        "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy", "use_cache": True,
        "v_head_dim": 128, "vocab_size": 102400,
    },
    # https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json (its quantization_config (mxfp4 experts) is
    # deliberately left out: random bf16 weights everywhere)
    "gpt-oss-20b": {
        "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "attention_bias": True,
        "attention_dropout": 0.0, "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64,
        "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
        "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 12,
        "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
        "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32, "output_router_logits": False,
        "pad_token_id": 199999, "rms_norm_eps": 1e-05,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                         "rope_type": "yarn", "truncate": False},
        "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
        "tie_word_embeddings": False, "use_cache": True, "vocab_size": 201088,
    },
}

# The --tiny shrink: same structure (GQA ratio kept where it is not 1, windows, layer pattern, experts, MLA),
# hidden 64, 4 heads, vocab 512. Windows shrink to 16 (8 for gpt-oss) so tiny sequences (>= 32) cross them.
_TINY_COMMON = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "vocab_size": 512,
                "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
_TINY: dict[str, dict] = {
    "llama-3.1-8b": {"num_key_value_heads": 2},
    "qwen2.5-7b": {"num_key_value_heads": 2, "sliding_window": 4096},
    "mistral-7b-v0.1": {"num_key_value_heads": 2, "sliding_window": 16},
    "phi-3-mini-4k": {"num_key_value_heads": 4, "sliding_window": 16, "original_max_position_embeddings": 4096},
    "gemma-2-9b": {"num_key_value_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 16,
                   "sliding_window_size": 16},
    "gemma-3-12b": {"num_key_value_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 16, "sliding_window": 16},
    "mixtral-8x7b": {"num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen3-30b-a3b": {"num_key_value_heads": 2, "head_dim": 16, "num_experts": 8, "num_experts_per_tok": 2,
                      "moe_intermediate_size": 32},
    "deepseek-v2-lite": {"num_key_value_heads": 4, "n_routed_experts": 8, "n_shared_experts": 2,
                         "num_experts_per_tok": 2, "moe_intermediate_size": 32, "kv_lora_rank": 16,
                         "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16},
    "gpt-oss-20b": {"num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
                    "experts_per_token": 2, "sliding_window": 8},
}


FAMILIES.update(HYBRID_FAMILIES)  # state-space and hybrid families (validation/model/hf_hybrid.py)
_TINY.update(_TINY_HYBRID)


def family_config(name: str, layers: int | None = None, overrides: dict | str | None = None,
                  tiny: bool = False) -> dict:
    """The config dict of `name` with the tiny shrink, the layer count and `overrides` applied (a new dict)."""
    if name not in FAMILIES:
        raise KeyError(f"unknown family {name!r}; known: {', '.join(FAMILIES)}")
    cfg = copy.deepcopy(FAMILIES[name])
    if tiny:
        cfg.update(_TINY_COMMON)
        cfg.update(_TINY[name])
    if layers is not None:
        cut_layers(cfg, layers)
    if overrides:
        if isinstance(overrides, str):
            overrides = json.loads(overrides)
        cfg.update(overrides)
    return cfg


def cut_layers(cfg: dict, layers: int) -> dict:
    """Set the decoder layer count of a config dict in place (and return it): `num_hidden_layers`, the
    `layer_types` pattern repeated to the new length, and the per-layer-index fields that must stay within it
    (qwen's max_window_layers, deepseek's first_k_dense_replace). Any config, built-in family or not."""
    layers = int(layers)
    if layers < 1:
        raise ValueError("layers must be >= 1")
    cfg["num_hidden_layers"] = layers
    if isinstance(cfg.get("layer_types"), list) and cfg["layer_types"]:
        full = cfg["layer_types"]
        cfg["layer_types"] = [full[i % len(full)] for i in range(layers)]
    if cfg.get("max_window_layers") is not None:  # qwen: window applies to layers >= max_window_layers
        cfg["max_window_layers"] = min(cfg["max_window_layers"], layers)
    if cfg.get("first_k_dense_replace") is not None:  # deepseek: keep a dense first layer, MoE after it
        cfg["first_k_dense_replace"] = min(cfg["first_k_dense_replace"], layers)
    return cfg


def layer_kinds(cfg: dict) -> list[str]:
    """Attention kind of each layer, as HF derives it (explicit layer_types, gemma2 alternation starting with a
    sliding layer, gemma3 `sliding_window_pattern`); for families without windows, all 'full_attention'."""
    n = cfg["num_hidden_layers"]
    if isinstance(cfg.get("layer_types"), list):
        return list(cfg["layer_types"])
    mt = cfg["model_type"]
    if is_hybrid(cfg):
        return hybrid_layer_kinds(cfg)
    if mt == "gemma2":
        return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
    if mt == "gemma3_text":
        p = cfg.get("sliding_window_pattern", 6)
        return ["sliding_attention" if (i + 1) % p else "full_attention" for i in range(n)]
    if mt in ("mistral", "phi3") and cfg.get("sliding_window"):
        return ["sliding_attention"] * n
    return ["full_attention"] * n


def to_hf_config(cfg: dict):
    """A transformers PretrainedConfig for the dict (AutoConfig.for_model on its model_type)."""
    from transformers import AutoConfig

    kwargs = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures", "quantization_config")}
    return AutoConfig.for_model(cfg["model_type"], **kwargs)


def dump_config(name: str, path: str, layers: int | None = None, overrides: dict | str | None = None,
                tiny: bool = False) -> str:
    """Write the family's config dict (layers/overrides applied, model_type included) as JSON; returns path."""
    cfg = family_config(name, layers, overrides, tiny)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_atomic(path, json.dumps(cfg, indent=2, sort_keys=True) + "\n", "config")
    return path
