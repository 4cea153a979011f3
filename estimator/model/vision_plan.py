"""Plans for images: a ViT encoder at an image size, Swin stage by stage, and a vision-language model tower by tower.

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

from estimator.call.attention import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES, estimate_call
from estimator.call.config import AttentionCall, element_bytes
from estimator.model.budget import Plan, budget
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
    from estimator.model.inputs import attention_layers

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
    fits = not reason and total + reserve <= capacity
    verdict = reason or (f"fits: {total / 2**30:.2f} GiB of {capacity / 2**30:.2f} GiB per GPU" if fits else
                         f"does not fit: {total / 2**30:.2f} GiB needed, {capacity / 2**30:.2f} GiB per GPU")
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
        return p.plan.step_time_ms
    return p.plan.prefill_time_ms


def _vlm(req: VisionRequest, tokens: dict) -> VisionPlan:
    m, base = req.model, req.base
    training = base.mode == "training"
    es = element_bytes(base.dtype)
    b, k = base.batch_per_gpu, req.images
    nv, lm_len = tokens["vision_encoder"], tokens["language_model"]
    crops = tokens.get("crops", 1)
    tower_trained = training and req.trainable == "all"
    lm_trained = training and req.trainable != "projector"
    per_crop = nv // crops
    parts = []
    tower_plan = None
    if k:
        tower_plan = _sub(req, m.tower.encoder_spec(m.name), per_crop, b * k * crops * base.dp,
                          frozen=not tower_trained)
        parts.append(Part(name="vision tower", params=m.tower.params, trainable=tower_trained, plan=tower_plan,
                          tokens=nv))
    parts.append(Part(name="projector", params=m.projector_params, trainable=training, plan=None,
                      tokens=m.image_lm_tokens(nv, crops)))
    lm_plan = _sub(req, m.lm, lm_len, base.batch, frozen=False)
    parts.append(Part(name="language model", params=m.lm.params, trainable=lm_trained, plan=lm_plan, tokens=lm_len))
    states = {p.name: _state(req, p.params, p.trainable) for p in parts}
    persistent = [(f"{p.name} weights", states[p.name][0]) for p in parts]
    optimizer = sum(s[2] for s in states.values())
    if training:
        persistent.append(("optimizer state", optimizer))
    # the tower's output, the projector's GEMM inputs (its saved activations) and the image features it hands over
    feats_in = b * k * nv * m.tower.hidden * es
    proj_in = sum(b * k * _rows(m, nv, crops, i) * cin * es for i, (cin, _) in enumerate(m.projector_shapes))
    feats_out = b * k * m.image_lm_tokens(nv, crops) * m.lm.hidden * es
    pixels = b * k * crops * m.tower.channels * m.tower.temporal_patch * (per_crop * m.tower.patch ** 2) * es
    hidden_states = (m.tower.layers + 1) * feats_in if m.family == "llava" else 0  # output_hidden_states=True
    rows = b * k * nv  # tower tokens per GPU
    if not training:
        kv = lm_plan.kv_cache_bytes
        tower_act = _tower_inference_act(m, tower_plan, rows, es) if tower_plan else 0
        phases = [("vision tower", [("vision tower activations", tower_act + pixels + hidden_states)]),
                  ("language model", [("language model kv cache", kv), ("projector image features", feats_out),
                                      ("language model activations", lm_plan.activation_bytes)])]
        return _finish(req, tokens, parts, phases, persistent, kv, lm_plan.kv_cache_bytes_per_token,
                       _projector_ms(req, m, nv, crops, False))
    grads = {n: s[1] for n, s in states.items()}
    steps = sum(s[3] for s in states.values())
    sig = m.tower.layers * rows * m.tower.ffn * es if m.tower.quick_gelu else 0  # QuickGELU's saved sigmoid
    tower_saved = _saved(tower_plan) + hidden_states + sig if (tower_plan and tower_trained) else 0
    lm_back = _backward_peak(lm_plan, lm_trained) - (0 if lm_trained else _frozen_linear_inputs(m.lm, lm_plan))
    phases = [("language model backward", [("vision tower saved activations", tower_saved),
                                           ("projector saved activations", proj_in + feats_out),
                                           ("language model backward peak", lm_back)]),
              ("optimizer step", [("gradients", sum(grads.values())), ("optimizer step temporaries", steps)])]
    if tower_plan is not None:
        if tower_trained:
            phases.append(("vision tower backward", [
                ("language model gradients", grads["language model"] + grads["projector"]),
                ("vision tower backward peak", _backward_peak(tower_plan, True) + sig)]))
        else:
            phases.append(("vision tower forward", [("vision tower activations",
                                                     _tower_inference_act(m, tower_plan, rows, es) + pixels
                                                     + hidden_states)]))
    return _finish(req, tokens, parts, phases, persistent, 0, 0, _projector_ms(req, m, nv, crops, True))


def _tower_inference_act(m: VisionLanguageSpec, plan: Plan, rows: int, es: int) -> int:
    """The tower's forward peak without grad: the encoder layer's, with the family's own extras - QuickGELU's
    sigmoid beside fc1's output in the MLP phase, and Qwen's fp32 rotation of q and k (the fp32 copies of q and k,
    q_embed and the two products and their sum: 12 bf16-widths beside the qkv output and the residuals)."""
    d = plan.activation_detail
    level = d.get("model_level_bytes", 0)
    act = plan.activation_bytes
    if m.tower.kind in ("qwen2_vl", "qwen2_5_vl") and plan.inputs.backend != "flash-attn" and "ffn_phase_bytes" in d:
        # VisionAttention splits the sequence at cu_seqlens and runs one call per image (batch 1) unless it is
        # flash-attention's varlen kernel: the call's peak is one image's, not the batch's
        one = _attn(replace(plan, inputs=replace(plan.inputs, batch=plan.inputs.dp)))
        delta = max(a.memory.peak_extra_bytes - o.memory.peak_extra_bytes for a, o in zip(_attn(plan), one))
        act = max(d["attention_phase_bytes"] - max(0, delta) + level, d["ffn_phase_bytes"] + level,
                  d.get("logits_phase_bytes", 0))
    if m.tower.quick_gelu and "ffn_phase_bytes" in d:
        act = max(act, d["ffn_phase_bytes"] + level + rows * m.tower.ffn * es)
    if m.tower.fp32_rotary:
        u = rows * m.tower.hidden * es
        act = max(act, 2 * u + 3 * u + 12 * u + level)
    return act


def _frozen_linear_inputs(lm: ModelSpec, plan: Plan) -> int:
    """Bytes a frozen language model does not save: each Linear saves its input only to compute its weight's
    gradient, so with requires_grad False the q/k/v input, o_proj's input, the MLP input and down_proj's input of
    every layer, and the LM head's input, are never kept (the gradient still flows through the layer to the
    projector)."""
    inp = plan.inputs
    rows, es = inp.batch_per_gpu * inp.tokens_per_gpu, element_bytes(inp.dtype)
    per_layer = (2 * lm.hidden + lm.q_heads * lm.head_dim + lm.ffn) * rows * es
    # the same for every RMSNorm's `weight * normed`: the normed input is saved only for the weight's gradient (in
    # the residual dtype: fp32 under autocast); norms_per_layer per layer and the final norm
    rs = 4 if inp.recipe is not None and inp.recipe.autocast else es
    norms = (lm.norms_per_layer * lm.layers + 1) * rows * lm.hidden * rs
    return lm.layers * per_layer + rows * lm.hidden * es + norms


def _rows(m: VisionLanguageSpec, nv: int, crops: int, i: int) -> int:
    """Rows of projector GEMM i for one image: Qwen's merger runs on the merged tokens."""
    if m.family in ("qwen2_vl", "qwen2_5_vl"):
        return nv // m.tower.merge ** 2
    return m.image_lm_tokens(nv, crops) if m.family != "llava" else nv


