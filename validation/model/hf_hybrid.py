"""State-space and hybrid families for `validation.hf_models` (random weights from configs in code; stdlib only).

The configs are the defaults of transformers 5.17's configuration files (public, versioned):
  mamba2-codestral  transformers/models/mamba2/configuration_mamba2.py Mamba2Config(): hidden 4096, 128 heads × 64,
                    state 128, 8 groups, 64 layers (the widths usually quoted for Mamba-Codestral-7B; its hub
                    config.json was not read here, so the name says "codestral" for the widths only)
  falcon-h1         transformers/models/falcon_h1/configuration_falcon_h1.py FalconH1Config()
  bamba             transformers/models/bamba/configuration_bamba.py BambaConfig(), with attention at layers 3
                    and 7 (BambaConfig sets no attention layer; the index list is this project's choice)
Cut to a few layers by `--layers`/the case's `layers`. On a machine without mamba-ssm and causal-conv1d
transformers runs its reference PyTorch path; `fallback_note()` says which path the process will take.
"""

from __future__ import annotations

HYBRID_FAMILIES: dict[str, dict] = {
    "mamba2-codestral": {
        "model_type": "mamba2", "num_heads": 128, "head_dim": 64, "vocab_size": 32768, "hidden_size": 4096,
        "state_size": 128, "num_hidden_layers": 64, "layer_norm_epsilon": 1e-05, "expand": 2, "conv_kernel": 4,
        "n_groups": 8, "use_bias": False, "use_conv_bias": True, "hidden_act": "silu", "residual_in_fp32": True,
        "time_step_rank": 256, "chunk_size": 256, "tie_word_embeddings": False, "pad_token_id": 1,
        "bos_token_id": 0, "eos_token_id": 2,
    },
    "falcon-h1": {
        "model_type": "falcon_h1", "vocab_size": 128000, "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
        "rms_norm_eps": 1e-05, "max_position_embeddings": 8192, "mamba_d_ssm": 1024, "mamba_n_heads": 128,
        "mamba_d_head": 8, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4, "mamba_expand": 2,
        "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_proj_bias": False, "mamba_rms_norm": False,
        "projectors_bias": False, "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    },
    "bamba": {
        "model_type": "bamba", "vocab_size": 128000, "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu",
        "rms_norm_eps": 1e-05, "max_position_embeddings": 262144, "attn_layer_indices": [3, 7],
        "mamba_n_heads": 128, "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
        "mamba_expand": 2, "mamba_chunk_size": 256, "mamba_conv_bias": True, "mamba_proj_bias": False,
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    },
}

# --tiny: hidden 64; the mixer's heads × head_dim = expand · hidden
_TINY_HYBRID: dict[str, dict] = {
    "mamba2-codestral": {"hidden_size": 64, "num_heads": 8, "head_dim": 16, "state_size": 16, "n_groups": 2,
                         "vocab_size": 512, "chunk_size": 16},
    "falcon-h1": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "mamba_d_ssm": 64, "mamba_n_heads": 8, "mamba_d_head": 8, "mamba_d_state": 16,
                  "mamba_chunk_size": 16, "vocab_size": 512},
    "bamba": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
              "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 16, "mamba_chunk_size": 16,
              "vocab_size": 512, "attn_layer_indices": [1]},
}
for _name in _TINY_HYBRID:
    _TINY_HYBRID[_name].update(bos_token_id=None, eos_token_id=None, pad_token_id=None)

HYBRID_MODEL_TYPES = ("mamba2", "falcon_h1", "bamba")


def is_hybrid(cfg: dict) -> bool:
    return cfg.get("model_type") in HYBRID_MODEL_TYPES


def hybrid_layer_kinds(cfg: dict) -> list[str]:
    """`layer_types` as transformers 5.17 derives them: Mamba2 'linear_attention' everywhere, Falcon-H1 'hybrid'
    (mamba and attention in every layer), Bamba 'full_attention' at attn_layer_indices, else 'linear_attention'."""
    n = cfg["num_hidden_layers"]
    if cfg["model_type"] == "falcon_h1":
        return ["hybrid"] * n
    attn = set(cfg.get("attn_layer_indices") or ()) if cfg["model_type"] == "bamba" else set()
    return ["full_attention" if i in attn else "linear_attention" for i in range(n)]


def cache_of(out):
    """The cache a forward returned: Mamba2 names it cache_params, the hybrids past_key_values."""
    cache = getattr(out, "past_key_values", None)
    return cache if cache is not None else getattr(out, "cache_params", None)


def cache_kwargs(model, cache) -> dict:
    """The keyword a model's forward takes its cache under."""
    return {"cache_params": cache} if model.config.model_type == "mamba2" else {"past_key_values": cache}


def fallback_note() -> str:
    """'torch-fallback' unless mamba-ssm and causal-conv1d are both importable here ('fast-kernels')."""
    import importlib.util

    have = all(importlib.util.find_spec(m) is not None for m in ("mamba_ssm", "causal_conv1d"))
    return "fast-kernels" if have else "torch-fallback"
