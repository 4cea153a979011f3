"""Whole-model capacity plan: the per-GPU memory budget, FLOPs and time of a prefill (inference) or of one
mixed-precision AdamW step (training), built on the attention estimator (`estimate_call`).

All byte figures are per GPU and exact ints; FLOP figures are for the whole model (all GPUs together).
Every assumption a figure rests on is listed in `Plan.assumptions`; docs/plan.md explains them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from estimator.call.attention import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES
from estimator.call.config import KV_DTYPE_BITS, element_bytes
from estimator.model.activations import inference_activations, largest_allocation_bytes, training_peak
from estimator.model.assumptions import assumptions
from estimator.model.inputs import PlanInputs, Sizes, gpu_of
from estimator.model.layer_attention import attention_layers
from estimator.model.state import model_state
from estimator.model.time import plan_flops, plan_times
from estimator.units import cdiv


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The answer. `to_dict()` has every key of docs/contract.md §3 (bytes per GPU as ints)."""

    inputs: PlanInputs
    supported: bool
    verdict: str
    selected_backend: str
    params: int
    params_per_gpu: int
    weights_bytes: int
    kv_cache_bytes: int
    kv_cache_bytes_per_token: int
    kv_cache_bytes_per_sequence: int
    attention_scores_bytes: int
    textbook_scores_bytes: int
    activation_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    workspace_bytes: int
    total_bytes: int
    capacity_bytes: int
    allocator_reserve_bytes: int  # kept free for the largest single block: fits = total + reserve <= capacity
    fits: bool
    prefill_flops: int
    prefill_executed_flops: int
    training_step_flops: int
    decode_flops_per_token: int | None
    prefill_time_ms: float
    step_time_ms: float
    decode_time_ms_per_token: float | None  # steady state: every cache length seen before in the process
    decode_first_pass_ms_per_token: float | None  # a fresh process: + cuDNN graph builds (step_time.py)
    prefill_tokens_per_s: float
    decode_tokens_per_s: float | None
    attention_share: float
    ffn_share: float
    expert_ffn_share: float  # MoE layers' router, routed top-k experts and shared experts (ffn_share: dense MLPs)
    embedding_share: float
    other_share: float
    flops_shares: dict[str, float] = field(hash=False)
    components: tuple[tuple[str, int], ...]
    activation_detail: dict[str, int] = field(hash=False)
    assumptions: tuple[str, ...]
    communication_time_ms: float = 0.0  # exposed communication of the step (training) or prefill (model/comm.py)
    communication: dict = field(default_factory=dict, hash=False)  # per kind (tp, cp, dp), links, decode per token
    time_split: dict = field(default_factory=dict, hash=False)  # ms per kernel class per phase (step_time.py)
    time_model: dict = field(default_factory=dict, hash=False)  # GPU the constants were measured on, error band
    max_seq_len: int | None = None  # filled by make_plan's solvers
    max_batch: int | None = None

    def to_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k not in ("inputs", "components")}
        out["components"] = [{"component": c, "bytes": b} for c, b in self.components]
        inp = self.inputs
        out["inputs"] = {k: getattr(inp, k) for k in ("seq_len", "batch", "dtype", "kv_dtype", "mode",
                                                       "checkpointing", "precision", "optimizer", "window",
                                                       "backend", "gpu", "gpus",
                                                       "tp", "cp", "torch_version", "logits",
                                                       "sequence_parallel", "micro_batch", "zero",
                                                       "persistent_grads", "kv_layout", "ep")}
        out["inputs"]["model"] = inp.model.name
        out["model"] = {**asdict(inp.model), "params": inp.model.params}
        out["assumptions"] = list(self.assumptions)
        return out


