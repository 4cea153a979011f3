"""A vision-language model's plan, part by part (the joining rules are in estimator/model/vision_plan.py): the
tower over every image, the projector's GEMMs, the language model over text + image tokens, with what each part's
modeling file in transformers 5.17 adds to its encoder/decoder layer."""

from __future__ import annotations

from dataclasses import replace

from estimator.call.config import element_bytes
from estimator.model.budget import Plan
from estimator.model.inputs import gpu_of
from estimator.model.specs import ModelSpec
from estimator.model.vision import VisionLanguageSpec
from estimator.model.vision_parts import (
    Part,
    VisionPlan,
    VisionRequest,
    _attn,
    _backward_peak,
    _finish,
    _saved,
    _state,
    _sub,
)
from estimator.model.vision_tokens import qwen_vl_windows


def vlm_plan(req: VisionRequest, tokens: dict) -> VisionPlan:
    m, base = req.model, req.base
    training = base.mode == "training"
    es = element_bytes(base.dtype)
    b, k = base.batch_per_gpu, req.images
    nv, lm_len = tokens["vision_encoder"], tokens["language_model"]
    crops = tokens.get("crops", 1)
    tower_trained = training and req.trainable == "all"
    lm_trained = training and req.trainable != "projector"
    per_crop = nv // crops
    parts, towers = [], []
    if k:
        towers = _tower_plans(req, m, per_crop, b * k * crops * base.dp, frozen=not tower_trained)
        windows = len(_windows(m, tokens))
        for i, (label, plan) in enumerate(towers):
            calls = b * k * crops * (windows if label.endswith("windowed blocks") else 1)
            extra = tower_block_extras_ms(m, plan, calls) * plan.inputs.model.layers
            parts.append(Part(name=label, params=m.tower.params if i == 0 else 0, trainable=tower_trained,
                              plan=plan, tokens=nv, extra_ms=extra))
    tower_plan = towers[0][1] if towers else None
    parts.append(Part(name="projector", params=m.projector_params, trainable=training, plan=None,
                      tokens=m.image_lm_tokens(nv, crops)))
    lm_plan = _sub(req, image_masked_lm(m, lm_len, k), lm_len, base.batch, frozen=False)
    parts.append(Part(name="language model", params=m.lm.params, trainable=lm_trained, plan=lm_plan, tokens=lm_len,
                      saved_ms=frozen_weights_saving_ms(lm_plan) if training and not lm_trained else 0.0,
                      extra_ms=image_mask_ms(m, k, b)))
    states = {p.name: _state(req, p.params, p.trainable) for p in parts}
    persistent = [(f"{p.name} weights", states[p.name][0]) for p in parts if p.params]
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
        tower_act = max((_tower_inference_act(m, t, rows, es) for _, t in towers), default=0)
        phases = [("vision tower", [("vision tower activations", tower_act + pixels + hidden_states)]),
                  ("language model", [("language model kv cache", kv), ("projector image features", feats_out),
                                      ("language model activations", lm_plan.activation_bytes)])]
        return _finish(req, tokens, parts, phases, persistent, kv, lm_plan.kv_cache_bytes_per_token,
                       _projector_ms(req, m, nv, crops, False))
    grads = {n: s[1] for n, s in states.items()}
    steps = sum(s[3] for s in states.values())
    sig = m.tower.layers * rows * m.tower.ffn * es if m.tower.quick_gelu else 0  # QuickGELU's saved sigmoid
    saved = [_saved(t) for _, t in towers]
    tower_saved = sum(saved) + hidden_states + sig if (towers and tower_trained) else 0
    lm_back = _backward_peak(lm_plan, lm_trained) - (0 if lm_trained else _frozen_linear_inputs(m.lm, lm_plan))
    phases = [("language model backward", [("vision tower saved activations", tower_saved),
                                           ("projector saved activations", proj_in + feats_out),
                                           ("language model backward peak", lm_back)]),
              ("optimizer step", [("gradients", sum(grads.values())), ("optimizer step temporaries", steps)])]
    if tower_plan is not None:
        if tower_trained:
            phases.append(("vision tower backward", [
                ("language model gradients", grads["language model"] + grads["projector"]),
                ("vision tower backward peak", max(_backward_peak(t, True) + sum(saved) - saved[i]
                                                   for i, (_, t) in enumerate(towers)) + sig)]))
        else:
            phases.append(("vision tower forward", [("vision tower activations",
                                                     max(_tower_inference_act(m, t, rows, es) for _, t in towers)
                                                     + pixels + hidden_states)]))
    return _finish(req, tokens, parts, phases, persistent, 0, 0, _projector_ms(req, m, nv, crops, True))


