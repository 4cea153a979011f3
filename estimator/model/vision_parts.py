"""The pieces of an image plan (request, parts, joining rule, result) for a Swin stage by stage and a
vision-language model tower by tower.

Every part is priced by the whole-model budget (`estimator.model.budget.budget`) of its own encoder or decoder
`ModelSpec` - layers, GEMMs, each attention call per backend, activations - and the parts are joined in the order
transformers 5.17 runs them (*ForConditionalGeneration.forward: the tower over every image, the projector, then the
language model over text + image tokens; backward in reverse):

  inference  weights (exact per part) + the larger of the tower's phase (its peak layer, its input pixels) and the
             language-model phase (the KV cache, the image features handed over, the LM's peak layer)
  training   weights + optimizer state of the trained parts + the largest of: the LM backward peak (with the tower's
             saved activations, its autocast weight copies and the projector's inputs still held), the tower's
             backward peak (the LM and projector gradients allocated by then) and the optimizer step. A frozen part
             keeps no gradient or optimizer state; a frozen tower (`tower-frozen`) runs as a forward without grad
             and saves nothing; `projector` also freezes the LM, whose activations are still saved (the gradient
             flows through it to the projector) but whose weight gradients are never allocated.
Swin: one budget per stage with the window as the sequence (window² tokens, batch x windows), its attention call
taking the float relative-position bias (and, in shifted blocks, the bias plus the shift mask materialised as a
(batch·windows, heads, w², w²) tensor: transformers 5.17 SwinAttention.forward), so flash cannot run it.
Tensor and context parallelism are not modelled for images (refused by name); data parallelism is.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from estimator.call.attention import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES
from estimator.call.config import element_bytes
from estimator.model.budget import Plan, budget, fit_verdict
from estimator.model.inputs import PlanInputs, gpu_of
from estimator.model.recipes import optimizer_state_bytes, optimizer_step_transient_bytes
from estimator.model.specs import ModelSpec
from estimator.model.vision import TRAINABLE, SwinSpec, VisionLanguageSpec
from estimator.model.vision_tokens import image_tokens, swin_stages

MAX_IMAGES = 256


@dataclass(frozen=True, kw_only=True)
class VisionRequest:
    """One image planning question: the model, the workload flags (`base`, whose model and seq_len the parts
    replace), the image size (pixels, height x width), images per sequence, text tokens, what training updates."""

    model: object  # VisionLanguageSpec | SwinSpec | ModelSpec (a ViT encoder)
    base: PlanInputs
    image_size: tuple[int, int] | None = None
    images: int = 1
    text_tokens: int = 0
    trainable: str = "all"
    pan_and_scan: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.model, (VisionLanguageSpec, SwinSpec, ModelSpec)):
            raise ValueError("model: expected a vision-language model, a Swin or a ViT encoder")
        if isinstance(self.model, ModelSpec) and self.model.kind != "encoder":
            raise ValueError("--image-size: images apply to a vision encoder or a vision-language config")
        if not isinstance(self.images, int) or isinstance(self.images, bool) or not 0 <= self.images <= MAX_IMAGES:
            raise ValueError(f"images: expected 0..{MAX_IMAGES} images per sequence, got {self.images!r}")
        if self.trainable not in TRAINABLE:
            raise ValueError(f"trainable: unknown value {self.trainable!r}; expected one of {', '.join(TRAINABLE)}")
        if self.base.tp > 1 or self.base.cp > 1:
            raise ValueError("tp: tensor and context parallelism are not modelled for image models (tp 1, cp 1)")
        if self.trainable != "all" and not isinstance(self.model, VisionLanguageSpec):
            raise ValueError("trainable: tower-frozen and projector apply to vision-language models")
        if self.image_size is None and not isinstance(self.model, ModelSpec):
            side = self.model.tower.image_size if isinstance(self.model, VisionLanguageSpec) else 0
            side = side or getattr(self.model, "image_size", 0) or 448
            object.__setattr__(self, "image_size", (side, side))
        if isinstance(self.model, VisionLanguageSpec) and self.images == 0 and self.text_tokens < 1:
            raise ValueError("seq_len: a vision-language plan without images needs text tokens (--seq-len)")


@dataclass(frozen=True, kw_only=True)
class Part:
    name: str
    params: int
    trainable: bool
    plan: Plan | None  # the part's own budget (None: the projector, priced here)
    tokens: int = 0
    saved_ms: float = 0.0  # training step time its plan prices that a frozen part never runs (vision_vlm.py)
    extra_ms: float = 0.0  # what the part runs beyond its encoder plan (Swin's window ops: vision_swin.py)


@dataclass(frozen=True, kw_only=True)
class VisionPlan:
    request: VisionRequest
    tokens: dict
    parts: tuple[Part, ...]
    components: tuple[tuple[str, int], ...]
    phase: str  # the phase at the peak
    total_bytes: int
    capacity_bytes: int
    fits: bool
    supported: bool
    verdict: str
    weights_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    kv_cache_bytes: int
    kv_cache_bytes_per_token: int
    activation_bytes: int
    attention_scores_bytes: int
    prefill_flops: int
    prefill_time_ms: float
    step_time_ms: float
    decode_flops_per_token: int | None
    decode_time_ms_per_token: float | None
    selected_backend: str
    time_split_ms: dict = field(hash=False)
    memory_split_bytes: dict = field(hash=False)
    max_seq_len: int | None = None
    max_batch: int | None = None
    decode_first_pass_ms_per_token: float | None = None  # not priced for image models

    @property
    def params(self) -> int:
        return sum(p.params for p in self.parts)

    def to_dict(self) -> dict:
        lm = next((p.plan for p in self.parts if p.name == "language model"), None)
        main = lm or self.parts[-1].plan
        shares = {k: getattr(main, k) for k in ("attention_share", "ffn_share", "embedding_share")} if main else {}
        out = {"params": self.params, "params_per_gpu": self.params, "weights_bytes": self.weights_bytes,
               "kv_cache_bytes": self.kv_cache_bytes, "kv_cache_bytes_per_token": self.kv_cache_bytes_per_token,
               "attention_scores_bytes": self.attention_scores_bytes, "activation_bytes": self.activation_bytes,
               "gradient_bytes": self.gradient_bytes, "optimizer_bytes": self.optimizer_bytes,
               "total_bytes": self.total_bytes, "capacity_bytes": self.capacity_bytes, "fits": self.fits,
               "supported": self.supported, "verdict": self.verdict, "max_seq_len": self.max_seq_len,
               "max_batch": self.max_batch, "prefill_flops": self.prefill_flops,
               "decode_flops_per_token": self.decode_flops_per_token, "prefill_time_ms": self.prefill_time_ms,
               "step_time_ms": self.step_time_ms, "decode_time_ms_per_token": self.decode_time_ms_per_token,
               **shares, "selected_backend": self.selected_backend, "tokens": self.tokens,
               "components": [{"component": c, "bytes": b} for c, b in self.components], "peak_phase": self.phase,
               "memory_split_bytes": self.memory_split_bytes, "time_split_ms": self.time_split_ms,
               "parts": [{"part": p.name, "params": p.params, "trainable": p.trainable, "tokens": p.tokens,
                          "selected_backend": p.plan.selected_backend if p.plan else "",
                          "attention_calls": _calls(p.plan)} for p in self.parts]}
        inp = self.request.base
        out["inputs"] = {"model": getattr(self.request.model, "name", ""), "batch": inp.batch, "dtype": inp.dtype,
                         "mode": inp.mode, "precision": inp.precision, "optimizer": inp.optimizer,
                         "backend": inp.backend, "gpu": inp.gpu, "gpus": inp.gpus, "trainable": self.request.trainable,
                         "image_size": list(self.request.image_size or ()), "images": self.request.images,
                         "text_tokens": self.request.text_tokens}
        return out


def _calls(plan: Plan | None) -> list[str]:
    if plan is None:
        return []
    c = [f"{a.memory.call.batch}x{a.memory.call.q_heads}x{a.memory.call.q_len}x{a.memory.call.kv_len} "
         f"-> {a.memory.selected_backend}" for a in _attn(plan)]
    return c


def _attn(plan: Plan):
    from estimator.model.layer_attention import attention_layers

    return attention_layers(plan.inputs)


# --- tokens ---------------------------------------------------------------------------------------------------

def request_tokens(req: VisionRequest) -> dict:
    """{"vision_encoder": tokens per image into the tower, "language_model": the LM's sequence, "text": ...}."""
    m, (h, w) = req.model, req.image_size or (0, 0)
    if isinstance(m, ModelSpec):  # ViT
        t = image_tokens("vit", h, w, patch=m.patch_size) if req.image_size else None
        n = t.vision_tokens if t else m.native_tokens
        return {"vision_encoder": n, "language_model": 0, "text": 0, "images": max(1, req.images),
                "image_size": [h, w] if t else [m.image_size, m.image_size], "rule": t.rule if t else "native"}
    if isinstance(m, SwinSpec):
        stages = swin_stages(h, w, m.patch, m.window, len(m.depths))
        return {"vision_encoder": stages[0].tokens, "language_model": 0, "text": 0, "images": max(1, req.images),
                "image_size": [h, w], "stages": [{"tokens": s.tokens, "grid": [s.height, s.width],
                                                  "window": s.window, "windows": s.windows, "shifted": s.shifted}
                                                 for s in stages],
                "rule": "ceil(H/4) x ceil(W/4), padded to the window, halved a side per stage"}
    t = image_tokens(m.family, h, w, patch=m.tower.patch, tower_image_size=m.tower.image_size,
                     pooled_tokens=m.pooled_tokens, pan_and_scan=req.pan_and_scan, merge=m.tower.merge)
    lm_per_image = t.lm_tokens
    return {"vision_encoder": t.vision_tokens, "language_model": req.text_tokens + req.images * lm_per_image,
            "text": req.text_tokens, "images": req.images, "image_size": [t.height, t.width],
            "image_tokens_per_image": lm_per_image, "crops": t.crops, "rule": t.rule}


# --- parts ----------------------------------------------------------------------------------------------------

def _sub(req: VisionRequest, model: ModelSpec, seq_len: int, batch: int, *, frozen: bool = False,
         backend: str | None = None) -> Plan:
    base = req.base
    kw = dict(model=model, seq_len=seq_len, batch=batch, window=None, backend=backend or base.backend)
    if frozen and base.mode == "training":
        kw.update(mode="inference", dtype=base.dtype, precision=None)
    return budget(replace(base, **kw))


def _state(req: VisionRequest, params: int, trainable: bool) -> tuple[int, int, int, int]:
    """(weights, gradients, optimizer state, optimizer-step temporaries) of `params` parameters."""
    base, recipe = req.base, req.base.recipe
    if recipe is None:
        return params * element_bytes(base.dtype), 0, 0, 0
    w = params * recipe.weight_bytes
    if not trainable:
        return w, 0, 0, 0
    opt = optimizer_state_bytes(base.optimizer, params, recipe.optimizer_param_bytes)
    opt += params * 4 if recipe.master_dtype else 0
    return w, w, opt, optimizer_step_transient_bytes(base.optimizer, params, recipe.optimizer_param_bytes)


def _saved(plan: Plan) -> int:
    """A training sub-plan's activations saved for backward (layers + model level) and autocast weight copies."""
    d = plan.activation_detail
    return d.get("stored_layers_bytes", 0) + d.get("model_level_bytes", 0) + d.get("weight_casts_bytes", 0)


def _backward_peak(plan: Plan, with_grads: bool) -> int:
    d = plan.activation_detail
    if with_grads:
        return d.get("backward_peak_bytes", plan.activation_bytes)
    if "backward_peak_frozen_bytes" in d:  # the weights frozen: no gradient decides the peak phase
        return d["backward_peak_frozen_bytes"]
    return d.get("backward_peak_activations_bytes", plan.activation_bytes) + d.get("weight_casts_bytes", 0)


def _unsupported(plans: list[Plan]) -> str:
    bad = [p for p in plans if p is not None and not p.supported]
    return f"{bad[0].inputs.model.name}: {bad[0].verdict}" if bad else ""


def _finish(req, tokens, parts, phases, persistent, kv, kv_per_token, extra_time=0.0) -> VisionPlan:
    """Join the phases: persistent components + the largest phase + workspaces and the CUDA context."""
    training = req.base.mode == "training"
    workspace = (2 if training else 1) * CUBLAS_WORKSPACE_BYTES
    name, items = max(phases, key=lambda p: sum(b for _, b in p[1]))
    components = tuple(persistent) + tuple((f"{label} ({name})", b) for label, b in items) + (
        ("cuBLAS workspace" + ("s" if training else ""), workspace), ("CUDA context", CUDA_CONTEXT_BYTES))
    total = sum(b for _, b in components)
    plans = [p.plan for p in parts if p.plan is not None]
    capacity = gpu_of(req.base).memory_bytes
    reason = _unsupported(plans)
    reserve = max((p.allocator_reserve_bytes for p in plans), default=0)
    fit = fit_verdict(total_bytes=total, capacity_bytes=capacity, allocator_reserve_bytes=reserve,
                      cannot_run=reason)  # the one verdict (estimator/model/budget.py), the reserve counted
    fits, verdict = fit.fits, fit.text()
    time_key = "step_time_ms" if training else "prefill_time_ms"
    split_t = {p.name: round(_part_time(p, training), 4) for p in parts}
    if extra_time:
        split_t["projector"] = round(split_t.get("projector", 0.0) + extra_time, 4)
    split_m = {}
    for label, b in components:
        key = next((p.name for p in parts if label.startswith(p.name)), "other")
        split_m[key] = split_m.get(key, 0) + b
    lm = next((p.plan for p in parts if p.name == "language model"), None)
    weights = sum(b for c, b in persistent if "weights" in c)
    grads = sum(_state(req, p.params, p.trainable)[1] for p in parts) if training else 0
    optimizer = sum(b for c, b in persistent if "optimizer" in c)
    acts = total - weights - optimizer - kv - workspace - CUDA_CONTEXT_BYTES
    prefill = sum(_part_time(p, False) for p in parts) + (extra_time if not training else extra_time / 3)
    step = sum(_part_time(p, True) for p in parts) + extra_time if training else prefill
    del time_key
    return VisionPlan(
        request=req, tokens=tokens, parts=tuple(parts), components=components, phase=name, total_bytes=total,
        capacity_bytes=capacity, fits=fits, supported=not reason, verdict=verdict, weights_bytes=weights,
        gradient_bytes=grads, optimizer_bytes=optimizer, kv_cache_bytes=kv, kv_cache_bytes_per_token=kv_per_token,
        activation_bytes=max(0, acts - (grads if "optimizer" in name else 0)),
        attention_scores_bytes=max((p.attention_scores_bytes for p in plans), default=0),
        prefill_flops=sum(p.prefill_flops for p in plans), prefill_time_ms=round(prefill, 4),
        step_time_ms=round(step, 4), decode_flops_per_token=lm.decode_flops_per_token if lm else None,
        decode_time_ms_per_token=lm.decode_time_ms_per_token if lm else None,
        selected_backend=(lm or plans[-1]).selected_backend, time_split_ms=split_t, memory_split_bytes=split_m)


def _part_time(p: Part, training: bool) -> float:
    if p.plan is None:
        return 0.0
    if training and p.plan.inputs.mode == "training":
        return p.plan.step_time_ms - p.saved_ms + p.extra_ms
    return p.plan.prefill_time_ms + (p.extra_ms if p.plan.inputs.mode == "inference" else 0.0)
