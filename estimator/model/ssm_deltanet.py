"""The cache of Qwen3-Next (transformers 5.17 `qwen3_next`: gated DeltaNet layers with full attention in every
`full_attention` entry of `layer_types`, by default every 4th layer) as its cache classes hold it
(transformers/cache_utils.py `LinearAttentionLayer` for the DeltaNet layers, `DynamicLayer` for attention):

  per DeltaNet layer and sequence: the conv window (conv_dim × conv_kernel in the model dtype, conv_dim =
  2·key_heads·key_head_dim + value_heads·value_head_dim: q, k and v go through one depthwise conv) and the
  recurrent state (value_heads, key_head_dim, value_head_dim) in **fp32** (torch_chunk_gated_delta_rule computes it
  from fp32 copies; the cache keeps `zeros_like` of it);
  per attention layer and token: k and v, kv_heads × head_dim each, in the model dtype.

Qwen3NextConfig's defaults: 36 DeltaNet layers × (8,192 × 4 × 2 + 32 × 128 × 128 × 4 bytes) = 77,856,768 bytes
(74.25 MiB) per sequence, and 12 × 2 × 2 × 256 × 2 = 24,576 bytes (24 KiB) per token. Checked against the cache a
transformers model returns (tests/test_hybrid_ssm.py). The prefill's activations (the chunked delta rule's torch
fallback, the MoE blocks) are not planned: `plan` refuses qwen3_next.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.model.ssm_mamba2 import F32


@dataclass(frozen=True, kw_only=True)
class DeltaNetCache:
    """The cache geometry of a Qwen3-Next config (widths in elements)."""

    deltanet_layers: int
    attention_layers: int
    key_heads: int
    key_head_dim: int
    value_heads: int
    value_head_dim: int
    conv_kernel: int
    kv_heads: int
    head_dim: int

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 20:
                raise ValueError(f"{name}: expected a whole number in 0..{1 << 20}, got {value!r}")

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_heads * self.key_head_dim + self.value_heads * self.value_head_dim

    def state_bytes_per_sequence(self, es: int) -> int:
        """Conv windows (model dtype) and fp32 recurrent states of every DeltaNet layer, one sequence."""
        per = self.conv_dim * self.conv_kernel * es + self.value_heads * self.key_head_dim * self.value_head_dim * F32
        return self.deltanet_layers * per

    def kv_bytes_per_token(self, es: int) -> int:
        return self.attention_layers * 2 * self.kv_heads * self.head_dim * es

    def cache_bytes(self, *, batch: int, seq_len: int, es: int) -> int:
        return batch * (self.state_bytes_per_sequence(es) + seq_len * self.kv_bytes_per_token(es))


def _int(cfg: dict, key: str, default: int) -> int:
    value = cfg.get(key, default)
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ValueError(f"{key}: expected a whole number, got {value!r}")
    return int(value)


def deltanet_cache_from_hf_config(cfg: dict) -> DeltaNetCache:
    """The cache geometry of a `qwen3_next` config dict (keys left out take Qwen3NextConfig's 5.17 defaults; the
    layer pattern from `layer_types`, else full attention in every 4th layer)."""
    if str(cfg.get("model_type", "")) != "qwen3_next":
        raise ValueError(f"model_type: expected 'qwen3_next', got {cfg.get('model_type')!r}")
    layers = _int(cfg, "num_hidden_layers", 48)
    types = cfg.get("layer_types") or ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                                       for i in range(layers)]
    if len(types) != layers or any(t not in ("full_attention", "linear_attention") for t in types):
        raise ValueError("layer_types: expected one of full_attention / linear_attention per layer")
    attn = sum(t == "full_attention" for t in types)
    return DeltaNetCache(deltanet_layers=layers - attn, attention_layers=attn,
                         key_heads=_int(cfg, "linear_num_key_heads", 16),
                         key_head_dim=_int(cfg, "linear_key_head_dim", 128),
                         value_heads=_int(cfg, "linear_num_value_heads", 32),
                         value_head_dim=_int(cfg, "linear_value_head_dim", 128),
                         conv_kernel=_int(cfg, "linear_conv_kernel_dim", 4),
                         kv_heads=_int(cfg, "num_key_value_heads", 2), head_dim=_int(cfg, "head_dim", 256))
