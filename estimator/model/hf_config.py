"""Reading a local Hugging Face `config.json` into a `ModelSpec` (never fetched: there is no hub access).
`from_hf_config` covers the decoder families of transformers 5.17 listed in its docstring and ViT encoders;
tests/test_specs_hf.py checks the families against the parameters transformers allocates."""

from __future__ import annotations

import json
import math
from pathlib import Path

from estimator.call.config import MAX_SEQ_LEN, check_positive_int
from estimator.model.specs import ModelSpec
from estimator.textfile import MAX_CONFIG_BYTES, MAX_JSON_DEPTH, json_depth, read_bytes_limited

# model_type → defaults that the config file may leave out (each from that model's configuration_*.py in
# transformers 5.17) and the family's fixed traits. `cfg` entries fill keys absent from the file.
_HF_DEFAULTS: dict[str, dict] = {
    "llama": {"tie_word_embeddings": False},
    "mistral": {"tie_word_embeddings": False},
    "qwen2": {"tie_word_embeddings": False, "qkv_bias": True},
    "qwen3": {"tie_word_embeddings": False, "qk_norm": True},
    "phi3": {"tie_word_embeddings": False, "fused": True},
    "gemma": {"tie_word_embeddings": True},
    "gemma2": {"tie_word_embeddings": True, "norms_per_layer": 4, "alternate_window": True,
               "cfg": {"head_dim": 256, "query_pre_attn_scalar": 256, "sliding_window": 4096,
                       "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0}},
    # Gemma3TextConfig's defaults (transformers 5.17 models/gemma3/configuration_gemma3.py): a multimodal file's
    # text_config lists only what differs from them (google/gemma-3-4b-it leaves out the head counts)
    "gemma3_text": {"tie_word_embeddings": True, "norms_per_layer": 4, "qk_norm": True,
                    "cfg": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
                            "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                            "head_dim": 256, "query_pre_attn_scalar": 256,
                            "sliding_window": 4096, "sliding_window_pattern": 6, "max_position_embeddings": 131072}},
    "mixtral": {"tie_word_embeddings": False, "cfg": {"num_experts_per_tok": 2, "num_local_experts": 8}},
    "qwen2_moe": {"tie_word_embeddings": False, "qkv_bias": True, "shared_expert_gate": True,
                  "cfg": {"num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
                          "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1}},
    "qwen3_moe": {"tie_word_embeddings": False, "qk_norm": True,
                  "cfg": {"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                          "decoder_sparse_step": 1}},
    "deepseek_v2": {"tie_word_embeddings": False,
                    "cfg": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                            "v_head_dim": 128, "n_routed_experts": 64, "n_shared_experts": 2,
                            "moe_intermediate_size": 1407, "first_k_dense_replace": 0, "moe_layer_freq": 1}},
    "deepseek_v3": {"tie_word_embeddings": False, "router_score_bias": True,
                    "cfg": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                            "v_head_dim": 128, "n_routed_experts": 256, "n_shared_experts": 1,
                            "num_experts_per_tok": 8, "moe_intermediate_size": 2048, "first_k_dense_replace": 3,
                            "moe_layer_freq": 1}},
    "gpt_oss": {"tie_word_embeddings": False, "attention_sinks": True, "router_bias": True, "expert_bias": True,
                "cfg": {"attention_bias": True, "head_dim": 64, "sliding_window": 128, "num_local_experts": 128,
                        "num_experts_per_tok": 4}},
}
_HF_DEFAULTS["gemma3"] = _HF_DEFAULTS["gemma3_text"]  # a text-only file saved under the multimodal name
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
MAX_INT_DIGITS = 30  # far above any config value (int64 has 19 digits), far below Python's 4,300-digit limit
TEXT_ONLY_NOTE = "text model only: the vision tower is not planned"


class _Refused:
    """A JSON number the reader refuses (too many digits, NaN, Infinity), kept until its key is known."""

    def __init__(self, why: str):
        self.why = why


def _parse_int(text: str):
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        return _Refused(f"an integer of {digits:,} digits; expected at most {MAX_INT_DIGITS}")
    return int(text)


def _parse_float(text: str):
    value = float(text)
    return value if math.isfinite(value) else _Refused(f"{text[:20]} is out of range; expected a finite number")


def _parse_constant(text: str):
    return _Refused(f"{text} is not a number; expected a finite number")


def _refuse(key: str, value) -> None:
    if isinstance(value, _Refused):
        raise ValueError(f"config {key}: {value.why}")
    if isinstance(value, list):
        for item in value:
            _refuse(key, item)


def _object(pairs: list) -> dict:
    for key, value in pairs:
        _refuse(key, value)
    return dict(pairs)


def parse_hf_config_bytes(data: bytes, source: str = "config") -> dict:
    """The one reader of a config.json's content, for the command line (the file's bytes) and the web page (the
    upload's bytes; never a path): UTF-8 with or without a byte-order mark, at most MAX_CONFIG_BYTES, nested at
    most MAX_JSON_DEPTH levels, an object at the top. An integer over MAX_INT_DIGITS digits, NaN or Infinity is
    refused naming its key. ValueError with one line otherwise."""
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"{source}: larger than {MAX_CONFIG_BYTES:,} bytes; not a config.json")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    if json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"{source}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        cfg = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant,
                         object_pairs_hook=_object)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise ValueError(f"{source}: JSON nested too deeply") from None
    if not isinstance(cfg, dict):
        kind = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}.get(type(cfg), "a number")
        raise ValueError(f"{source}: expected a JSON object at the top level, got {kind}")
    return cfg


