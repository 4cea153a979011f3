"""Whole-model architectures: `ModelSpec`, named presets with exact parameter counts, and a reader for a
local Hugging Face `config.json` (never fetched: there is no hub access).

Parameter count (units: parameters), summed exactly from the architecture:
  decoder  = vocab·hidden·(1 if tied else 2) + layers·per_layer + final norm
  encoder  = patch conv (channels·patch²·hidden + hidden) + cls token + learned positions (tokens·hidden)
             + layers·per_layer + final norm + classifier head (hidden·classes + classes)
  per_layer = hidden·(q_heads + 2·kv_heads)·head_dim + q_heads·head_dim·hidden   (q, k, v, o projections)
            + (3 if gated_ffn else 2)·hidden·ffn                                 (SwiGLU/GeGLU or plain MLP)
            + biases where the model has them + norms_per_layer·(hidden, or 2·hidden for LayerNorm)
Each preset cites the config it was read from and the published total it must reproduce
(tests/test_models.py checks every one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from estimator.call.config import MAX_DIM, MAX_SEQ_LEN, check_positive_int

KINDS = ("decoder", "encoder")
NORMS = ("rmsnorm", "layernorm")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A dense transformer. `vocab` is the output size of the last projection: the vocabulary of a
    decoder, the number of classes of an encoder's classifier head."""

    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    kind: str = "decoder"  # decoder (causal LM, KV cache) | encoder (ViT: bidirectional, no KV cache)
    gated_ffn: bool = True  # SwiGLU/GeGLU: gate, up and down matrices; False: fc1, act, fc2
    tied_embeddings: bool = False
    window_per_layer: tuple[int | None, ...] | None = None  # per layer: sliding window in tokens, None = global
    norm: str = "rmsnorm"  # rmsnorm (weight only) | layernorm (weight and bias)
    norms_per_layer: int = 2  # Gemma-2 has 4 (pre and post norms around attention and MLP)
    qkv_bias: bool = False  # Qwen2, ViT
    out_bias: bool = False  # bias on the attention output projection (ViT)
    mlp_bias: bool = False  # biases on the MLP matrices (ViT)
    image_size: int = 0  # encoders only: input resolution in pixels (square)
    patch_size: int = 0  # encoders only: patch side in pixels
    channels: int = 3
    max_positions: int | None = None  # the context the model was trained for (informational)
    attn_logit_softcap: float | None = None  # Gemma-2: tanh soft-capping of the scores (not in SDPA's kernels)
    source: str = ""

    def __post_init__(self) -> None:
        for field, limit in (("layers", 1 << 12), ("hidden", 1 << 18), ("q_heads", 1 << 12),
                             ("kv_heads", 1 << 12), ("head_dim", MAX_DIM), ("ffn", 1 << 20),
                             ("vocab", 1 << 24), ("norms_per_layer", 16), ("channels", 64)):
            object.__setattr__(self, field, check_positive_int(field, getattr(self, field), limit))
        if self.q_heads % self.kv_heads:
            raise ValueError(f"kv_heads: q_heads ({self.q_heads}) must be divisible by kv_heads ({self.kv_heads})")
        if self.kind not in KINDS:
            raise ValueError(f"kind: unknown value {self.kind!r}; expected one of {', '.join(KINDS)}")
        if self.norm not in NORMS:
            raise ValueError(f"norm: unknown value {self.norm!r}; expected one of {', '.join(NORMS)}")
        windows = self.window_per_layer
        if windows is None:
            windows = (None,) * self.layers
        windows = tuple(windows)
        if len(windows) != self.layers:
            raise ValueError(f"window_per_layer: has {len(windows)} entries for {self.layers} layers")
        windows = tuple(None if w is None else check_positive_int("window_per_layer", w, MAX_SEQ_LEN)
                        for w in windows)
        object.__setattr__(self, "window_per_layer", windows)
        if self.max_positions is not None:
            object.__setattr__(self, "max_positions", check_positive_int("max_positions", self.max_positions, 1 << 30))
        if self.attn_logit_softcap is not None:
            try:
                cap = float(self.attn_logit_softcap)
            except (TypeError, ValueError):
                raise ValueError(f"attn_logit_softcap: expected a number, got {self.attn_logit_softcap!r}") from None
            object.__setattr__(self, "attn_logit_softcap", cap if cap > 0 else None)
        if self.kind == "encoder":
            for field in ("image_size", "patch_size"):
                check_positive_int(field, getattr(self, field), 1 << 16)
            if self.image_size % self.patch_size:
                raise ValueError(f"patch_size: {self.patch_size} does not divide image_size {self.image_size}")

    @property
    def q_dim(self) -> int:
        return self.q_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def norm_params(self) -> int:
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    @property
    def attention_params_per_layer(self) -> int:
        """q, k, v, o weights (+ biases): hidden·(q_dim + 2·kv_dim) + q_dim·hidden."""
        weights = self.hidden * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden
        return weights + self.qkv_bias * (self.q_dim + 2 * self.kv_dim) + self.out_bias * self.hidden

    @property
    def ffn_params_per_layer(self) -> int:
        """(3 if gated else 2)·hidden·ffn (+ biases)."""
        mats = 3 if self.gated_ffn else 2
        bias = self.mlp_bias * (self.ffn * (mats - 1) + self.hidden)
        return mats * self.hidden * self.ffn + bias

    @property
    def params_per_layer(self) -> int:
        return self.attention_params_per_layer + self.ffn_params_per_layer + self.norms_per_layer * self.norm_params

    @property
    def native_tokens(self) -> int:
        """Encoders: patches at the native resolution plus the class token; decoders: 0."""
        return (self.image_size // self.patch_size) ** 2 + 1 if self.kind == "encoder" else 0

    @property
    def embedding_params(self) -> int:
        """Input side: token embedding (decoder) or patch conv + class token + learned positions (encoder)."""
        if self.kind == "encoder":
            conv = self.channels * self.patch_size**2 * self.hidden + self.hidden
            return conv + self.hidden + self.native_tokens * self.hidden
        return self.vocab * self.hidden

    @property
    def head_params(self) -> int:
        """Output side: LM head (0 when tied to the embedding) or classifier head with bias."""
        if self.kind == "encoder":
            return self.hidden * self.vocab + self.vocab
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Total parameters (exact)."""
        return (self.embedding_params + self.layers * self.params_per_layer + self.norm_params
                + self.head_params)

    @property
    def matmul_params_per_layer(self) -> int:
        """Weights that take part in a GEMM per token: q, k, v, o and the FFN matrices (no biases or norms)."""
        attention = self.hidden * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden
        return attention + (3 if self.gated_ffn else 2) * self.hidden * self.ffn

    def params_per_gpu(self, tp: int = 1) -> int:
        """Parameters one GPU holds under tensor parallelism tp (Megatron-LM layout, Shoeybi et al. 2019): q/k/v
        and FFN-up columns, o and FFN-down rows and the vocabulary split tp ways; kv heads copied when tp exceeds
        kv_heads; norms, row-parallel biases and encoder patch/position embeddings replicated. tp=1: params."""
        hq, hk, F = self.q_heads // tp, max(1, self.kv_heads // tp), -(-self.ffn // tp)
        attn = self.hidden * (hq + 2 * hk) * self.head_dim + hq * self.head_dim * self.hidden
        attn += self.qkv_bias * (hq + 2 * hk) * self.head_dim + self.out_bias * self.hidden
        mats = 3 if self.gated_ffn else 2
        ffn = mats * self.hidden * F + self.mlp_bias * (F * (mats - 1) + self.hidden)
        layer = attn + ffn + self.norms_per_layer * self.norm_params
        if self.kind == "encoder":
            ends = self.embedding_params + self.head_params
        else:
            ends = -(-self.vocab // tp) * self.hidden * (1 if self.tied_embeddings else 2)
        return ends + self.layers * layer + self.norm_params

    @property
    def windowed(self) -> bool:
        return any(w is not None for w in self.window_per_layer)


def _llama(name, layers, hidden, heads, kv_heads, ffn, vocab, source, **kw) -> ModelSpec:
    return ModelSpec(name=name, layers=layers, hidden=hidden, q_heads=heads, kv_heads=kv_heads,
                     head_dim=kw.pop("head_dim", hidden // heads), ffn=ffn, vocab=vocab, source=source, **kw)


_HF = "https://huggingface.co/{}/blob/main/config.json; total = safetensors parameter count on the model page"
_TV = ("torchvision.models.{} weights meta num_params (IMAGENET1K, 224 px); arithmetic: patch conv + cls + "
       "positions + layers + final LayerNorm + 1000-class head")

PRESETS: dict[str, ModelSpec] = {m.name: m for m in (
    _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, _HF.format("meta-llama/Llama-2-7b-hf") + " 6,738,415,616",
           max_positions=4096),
    _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000,
           _HF.format("meta-llama/Llama-2-13b-hf") + " 13,015,864,320", max_positions=4096),
    _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000,
           _HF.format("meta-llama/Llama-2-70b-hf") + " 68,976,648,192", max_positions=4096),
    _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256,
           _HF.format("meta-llama/Meta-Llama-3-8B") + " 8,030,261,248", max_positions=8192),
    _llama("llama-3-70b", 80, 8192, 64, 8, 28672, 128256,
           _HF.format("meta-llama/Meta-Llama-3-70B") + " 70,553,706,496", max_positions=8192),
    # v0.1: the config sets sliding_window 4096 on every layer (v0.2/v0.3 drop it; v0.3 has vocab 32768).
    _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000,
           _HF.format("mistralai/Mistral-7B-v0.1") + " 7,241,732,096", window_per_layer=(4096,) * 32,
           max_positions=32768),
    # q/k/v biases, untied embeddings (tie_word_embeddings false for the 7B).
    _llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064,
           _HF.format("Qwen/Qwen2.5-7B") + " 7,615,616,512", qkv_bias=True, max_positions=131072),
    # head_dim 256 (explicit, not hidden/heads = 224), tied embeddings, 4 norms per layer, GeGLU,
    # sliding window 4096 on even layers (modeling_gemma2: is_sliding = not layer_idx % 2).
    _llama("gemma-2-9b", 42, 3584, 16, 8, 14336, 256000,
           _HF.format("google/gemma-2-9b") + " 9,241,705,984", head_dim=256, tied_embeddings=True,
           norms_per_layer=4, window_per_layer=tuple(4096 if i % 2 == 0 else None for i in range(42)),
           max_positions=8192, attn_logit_softcap=50.0),
    ModelSpec(name="vit-l-16", kind="encoder", layers=24, hidden=1024, q_heads=16, kv_heads=16, head_dim=64,
              ffn=4096, vocab=1000, gated_ffn=False, norm="layernorm", qkv_bias=True, out_bias=True,
              mlp_bias=True, image_size=224, patch_size=16, source=_TV.format("vit_l_16") + ": 304,326,632"),
    ModelSpec(name="vit-h-14", kind="encoder", layers=32, hidden=1280, q_heads=16, kv_heads=16, head_dim=80,
              ffn=5120, vocab=1000, gated_ffn=False, norm="layernorm", qkv_bias=True, out_bias=True,
              mlp_bias=True, image_size=224, patch_size=14,
              source=_TV.format("vit_h_14") + " (SWAG_LINEAR_V1): 632,045,800"),
)}

PRESET_ALIASES = {"llama2-7b": "llama-2-7b", "llama2-13b": "llama-2-13b", "llama2-70b": "llama-2-70b",
                  "llama3-8b": "llama-3-8b", "llama3-70b": "llama-3-70b", "llama-3.1-8b": "llama-3-8b",
                  "llama-3.1-70b": "llama-3-70b", "qwen2.5-7b-instruct": "qwen2.5-7b", "gemma2-9b": "gemma-2-9b",
                  "vit-large-16": "vit-l-16", "vit-huge-14": "vit-h-14", "mistral-7b-v0.1": "mistral-7b"}


def get_preset(name: str) -> ModelSpec:
    """Look a preset up by name (case-insensitive); ValueError listing the known names otherwise."""
    key = str(name).strip().lower().replace("_", "-")
    key = PRESET_ALIASES.get(key, key)
    if key not in PRESETS:
        raise ValueError(f"preset: unknown model {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[key]


# --- Hugging Face config.json ------------------------------------------------------------------------------

# model_type → defaults that the config file may leave out (each from that model's configuration_*.py).
_HF_DEFAULTS: dict[str, dict] = {
    "llama": {"tie_word_embeddings": False},
    "mistral": {"tie_word_embeddings": False},
    "qwen2": {"tie_word_embeddings": False, "qkv_bias": True},
    "gemma": {"tie_word_embeddings": True},
    "gemma2": {"tie_word_embeddings": True, "norms_per_layer": 4, "alternate_window": True},
    "gemma3_text": {"tie_word_embeddings": True, "norms_per_layer": 4},
}


def _hf_int(cfg: dict, key: str, default=None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise ValueError(f"config: missing {key!r}")
    return check_positive_int(f"config {key}", value, 1 << 24)


def from_hf_config(path_or_dict, name: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a local Hugging Face config.json (a path) or its parsed dict.

    Covers dense Llama-style decoders (llama, mistral, qwen2, gemma, gemma2, gemma3 text, and configs with the
    same keys) and ViT encoders. Mixture-of-experts configs are refused: their per-token FFN is not dense.
    Raises ValueError naming the problem for a missing or malformed file."""
    if isinstance(path_or_dict, dict):
        cfg, label = path_or_dict, name or "config"
    elif not isinstance(path_or_dict, (str, Path)):
        raise ValueError(f"config: expected a path or a JSON object, got {type(path_or_dict).__name__}")
    else:
        path = Path(path_or_dict)
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"config: file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"config: cannot read {path}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"config: {path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
        label = name or path.parent.name or path.stem
    if not isinstance(cfg, dict):
        raise ValueError("config: expected a JSON object at the top level")
    if isinstance(cfg.get("text_config"), dict) and "num_hidden_layers" not in cfg:
        cfg = {**cfg["text_config"], "tie_word_embeddings": cfg.get("tie_word_embeddings",
                                                                   cfg["text_config"].get("tie_word_embeddings"))}
    model_type = str(cfg.get("model_type", "")).lower()
    for moe_key in ("num_local_experts", "num_experts", "n_routed_experts"):
        if cfg.get(moe_key):
            raise ValueError(f"config: mixture-of-experts model ({moe_key}={cfg[moe_key]}) is not modelled")
    if model_type == "vit":
        return _vit_from_hf(cfg, label)
    defaults = _HF_DEFAULTS.get(model_type, {"tie_word_embeddings": False})
    layers = _hf_int(cfg, "num_hidden_layers")
    hidden = _hf_int(cfg, "hidden_size")
    heads = _hf_int(cfg, "num_attention_heads")
    kv_heads = _hf_int(cfg, "num_key_value_heads", heads)
    head_dim = cfg.get("head_dim") or (hidden // heads if hidden % heads == 0 else None)
    if head_dim is None:
        raise ValueError(f"config: hidden_size {hidden} is not divisible by num_attention_heads {heads} "
                         "and no head_dim is given")
    tied = cfg.get("tie_word_embeddings")
    tied = defaults["tie_word_embeddings"] if tied is None else bool(tied)
    act = str(cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))).lower()
    gated = model_type in _HF_DEFAULTS or act in ("silu", "swish", "gelu_pytorch_tanh")
    return ModelSpec(
        name=label, layers=layers, hidden=hidden, q_heads=heads, kv_heads=kv_heads, head_dim=_hf_int(
            {"head_dim": head_dim}, "head_dim"),
        ffn=_hf_int(cfg, "intermediate_size"), vocab=_hf_int(cfg, "vocab_size"), gated_ffn=gated,
        tied_embeddings=tied, window_per_layer=_hf_windows(cfg, layers, defaults),
        norms_per_layer=defaults.get("norms_per_layer", 2),
        qkv_bias=bool(cfg.get("attention_bias", defaults.get("qkv_bias", False))),
        out_bias=bool(cfg.get("attention_bias", False)), mlp_bias=bool(cfg.get("mlp_bias", False)),
        max_positions=cfg.get("max_position_embeddings"), attn_logit_softcap=cfg.get("attn_logit_softcapping"),
        source=f"Hugging Face config.json ({model_type or '?'})")


