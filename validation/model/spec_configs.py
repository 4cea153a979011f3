"""The Hugging Face config dict to build for a model the planner names: a preset or an architecture typed in the
app's form (a `ModelSpec`), so that `validation model --preset NAME` and the Validate page can build what the plan
is for. Stdlib only (the estimator's ModelSpec is read by attribute, never imported here).

A preset that is one of validation/model/hf_configs.py's families gets that family's published config (the same
dict `validation.hf_models` builds). Any other spec of the plain Llama shape (RMSNorm, gated MLP, no biases, no
windows, experts or latent attention) becomes a `llama` config with its sizes; with q/k/v biases only, a `qwen2`
config (Qwen2's attention always has them: transformers 5.17 models/qwen2/modeling_qwen2.py). Anything else is
refused by name: pass its own config.json instead.
"""

from __future__ import annotations

import copy

from validation.model.hf_configs import FAMILIES

# preset name (estimator/model/presets.py) -> family of validation/model/hf_configs.py with the same shapes
PRESET_FAMILY = {"llama-3.1-8b": "llama-3.1-8b", "qwen2.5-7b": "qwen2.5-7b", "mistral-7b": "mistral-7b-v0.1",
                 "phi-3-mini": "phi-3-mini-4k", "gemma-2-9b": "gemma-2-9b", "gemma-3-12b": "gemma-3-12b",
                 "mixtral-8x7b": "mixtral-8x7b", "qwen3-30b-a3b": "qwen3-30b-a3b",
                 "deepseek-v2-lite": "deepseek-v2-lite", "gpt-oss-20b": "gpt-oss-20b"}


def _plain(spec) -> list[str]:
    """What keeps `spec` from being a plain Llama-shaped decoder (empty when it is one)."""
    checks = (("an encoder", spec.kind != "decoder"), ("LayerNorm", spec.norm != "rmsnorm"),
              ("a 2-matrix MLP", not spec.gated_ffn), ("sliding windows", spec.windowed),
              ("output or MLP biases", spec.out_bias or spec.mlp_bias), ("experts", spec.experts > 0),
              ("latent attention", spec.kv_lora_rank > 0), ("fused projections", spec.fused_qkv or spec.fused_gate_up),
              ("q/k norms", spec.qk_norm), ("attention sinks", spec.attention_sinks),
              (f"{spec.norms_per_layer} norms per layer", spec.norms_per_layer != 2),
              ("soft-capping", spec.attn_logit_softcap is not None or spec.final_logit_softcap is not None),
              ("a value width other than head_dim", spec.v_head_dim not in (None, spec.head_dim)))
    return [name for name, present in checks if present]


def config_for_spec(spec, preset: str | None = None) -> dict:
    """The config dict to build for `spec` (a preset's name picks its family's published config when it has
    one); ValueError naming what cannot be built otherwise."""
    if preset and preset in PRESET_FAMILY:
        return copy.deepcopy(FAMILIES[PRESET_FAMILY[preset]])
    odd = _plain(spec)
    if odd:
        raise ValueError(f"config: {spec.name} has {', '.join(odd)}, which only its own config.json describes; "
                         "pass --config PATH (in the app: plan it from its config.json)")
    cfg = {"model_type": "qwen2" if spec.qkv_bias else "llama", "hidden_size": spec.hidden,
           "intermediate_size": spec.ffn, "num_hidden_layers": spec.layers, "num_attention_heads": spec.q_heads,
           "num_key_value_heads": spec.kv_heads, "head_dim": spec.head_dim, "vocab_size": spec.vocab,
           "hidden_act": "silu", "rms_norm_eps": 1e-05, "tie_word_embeddings": bool(spec.tied_embeddings),
           "max_position_embeddings": spec.max_positions or 131072, "rope_theta": 500000.0,
           "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    if spec.qkv_bias:
        cfg.update(use_sliding_window=False, sliding_window=None)
    else:
        cfg.update(attention_bias=False, mlp_bias=False)
    return cfg
