"""Swin's plan, stage by stage (the joining rules are in estimator/model/vision_plan.py): one whole-model budget per
stage with the window as the sequence, the float relative-position bias through the attention estimator, and what
transformers 5.17 swin/modeling_swin.py SwinLayer.forward keeps alive beside it."""

from __future__ import annotations

from dataclasses import replace

from estimator.call.attention import estimate_call
from estimator.call.config import AttentionCall, element_bytes
from estimator.model.budget import budget
from estimator.model.inputs import gpu_of
from estimator.model.vision_parts import Part, VisionPlan, VisionRequest, _backward_peak, _finish, _saved, _state
from estimator.model.vision_tokens import swin_stages


def swin_plan(req: VisionRequest, tokens: dict) -> VisionPlan:
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
        if training and base.backend == "auto":
            # the bias is a trained parameter, so the mask requires grad: SDPA runs the memory-efficient kernel,
            # which returns the bias gradient (the profiled Swin-L step: fmha_cutlassF/B kernels, no cuDNN)
            call = replace(call, backend="efficient")
        est = estimate_call(call, gpu, base.torch_version)
        backend = est.selected_backend if est.supported else base.backend
        plan = budget(replace(base, model=m.stage_spec(i), seq_len=w2, batch=b * s.windows * base.dp, window=None,
                              backend="eager" if base.backend == "eager" else (
                                  backend if backend != "none" else base.backend)))
        if not est.supported:
            plan = replace(plan, supported=False, fits=False,
                           verdict=f"backend {base.backend} cannot run Swin's window "
                           "attention with its float relative-position bias: " +
                           "; ".join(r for rs in est.reasons.values() for r in rs)[:300])
        params = m.params if i == 0 else 0
        extra = ((swin_block_extras_ms(req, i, s, plan) + _bias_call_ms(call, est, gpu, base)) * m.depths[i]
                 + _merge_ms(req, i, s, len(stages), plan))
        parts.append(Part(name=f"stage {i + 1}", params=params, trainable=training, plan=plan, tokens=s.tokens,
                          extra_ms=extra))
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


# get_attn_mask rebuilds the shift mask on every shifted block's forward (an img_mask of zeros, nine slice
# assignments, window_partition, the pairwise difference, two masked_fill: ~15 small kernels), and the
# relative-position bias is gathered from its table, viewed and permuted (3)
SHIFT_MASK_KERNELS = 15
BIAS_GATHER_KERNELS = 3


def _kernels(plan):
    from estimator.model.calibration import load_constants
    from estimator.model.kernel_prices import Kernels

    return Kernels(load_constants(plan.inputs.calibration), gpu_of(plan.inputs))