def image_masked_lm(m: VisionLanguageSpec, lm_len: int, images: int) -> ModelSpec:
    """The language model as it runs with image tokens in its sequence. Gemma-3 and PaliGemma hand the LM the
    processor's token_type_ids, and their image tokens (PaliGemma: the whole prefix) attend bidirectionally within
    their block (transformers 5.17 gemma3/modeling_gemma3.py create_masks_for_vision_model: OR(causal, blockwise)
    for the global layers, AND(sliding window, OR(causal, blockwise)) for the sliding ones; paligemma/
    modeling_paligemma.py: block_sequence_ids on the prefix). masking_utils.create_causal_mask then sets
    allow_is_causal_skip = False, so SDPA gets a dense (batch, 1, n, n) bool mask in every layer instead of
    is_causal: the global layers run the same bool-masked n x n call (flash cannot take it; k and v repeated to
    every query head) that a sliding layer runs once its keys reach the window. Priced so: each layer's window
    capped at the LM sequence (a global layer's "window" the whole sequence), which makes every layer the dense
    bool-masked call. The other families (LLaVA, Qwen) keep is_causal."""
    if m.family not in ("gemma3", "paligemma") or images < 1:
        return m.lm
    n = max(1, lm_len)
    windows = tuple(n if w is None else min(w, n) for w in m.lm.window_per_layer)
    return replace(m.lm, window_per_layer=windows)


# Gemma-3 with images builds its language model's two masks in create_masks_for_vision_model (transformers 5.17
# gemma3/modeling_gemma3.py): the global layers' OR(causal, blockwise) mask from block_sequence_ids, and the sliding
# layers' AND(sliding window, OR(causal, blockwise)) through or_mask_function / and_mask_function, which sets
# use_vmap (masking_utils.create_causal_mask) so sdpa_mask builds it with four nested torch.vmap levels over
# (batch, head, q, kv) under TransformGetItemToIndex: Python and functorch dispatch on the host, once per forward,
# with the device idle (the mask is the first thing the language model needs). Measured on the H200 by
# synchronising around the call (`python bench/bench_vision_parts.py --cases
# validation/cases/h200_vision_parts_probe.csv`, validation/data/h200_vision_parts_probe.jsonl `mask_ms`): Gemma-3-4B,
# batch 1 with 2,306 LM tokens 6.3 ms (6.2-6.8 over 5 reps), batch 2 with 1,028 tokens 10.2 ms (9.2-10.5): about 5.1-6.3
# ms a sequence, whatever its length (the vmap's dispatch, not the mask's n² elements, sets it). Priced per sequence at
# the mean of the two, so a batch-1 row is planned 0.6 ms under its measurement and a batch-2 row 1.2 ms over.
GEMMA3_IMAGE_MASK_MS_PER_SEQUENCE = 5.7


def image_mask_ms(m: VisionLanguageSpec, images: int, batch: int) -> float:
    """Host time of the language model's mask construction beyond a text-only forward, once per forward (prefill
    or training step): Gemma-3 with images GEMMA3_IMAGE_MASK_MS_PER_SEQUENCE x batch; PaliGemma's prefix mask is
    built without a custom mask function (no vmap); the other families keep is_causal."""
    if m.family != "gemma3" or images < 1:
        return 0.0
    return GEMMA3_IMAGE_MASK_MS_PER_SEQUENCE * max(1, batch)