def _projector_ms(req: VisionRequest, m: VisionLanguageSpec, nv: int, crops: int, training: bool) -> float:
    """The projector's GEMMs at the plan's GEMM roofline (2·rows·in·out FLOPs each; x3 for a training step)."""
    from estimator.model.time import GEMM_EFFICIENCY

    gpu = gpu_of(req.base)
    rows = req.base.batch_per_gpu * req.images
    flops = sum(2 * rows * _rows(m, nv, crops, i) * cin * cout for i, (cin, cout) in enumerate(m.projector_shapes))
    peak = gpu.peak_flops_per_s[req.base.dtype]
    return (3 if training else 1) * flops / (peak * GEMM_EFFICIENCY) * 1e3


def _swin(req: VisionRequest, tokens: dict) -> VisionPlan:
    m, base = req.model, req.base
    training = base.mode == "training"
    es, b = element_bytes(base.dtype), base.batch_per_gpu * max(1, req.images)
    stages = swin_stages(*req.image_size, m.patch, m.window, len(m.depths))
    gpu = gpu_of(base)
    parts, extra_saved, extra_peak = [], [], []
    for i, s in enumerate(stages):
        heads, w2 = m.heads[i], s.window ** 2
        call = AttentionCall(batch=b * s.windows, q_heads=heads, kv_heads=heads, head_dim=m.stage_width(i) // heads,
                             q_len=w2, kv_len=w2, dtype=base.dtype, causal=False, mask="float",
                             mode="forward_backward" if training else "forward",
                             backend="eager" if base.backend == "eager" else base.backend)
        est = estimate_call(call, gpu, base.torch_version)
        backend = est.selected_backend if est.supported else base.backend
        plan = budget(replace(base, model=m.stage_spec(i), seq_len=w2, batch=b * s.windows * base.dp, window=None,
                              backend="eager" if base.backend == "eager" else (
                                  backend if backend != "none" else base.backend)))
        if not est.supported:
            plan = replace(plan, supported=False, verdict=f"backend {base.backend} cannot run Swin's window "
                           "attention with its float relative-position bias: " +
                           "; ".join(r for rs in est.reasons.values() for r in rs)[:300])
        params = m.params if i == 0 else 0
        parts.append(Part(name=f"stage {i + 1}", params=params, trainable=training, plan=plan, tokens=s.tokens))
        # bias + shift mask, per shifted block (the bias alone, (1, heads, w², w²), broadcasts: no copy)
        mask = b * s.windows * heads * w2 * w2 * es if s.shifted else 0
        merge = 2 * b * s.tokens * m.stage_width(i) * es if i < len(stages) - 1 else 0  # concat + its LayerNorm
        extra_saved.append((m.depths[i] // 2) * mask + merge)
        # SwinLayer.forward keeps its locals to the end of the block: the partitioned windows, the attention output
        # and the reversed windows (3 more (tokens, width) tensors) stay alive beside the MLP's fc1 and GELU; in the
        # attention phase the rolled copy and the partitioned windows sit beside q, k, v and the call, with the
        # combined bias + shift mask of a shifted block, and eager's `scores + mask` (one more scores-sized tensor)
        u = b * s.padded_height * s.padded_width * m.stage_width(i) * es
        d, level = plan.activation_detail, plan.activation_detail.get("model_level_bytes", 0)
        pixels = b * m.channels * req.image_size[0] * req.image_size[1] * es  # pixel_values, held by the caller
        attn_phase = d.get("attention_phase_bytes", 0) + 2 * u + mask * (2 if base.backend == "eager" else 1)
        extra_peak.append(max(plan.activation_bytes + 3 * u, attn_phase + level) + pixels - plan.activation_bytes)
    states = _state(req, m.params, training)
    persistent = [("swin weights", states[0])] + ([("optimizer state", states[2])] if training else [])
    if not training:
        phases = [(f"stage {i + 1}", [(f"stage {i + 1} activations", p.plan.activation_bytes + extra_peak[i])])
                  for i, p in enumerate(parts)]
        return _finish(req, tokens, parts, phases, persistent, 0, 0)
    saved = [_saved(p.plan) + extra_saved[i] for i, p in enumerate(parts)]
    stage_grads = [_state(req, p.plan.inputs.model.params, True)[1] for p in parts]
    phases = []
    for j, p in enumerate(parts):
        below = sum(saved[:j])
        later_grads = sum(stage_grads[j + 1:])
        phases.append((f"stage {j + 1} backward", [
            ("saved activations of earlier stages", below),
            (f"stage {j + 1} backward peak", _backward_peak(p.plan, True) + extra_saved[j]),
            ("gradients of later stages", later_grads)]))
    phases.append(("optimizer step", [("gradients", states[1]), ("optimizer step temporaries", states[3])]))
    return _finish(req, tokens, parts, phases, persistent, 0, 0)


def vision_plan(req: VisionRequest, *, solve: bool = True) -> VisionPlan:
    """The plan; with `solve`, the largest text tokens (VLM) or batch that fit."""
    tokens = request_tokens(req)
    m = req.model
    if not isinstance(m, (VisionLanguageSpec, SwinSpec)):
        raise ValueError("model: a ViT encoder is planned by make_plan at the image's tokens (vit_inputs)")
    build = _vlm if isinstance(m, VisionLanguageSpec) else _swin
    plan = build(req, tokens)
    if not solve or not plan.supported:
        return plan
    max_batch = _largest(lambda x: build(replace(req, base=replace(req.base, batch=x)),
                                         request_tokens(req)).fits, req.base.batch, 1 << 16)
    max_seq = None
    if isinstance(m, VisionLanguageSpec):
        max_seq = _largest(lambda x: _try(build, replace(req, text_tokens=x)), max(1, req.text_tokens), 1 << 22)
    return replace(plan, max_batch=max_batch, max_seq_len=max_seq)


def _try(build, req: VisionRequest) -> bool:
    try:
        return build(req, request_tokens(req)).fits
    except ValueError:
        return False


def _largest(fits, start: int, high: int) -> int:
    """Largest x in [1, high] with fits(x) (monotone), galloping from `start`; 0 when 1 does not fit."""
    if not fits(1):
        return 0
    ok, bad = 1, None
    x = max(1, start)
    if fits(x):
        ok = x
        while bad is None:
            nxt = min(ok * 2, high)
            if nxt == ok:
                return ok
            if fits(nxt):
                ok = nxt
            else:
                bad = nxt
    else:
        bad = x
    while bad - ok > 1:
        mid = (ok + bad) // 2
        ok, bad = (mid, bad) if fits(mid) else (ok, mid)
    return ok