def swin_block_extras_ms(req: VisionRequest, i: int, s, plan) -> float:
    """What one Swin block runs beyond the encoder layer its stage plan prices (transformers 5.17
    swin/modeling_swin.py SwinLayer.forward and SwinSelfAttention.forward), averaged over a shifted and a plain
    block, priced at the measured memory-bound kernel rates:
    - window_partition and window_reverse (view, permute, contiguous: one copy each of the padded stage tensor),
      the attention output's transpose-reshape (one copy), torch.roll before and after the attention in a shifted
      block, maybe_pad's F.pad and the crop back when the grid is padded; under autocast the partitioned windows
      and the first roll are fp32 (the LayerNorm's output), the rest bf16;
    - through SDPA in a shifted block, bias + shift mask materialised as a (batch·windows, heads, w², w²) tensor in
      fp32 (the bias table is fp32) and cast to bf16 for the kernel;
    - training: each copy's backward is one more copy; the mask's gradient (the memory-efficient backward writes it
      at the expanded shape) cast to fp32 and summed back to the (heads, w², w²) bias in every block; drop_path's
      two multiplies (drop_path_rate > 0 in the published configs) forward and backward;
    - the host: these kernels' dispatch, plus get_attn_mask's and the bias gather's small kernels, at
      DECODE_KERNEL_HOST_MS each (estimator/model/decode_time.py), where that exceeds their GPU time.
    Returns the ms of one block (training: forward + backward)."""
    from estimator.model.decode_time import DECODE_KERNEL_HOST_MS

    base, m = req.base, req.model
    kern = _kernels(plan)
    training = base.mode == "training"
    autocast = bool(training and base.recipe and base.recipe.autocast)
    dt = plan.inputs.dtype if not training else (base.recipe.compute_dtype if base.recipe else base.dtype)
    rdt = "float32" if autocast else dt
    b = base.batch_per_gpu * max(1, req.images)
    W = m.stage_width(i)
    padded = b * s.padded_height * s.padded_width * W
    e = padded  # elements of one stage-tensor copy
    gpu, kernels = 0.0, 0
    copies = [(e, rdt), (e, dt), (e, dt)]  # partition (LN output), reverse, attention output transpose
    if s.shifted:
        copies += [(0.5 * e, rdt), (0.5 * e, dt)]  # two rolls in every other block: half on average
    if s.padded_height != s.height or s.padded_width != s.width:
        copies += [(e, rdt), (e, dt)]
    for n, dtype in copies:
        g, k = kern.mem_ms("copy", n, dtype)
        gpu += g * (2 if training else 1)
        kernels += k
    mask_e = b * s.windows * m.heads[i] * s.window ** 4
    sdpa = plan.selected_backend != "eager"
    if s.shifted and sdpa:  # half the blocks
        g1, k1 = kern.mem_ms("add", mask_e, "float32")
        g2, k2 = kern.mem_ms("cast_bf16_fp32", mask_e)
        gpu += 0.5 * (g1 + g2)
        kernels += k1 + k2
    if training:
        g1, _ = kern.mem_ms("cast_bf16_fp32", mask_e)
        g2, _ = kern.mem_ms("add", mask_e, "float32")  # the sum back to the bias: reads it once
        gpu += g1 + 0.5 * g2
        g3, k3 = kern.mem_ms("mul", b * s.tokens * W, rdt)
        gpu += 4 * g3
        kernels += 2 * k3
    kernels += BIAS_GATHER_KERNELS + (SHIFT_MASK_KERNELS // 2 if s.shifted else 0)
    host = kernels * DECODE_KERNEL_HOST_MS
    return gpu if training else max(gpu, host)


def _bias_call_ms(call: AttentionCall, est, gpu, base) -> float:
    """What the window call costs beyond the unmasked call the stage's encoder budget prices: transformers 5.17
    SwinSelfAttention.forward hands SDPA the relative-position bias (plus the shift mask) as a float
    `attn_mask`, so the kernel reads a bias, and cuDNN's masked forward runs one CTA per (batch·window, head)
    problem at its per-CTA floor (estimator/call/cta_floor.py `cudnn_masked_ms`). Same backend, same shape, the mask
    the only difference; 0 where either call has no time."""
    if not est.supported or est.time_ms is None:
        return 0.0
    backend = est.selected_backend if call.backend != "eager" else "eager"
    plain = estimate_call(replace(call, mask="none", backend=backend), gpu, base.torch_version)
    if not plain.supported or plain.time_ms is None:
        return 0.0
    return max(est.time_ms - plain.time_ms, 0.0)


def _merge_ms(req: VisionRequest, i: int, s, n_stages: int, plan) -> float:
    """SwinPatchMerging after every stage but the last: the four strided slices concatenated (one copy), a LayerNorm
    over 4W and the Linear 4W -> 2W on a quarter of the tokens, which the stage's encoder plan does not hold
    (training: the GEMM's two backward GEMMs and the copy's backward too)."""
    if i >= n_stages - 1:
        return 0.0
    base, m = req.base, req.model
    kern = _kernels(plan)
    training = base.mode == "training"
    dt = base.recipe.compute_dtype if (training and base.recipe) else plan.inputs.dtype
    rdt = "float32" if (training and base.recipe and base.recipe.autocast) else dt
    b = base.batch_per_gpu * max(1, req.images)
    W = m.stage_width(i)
    rows = b * s.tokens // 4
    gemm = kern.gemm_ms(rows, 2 * W, 4 * W, dt)
    if training:
        gemm += kern.gemm_ms(rows, 2 * W, 4 * W, dt, "grad_input") + kern.gemm_ms(rows, 2 * W, 4 * W, dt, "grad_weight")
    cp, _ = kern.mem_ms("copy", b * s.tokens * W, rdt)
    return gemm + cp * (3 if training else 1)  # copy, its backward, the LayerNorm (about a copy's bytes)
