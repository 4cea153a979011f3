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
