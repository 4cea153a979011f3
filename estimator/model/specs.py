"""Whole-model architectures: `ModelSpec` and named presets with exact parameter counts (a local Hugging Face
`config.json` is read by `estimator.model.hf_config`).

Parameter count (units: parameters), summed exactly from the architecture:
  decoder  = vocab·hidden·(1 if tied else 2) + layers·per_layer + final norm
  encoder  = patch conv (channels·patch²·hidden + hidden) + cls token + learned positions (tokens·hidden)
             + layers·per_layer + final norm + classifier head (hidden·classes + classes)
  per_layer = attention + FFN + norms_per_layer·(hidden, or 2·hidden for LayerNorm)
  attention = hidden·(q_heads·head_dim + kv_heads·head_dim + kv_heads·v_head_dim) + q_heads·v_head_dim·hidden
              (q, k, v, o; fused qkv_proj has the same count) + biases + q/k norms (2·head_dim) + sinks (q_heads)
      MLA   = q (hidden·q_heads·head_dim, or hidden·q_lora + q_lora norm + q_lora·q_heads·head_dim)
              + kv_a (hidden·(kv_lora + rope)) + kv_a norm (kv_lora) + kv_b (kv_lora·q_heads·(nope + v_head_dim))
              + o (q_heads·v_head_dim·hidden)
  FFN, dense layer = (3 if gated_ffn else 2)·hidden·ffn (+ biases)
  FFN, MoE layer   = router (experts·hidden [+ experts]) + experts·3·hidden·moe_ffn [+ experts·(2·moe_ffn + hidden)]
                     + shared expert 3·hidden·shared_experts_ffn [+ its gate, hidden]
Each preset cites the config it was read from and the published total it must reproduce
(tests/test_models.py checks every one; tests/test_specs_hf.py checks the new families against the parameters
transformers allocates). docs/architectures.md lists, per family, what is counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from estimator.call.config import MAX_DIM, MAX_SEQ_LEN, check_positive_int, optional_float

KINDS = ("decoder", "encoder")
NORMS = ("rmsnorm", "layernorm")
KV_LAYOUTS = ("hf", "latent", "per-head")  # how a KV cache is stored: as transformers 5.17 does (MLA: latent),
# MLA's latent c_kv + rope key (vLLM, SGLang), or decompressed k and v per head (DeepSeek's remote code, engines
# without MLA kernels)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A transformer: dense, mixture-of-experts (`experts` > 0) or with multi-head latent attention
    (`kv_lora_rank` > 0). `vocab` is the output size of the last projection: the vocabulary of a decoder, the
    number of classes of an encoder's classifier head. Widths are in elements, counts in parameters."""

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
    # encoders only: the plan counts the pixel_values its caller holds (False for a VLM tower or a Swin stage,
    # priced inside a plan that counts its own pixels: estimator/model/vision_vlm.py, vision_swin.py)
    holds_pixels: bool = True
    max_positions: int | None = None  # the context the model was trained for (informational)
    attn_logit_softcap: float | None = None  # Gemma-2: tanh soft-capping of the scores (not in SDPA's kernels)
    # --- attention details (all default to the plain Llama layout) ---
    v_head_dim: int | None = None  # value width per head in elements; None = head_dim. MLA: 128 while head_dim
    #                                (the q/k width per head, qk_nope + qk_rope) is 192
    fused_qkv: bool = False  # one qkv_proj GEMM (Phi-3): same parameters, one [tokens, q+k+v] output instead of 3
    fused_gate_up: bool = False  # one gate_up_proj GEMM (Phi-3): same parameters, one [tokens, 2·ffn] output
    qk_norm: bool = False  # RMSNorm over head_dim on q and on k (Qwen3, Gemma-3): 2·head_dim params per layer
    attention_sinks: bool = False  # gpt-oss: one learned sink logit per q head per layer (q_heads params)
    query_pre_attn_scalar: float | None = None  # Gemma: scores scaled by this**-0.5 instead of head_dim**-0.5
    final_logit_softcap: float | None = None  # Gemma-2: tanh soft-capping of the LM-head logits
    # --- mixture of experts (experts = 0: dense; every layer uses `ffn`) ---
    experts: int = 0  # routed experts per MoE layer (num_local_experts / num_experts / n_routed_experts)
    experts_per_token: int = 0  # top-k routed experts each token runs (num_experts_per_tok)
    moe_ffn: int = 0  # intermediate width of one routed expert, elements (moe_intermediate_size; Mixtral and
    #                   gpt-oss: intermediate_size). Experts are gated (gate, up, down)
    shared_experts_ffn: int = 0  # intermediate width of the always-on shared expert MLP, elements (DeepSeek:
    #                              n_shared_experts·moe_intermediate_size; Qwen2-MoE: shared_expert_intermediate_size)
    shared_expert_gate: bool = False  # Qwen2-MoE: sigmoid gate Linear(hidden, 1) on the shared expert (hidden params)
    dense_layers: tuple[int, ...] = ()  # MoE models: indices of the layers with a dense `ffn` MLP instead
    #                                     (DeepSeek first_k_dense_replace, Qwen-MoE mlp_only_layers / sparse step)
    router_bias: bool = False  # gpt-oss: bias on the router (experts params per MoE layer)
    expert_bias: bool = False  # gpt-oss: biases on every expert's gate_up (2·moe_ffn) and down (hidden)
    router_score_bias: bool = False  # DeepSeek-V3 e_score_correction_bias: experts floats per MoE layer, a *buffer*
    #                                  in HF (in the checkpoint, not in parameters()): counted in state_params only
    # --- multi-head latent attention (DeepSeek-V2/V3; kv_lora_rank = 0: not MLA) ---
    kv_lora_rank: int = 0  # width of the compressed kv latent c_kv per token, elements (512)
    q_lora_rank: int = 0  # width of the compressed q latent; 0 = q_proj straight from hidden (V2-Lite)
    qk_rope_head_dim: int = 0  # rotary part of head_dim, elements (64), shared by all heads (kv_a_proj output)
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
            if self.image_size < self.patch_size:
                raise ValueError(f"patch_size: {self.patch_size} is larger than image_size {self.image_size}")
            # a partial edge patch is dropped (the Conv2d patch embedding floors: ViT-H/14 at 1024 px runs 73 x 73
            # patches in transformers 5.17 vit/modeling_vit.py ViTPatchEmbeddings), so no divisibility is required
        for field in ("query_pre_attn_scalar", "final_logit_softcap"):
            value = optional_float(field, getattr(self, field))
            object.__setattr__(self, field, value if value is not None and value > 0 else None)
        if self.v_head_dim is not None:
            object.__setattr__(self, "v_head_dim", check_positive_int("v_head_dim", self.v_head_dim, MAX_DIM))
        self._check_moe()
        self._check_mla()

    def _check_moe(self) -> None:
        for field in ("experts", "experts_per_token", "moe_ffn", "shared_experts_ffn", "kv_lora_rank", "q_lora_rank",
                      "qk_rope_head_dim"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{field}: expected a whole number >= 0, got {value!r}")
        if not self.experts:
            extra = [f for f in ("experts_per_token", "moe_ffn", "shared_experts_ffn", "shared_expert_gate",
                                 "router_bias", "expert_bias", "router_score_bias", "dense_layers") if getattr(self, f)]
            if extra:
                raise ValueError(f"experts: {extra[0]} is set but the model has no experts (experts=0)")
            return
        check_positive_int("experts", self.experts, 1 << 14)
        check_positive_int("moe_ffn", self.moe_ffn, 1 << 20)
        if not 1 <= self.experts_per_token <= self.experts:
            raise ValueError(f"experts_per_token: expected 1..{self.experts} (experts), got {self.experts_per_token}")
        if self.shared_expert_gate and not self.shared_experts_ffn:
            raise ValueError("shared_expert_gate: the model has no shared expert (shared_experts_ffn=0)")
        dense = tuple(self.dense_layers)
        for i in dense:
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < self.layers:
                raise ValueError(f"dense_layers: {i!r} is not a layer index in 0..{self.layers - 1}")
        object.__setattr__(self, "dense_layers", tuple(sorted(set(dense))))

    def _check_mla(self) -> None:
        if not self.kv_lora_rank:
            if self.q_lora_rank or self.qk_rope_head_dim:
                raise ValueError("kv_lora_rank: q_lora_rank / qk_rope_head_dim need latent attention "
                                 "(kv_lora_rank > 0)")
            return
        # kv_heads stays free (HF decompresses k and v for every q head, so configs give kv_heads = q_heads; the
        # advisor may try fewer): the MLA weights are counted per q head, the "hf" cache per kv head.
        if not 0 < self.qk_rope_head_dim < self.head_dim:
            raise ValueError(f"qk_rope_head_dim: expected 1..{self.head_dim - 1} (head_dim = qk_nope + qk_rope), "
                             f"got {self.qk_rope_head_dim}")

    @property
    def q_dim(self) -> int:
        return self.q_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def v_head(self) -> int:
        """Value width per head in elements (v_head_dim, or head_dim when not given)."""
        return self.v_head_dim or self.head_dim

    @property
    def v_dim(self) -> int:
        return self.kv_heads * self.v_head

    @property
    def mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def qk_nope_head_dim(self) -> int:
        """MLA: the non-rotary part of the q/k head width (head_dim − qk_rope_head_dim); 0 when not MLA."""
        return self.head_dim - self.qk_rope_head_dim if self.mla else 0

    @property
    def attention_head_widths(self) -> tuple[int, int, int]:
        """(q, k, v) width per head in elements, as the attention call sees them in HF (k = q = head_dim)."""
        return (self.head_dim, self.head_dim, self.v_head)

    @property
    def attention_widths_per_layer(self) -> tuple[tuple[int, int, int], ...]:
        """Per layer: (q, k, v) width per head in elements (every family here uses one shape in all layers)."""
        return (self.attention_head_widths,) * self.layers

    def attention_shape(self, layout: str = "hf") -> dict:
        """The attention call's heads and widths per head. 'hf' and 'per-head': q_heads × head_dim queries and keys,
        kv_heads × v_head values (transformers 5.17 decompresses MLA's latent with kv_b_proj before the call, whatever
        it caches). 'latent' (MLA with the kv_b projection absorbed, as vLLM/SGLang decode): one shared kv head, q/k
        width kv_lora_rank + qk_rope, v width kv_lora_rank."""
        _check_layout(layout)
        if layout == "latent" and self.mla:
            w = self.kv_lora_rank + self.qk_rope_head_dim
            return {"q_heads": self.q_heads, "kv_heads": 1, "q_width": w, "k_width": w, "v_width": self.kv_lora_rank}
        return {"q_heads": self.q_heads, "kv_heads": self.kv_heads, "q_width": self.head_dim,
                "k_width": self.head_dim, "v_width": self.v_head}

    def kv_cache_elements_per_token_per_layer(self, layout: str = "hf", tp: int = 1) -> int:
        """Cached elements per token in one attention layer on one of tp GPUs. 'per-head': kv_heads/tp·(head_dim +
        v_head) (k and v per head; MLA decompressed: 16·(192 + 128) for V2-Lite). 'hf' (what transformers 5.17's
        DynamicCache holds, measured on the H200): per head for every family but MLA, whose DeepseekV2Attention
        updates the cache with the compressed latent before decompressing it: kv_lora_rank + qk_rope_head_dim (576),
        the same on every tp rank. 'latent': that MLA latent; the per-head layout for non-MLA models."""
        _check_layout(layout)
        if self.mla and layout in ("hf", "latent"):
            return self.kv_lora_rank + self.qk_rope_head_dim
        return max(1, self.kv_heads // tp) * (self.head_dim + self.v_head)

    def kv_cache_bytes_per_token(self, kv_bits: int = 16, layout: str = "hf") -> int:
        """KV-cache bytes per token over all layers (decoders; 0 for encoders), rounded up to whole bytes:
        layers · kv_cache_elements_per_token_per_layer(layout) · kv_bits / 8. Windowed layers cache fewer tokens
        per sequence, not fewer bytes per cached token."""
        check_positive_int("kv_bits", kv_bits, 64)
        if self.kind != "decoder":
            return 0
        return _cdiv(self.layers * self.kv_cache_elements_per_token_per_layer(layout) * kv_bits, 8)

    @property
    def norm_params(self) -> int:
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    # --- per-layer pieces (tp: Megatron-LM tensor parallel degree; 1 = the whole layer) -------------------------

    def _attention_params(self, tp: int = 1) -> int:
        hq, hk, d, dv = self.q_heads // tp, max(1, self.kv_heads // tp), self.head_dim, self.v_head
        if self.mla:  # q_a/kv_a down-projections and their norms are replicated; q_b, kv_b split by heads
            r, c = self.qk_rope_head_dim, self.kv_lora_rank
            if self.q_lora_rank:
                ql = self.q_lora_rank
                q = self.hidden * ql + self.qkv_bias * ql + ql + ql * hq * d
            else:
                q = self.hidden * hq * d
            kv = self.hidden * (c + r) + self.qkv_bias * (c + r) + c + c * hq * (d - r + dv)
            attn = q + kv + hq * dv * self.hidden
        else:
            attn = self.hidden * (hq * d + hk * d + hk * dv) + hq * dv * self.hidden
            attn += self.qkv_bias * (hq * d + hk * d + hk * dv)
        return attn + self.out_bias * self.hidden + self.qk_norm * 2 * d + self.attention_sinks * hq

    def _dense_ffn_params(self, tp: int = 1) -> int:
        F, mats = _cdiv(self.ffn, tp), 3 if self.gated_ffn else 2
        return mats * self.hidden * F + self.mlp_bias * (F * (mats - 1) + self.hidden)

    def _expert_params(self, tp: int = 1) -> int:
        """One routed expert (gate, up, down; gpt-oss biases), its intermediate split tp ways."""
        F = _cdiv(self.moe_ffn, tp)
        return 3 * self.hidden * F + self.expert_bias * (2 * F + self.hidden)

    def _moe_ffn_params(self, tp: int = 1, ep: int = 1) -> int:
        """Router (replicated) + the routed experts this GPU holds (all, or experts/ep under expert parallelism) +
        shared expert (split like a dense MLP) + its gate."""
        router = self.experts * self.hidden + self.router_bias * self.experts
        shared = 3 * self.hidden * _cdiv(self.shared_experts_ffn, tp) + self.shared_expert_gate * self.hidden
        return router + _cdiv(self.experts, ep) * self._expert_params(tp) + shared

    @property
    def moe_layer_flags(self) -> tuple[bool, ...]:
        """Per layer: True where the MLP is a mixture of experts."""
        dense = set(self.dense_layers)
        return tuple(bool(self.experts) and i not in dense for i in range(self.layers))

    @property
    def router_style(self) -> str:
        """How the MoE router of transformers 5.17 computes the routing weights, which fixes their dtype:
        'mixtral' (softmax of fp32 logits, fp32 top-k weights), 'qwen' (Qwen2/3-MoE: top-k weights cast back to the
        model dtype), 'deepseek' (router GEMM in fp32, fp32 weights), 'gpt_oss' (router bias, top-k then softmax in
        the model dtype; clamped SwiGLU experts with biases). Inferred from the traits that tell the families
        apart; '' for dense models."""
        if not self.experts:
            return ""
        if self.router_bias or self.expert_bias:
            return "gpt_oss"
        if self.mla or self.router_score_bias:
            return "deepseek"
        if self.qk_norm or self.shared_expert_gate or self.qkv_bias:
            return "qwen"
        return "mixtral"

    @property
    def moe_layers(self) -> int:
        """Number of layers whose MLP is a mixture of experts (0 for dense models)."""
        return sum(self.moe_layer_flags)

    @property
    def attention_params_per_layer(self) -> int:
        """q, k, v, o weights (+ biases, q/k norms, sinks); MLA: its down/up projections and latent norms."""
        return self._attention_params()

    @property
    def ffn_params_per_layer(self) -> int:
        """Dense MLP of one layer: (3 if gated else 2)·hidden·ffn (+ biases). MoE layers: moe_params_per_layer."""
        return self._dense_ffn_params()

    @property
    def moe_params_per_layer(self) -> int:
        """MLP of one MoE layer with every expert resident (router, routed experts, shared expert); 0 if dense."""
        return self._moe_ffn_params() if self.experts else 0

    @property
    def layer_params(self) -> tuple[int, ...]:
        """Parameters of each layer (all experts resident)."""
        base = self.attention_params_per_layer + self.norms_per_layer * self.norm_params
        moe, dense = base + self.moe_params_per_layer, base + self.ffn_params_per_layer
        return tuple(moe if f else dense for f in self.moe_layer_flags)

    @property
    def native_tokens(self) -> int:
        """Encoders: patches at the native resolution (floored grid) plus the class token; decoders: 0."""
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

    def _layers_params(self, tp: int = 1, ep: int = 1) -> int:
        moe = self.moe_layers
        per = self._attention_params(tp) + self.norms_per_layer * self.norm_params
        return (self.layers * per + (self.layers - moe) * self._dense_ffn_params(tp)
                + (moe * self._moe_ffn_params(tp, ep) if moe else 0))

    @property
    def params(self) -> int:
        """Total parameters (exact): what HF's `model.parameters()` holds, tied embeddings counted once, every
        expert resident. Buffers (DeepSeek-V3's e_score_correction_bias) are not parameters: see state_params."""
        return self.embedding_params + self._layers_params() + self.norm_params + self.head_params

    @property
    def state_params(self) -> int:
        """Elements of the checkpoint: params + persistent buffers (router score-correction biases)."""
        return self.params + self.router_score_bias * self.experts * self.moe_layers

    @property
    def expert_params(self) -> int:
        """Resident routed-expert weights over all MoE layers (every expert, biases included; not the router or
        the shared expert). Under expert parallelism these are what is split across GPUs."""
        return self.moe_layers * self.experts * self._expert_params() if self.experts else 0

    @property
    def active_params_per_token(self) -> int:
        """Parameters one token uses: params less the routed experts it does not run (experts − top-k per MoE
        layer); embeddings, attention, routers, shared experts and dense layers all count. Dense models: params.
        The convention of the published 'active' figures (Mixtral 12.9B, Qwen3-30B-A3B 3.3B)."""
        if not self.experts:
            return self.params
        idle = self.moe_layers * (self.experts - self.experts_per_token) * self._expert_params()
        return self.params - idle

    def _attention_matmul_params(self) -> int:
        if self.mla:
            d, dv, r, c = self.head_dim, self.v_head, self.qk_rope_head_dim, self.kv_lora_rank
            ql = self.q_lora_rank
            q = self.hidden * ql + ql * self.q_heads * d if ql else self.hidden * self.q_heads * d
            return q + self.hidden * (c + r) + c * self.q_heads * (d - r + dv) + self.q_heads * dv * self.hidden
        return (self.hidden * (self.q_dim + self.kv_dim + self.v_dim) + self.q_heads * self.v_head * self.hidden)

    @property
    def matmul_params_by_layer(self) -> tuple[int, ...]:
        """Per layer: weights that take part in a GEMM for one token (no biases, norms or sinks): attention
        projections and the MLP; MoE layers: router + top-k experts + shared expert (+ its gate)."""
        attn = self._attention_matmul_params()
        dense = attn + (3 if self.gated_ffn else 2) * self.hidden * self.ffn
        if not self.experts:
            return (dense,) * self.layers
        moe = (attn + self.experts * self.hidden + self.experts_per_token * 3 * self.hidden * self.moe_ffn
               + 3 * self.hidden * self.shared_experts_ffn + self.shared_expert_gate * self.hidden)
        return tuple(moe if f else dense for f in self.moe_layer_flags)

    @property
    def matmul_params(self) -> int:
        """GEMM weights one token runs through over all layers (sum of matmul_params_by_layer; no LM head)."""
        return sum(self.matmul_params_by_layer)

    @property
    def matmul_params_per_layer(self) -> int:
        """Weights that take part in a GEMM per token in one layer: q, k, v, o and the FFN matrices (no biases or
        norms); MoE: router + the top-k active experts + shared expert. Where layers differ (DeepSeek's dense first
        layers) the largest layer's value; matmul_params_by_layer has each."""
        return max(self.matmul_params_by_layer)

    @property
    def resident_moe_params_per_layer(self) -> int:
        """Weights resident in one MoE layer's MLP (all experts, router, shared): what a GPU holds, as opposed to
        the top-k that matmul_params_per_layer counts per token. 0 for dense models."""
        return self.moe_params_per_layer

    def params_per_gpu(self, tp: int = 1, ep: int = 1) -> int:
        """Parameters one GPU holds under tensor parallelism tp (Megatron-LM layout, Shoeybi et al. 2019): q/k/v
        and FFN-up columns, o and FFN-down rows and the vocabulary split tp ways; kv heads copied when tp exceeds
        kv_heads; norms, row-parallel biases and encoder patch/position embeddings replicated. tp=1: params.
        Expert parallelism ep: each MoE layer's routed experts split ep ways (router and shared expert replicated).
        MoE (no expert parallelism): each expert's intermediate split tp ways, the router replicated. MLA: q_b and
        kv_b split by heads, the q_a/kv_a down-projections and latent norms replicated. Sinks split with heads."""
        if self.kind == "encoder":
            ends = self.embedding_params + self.head_params
        else:
            ends = _cdiv(self.vocab, tp) * self.hidden * (1 if self.tied_embeddings else 2)
        return ends + self._layers_params(tp, ep) + self.norm_params

    @property
    def windowed(self) -> bool:
        return any(w is not None for w in self.window_per_layer)


def _check_layout(layout: str) -> None:
    if layout not in KV_LAYOUTS:
        raise ValueError(f"layout: unknown value {layout!r}; expected one of {', '.join(KV_LAYOUTS)}")