def budget(inputs: PlanInputs) -> Plan:
    """Memory, FLOPs and time of the plan without the solvers. Per-GPU bytes, whole-model FLOPs."""
    m, gpu = inputs.model, gpu_of(inputs)
    es, b, n, tp = element_bytes(inputs.dtype), inputs.batch_per_gpu, inputs.tokens_per_gpu, inputs.tp
    hq, hk, d = inputs.q_heads_per_gpu, inputs.kv_heads_per_gpu, m.head_dim
    recipe = inputs.recipe
    rs = recipe.residual_bytes if recipe else es
    z = Sizes(b=b, n=n, F=cdiv(m.ffn, tp), V=cdiv(m.vocab, tp) if m.kind == "decoder" else m.vocab, es=es,
              q=b * n * hq * d * es, kv=2 * b * n * hk * d * es, resid=b * n * m.hidden * rs, rs=rs,
              autocast=bool(recipe and recipe.autocast))
    training = inputs.mode == "training"
    attn = attention_layers(inputs)
    unsupported = [a for a in attn if not a.memory.supported or not a.timing.supported
                   or (a.forward_timing is not None and not a.forward_timing.supported)]
    selected = attn[-1].memory.selected_backend if not unsupported else "none"  # the longest-span layers'
    verdict = ""
    if unsupported:
        est = unsupported[0].timing if not unsupported[0].timing.supported else unsupported[0].memory
        reasons = est.reasons.get(inputs.backend, ()) or tuple(r for rs in est.reasons.values() for r in rs)
        verdict = f"backend {inputs.backend} cannot run this attention call: " + "; ".join(reasons or ("unknown",))

    params_gpu = inputs.model.params_per_gpu(inputs.tp, inputs.ep)
    weights, grads, optimizer = model_state(inputs)
    # KV cache (decoder inference): Σ_layers hk·(d + dv)·seq_len/cp·b·kv_bits/8 (MLA under the hf/latent layouts:
    # kv_lora_rank + qk_rope per token, ModelSpec.kv_cache_elements_per_token_per_layer), kept in bits until the end.
    kv_bits = KV_DTYPE_BITS[inputs.kv_dtype]
    decoder = m.kind == "decoder"
    kv_elements = m.kv_cache_elements_per_token_per_layer(inputs.kv_layout, tp)
    per_token_bits = m.layers * kv_elements * kv_bits if decoder else 0
    # Hugging Face's cache holds every prefill token, windowed layers too (see activations.inference_activations)
    seq_bits = m.layers * kv_elements * kv_bits * cdiv(inputs.seq_len, inputs.cp) if decoder else 0
    kv_cache = 0 if training else cdiv(seq_bits * b, 8)

    scores_live = textbook = 0
    detail: dict[str, int] = {}
    activations = 0
    peak = {"activations": 0, "weight_casts": 0, "gradients": grads, "optimizer_step": 0}  # training, at the peak
    if not unsupported:
        # textbook b·h·L·S·es of what is alive at the peak: every layer's when training keeps them all
        keep_all = training and inputs.checkpointing == "none"
        per_layer = [(a.memory.scores_bytes, a.layers, a.memory.selected_backend in ("math", "eager")) for a in attn]
        textbook = sum(sb * k for sb, k, _ in per_layer) if keep_all else max(sb for sb, _, _ in per_layer)
        live = [(sb, k) for sb, k, mat in per_layer if mat]
        if live:
            scores_live = sum(sb * k for sb, k in live) if keep_all else max(sb for sb, _ in live)
        if training:
            peak, detail = training_peak(inputs, attn, z, grads)
            activations = detail["backward_peak_activations_bytes"]  # the activations at their own peak
        else:
            activations, detail = inference_activations(inputs, attn, z, kv_bits)

    if training:
        workspace = 2 * CUBLAS_WORKSPACE_BYTES  # forward thread and autograd thread
        at_step = "peak_phase_optimizer_step" in detail
        grads_name = "gradients" if peak["gradients"] == grads else (
            "gradients (fp32 copies at the optimizer step)" if at_step else "gradients (allocated at the peak)")
        components = (("weights", weights), (grads_name, peak["gradients"]), ("optimizer state", optimizer),
                      ("optimizer step temporaries", peak["optimizer_step"]),
                      ("activations (freed before the optimizer step)" if at_step else "activations",
                       peak["activations"]),
                      ("16-bit weight copies (autocast)", peak["weight_casts"]), ("cuBLAS workspaces", workspace),
                      ("CUDA context", CUDA_CONTEXT_BYTES))
    else:
        workspace = CUBLAS_WORKSPACE_BYTES
        components = (("weights", weights), ("kv cache", kv_cache), ("activations (peak layer)", activations),
                      ("cuBLAS workspace", workspace), ("CUDA context", CUDA_CONTEXT_BYTES))
    total = sum(c for _, c in components)
    capacity = gpu.memory_bytes
    # the caching allocator needs room for the largest single block on top of the peak (see the function)
    reserve = 0 if unsupported else largest_allocation_bytes(inputs, attn, z)
    fits = not unsupported and total + reserve <= capacity
    if not unsupported:
        verdict = (f"fits: {total / 2**30:.2f} GiB of {capacity / 2**30:.2f} GiB per GPU" if fits else
                   f"does not fit: {total / 2**30:.2f} GiB needed, {capacity / 2**30:.2f} GiB per GPU")
        if not fits and total <= capacity:
            verdict = (f"does not fit: {total / 2**30:.2f} GiB needed of {capacity / 2**30:.2f} GiB per GPU, but the "
                       f"step's largest block ({reserve / 2**30:.2f} GiB) needs that much more free: near the limit "
                       "the caching allocator runs out in fragments")

    flops = plan_flops(inputs, attn, unsupported=bool(unsupported))
    times = plan_times(inputs, attn, gpu, params_gpu, weights, kv_cache, flops, unsupported=bool(unsupported))
    return Plan(
        inputs=inputs, supported=not unsupported, verdict=verdict, selected_backend=selected, params=m.params,
        params_per_gpu=params_gpu, weights_bytes=weights, kv_cache_bytes=kv_cache,
        kv_cache_bytes_per_token=cdiv(per_token_bits, 8), kv_cache_bytes_per_sequence=cdiv(seq_bits, 8),
        attention_scores_bytes=scores_live, textbook_scores_bytes=textbook, activation_bytes=activations,
        gradient_bytes=grads, optimizer_bytes=optimizer, workspace_bytes=workspace, total_bytes=total,
        capacity_bytes=capacity, allocator_reserve_bytes=reserve, fits=fits, prefill_flops=flops["forward"],
        prefill_executed_flops=flops["forward_executed"], training_step_flops=flops["step"],
        decode_flops_per_token=flops["decode"], flops_shares=flops["shares"], components=components,
        activation_detail=detail, assumptions=assumptions(inputs), **times)
