"""The spec's parameter count against the parameters transformers really allocates, for every family that
`from_hf_config` reads beyond Llama: the model is built from the saved config.json (tests/data/*.config.json,
the real hub files) on the meta device (no memory; exact numel), with the real dims and layer count.

Tied embeddings are one Parameter (`model.parameters()` yields it once); buffers (DeepSeek-V3's
e_score_correction_bias) are not parameters. gpt-oss: the hub config's mxfp4 `quantization_config` is dropped
and the experts checked to be plain bf16/fp32 tensors, so the count is the unquantized layout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from estimator.model.hf_config import from_hf_config  # noqa: E402
from estimator.model.presets import get_preset  # noqa: E402

DATA = Path(__file__).parent / "data"

# fixture → preset it must reproduce (None: family checked without a preset)
FIXTURES = {
    "mixtral-8x7b": "mixtral-8x7b",
    "qwen3-30b-a3b": "qwen3-30b-a3b",
    "qwen1.5-moe-a2.7b": "qwen1.5-moe-a2.7b",
    "deepseek-v2-lite": "deepseek-v2-lite",
    "deepseek-v3": "deepseek-v3",
    "gemma-3-12b": "gemma-3-12b",
    "gemma-3-27b": "gemma-3-27b",
    "gpt-oss-20b": "gpt-oss-20b",
    "gpt-oss-120b": "gpt-oss-120b",
    "phi-3-mini-4k": "phi-3-mini",
    "gemma-2-9b": "gemma-2-9b",
    "qwen2.5-72b": "qwen2.5-72b",
    "llama-3.1-405b": "llama-3.1-405b",
}


def _hf_config(raw: dict):
    cfg = {k: v for k, v in raw.items() if k not in ("quantization_config", "auto_map", "architectures")}
    if isinstance(cfg.get("text_config"), dict):  # Gemma-3: the language model (Gemma3ForCausalLM)
        cfg = dict(cfg["text_config"])
    model_type = cfg.pop("model_type")
    return transformers.AutoConfig.for_model(model_type, **cfg)


def _meta_model(config, cls=None):
    with torch.device("meta"):
        if cls is not None:
            return cls(config)
        return transformers.AutoModelForCausalLM.from_config(config)


def _numel(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_spec_counts_the_parameters_transformers_allocates(fixture):
    raw = json.loads((DATA / f"{fixture}.config.json").read_text())
    spec = from_hf_config(raw, name=fixture)
    config = _hf_config(raw)
    assert getattr(config, "quantization_config", None) is None
    model = _meta_model(config)
    assert config.num_hidden_layers == spec.layers
    assert _numel(model) == spec.params
    buffers = sum(b.numel() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    assert spec.state_params - spec.params == buffers
    if FIXTURES[fixture]:
        preset = get_preset(FIXTURES[fixture])
        assert spec.params == preset.params and spec.window_per_layer == preset.window_per_layer
        assert spec.moe_layer_flags == preset.moe_layer_flags


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_windows_follow_the_attention_layers(fixture):
    raw = json.loads((DATA / f"{fixture}.config.json").read_text())
    config = _hf_config(raw)
    spec, model = from_hf_config(raw), _meta_model(config)
    for i, layer in enumerate(model.model.layers):
        if hasattr(layer.self_attn, "sliding_window"):  # per layer (layer_types)
            window = layer.self_attn.sliding_window
        else:  # Phi-3 / Mixtral: the model-wide config.sliding_window mask (create_sliding_window_causal_mask)
            window = getattr(config, "sliding_window", None)
        assert spec.window_per_layer[i] == (window or None), i  # qwen2_moe writes 0 for "none"


def test_gpt_oss_experts_are_unquantized_with_their_layout():
    raw = json.loads((DATA / "gpt-oss-20b.config.json").read_text())
    model = _meta_model(_hf_config(raw))
    mlp = model.model.layers[0].mlp
    # experts stored [E, hidden, 2·F] (input-major, unlike Mixtral's [E, 2·F, hidden]), with biases
    assert tuple(mlp.experts.gate_up_proj.shape) == (32, 2880, 2 * 2880)
    assert tuple(mlp.experts.gate_up_proj_bias.shape) == (32, 2 * 2880)
    assert tuple(mlp.experts.down_proj.shape) == (32, 2880, 2880)
    assert mlp.experts.gate_up_proj.dtype.is_floating_point and mlp.experts.gate_up_proj.element_size() >= 2
    assert tuple(mlp.router.bias.shape) == (32,)
    assert tuple(model.model.layers[0].self_attn.sinks.shape) == (64,)


def test_mla_projection_widths():
    raw = json.loads((DATA / "deepseek-v2-lite.config.json").read_text())
    spec, model = from_hf_config(raw), _meta_model(_hf_config(raw))
    attn = model.model.layers[0].self_attn
    # kv_a_proj_with_mqa emits the 512 latent and the 64-wide shared rotary key together
    assert attn.kv_a_proj_with_mqa.out_features == spec.kv_lora_rank + spec.qk_rope_head_dim == 576
    assert attn.kv_b_proj.out_features == spec.q_heads * (spec.qk_nope_head_dim + spec.v_head) == 16 * 256
    assert attn.q_proj.out_features == spec.q_heads * spec.head_dim == 16 * 192  # q_lora_rank null: no q_a/q_b
    assert spec.attention_head_widths == (192, 192, 128)
    assert type(model.model.layers[0].mlp).__name__.endswith("MLP")  # first_k_dense_replace = 1
    assert type(model.model.layers[1].mlp).__name__.endswith("Moe")


def test_gemma3_hub_total_is_language_model_plus_vision_tower():
    raw = json.loads((DATA / "gemma-3-12b.config.json").read_text())
    config = transformers.AutoConfig.for_model("gemma3", **{k: v for k, v in raw.items()
                                                            if k not in ("model_type", "architectures")})
    full = _meta_model(config, transformers.Gemma3ForConditionalGeneration)
    language = sum(p.numel() for n, p in full.named_parameters() if ".language_model." in f".{n}"
                   or n.startswith("lm_head"))
    assert _numel(full) == 12_187_325_040  # google/gemma-3-12b-it safetensors total
    assert language == get_preset("gemma-3-12b").params
