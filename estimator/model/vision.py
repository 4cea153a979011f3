"""Vision-language models and Swin: their specs and how a Hugging Face `config.json` of one is read.

A vision-language model (VLM) is three parts run one after the other (transformers 5.17 *ForConditionalGeneration):
the vision tower (a ViT-style encoder run per image), the projector (LLaVA's 2-layer MLP, Qwen2-VL's merger, Gemma-3's
pooled projection, PaliGemma's linear) and the language model (a `ModelSpec` decoder) over the text plus the image
tokens. `VisionTower.encoder_spec` is the tower as an encoder `ModelSpec` so that the plan prices its layers (GEMMs,
attention per backend, activations) with the same model as every other encoder; its parameters are counted exactly
here (`VisionTower.params`), from each family's modeling file.

Parameter counts (units: parameters), per family (transformers 5.17 models/<family>/modeling_<family>.py):
  CLIP tower (LLaVA)   class token H + patch conv C·p²·H (no bias) + positions (g² + 1)·H + pre-LN 2H
                       + layers·(4(H² + H) + 2·2H + 2HF + F + H) + post-LN 2H
  SigLIP tower (Gemma-3, PaliGemma)  patch conv C·p²·H + H + positions g²·H + layers·(same) + post-LN 2H
                       (+ the attention-pooling head when vision_use_head)
  Qwen2-VL tower       Conv3d C·t·p²·H (no bias) + layers·(qkv 3H² + 3H, proj H² + H, 2 LayerNorms 4H,
                       fc1/fc2 2HF + F + H)
  Qwen2.5-VL tower     the same with RMSNorms (H each) and a gated MLP with biases (3HF + 2F + H)
  projector            LLaVA: (Hv·Ht + Ht) + (Ht² + Ht); Qwen2-VL merger: ln_q (2Hv; Qwen2.5: Hv) + (4Hv)² + 4Hv
                       + 4Hv·Ht + Ht; Gemma-3: Hv·Ht + Hv (RMSNorm); PaliGemma: Hv·Ht + Ht
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from estimator.call.config import check_positive_int
from estimator.model.specs import ModelSpec

VLM_TYPES = ("llava", "qwen2_vl", "qwen2_5_vl", "gemma3", "paligemma")
TOWERS = ("clip", "siglip", "qwen2_vl", "qwen2_5_vl")
TRAINABLE = ("all", "tower-frozen", "projector")  # what a VLM training step updates (the rest is frozen)


@dataclass(frozen=True, kw_only=True)
class VisionTower:
    """A ViT-style vision tower. Widths in elements; `image_size` is the fixed input resolution (0: dynamic, Qwen)."""

    kind: str  # clip | siglip | qwen2_vl | qwen2_5_vl
    layers: int
    hidden: int
    heads: int
    ffn: int
    patch: int = 14
    channels: int = 3
    image_size: int = 0  # pixels a side every image is resized to (CLIP 336, SigLIP 224/448/896); 0: Qwen dynamic
    temporal_patch: int = 1  # Qwen: 2 (a still image is repeated to two frames)
    merge: int = 1  # Qwen: spatial_merge_size 2
    window_px: int = 0  # Qwen2.5-VL: 112
    full_attention_layers: tuple[int, ...] = ()  # Qwen2.5-VL fullatt_block_indexes
    pooling_head: bool = False  # SigLIP's attention-pooling head (vision_use_head): built, and run, when true
    act: str = ""  # hidden_act; "" = the family's default (CLIP and Qwen2-VL quick_gelu, SigLIP gelu_pytorch_tanh)

    def __post_init__(self) -> None:
        if self.kind not in TOWERS:
            raise ValueError(f"vision_config: tower kind {self.kind!r} is not modelled; known: {', '.join(TOWERS)}")
        for name in ("layers", "hidden", "heads", "ffn", "patch", "channels", "temporal_patch", "merge"):
            check_positive_int(f"vision_config {name}", getattr(self, name), 1 << 20)
        if self.hidden % self.heads:
            raise ValueError(f"vision_config: hidden {self.hidden} is not divisible by {self.heads} heads")
        if not self.act:
            default = {"clip": "quick_gelu", "qwen2_vl": "quick_gelu", "siglip": "gelu_pytorch_tanh"}
            object.__setattr__(self, "act", default.get(self.kind, "silu"))

    @property
    def quick_gelu(self) -> bool:
        """QuickGELUActivation (transformers 5.17 activations.py): x * sigmoid(1.702 x), unfused: the sigmoid's output
        is one more ffn-wide tensor, saved for backward and alive in the forward beside fc1's output."""
        return self.act == "quick_gelu"

    @property
    def fp32_rotary(self) -> bool:
        """Qwen towers rotate q and k in fp32 (apply_rotary_pos_emb_vision: q.float(), k.float())."""
        return self.kind in ("qwen2_vl", "qwen2_5_vl")

    @property
    def gated(self) -> bool:
        return self.kind == "qwen2_5_vl"

    @property
    def params(self) -> int:
        H, F, C, p = self.hidden, self.ffn, self.channels, self.patch
        attn = 4 * (H * H + H)
        if self.gated:
            mlp, norms = 3 * H * F + 2 * F + H, 2 * H
        else:
            mlp, norms = 2 * H * F + F + H, 4 * H
        layers = self.layers * (attn + mlp + norms)
        g2 = (self.image_size // p) ** 2
        if self.kind == "clip":
            return H + C * p * p * H + (g2 + 1) * H + 2 * H + layers + 2 * H
        if self.kind == "siglip":  # + SiglipMultiheadAttentionPoolingHead: probe, MHA, LayerNorm, MLP
            head = (H + 4 * H * H + 4 * H + 2 * H + 2 * H * F + F + H) if self.pooling_head else 0
            return C * p * p * H + H + g2 * H + layers + 2 * H + head
        return C * self.temporal_patch * p * p * H + layers

    def encoder_spec(self, name: str) -> ModelSpec:
        """The tower as an encoder ModelSpec for the plan's layer pricing (its parameter count is `params`)."""
        return ModelSpec(name=f"{name} vision tower", kind="encoder", layers=self.layers, hidden=self.hidden,
                         q_heads=self.heads, kv_heads=self.heads, head_dim=self.hidden // self.heads, ffn=self.ffn,
                         vocab=1, gated_ffn=self.gated, norm="rmsnorm" if self.gated else "layernorm",
                         qkv_bias=True, out_bias=True, mlp_bias=True, image_size=max(self.image_size, self.patch),
                         patch_size=self.patch, channels=self.channels * self.temporal_patch, holds_pixels=False,
                         source=f"vision tower ({self.kind})")


@dataclass(frozen=True, kw_only=True)
class VisionLanguageSpec:
    """A VLM: tower, projector, language model, and the family's image-token rule."""

    name: str
    family: str  # llava | qwen2_vl | qwen2_5_vl | gemma3 | paligemma
    tower: VisionTower
    lm: ModelSpec
    pooled_tokens: int = 256  # Gemma-3 mm_tokens_per_image
    source: str = ""
    projector_shapes: tuple[tuple[int, int], ...] = field(default=())  # (in, out) of each projector GEMM

    def __post_init__(self) -> None:
        if self.family not in VLM_TYPES:
            raise ValueError(f"config: model_type {self.family!r} is not a modelled vision-language model")
        if not isinstance(self.lm, ModelSpec) or self.lm.kind != "decoder":
            raise ValueError("text_config: the language model must be a decoder")
        if not self.projector_shapes:
            object.__setattr__(self, "projector_shapes", self._projector_shapes())

    def _projector_shapes(self) -> tuple[tuple[int, int], ...]:
        hv, ht = self.tower.hidden, self.lm.hidden
        if self.family == "llava":
            return ((hv, ht), (ht, ht))
        if self.family in ("qwen2_vl", "qwen2_5_vl"):
            m2 = self.tower.merge ** 2
            return ((hv * m2, hv * m2), (hv * m2, ht))
        return ((hv, ht),)

    @property
    def projector_params(self) -> int:
        hv = self.tower.hidden
        shapes = self.projector_shapes
        if self.family == "gemma3":  # mm_input_projection_weight (no bias) + mm_soft_emb_norm (Gemma RMSNorm)
            return shapes[0][0] * shapes[0][1] + hv
        biases = sum(out for _, out in shapes)
        norm = {"qwen2_vl": 2 * hv, "qwen2_5_vl": hv}.get(self.family, 0)  # merger ln_q
        return sum(i * o for i, o in shapes) + biases + norm

    @property
    def params(self) -> int:
        return self.tower.params + self.projector_params + self.lm.params

    def image_lm_tokens(self, vision_tokens: int, crops: int = 1) -> int:
        """Image tokens the projector hands the LM for one image's `vision_tokens` tower tokens (no markers)."""
        if self.family == "llava":
            return vision_tokens - crops  # the class token of every crop dropped
        if self.family in ("qwen2_vl", "qwen2_5_vl"):
            return vision_tokens // self.tower.merge ** 2
        if self.family == "gemma3":
            return crops * self.pooled_tokens
        return vision_tokens


@dataclass(frozen=True, kw_only=True)
class SwinSpec:
    """Swin Transformer (transformers 5.17 swin/modeling_swin.py): a patch embedding, stages of window-attention
    blocks (every odd block shifted), patch merging between stages, a final LayerNorm and a classifier."""

    name: str
    embed_dim: int
    depths: tuple[int, ...]
    heads: tuple[int, ...]
    window: int = 7
    patch: int = 4
    channels: int = 3
    mlp_ratio: float = 4.0
    image_size: int = 224
    classes: int = 1000
    source: str = ""

    def __post_init__(self) -> None:
        depths, heads = tuple(self.depths), tuple(self.heads)
        if not depths or len(depths) != len(heads):
            raise ValueError("depths: Swin needs one head count per stage (num_heads) and as many depths")
        for d in depths:
            check_positive_int("depths", d, 1 << 10)
        for i, h in enumerate(heads):
            check_positive_int("num_heads", h, 1 << 10)
            if (self.embed_dim << i) % h:
                raise ValueError(f"num_heads: stage {i} width {self.embed_dim << i} is not divisible by {h} heads")
        for name in ("embed_dim", "window", "patch", "channels", "image_size", "classes"):
            check_positive_int(name, getattr(self, name), 1 << 20)
        object.__setattr__(self, "depths", depths)
        object.__setattr__(self, "heads", heads)

    def stage_width(self, i: int) -> int:
        return self.embed_dim << i

    def stage_ffn(self, i: int) -> int:
        return int(self.stage_width(i) * self.mlp_ratio)

    @property
    def params(self) -> int:
        """patch conv C·p²·E + E, its LayerNorm 2E; per block: q, k, v, o with biases 4(W² + W), 2 LayerNorms 4W,
        MLP 2·W·F + F + W, relative-position bias table (2w - 1)²·heads; patch merging per stage but the last:
        LayerNorm 8W + Linear 4W·2W (no bias); final LayerNorm; classifier."""
        E, w = self.embed_dim, self.window
        total = self.channels * self.patch ** 2 * E + E + 2 * E
        for i, (d, h) in enumerate(zip(self.depths, self.heads, strict=True)):
            W, F = self.stage_width(i), self.stage_ffn(i)
            total += d * (4 * (W * W + W) + 4 * W + 2 * W * F + F + W + (2 * w - 1) ** 2 * h)
            if i < len(self.depths) - 1:
                total += 8 * W + 4 * W * 2 * W
        last = self.stage_width(len(self.depths) - 1)
        return total + 2 * last + last * self.classes + self.classes

    def stage_spec(self, i: int) -> ModelSpec:
        """Stage i as an encoder ModelSpec (its blocks; the plan prices one window as one sequence)."""
        W = self.stage_width(i)
        return ModelSpec(name=f"{self.name} stage {i + 1}", kind="encoder", layers=self.depths[i], hidden=W,
                         q_heads=self.heads[i], kv_heads=self.heads[i], head_dim=W // self.heads[i],
                         ffn=self.stage_ffn(i), vocab=1, gated_ffn=False, norm="layernorm", qkv_bias=True,
                         out_bias=True, mlp_bias=True, image_size=self.window, patch_size=1, channels=1,
                         holds_pixels=False, source=self.source)


# --- reading a config.json ------------------------------------------------------------------------------------

def _int(cfg: dict, key: str, default=None, where: str = "config") -> int:
    value = cfg.get(key, default)
    if value is None:
        raise ValueError(f"{where}: missing {key!r}")
    return check_positive_int(f"{where} {key}", value, 1 << 24)


def _tower_from(vc: dict, kind: str, family: str = "") -> VisionTower:
    w = "vision_config"
    if kind in ("qwen2_vl", "qwen2_5_vl"):
        hidden = _int(vc, "embed_dim" if kind == "qwen2_vl" else "hidden_size",
                      1280 if kind == "qwen2_vl" else 1280, w)
        ffn = hidden * _int(vc, "mlp_ratio", 4, w) if kind == "qwen2_vl" else _int(vc, "intermediate_size", 3420, w)
        full = vc.get("fullatt_block_indexes", [7, 15, 23, 31]) if kind == "qwen2_5_vl" else []
        return VisionTower(kind=kind, layers=_int(vc, "depth", 32, w), hidden=hidden,
                           heads=_int(vc, "num_heads", 16, w), ffn=ffn, patch=_int(vc, "patch_size", 14, w),
                           channels=_int(vc, "in_channels", vc.get("in_chans", 3), w),
                           temporal_patch=_int(vc, "temporal_patch_size", 2, w),
                           merge=_int(vc, "spatial_merge_size", 2, w),
                           window_px=_int(vc, "window_size", 112, w) if kind == "qwen2_5_vl" else 0,
                           full_attention_layers=tuple(int(i) for i in full), act=str(vc.get("hidden_act") or ""))
    defaults = {"clip": (1024, 24, 16, 4096, 336, 14), "siglip": (1152, 27, 16, 4304, 896, 14)}[kind]
    return VisionTower(kind=kind, hidden=_int(vc, "hidden_size", defaults[0], w), act=str(vc.get("hidden_act") or ""),
                       layers=_int(vc, "num_hidden_layers", defaults[1], w),
                       heads=_int(vc, "num_attention_heads", defaults[2], w),
                       ffn=_int(vc, "intermediate_size", defaults[3], w),
                       image_size=_int(vc, "image_size", defaults[4], w), patch=_int(vc, "patch_size", defaults[5], w),
                       channels=_int(vc, "num_channels", 3, w),
                       # SiglipVisionConfig.vision_use_head defaults to true; Gemma3Config's tower sets it false
                       pooling_head=kind == "siglip" and bool(vc.get("vision_use_head", family != "gemma3")))


# the text model's model_type when the file leaves it out (each VLM's configuration_*.py in transformers 5.17)
_TEXT_TYPES = {"llava": "llama", "qwen2_vl": "qwen2", "qwen2_5_vl": "qwen2", "gemma3": "gemma3_text",
               "paligemma": "gemma"}
_TOWER_KIND = {"llava": "clip", "qwen2_vl": "qwen2_vl", "qwen2_5_vl": "qwen2_5_vl", "gemma3": "siglip",
               "paligemma": "siglip"}


def is_vision_language(cfg: dict) -> bool:
    return isinstance(cfg, dict) and isinstance(cfg.get("vision_config"), dict)


def vlm_from_hf(cfg: dict, label: str) -> VisionLanguageSpec:
    """A VisionLanguageSpec from a parsed VLM config.json (llava, qwen2_vl, qwen2_5_vl, gemma3, paligemma). A
    vision-language type whose tower is not modelled is refused by name."""
    from estimator.model.hf_config import from_hf_config

    family = str(cfg.get("model_type") or "").lower()
    if family not in VLM_TYPES:
        raise ValueError(f"config: model_type {family!r} has a vision tower this planner does not model; "
                         f"modelled vision-language models: {', '.join(VLM_TYPES)}")
    vc, tc = cfg["vision_config"], cfg.get("text_config")
    if not isinstance(tc, dict):  # Qwen2-VL files of transformers < 5 keep the text fields at the top level
        tc = {k: v for k, v in cfg.items() if k not in ("vision_config", "model_type")}
    text_type = str(tc.get("model_type") or "").lower()
    text_type = {"qwen2_vl_text": "qwen2", "qwen2_5_vl_text": "qwen2"}.get(text_type, text_type)
    text = {**tc, "model_type": text_type or _TEXT_TYPES[family]}
    if family in ("qwen2_vl", "qwen2_5_vl"):
        text.setdefault("tie_word_embeddings", cfg.get("tie_word_embeddings", False))
        text["use_sliding_window"] = False if text.get("use_sliding_window") is None else text["use_sliding_window"]
    elif "tie_word_embeddings" in cfg:
        text["tie_word_embeddings"] = cfg["tie_word_embeddings"]
    lm = from_hf_config(text, name=f"{label} language model")
    tower = _tower_from(vc, _TOWER_KIND[family], family)
    if family == "paligemma" and "projection_dim" in vc:
        shapes = ((tower.hidden, _int(vc, "projection_dim", where="vision_config")),)
    else:
        shapes = ()
    return VisionLanguageSpec(name=label, family=family, tower=tower, lm=lm, projector_shapes=shapes,
                              pooled_tokens=_int(cfg, "mm_tokens_per_image", 256),
                              source=f"Hugging Face config.json ({family})")


def swin_from_hf(cfg: dict, label: str) -> SwinSpec:
    classes = len(cfg["id2label"]) if isinstance(cfg.get("id2label"), dict) else cfg.get("num_labels", 1000)
    depths, heads = cfg.get("depths", [2, 2, 6, 2]), cfg.get("num_heads", [3, 6, 12, 24])
    if not isinstance(depths, list) or not isinstance(heads, list):
        raise ValueError("config depths / num_heads: expected lists of whole numbers")
    return SwinSpec(name=label, embed_dim=_int(cfg, "embed_dim", 96), depths=tuple(depths), heads=tuple(heads),
                    window=_int(cfg, "window_size", 7), patch=_int(cfg, "patch_size", 4),
                    channels=_int(cfg, "num_channels", 3), mlp_ratio=float(cfg.get("mlp_ratio", 4.0)),
                    image_size=_int(cfg, "image_size", 224), classes=check_positive_int("config num_labels", classes,
                                                                                         1 << 24),
                    source="Hugging Face config.json (swin)")


def with_lm_layers(spec: VisionLanguageSpec, layers: int) -> VisionLanguageSpec:
    return replace(spec, lm=replace(spec.lm, layers=layers, window_per_layer=None))