def _hf_windows(cfg: dict, layers: int, defaults: dict) -> tuple[int | None, ...]:
    """Per-layer sliding windows: `layer_types` if present, else Gemma-2 alternation, else one window for all."""
    window = cfg.get("sliding_window")
    if cfg.get("use_sliding_window") is False or not window:
        return (None,) * layers
    window = check_positive_int("config sliding_window", window, MAX_SEQ_LEN)
    types = cfg.get("layer_types")
    if isinstance(types, list):
        if len(types) != layers:
            raise ValueError(f"config: layer_types has {len(types)} entries for {layers} layers")
        return tuple(window if "sliding" in str(t) else None for t in types)
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
    bias = bool(cfg.get("qkv_bias", True))
    return ModelSpec(name=label, kind="encoder", layers=_hf_int(cfg, "num_hidden_layers"), hidden=hidden,
                     q_heads=heads, kv_heads=heads, head_dim=hidden // heads, ffn=_hf_int(cfg, "intermediate_size"),
                     vocab=check_positive_int("config num_labels", classes, 1 << 24), gated_ffn=False,
                     norm="layernorm", qkv_bias=bias, out_bias=True, mlp_bias=True,
                     image_size=_hf_int(cfg, "image_size"), patch_size=_hf_int(cfg, "patch_size"),
                     channels=_hf_int(cfg, "num_channels", 3), source="Hugging Face config.json (vit)")
