"""The per-GPU memory plan of a state-space / hybrid decoder (`estimator.model.hybrid.HybridSpec`): a prefill that
keeps its cache state, or one cached decode step, as transformers 5.17 runs them on the torch fallback path (no
mamba-ssm / causal-conv1d: `estimator/model/ssm_mamba2.py`). Softmax attention layers are priced by the
attention estimator (`estimate_call`, SDPA's backend choice), the rest by replaying the layer's tensors.

A training step (mode "training") is replayed through autograd by estimator/model/hybrid_train.py. The fused
kernels are refused (`kernels="fast"`: not modelled): a planner that priced the fast path here would say "fits"
for a prefill that needs tens of GiB more on a machine without them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from estimator.call.allocator import CachingAllocator, OutOfMemory
from estimator.call.attention import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES, estimate_call
from estimator.call.config import MAX_SEQ_LEN, AttentionCall, check_positive_int, element_bytes, normalize_dtype
from estimator.hardware import get_gpu
from estimator.model.budget import Verdict, fit_verdict
from estimator.model.hybrid import HybridSpec
from estimator.model.hybrid_time import fallback_time
from estimator.model.hybrid_train import train_step_bytes
from estimator.model.ssm_mamba2 import F32, Trace, decode_replay, prefill_replay
from estimator.units import MIB, round_up

MODES = ("prefill", "decode", "training")
KERNELS = ("torch-fallback", "fast")
PATH_TEXT = ("torch fallback: transformers 5.17 reference PyTorch path (mamba2_chunk_scan, causal_conv1d_fn), as it "
             "runs without mamba-ssm and causal-conv1d")


@dataclass(frozen=True, kw_only=True)
class HybridPlan:
    spec: HybridSpec
    mode: str
    batch: int
    seq_len: int
    dtype: str
    path: str
    weights_bytes: int
    state_bytes: int  # conv + ssm states of every Mamba2 layer, all sequences
    kv_cache_bytes: int  # attention layers' k and v (seq_len tokens; decode: seq_len + 1)
    activation_bytes: int  # the step's peak above weights and cache (training: and optimizer state)
    workspace_bytes: int
    context_bytes: int
    total_bytes: int
    verdict: Verdict
    time_ms: float | None = None  # prefill / training step (estimator/model/hybrid_time.py); None for decode
    time_band_ms: tuple[float, float] | None = None  # the measured band around it
    optimizer_bytes: int = 0  # training: the optimizer's state (bf16-true: in the parameters' dtype)
    gradient_bytes: int = 0  # training: every parameter's gradient (part of activation_bytes at the peak)
    detail: dict = field(default_factory=dict, hash=False)

    @property
    def fits(self) -> bool:
        return self.verdict.fits

    @property
    def measured_view_bytes(self) -> int:
        """What torch.cuda.max_memory_allocated() sees above the process baseline (weights, cache, activations:
        no context, no cuBLAS workspace)."""
        return self.total_bytes - self.workspace_bytes - self.context_bytes


def hybrid_plan(spec: HybridSpec, *, seq_len: int, batch: int = 1, mode: str = "prefill", dtype: str = "bfloat16",
                gpu: str = "h200", kernels: str = "torch-fallback", optimizer: str = "adamw") -> HybridPlan:
    """The plan of a prefill of `seq_len` tokens (keeping the cache state and the last position's logits), of
    one decode step after such a prefill, or of one training step (bf16-true, `optimizer`; no checkpointing:
    estimator/model/hybrid_train.py)."""
    seq_len = check_positive_int("seq_len", seq_len, MAX_SEQ_LEN)
    batch = check_positive_int("batch", batch, 1 << 16)
    if mode not in MODES:
        raise ValueError(f"mode: unknown value {mode!r}; expected one of {', '.join(MODES)}")
    if kernels not in KERNELS:
        raise ValueError(f"kernels: unknown value {kernels!r}; expected one of {', '.join(KERNELS)}")
    if kernels == "fast":
        raise ValueError("kernels: the fused mamba-ssm / causal-conv1d kernels are not modelled; this planner prices "
                         "the torch fallback transformers runs without them")
    dtype = normalize_dtype(dtype)
    if dtype == "float32":  # the fallback's .float() / .to(float32) calls are copies only from a 16-bit model
        raise ValueError("dtype: float32 is not modelled for these families (the torch fallback's fp32 copies are "
                         "replayed for a bfloat16 or float16 model); use bfloat16 or float16")
    if mode == "training":
        return _training_plan(spec, seq_len=seq_len, batch=batch, dtype=dtype, gpu=gpu, optimizer=optimizer)
    es = element_bytes(dtype)
    g = get_gpu(gpu)
    weights = weights_bytes(spec, es)
    p = Trace()
    if mode == "prefill":
        _prefill(p, spec, batch, seq_len, es, g)
    else:
        _decode(p, spec, batch, seq_len, es)
    state = batch * spec.state_bytes_per_sequence(es)
    kv = batch * (seq_len + (mode == "decode")) * spec.kv_bytes_per_token(es)
    cache = state + kv
    activations = max(0, p.peak - cache)
    workspace, context = CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES
    total = weights + cache + activations + workspace + context
    ran, reserved, failed = _allocator_replay(p, weights, workspace, g.memory_bytes - context)
    if ran:  # what the replayed segments hold beyond the live tensors at the reserved peak (fragmentation)
        reserve = max(0, reserved - (weights + workspace + p.peak))
    else:  # a request no cached block or new segment could hold: the plan does not fit
        reserve = max(round_up(failed, 2 * MIB), g.memory_bytes - total + 1)
    verdict = fit_verdict(total_bytes=total, capacity_bytes=g.memory_bytes, allocator_reserve_bytes=reserve)
    t = fallback_time(spec, mode=mode, seq_len=seq_len, batch=batch, dtype=dtype, gpu=g) if mode == "prefill" else {}
    return HybridPlan(spec=spec, mode=mode, batch=batch, seq_len=seq_len, dtype=dtype, path=PATH_TEXT,
                      weights_bytes=weights, state_bytes=state, kv_cache_bytes=kv, activation_bytes=activations,
                      workspace_bytes=workspace, context_bytes=context, total_bytes=total, verdict=verdict,
                      time_ms=t.get("time_ms"), time_band_ms=t.get("band_ms"),
                      detail={"peak_above_weights_bytes": p.peak, "allocator_replay_ran": ran,
                              "replayed_peak_reserved_bytes": reserved, "failed_request_bytes": failed})


def _training_plan(spec: HybridSpec, *, seq_len: int, batch: int, dtype: str, gpu: str, optimizer: str = "adamw"):
    """A `HybridPlan` of mode "training": weights, optimizer state, the step's peak of activations, gradient
    buffers and parameter gradients, the verdict from the caching-allocator replay of every tensor of the step."""
    es = element_bytes(dtype)
    g = get_gpu(gpu)
    c = train_step_bytes(spec, seq_len=seq_len, batch=batch, es=es, gpu=g, optimizer=optimizer)
    weights, opt = weights_bytes(spec, es), c["optimizer_bytes"]
    activations = max(c["graph_peak_bytes"], c["optimizer_step_bytes"])
    workspace, context = CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES
    total = weights + opt + activations + workspace + context
    ran, reserved, failed = _allocator_replay(c["graph"].trace, weights + opt, workspace, g.memory_bytes - context)
    if ran:
        reserve = max(0, reserved - (weights + opt + workspace + c["graph_peak_bytes"]))
    else:
        reserve = max(round_up(failed, 2 * MIB), g.memory_bytes - total + 1)
    verdict = fit_verdict(total_bytes=total, capacity_bytes=g.memory_bytes, allocator_reserve_bytes=reserve)
    t = fallback_time(spec, mode="training", seq_len=seq_len, batch=batch, dtype=dtype, gpu=g, optimizer=optimizer,
                      graph=c["graph"])
    return HybridPlan(spec=spec, mode="training", batch=batch, seq_len=seq_len, dtype=dtype, path=PATH_TEXT,
                      time_ms=t["time_ms"], time_band_ms=t["band_ms"],
                      weights_bytes=weights, state_bytes=0, kv_cache_bytes=0, activation_bytes=activations,
                      optimizer_bytes=opt, gradient_bytes=c["gradient_bytes"], workspace_bytes=workspace,
                      context_bytes=context, total_bytes=total, verdict=verdict,
                      detail={"peak_above_weights_bytes": c["graph_peak_bytes"], "allocator_replay_ran": ran,
                              "replayed_peak_reserved_bytes": reserved, "failed_request_bytes": failed,
                              "optimizer_step_bytes": c["optimizer_step_bytes"], "optimizer": optimizer,
                              "recipe": "bf16-true" if es == 2 else "16-true"})


def weights_bytes(spec: HybridSpec, es: int) -> int:
    """Parameters and buffers in the model dtype (Falcon-H1's mup_vector), the rotary inv_freq in fp32."""
    return spec.params * es + spec.buffer_elements * es + (spec.head_dim // 2 * F32 if spec.attention_layers else 0)


def _allocator_replay(p: Trace, weights: int, workspace: int, capacity: int) -> tuple[bool, int, int]:
    """The step's tensors, in order, through PyTorch's caching allocator (estimator/call/allocator.py, the rules of
    c10/cuda/CUDACachingAllocator.cpp): the cuBLAS workspace and the weights first (kept), then every replayed
    allocation and free. (ran, peak reserved bytes, the request that found no room or 0). On the H200 the fallback
    ran out with memory to spare this way: at 40,000 tokens of 32 heads × 64 with state 64 the freed C·B product's
    segment had taken a smaller tensor, and the M·x product of the same size needed a second one
    (validation/data/h200_hf_hybrid_heldout.csv)."""
    alloc = CachingAllocator(capacity)
    live: dict = {}
    peak = 0
    try:
        alloc.malloc(workspace)
        alloc.malloc(weights)
        for op, tag, size in p.events:
            if op == "alloc":
                live[tag] = alloc.malloc(size)
            else:
                alloc.free(live.pop(tag, None))
            peak = max(peak, alloc.reserved_bytes)
    except OutOfMemory as e:
        return False, max(peak, alloc.reserved_bytes), int(e.args[0])
    return True, peak, 0


def _norm(p: Trace, T: int, H: int, in_bytes: int, es: int, out: str) -> None:
    """RMSNorm of a (T, H) input: fp32 copy (unless fp32), pow, normalised, cast back, weight · x -> `out`."""
    if in_bytes != F32:
        p.add("n32", T * H * F32)
    p.add("npow", T * H * F32)
    p.free("npow")
    p.add("n2", T * H * F32)
    p.free("n32")
    p.add("n3", T * H * es)
    p.free("n2")
    p.add(out, T * H * es)
    p.free("n3")


def _attention(p: Trace, spec: HybridSpec, b: int, L: int, es: int, gpu, i: int) -> None:
    """q, k, v projections, RoPE (q·cos + rotate_half(q)·sin), the cache keeps k and v (DynamicLayer's first
    update stores the tensors), SDPA (the estimator's peak for the backend SDPA picks), the contiguous output and
    o_proj -> `attn_out`."""
    T, hq, hk, d = b * L, spec.q_heads, spec.kv_heads, spec.head_dim
    p.add("q", T * hq * d * es)
    p.add("k", T * hk * d * es)
    if spec.multipliers:  # k_proj(...) * key_multiplier
        p.add("k2", T * hk * d * es)
        p.free("k")
        p.rename("k2", "k")
    p.add("v", T * hk * d * es)
    for name, heads in (("q", hq), ("k", hk)):
        full = T * heads * d * es
        p.add(name + "cos", full)
        p.add(name + "neg", full // 2)
        p.add(name + "rot", full)
        p.free(name + "neg")
        p.add(name + "sin", full)
        p.free(name + "rot")
        p.add(name + "emb", full)
        p.free(name + "cos", name + "sin")
    p.free("q", "k")
    p.rename("kemb", f"kv{i}")
    p.rename("v", f"kv{i}")
    call = AttentionCall(batch=b, q_heads=hq, kv_heads=hk, head_dim=d, q_len=L, kv_len=L,
                         dtype="bfloat16" if es == 2 else "float32", causal=True, mode="forward", backend="auto")
    est = estimate_call(call, gpu)
    if not est.supported:
        raise ValueError(f"seq_len: SDPA cannot run the attention call ({'; '.join(est.reasons.get('auto', ()))})")
    p.add("sdpa", est.peak_extra_bytes)
    p.free("sdpa")
    p.add("attn", T * hq * d * es)  # the call's output
    p.add("attn_c", T * hq * d * es)  # transpose(1, 2).reshape(...).contiguous()
    p.free("attn", "qemb")
    p.add("attn_out", T * spec.hidden * es)  # o_proj
    p.free("attn_c")


def _mlp(p: Trace, spec: HybridSpec, T: int, es: int) -> None:
    """down(act(gate(x)) · up(x)) (Falcon-H1: up(x) · act(gate(x) · gate_multiplier), · down_multiplier)."""
    F = T * spec.ffn * es
    if spec.multipliers:
        p.add("up", F)
        p.add("gate", F)
        p.add("gm", F)
        p.free("gate")
        p.add("act", F)
        p.free("gm")
    else:
        p.add("gate", F)
        p.add("act", F)
        p.free("gate")
        p.add("up", F)
    p.add("prod", F)
    p.free("act", "up")
    p.add("down", T * spec.hidden * es)
    p.free("prod")
    if spec.multipliers:
        p.add("down2", T * spec.hidden * es)
        p.free("down")
        p.rename("down2", "down")


def _keep_cache(p: Trace, i: int) -> None:
    for name in ("conv_state", "ssm_state"):
        if name in p.live:
            p.rename(name, f"{name}{i}")


def _prefill(p: Trace, spec: HybridSpec, b: int, L: int, es: int, gpu) -> None:
    T, H = b * L, spec.hidden
    p.add("ids", T * 8)  # the int64 input ids (allocated by the caller, counted by the measurement)
    p.add("embeds", T * H * es)  # inputs_embeds stays referenced by the model's forward
    if spec.multipliers:  # embed_tokens(ids) * embedding_multiplier
        p.add("emb2", T * H * es)
        p.free("embeds")
        p.rename("emb2", "embeds")
    if spec.attention_layers:  # rotary cos and sin (b, L, head_dim) in dtype, position ids (int64)
        p.add("rope", 2 * T * spec.head_dim * es + L * 8)
    x, xb = "embeds", es
    for i, kind in enumerate(spec.layer_kinds):
        rs = F32 if spec.residual_fp32 else es
        if spec.model_type == "mamba2":
            if xb != es:
                p.add("cast", T * H * es)  # hidden_states.to(norm.weight.dtype)
            _norm(p, T, H, es, es, "normed")
            p.free("cast")
            if rs != xb:
                p.add("res32", T * H * rs)  # residual.to(float32)
            prefill_replay(p, spec.mixer, b, L, es)
            _keep_cache(p, i)
            p.add("x_new", T * H * rs)
            p.free("mixer_out", "normed", "res32")
        else:
            _norm(p, T, H, xb, es, "normed")
            if kind in ("mamba", "parallel"):
                prefill_replay(p, spec.mixer, b, L, es)
                _keep_cache(p, i)
                p.rename("mixer_out", "mamba_out")
            if kind in ("attention", "parallel"):
                if spec.multipliers:
                    p.add("attn_in", T * H * es)  # hidden_states * attention_in_multiplier
                _attention(p, spec, b, L, es, gpu, i)
                p.free("attn_in")
                if spec.multipliers:
                    p.add("attn_scaled", T * H * es)
                    p.free("attn_out")
                    p.rename("attn_scaled", "attn_out")
            if kind == "parallel":
                p.add("mixed", T * H * es)
                p.free("mamba_out", "attn_out")
            p.add("x_mid", T * H * es)
            p.free("mixed", "mamba_out", "attn_out", "normed")
            _norm(p, T, H, es, es, "normed")
            _mlp(p, spec, T, es)
            p.add("x_new", T * H * es)
            p.free("down", "normed", "x_mid")
            rs = es
        if x != "embeds":
            p.free(x)
        p.rename("x_new", "x")
        x, xb = "x", rs
    _norm(p, T, H, xb, es, "final")
    p.free("x", "embeds", "rope")
    p.add("logits", b * spec.vocab * es)  # lm_head of the last position, then .float()
    p.add("logits32", b * spec.vocab * F32)
    p.free("logits", "final")


def _decode(p: Trace, spec: HybridSpec, b: int, L: int, es: int) -> None:
    """One cached step after a prefill of L tokens: the cache (states, L tokens of k/v), the previous step's
    logits, and the worst layer's transient (a Mamba2 layer's state-sized tensors; an attention layer's
    torch.cat of k and v to L + 1 tokens beside the old ones)."""
    H = spec.hidden
    p.add("cache", b * spec.state_bytes_per_sequence(es) + b * L * spec.kv_bytes_per_token(es))
    p.add("prev_logits", b * spec.vocab * F32)
    p.add("ids", b * 8)
    p.add("embeds", b * H * es)
    p.add("x", b * H * F32)
    worst = 0
    if spec.mamba_layers:
        q = Trace()
        decode_replay(q, spec.mixer, b, es)
        worst = q.peak
    if spec.attention_layers:
        kv_layer = b * L * 2 * spec.kv_heads * spec.head_dim * es
        worst = max(worst, kv_layer + b * (L + 1) * 2 * spec.kv_heads * spec.head_dim * es - kv_layer
                    + 4 * b * spec.q_heads * spec.head_dim * es)
    mlp = 4 * b * spec.ffn * es
    p.add("layer", max(worst, mlp) + 3 * b * H * F32)
    p.free("layer")
    p.add("kv_growth", b * spec.kv_bytes_per_token(es))
    p.add("logits", b * spec.vocab * (es + F32))