def _tower_plans(req: VisionRequest, m: VisionLanguageSpec, tokens: int, batch: int, *, frozen: bool):
    """[(part name, budget)] of the tower: one encoder over every block; Qwen2.5-VL's windowed blocks apart, as
    windows of (window_px / patch)² = 64 patches each (transformers 5.17 qwen2_5_vl/modeling_qwen2_5_vl.py:
    get_window_index reorders the patches by window, cu_window_seqlens cuts the attention calls; the blocks in
    fullatt_block_indexes attend over the whole image)."""
    spec = m.tower.encoder_spec(m.name)
    full = sum(1 for i in set(m.tower.full_attention_layers) if 0 <= i < m.tower.layers)
    w2 = (m.tower.window_px // m.tower.patch) ** 2 if m.tower.window_px else 0
    if not w2 or full == m.tower.layers or tokens <= w2:
        return [("vision tower", _sub(req, spec, tokens, batch, frozen=frozen))]
    windows = -(-tokens // w2)  # the patches of one image in whole windows (edge windows padded: an upper bound)
    out = []
    if full:
        out.append(("vision tower", _sub(req, replace(spec, layers=full, window_per_layer=None), tokens, batch,
                                         frozen=frozen)))
    windowed = replace(spec, layers=m.tower.layers - full, window_per_layer=None)
    out.append(("vision tower windowed blocks", _sub(req, windowed, w2, batch * windows, frozen=frozen)))
    return out


def _windows(m: VisionLanguageSpec, tokens: dict) -> list[int]:
    """Patches in each attention window of one image in Qwen2.5-VL's windowed blocks ([] for other towers):
    estimator/model/vision_tokens.py qwen_vl_windows on the resized grid (tokens["image_size"])."""
    if not m.tower.window_px:
        return []
    h, w = (tokens.get("image_size") or [0, 0])[:2]
    p = m.tower.patch
    return qwen_vl_windows(h // p, w // p, m.tower.merge, m.tower.window_px, p)


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
        delta = max(a.memory.peak_extra_bytes - o.memory.peak_extra_bytes
                    for a, o in zip(_attn(plan), one, strict=True))
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


def frozen_weights_saving_ms(plan: Plan) -> float:
    """Step time a training plan prices that a part with frozen weights (requires_grad False, the gradient still
    flowing through it: `--trainable projector`'s language model) never runs: autograd computes no weight gradient
    for a leaf that does not require one (torch/csrc/autograd/FunctionsManual.cpp: each output mask is
    `needs_input_grad`), so every Linear's grad_weight GEMM, its fp32 gradient cast under autocast, and the optimizer
    pass over those weights are left out. The backward keeps its grad_input GEMMs, memory-bound ops and attention.
    Priced with the plan's own kernel prices (estimator/model/layer_passes.py, estimator/model/kernel_prices.py):
    the backward's GPU sum less these kernels, or its own host time (`time_model.host_ms_by_phase`) less their
    launches, whichever is longer."""
    from estimator.model.calibration import load_constants
    from estimator.model.kernel_prices import Kernels
    from estimator.model.layer_passes import linear_shapes

    inp = plan.inputs
    split = plan.time_split
    if inp.mode != "training" or "backward" not in split:
        return 0.0
    kern = Kernels(load_constants(inp.calibration), gpu_of(inp))
    recipe = inp.recipe
    dtype = recipe.compute_dtype if recipe else inp.dtype
    T = inp.batch_per_gpu * inp.tokens_per_gpu
    m = inp.model
    attn, mlp, _ = linear_shapes(inp)
    shapes = [(n, k, c) for n, k, c in attn + mlp if n > 1]
    gemm = m.layers * sum(c * kern.gemm_ms(T, n, k, dtype, "grad_weight") for n, k, c in shapes)
    gemm += kern.gemm_ms(T, m.vocab, m.hidden, dtype, "grad_weight")  # the LM head
    launches = m.layers * sum(c for _, _, c in shapes) + 1
    cast = 0.0
    if recipe is not None and recipe.autocast:
        weights = m.layers * sum(n * k * c for n, k, c in shapes)
        cast = kern.mem_ms("cast_bf16_fp32", weights)[0]
    bwd = split["backward"]
    gpu = sum(v for k, v in bwd.items() if k not in ("launch_overhead", "python_overhead"))
    cpu = plan.time_model["host_ms_by_phase"]["backward"]  # the host's own time, overlapping the GPU's
    before = max(gpu, cpu)
    after = max(gpu - gemm - cast, cpu - launches * kern.k.matmul_floor_ms)
    optimizer = sum(split.get("optimizer", {}).values())
    return max(0.0, before - after) + optimizer


# Qwen2-VL's VisionAttention rotates q and k in fp32 (transformers 5.17 qwen2_vl/modeling_qwen2_vl.py
# apply_rotary_pos_emb_vision: q.float(), k.float(), cos/sin unsqueezed and cast, rotate_half's two slices, neg and
# cat, two products and a sum, the casts back): about 9 kernels for each of q and k beyond the encoder layer's
QWEN_ROTARY_KERNELS = 18


def tower_block_extras_ms(m: VisionLanguageSpec, plan: Plan, calls: int) -> float:
    """What one tower block runs beyond the encoder layer its plan prices, at the measured memory-bound kernel
    rates and, on the host, DECODE_KERNEL_HOST_MS per kernel (estimator/model/decode_time.py):
    - QuickGELU (CLIP, Qwen2-VL: x * sigmoid(1.702 x)): two more elementwise passes over fc1's output;
    - Qwen's fp32 rotation of q and k (QWEN_ROTARY_KERNELS kernels; fp32 passes over q and k: two casts up, the
      half-slices and their cat, two products and a sum, two casts down);
    - Qwen without flash-attention's varlen kernel: VisionAttention splits q, k, v at cu_seqlens
      (lengths.tolist(): a device sync every block) and calls the attention once per sequence, then concatenates
      the outputs (one copy) - per call its launch, the output's transpose copy and their Python. `calls` is the
      sequences of one block: the images (Qwen2-VL, Qwen2.5-VL's full-attention blocks) or, in Qwen2.5-VL's
      windowed blocks, every window of every image (cu_window_seqlens: qwen2_5_vl/modeling_qwen2_5_vl.py
      Qwen2_5_VLVisionAttention.forward, the `else` branch for sdpa and eager).
    Training (the tower trained): each elementwise pass's backward is BACKWARD_MEMORY_FACTOR passes, and the
    per-sequence calls' host dispatch is paid twice (forward and backward node).
    Returns ms per block: the GPU time or the host's dispatch, whichever is longer."""
    from estimator.model.calibration import load_constants
    from estimator.model.decode_time import DECODE_KERNEL_HOST_MS
    from estimator.model.kernel_prices import Kernels
    from estimator.model.layer_passes import BACKWARD_MEMORY_FACTOR

    inp = plan.inputs
    kern = Kernels(load_constants(inp.calibration), gpu_of(inp))
    training = inp.mode == "training"
    dt = inp.recipe.compute_dtype if (training and inp.recipe) else inp.dtype
    rows = inp.batch_per_gpu * inp.tokens_per_gpu
    t = m.tower
    gpu, kernels = 0.0, 0
    if t.quick_gelu:
        g, kn = kern.mem_ms("mul", rows * t.ffn, dt)
        gpu += 2 * g
        kernels += 2 * kn
    if t.fp32_rotary:
        e = rows * t.hidden  # q (and k) elements
        for op, dtype, n in (("cast_bf16_fp32", "bfloat16", 4), ("copy", "float32", 4), ("mul", "float32", 6)):
            g, _ = kern.mem_ms(op, e, dtype)
            gpu += n * g / 2  # n passes over q and k together: n / 2 each
        kernels += QWEN_ROTARY_KERNELS
    per_call = 0
    if t.kind in ("qwen2_vl", "qwen2_5_vl") and inp.backend != "flash-attn":
        g, kn = kern.mem_ms("copy", rows * t.hidden, dt)
        gpu += g
        per_call = 3 * max(1, calls)  # one attention call per sequence: its launch, the output's copy, the Python
        kernels += kn + per_call
    if training:
        gpu *= 1 + BACKWARD_MEMORY_FACTOR
        # a training block's host time is its layer's LAYER_PYTHON_MS (estimator/model/decode_time.py), except the
        # per-sequence attention calls: each is recorded in the forward and runs its own backward node
        return max(gpu, 2 * per_call * DECODE_KERNEL_HOST_MS)
    return max(gpu, kernels * DECODE_KERNEL_HOST_MS)