def from_hf_config_bytes(data: bytes, name: str = "config") -> ModelSpec:
    """A ModelSpec from a config.json's content (an upload): parsed by parse_hf_config_bytes, never read as a path."""
    return from_hf_config(parse_hf_config_bytes(data), name=name)


def _hf_int(cfg: dict, key: str, default=None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise ValueError(f"config: missing {key!r}")
    return check_positive_int(f"config {key}", value, 1 << 24)


def _hf_bool(cfg: dict, key: str, default):
    """A JSON boolean; the strings "true"/"false" (any case) read as such; null or absent: default. Anything
    else (1, "yes", a list) is refused by name rather than read by Python truthiness ("false" is truthy)."""
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"config {key}: expected true or false, got {value!r}")


def _hf_count(cfg: dict, key: str) -> int:
    """A whole number >= 0 (null or absent: 0)."""
    value = cfg.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"config {key}: expected a whole number >= 0, got {value!r}")
    return value


def from_hf_config(path_or_dict, name: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a local Hugging Face config.json (a path: the command line's) or its parsed dict
    (content from elsewhere, an upload, goes through from_hf_config_bytes).

    Covers the decoders llama, mistral, qwen2, qwen3, phi3, gemma, gemma2, gemma3 (text; `text_config` of the
    multimodal file), mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss, configs without a
    model_type that have Llama's keys, and ViT encoders. Another model_type is refused by name.
    Raises ValueError naming the problem for a missing or malformed file."""
    if isinstance(path_or_dict, dict):
        cfg, label = path_or_dict, name or "config"
    elif not isinstance(path_or_dict, (str, Path)):
        raise ValueError(f"config: expected a path or a JSON object, got {type(path_or_dict).__name__}")
    else:
        path = Path(path_or_dict)
        cfg = parse_hf_config_bytes(read_bytes_limited(path, MAX_CONFIG_BYTES, "config"), f"config {path}")
        # a Hub checkout's config.json is named after its folder (meta-llama/Llama-3.1-8B/config.json); any
        # other file after itself (/some/dir/x.json -> x, mixtral.config.json -> mixtral)
        stem = path.name.removesuffix(".json").removesuffix(".config") or path.stem
        label = name or (path.parent.name if stem == "config" and path.parent.name else stem)
    if not isinstance(cfg, dict):
        raise ValueError("config: expected a JSON object at the top level")
    multimodal = cfg.get("model_type") if isinstance(cfg.get("vision_config"), dict) else None
    if isinstance(cfg.get("text_config"), dict) and "num_hidden_layers" not in cfg:
        text = cfg["text_config"]
        cfg = {**text, "model_type": text.get("model_type") or cfg.get("model_type"),
               "tie_word_embeddings": cfg.get("tie_word_embeddings", text.get("tie_word_embeddings"))}
    model_type = str(cfg.get("model_type") or "").lower()
    if model_type == "vit":
        return _vit_from_hf(cfg, label)
    if model_type == "swin":  # stage by stage: estimator.model.vision.swin_from_hf (plan --config dispatches there)
        raise ValueError("config: model_type 'swin' is planned stage by stage (python -m estimator plan --config "
                         "FILE), not as one transformer")
    if model_type in ("mamba2", "falcon_h1", "bamba"):  # estimator/model/hybrid.py: its own spec and plan
        raise ValueError(f"config: model_type {model_type!r} is a state-space/hybrid model: python -m estimator plan "
                         "--config FILE prices it (docs/hybrids.md); it is not one softmax transformer")
    if model_type and model_type not in _HF_DEFAULTS:
        raise ValueError(f"config: model_type {model_type!r} is not modelled; known: vit, "
                         f"{', '.join(sorted(_HF_DEFAULTS))}")
    defaults = _HF_DEFAULTS.get(model_type, {"tie_word_embeddings": False})
    cfg = {**defaults.get("cfg", {}), **cfg}
    layers = _hf_int(cfg, "num_hidden_layers")
    hidden = _hf_int(cfg, "hidden_size")
    heads = _hf_int(cfg, "num_attention_heads")
    kv_heads = _hf_int(cfg, "num_key_value_heads", heads)
    tied = _hf_bool(cfg, "tie_word_embeddings", defaults["tie_word_embeddings"])
    act = str(cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))).lower()
    gated = model_type in _HF_DEFAULTS or act in ("silu", "swish", "gelu_pytorch_tanh")
    bias = _hf_bool(cfg, "attention_bias", None)
    kw: dict = {}
    if model_type in ("deepseek_v2", "deepseek_v3"):
        kw.update(_mla_from_hf(cfg, heads))
        head_dim, kv_heads = kw.pop("head_dim"), heads
    else:
        head_dim = cfg.get("head_dim") or (hidden // heads if hidden % heads == 0 else None)
        if head_dim is None:
            raise ValueError(f"config: hidden_size {hidden} is not divisible by num_attention_heads {heads} "
                             "and no head_dim is given")
        head_dim = _hf_int({"head_dim": head_dim}, "head_dim")
    kw.update(_moe_from_hf(cfg, model_type, layers, defaults))
    return ModelSpec(
        name=label, layers=layers, hidden=hidden, q_heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        ffn=_hf_int(cfg, "intermediate_size"), vocab=_hf_int(cfg, "vocab_size"), gated_ffn=gated,
        tied_embeddings=tied, window_per_layer=_hf_windows(cfg, layers, defaults, model_type),
        norms_per_layer=defaults.get("norms_per_layer", 2),
        qkv_bias=bias if bias is not None else _hf_bool(cfg, "qkv_bias", defaults.get("qkv_bias", False)),
        out_bias=bool(bias), mlp_bias=_hf_bool(cfg, "mlp_bias", False),
        max_positions=cfg.get("max_position_embeddings"), attn_logit_softcap=cfg.get("attn_logit_softcapping"),
        fused_qkv=bool(defaults.get("fused")), fused_gate_up=bool(defaults.get("fused")),
        qk_norm=bool(defaults.get("qk_norm")), attention_sinks=bool(defaults.get("attention_sinks")),
        query_pre_attn_scalar=cfg.get("query_pre_attn_scalar") if model_type.startswith("gemma") else None,
        final_logit_softcap=cfg.get("final_logit_softcapping"),
        source=f"Hugging Face config.json ({model_type or '?'})" + (
            f"; {TEXT_ONLY_NOTE} (the language model of a {multimodal} vision-language file only; "
            "python -m estimator plan --config plans its tower, projector and language model)" if multimodal else ""),
        **kw)


def _mla_from_hf(cfg: dict, heads: int) -> dict:
    """DeepSeek latent attention: head_dim = qk_nope + qk_rope (the q/k width), v_head_dim apart."""
    nope, rope = _hf_int(cfg, "qk_nope_head_dim"), _hf_int(cfg, "qk_rope_head_dim")
    return {"head_dim": nope + rope, "v_head_dim": _hf_int(cfg, "v_head_dim"),
            "kv_lora_rank": _hf_int(cfg, "kv_lora_rank"), "q_lora_rank": _hf_count(cfg, "q_lora_rank"),
            "qk_rope_head_dim": rope}


def _moe_from_hf(cfg: dict, model_type: str, layers: int, defaults: dict) -> dict:
    """Experts, top-k, widths and which layers stay dense, as each family's DecoderLayer decides it."""
    experts = next((_hf_count(cfg, k) for k in _MOE_KEYS if cfg.get(k)), 0)
    if not experts:
        return {}
    topk = _hf_int(cfg, "num_experts_per_tok", cfg.get("experts_per_token"))
    kw = {"experts": experts, "experts_per_token": topk,
          "moe_ffn": _hf_int(cfg, "moe_intermediate_size", cfg.get("intermediate_size")),
          "router_bias": bool(defaults.get("router_bias")), "expert_bias": bool(defaults.get("expert_bias")),
          "router_score_bias": bool(defaults.get("router_score_bias"))}
    if model_type in ("deepseek_v2", "deepseek_v3"):
        # layer_idx >= first_k_dense_replace (and layer_idx % moe_layer_freq == 0, DeepSeek's own code) is MoE
        first, freq = _hf_count(cfg, "first_k_dense_replace"), _hf_int(cfg, "moe_layer_freq", 1)
        kw["dense_layers"] = tuple(i for i in range(layers) if i < first or i % freq)
        kw["shared_experts_ffn"] = _hf_count(cfg, "n_shared_experts") * kw["moe_ffn"]
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        # MoE unless layer_idx in mlp_only_layers or (layer_idx + 1) % decoder_sparse_step != 0
        only = cfg.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
            raise ValueError(f"config mlp_only_layers: expected a list of layer indices, got {only!r}")
        step = _hf_int(cfg, "decoder_sparse_step", 1)
        kw["dense_layers"] = tuple(i for i in range(layers) if i in only or (i + 1) % step)
        if model_type == "qwen2_moe":
            kw["shared_experts_ffn"] = _hf_count(cfg, "shared_expert_intermediate_size")
            kw["shared_expert_gate"] = bool(kw["shared_experts_ffn"])
    return kw


def _hf_windows(cfg: dict, layers: int, defaults: dict, model_type: str = "") -> tuple[int | None, ...]:
    """Per-layer sliding windows: `layer_types` if present, else Gemma-3's sliding_window_pattern (every n-th layer
    global), else Gemma-2 alternation, else Qwen2's max_window_layers, else one window for all."""
    window = cfg.get("sliding_window")
    if _hf_bool(cfg, "use_sliding_window", None) is False or not window:
        return (None,) * layers
    window = check_positive_int("config sliding_window", window, MAX_SEQ_LEN)
    types = cfg.get("layer_types")
    if isinstance(types, list):
        if len(types) != layers:
            raise ValueError(f"config: layer_types has {len(types)} entries for {layers} layers")
        return tuple(window if "sliding" in str(t) else None for t in types)
    if model_type in ("gemma3", "gemma3_text"):  # Gemma3TextConfig: sliding unless (i + 1) % pattern == 0
        pattern = _hf_int(cfg, "sliding_window_pattern", 6)
        return tuple(window if (i + 1) % pattern else None for i in range(layers))
    if defaults.get("alternate_window"):
        return tuple(window if i % 2 == 0 else None for i in range(layers))
    if "max_window_layers" in cfg:  # Qwen2: layers at index >= max_window_layers use the window
        first = cfg["max_window_layers"]
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise ValueError(f"config max_window_layers: expected a whole number >= 0, got {first!r}")
        return tuple(window if i >= first else None for i in range(layers))
    return (window,) * layers


def _vit_from_hf(cfg: dict, label: str) -> ModelSpec:
    hidden = _hf_int(cfg, "hidden_size")
    heads = _hf_int(cfg, "num_attention_heads")
    if hidden % heads:
        raise ValueError(f"config: hidden_size {hidden} is not divisible by num_attention_heads {heads}")
    classes = len(cfg["id2label"]) if isinstance(cfg.get("id2label"), dict) else cfg.get("num_labels", 1000)
    bias = _hf_bool(cfg, "qkv_bias", True)
    return ModelSpec(name=label, kind="encoder", layers=_hf_int(cfg, "num_hidden_layers"), hidden=hidden,
                     q_heads=heads, kv_heads=heads, head_dim=hidden // heads, ffn=_hf_int(cfg, "intermediate_size"),
                     vocab=check_positive_int("config num_labels", classes, 1 << 24), gated_ffn=False,
                     norm="layernorm", qkv_bias=bias, out_bias=True, mlp_bias=True,
                     image_size=_hf_int(cfg, "image_size"), patch_size=_hf_int(cfg, "patch_size"),
                     channels=_hf_int(cfg, "num_channels", 3), source="Hugging Face config.json (vit)")
