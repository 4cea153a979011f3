"""State-space and hybrid decoders: `HybridSpec` (per layer a Mamba2 mixer, softmax attention or both in
parallel, with or without a dense MLP) and the reader of their transformers 5.17 `config.json`s.

Families (model_type as transformers names them; defaults are those of each configuration_*.py of 5.17):
  mamba2     Mamba2ForCausalLM: every layer one RMSNorm + Mamba2Mixer, no MLP; `residual_in_fp32` (default True)
             keeps the residual stream in fp32 (modeling_mamba2.py Mamba2Block.forward)
  falcon_h1  FalconH1ForCausalLM: every layer runs a Mamba2 mixer AND attention on the same normed input, sums
             them, then a gated MLP (modeling_falcon_h1.py FalconH1DecoderLayer); muP multipliers are new tensors
  bamba      BambaForCausalLM: Mamba2 layers, full attention at `attn_layer_indices`, a gated MLP in every layer
             (modeling_bamba.py BambaDecoderLayer)
Other linear-attention families (qwen3_next's gated DeltaNet, recurrent_gemma's RG-LRU, jamba's Mamba-1) are
refused by name: their torch fallbacks are not modelled.

Parameters are counted exactly (tests/test_hybrid.py checks them against the models transformers builds on the
meta device). docs/hybrids.md explains what is priced.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.call.config import check_positive_int
from estimator.model.ssm_mamba2 import MambaMixerShape

HYBRID_TYPES = ("mamba2", "falcon_h1", "bamba")
NOT_MODELLED = {"qwen3_next": "gated DeltaNet (torch_chunk_gated_delta_rule)", "jamba": "Mamba-1 slow_forward",
                "recurrent_gemma": "RG-LRU scan", "mamba": "Mamba-1 slow_forward",
                "zamba2": "shared-attention Mamba2 hybrid", "nemotron_h": "Mamba2/MLP/attention stack",
                "granitemoehybrid": "MoE Mamba2 hybrid", "lfm2": "short-conv hybrid"}
LAYER_KINDS = ("mamba", "attention", "parallel")  # parallel: Falcon-H1's mamba + attention on one input


@dataclass(frozen=True, kw_only=True)
class HybridSpec:
    """A decoder whose layers are Mamba2 mixers, attention, or both (widths in elements)."""

    name: str
    model_type: str
    layers: int
    hidden: int
    vocab: int
    mixer: MambaMixerShape
    layer_kinds: tuple[str, ...]
    q_heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    attention_bias: bool = False
    ffn: int = 0  # gated MLP width; 0 = no MLP (Mamba2)
    mlp_bias: bool = False
    norms_per_layer: int = 2
    residual_fp32: bool = False
    tied_embeddings: bool = False
    multipliers: bool = False  # Falcon-H1's muP multipliers (embedding, key, MLP gate/down, attention in/out)
    max_positions: int | None = None
    source: str = ""

    def __post_init__(self) -> None:
        if self.model_type not in HYBRID_TYPES:
            raise ValueError(f"model_type: {self.model_type!r} is not a modelled hybrid; expected one of "
                             f"{', '.join(HYBRID_TYPES)}")
        for name, limit in (("layers", 1 << 12), ("hidden", 1 << 18), ("vocab", 1 << 24)):
            check_positive_int(name, getattr(self, name), limit)
        kinds = tuple(self.layer_kinds)
        if len(kinds) != self.layers:
            raise ValueError(f"layer_kinds: has {len(kinds)} entries for {self.layers} layers")
        bad = [k for k in kinds if k not in LAYER_KINDS]
        if bad:
            raise ValueError(f"layer_kinds: unknown kind {bad[0]!r}; expected one of {', '.join(LAYER_KINDS)}")
        object.__setattr__(self, "layer_kinds", kinds)
        if self.attention_layers:
            for name in ("q_heads", "kv_heads", "head_dim"):
                check_positive_int(name, getattr(self, name), 1 << 14)
            if self.q_heads % self.kv_heads:
                raise ValueError(f"kv_heads: q_heads ({self.q_heads}) must be divisible by kv_heads "
                                 f"({self.kv_heads})")
        if self.mixer.hidden != self.hidden:
            raise ValueError(f"hidden: the mixer's hidden {self.mixer.hidden} differs from the model's {self.hidden}")

    @property
    def mamba_layers(self) -> int:
        return sum(k in ("mamba", "parallel") for k in self.layer_kinds)

    @property
    def attention_layers(self) -> int:
        return sum(k in ("attention", "parallel") for k in self.layer_kinds)

    @property
    def attention_params(self) -> int:
        hq, hk, d = self.q_heads, self.kv_heads, self.head_dim
        p = self.hidden * (hq + 2 * hk) * d + hq * d * self.hidden
        return p + self.attention_bias * ((hq + 2 * hk) * d + self.hidden)

    @property
    def mlp_params(self) -> int:
        return 3 * self.hidden * self.ffn + self.mlp_bias * (2 * self.ffn + self.hidden) if self.ffn else 0

    @property
    def params(self) -> int:
        """Exact parameters: embeddings (+ untied head), final norm, per layer norms + mixer / attention + MLP."""
        p = self.vocab * self.hidden * (1 if self.tied_embeddings else 2) + self.hidden
        p += self.layers * (self.norms_per_layer * self.hidden + self.mlp_params)
        return p + self.mamba_layers * self.mixer.params + self.attention_layers * self.attention_params

    @property
    def buffer_elements(self) -> int:
        """Non-persistent buffers the model holds on the GPU: Falcon-H1's mup_vector (1, 1, projection) per
        layer; the rotary inv_freq (head_dim/2, fp32) of attention models is counted by its bytes in the plan."""
        return self.layers * self.mixer.projection if self.multipliers else 0

    def state_bytes_per_sequence(self, es: int) -> int:
        """Fixed cache state of one sequence: every Mamba2 layer's conv window (dtype) and fp32 ssm state."""
        per = self.mixer.conv_state_bytes(1, es) + self.mixer.ssm_state_bytes(1)
        return self.mamba_layers * per

    def kv_bytes_per_token(self, es: int) -> int:
        """KV cache bytes per token of one sequence (attention layers: k and v per kv head)."""
        return self.attention_layers * 2 * self.kv_heads * self.head_dim * es


def _get(cfg: dict, key: str, default):
    value = cfg.get(key, default)
    return default if value is None else value


def _int(cfg: dict, key: str, default) -> int:
    value = _get(cfg, key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ValueError(f"{key}: expected a whole number, got {value!r}")
    return int(value)


def _model_type(cfg: dict) -> str:
    return str(cfg.get("model_type") or "").lower()


def claims_config(cfg: dict) -> bool:
    """Whether a config.json belongs to the hybrid path: a modelled hybrid, or one refused by name (NOT_MODELLED).
    The CLI and the plan page both ask this before `hybrid_from_hf_config`."""
    return _model_type(cfg) in HYBRID_TYPES or _model_type(cfg) in NOT_MODELLED


def hybrid_from_hf_config(cfg: dict, *, name: str = "") -> HybridSpec:
    """A HybridSpec from a transformers config dict (keys left out take transformers 5.17's defaults)."""
    mt = _model_type(cfg)
    if mt in NOT_MODELLED:
        extra = ""
        if mt == "qwen3_next":  # its cache is exact (estimator/model/ssm_deltanet.py), its activations are not
            from estimator.model.ssm_deltanet import deltanet_cache_from_hf_config

            c = deltanet_cache_from_hf_config(cfg)
            extra = (f" (its bf16 cache: {c.state_bytes_per_sequence(2) / 2**20:,.2f} MiB per sequence + "
                     f"{c.kv_bytes_per_token(2) / 1024:,.1f} KiB per token)")
        raise ValueError(f"model_type: {mt!r} ({NOT_MODELLED[mt]}) is not modelled yet{extra}; modelled hybrids: "
                         f"{', '.join(HYBRID_TYPES)}")
    if mt not in HYBRID_TYPES:
        raise ValueError(f"model_type: {mt!r} is not a hybrid; expected one of {', '.join(HYBRID_TYPES)}")
    label = name or str(cfg.get("_name_or_path") or mt)
    if mt == "mamba2":
        hidden = _int(cfg, "hidden_size", 4096)
        layers = _int(cfg, "num_hidden_layers", 64)
        mixer = MambaMixerShape(hidden=hidden, heads=_int(cfg, "num_heads", 128), head_dim=_int(cfg, "head_dim", 64),
                                groups=_int(cfg, "n_groups", 8), state=_int(cfg, "state_size", 128),
                                conv_kernel=_int(cfg, "conv_kernel", 4), chunk=_int(cfg, "chunk_size", 256),
                                proj_bias=bool(_get(cfg, "use_bias", False)),
                                conv_bias=bool(_get(cfg, "use_conv_bias", True)))
        expand = _get(cfg, "expand", 2)
        if int(expand * hidden) != mixer.intermediate:
            raise ValueError(f"num_heads: num_heads·head_dim ({mixer.intermediate}) must equal expand·hidden_size "
                             f"({int(expand * hidden)})")
        return HybridSpec(name=label, model_type=mt, layers=layers, hidden=hidden,
                          vocab=_int(cfg, "vocab_size", 32768), mixer=mixer, layer_kinds=("mamba",) * layers,
                          norms_per_layer=1, residual_fp32=bool(_get(cfg, "residual_in_fp32", True)),
                          tied_embeddings=bool(_get(cfg, "tie_word_embeddings", False)), source=label)
    hidden = _int(cfg, "hidden_size", 4096)
    layers = _int(cfg, "num_hidden_layers", 32)
    q_heads = _int(cfg, "num_attention_heads", 32)
    common = dict(q_heads=q_heads, kv_heads=_int(cfg, "num_key_value_heads", 8),
                  head_dim=_int(cfg, "head_dim", hidden // q_heads),
                  attention_bias=bool(_get(cfg, "attention_bias", False)), ffn=_int(cfg, "intermediate_size", 14336),
                  mlp_bias=bool(_get(cfg, "mlp_bias", False)),
                  tied_embeddings=bool(_get(cfg, "tie_word_embeddings", False)),
                  max_positions=_int(cfg, "max_position_embeddings", 8192))
    heads, head_dim = _int(cfg, "mamba_n_heads", 128), _int(cfg, "mamba_d_head", 64 if mt == "bamba" else 8)
    shape = dict(hidden=hidden, heads=heads, head_dim=head_dim, groups=_int(cfg, "mamba_n_groups", 1),
                 state=_int(cfg, "mamba_d_state", 256), conv_kernel=_int(cfg, "mamba_d_conv", 4),
                 chunk=_int(cfg, "mamba_chunk_size", 256), proj_bias=bool(_get(cfg, "mamba_proj_bias", False)),
                 conv_bias=bool(_get(cfg, "mamba_conv_bias", True)))
    if mt == "falcon_h1":
        d_ssm = cfg.get("mamba_d_ssm", 1024)
        inter = int(_get(cfg, "mamba_expand", 2) * hidden) if d_ssm is None else int(d_ssm)
        if inter != heads * head_dim:
            raise ValueError(f"mamba_n_heads: mamba_n_heads·mamba_d_head ({heads * head_dim}) must equal the mamba "
                             f"intermediate size ({inter})")
        rms = bool(_get(cfg, "mamba_rms_norm", False))
        if bool(_get(cfg, "projectors_bias", False)):
            raise ValueError("projectors_bias: Falcon-H1 with projector biases is not modelled")
        mixer = MambaMixerShape(**shape, gate="rmsnorm" if rms else "silu", norm=rms, in_multiplier=True,
                                out_multiplier=True)
        return HybridSpec(name=label, model_type=mt, layers=layers, hidden=hidden,
                          vocab=_int(cfg, "vocab_size", 128000), mixer=mixer, layer_kinds=("parallel",) * layers,
                          multipliers=True, source=label, **common)
    inter = int(_get(cfg, "mamba_expand", 2) * hidden)
    if inter != heads * head_dim:
        raise ValueError(f"mamba_n_heads: mamba_n_heads·mamba_d_head ({heads * head_dim}) must equal "
                         f"mamba_expand·hidden_size ({inter})")
    attn = set(cfg.get("attn_layer_indices") or ())
    kinds = tuple("attention" if i in attn else "mamba" for i in range(layers))
    return HybridSpec(name=label, model_type=mt, layers=layers, hidden=hidden, vocab=_int(cfg, "vocab_size", 128000),
                      mixer=MambaMixerShape(**shape), layer_kinds=kinds, source=label, **common)


# Presets: the defaults of transformers 5.17's configuration files (public and versioned; no hub access here), at
# their full layer counts. A checkpoint's own config.json goes through `plan --config`.
HYBRID_PRESET_CONFIGS: dict[str, tuple[dict, str]] = {
    "mamba2-default": ({"model_type": "mamba2"}, "transformers 5.17 configuration_mamba2.py Mamba2Config() "
                       "(hidden 4096, 128 heads x 64, state 128, 8 groups, 64 layers)"),
    "falcon-h1-default": ({"model_type": "falcon_h1"},
                          "transformers 5.17 configuration_falcon_h1.py FalconH1Config()"),
}


def get_hybrid_preset(name: str) -> HybridSpec | None:
    """The hybrid preset of that name (case-insensitive), or None when it is not one."""
    key = str(name).strip().lower().replace("_", "-")
    if key not in HYBRID_PRESET_CONFIGS:
        return None
    cfg, source = HYBRID_PRESET_CONFIGS[key]
    spec = hybrid_from_hf_config(cfg, name=key)
    return HybridSpec(**{**{f: getattr(spec, f) for f in spec.__dataclass_fields__}, "source": source})
