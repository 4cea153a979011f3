"""Peak extra bytes of one attention call (contract §1), per backend, as allocation timelines.

Each function replays, in order, the tensors that PyTorch 2.11 allocates and frees for the call, and
returns the Timeline: its running peak is peak_extra_bytes, its "forward" mark the bytes still alive
after the forward (what autograd saved, plus the output), and its event log feeds the caching-allocator
replay that decides `fits` near the limit (estimator/call/allocator.py). Each is registered as its backend's
timeline (`registry.register_timeline`). The sequences were read from the sources named
in docs/sdpa-internals.md and checked, allocation by allocation, against
`torch.cuda.memory._record_memory_history` traces on an H200 (validation/call/allocator_trace.py;
validation/data/h200_calibration.csv has the measured peaks they are held to).

Notation: B batch, Hq/Hk query/KV heads, L q_len, S kv_len, D head_dim, es input element bytes;
P = B·Hq·L·S score elements. All sizes in bytes.
"""

from __future__ import annotations

import numpy as np

from estimator.call import flex_time, registry
from estimator.call.shapes import Calls
from estimator.call.timeline import Timeline
from estimator.units import cdiv, round_up

CUDNN_FWD_WORKSPACE_BYTES = 256  # measured: cuDNN's forward graph asks for 256 B on sm90 (trace)


def _layout_copies(t: Timeline, c: Calls, g, *grads) -> None:
    """AccumulateGrad: a gradient whose strides differ from its leaf's is copied (then the original freed)."""
    for name, nbytes, length in grads:
        copy = g & (c.Hq > 1) & (length > 1)
        t.alloc(name + "_copy", nbytes, copy)
        t.free_if(copy, name)


def _sizes(c: Calls):
    P = c.B * c.Hq * c.L * c.S
    Q = c.B * c.Hq * c.L * c.D * c.es      # q, out, grad_q in the input dtype
    K = c.B * c.Hk * c.S * c.D * c.es      # k, v
    KE = c.B * c.Hq * c.S * c.D * c.es     # k or v expanded to Hq heads (GQA)
    return P, Q, K, KE


def _value_sizes(c: Calls):
    """The tensors at v's width (Dv: MLA's 128 against q/k's 192; D otherwise): out and grad_out (O), v and dV (V),
    dV expanded to Hq heads (VE)."""
    O = c.B * c.Hq * c.L * c.Dv * c.es
    V = c.B * c.Hk * c.S * c.Dv * c.es
    VE = c.B * c.Hq * c.S * c.Dv * c.es
    return O, V, VE


@registry.register_timeline("math")
def math_timeline(c: Calls) -> Timeline:
    """`_scaled_dot_product_attention_math` (aten/src/ATen/native/transformers/attention.cpp):
    fp32 upcast of 16-bit inputs, scaled q and kᵀ, dense causal/bool mask conversion, GQA
    repeat_interleave, fp32 scores, _safe_softmax, dropout, fp32 output cast back; then autograd's
    backward through bmm, softmax and the casts."""
    t, g, half, d = Timeline(), c.grad, ~c.fp32, c.has_dropout
    P, Q, K, KE = _sizes(c)
    Qf, Kf, KEf = Q * 4 // c.es, K * 4 // c.es, KE * 4 // c.es
    LS = c.L * c.S
    t.alloc("bool_bias", c.B * LS * c.es, c.mask_bool)  # convert_boolean_attn_mask, input dtype
    t.alloc("q_acc", Qf, half)
    t.alloc("k_acc", Kf, half)
    t.alloc("v_acc", Kf, half)
    t.alloc("query", Qf)  # q * sqrt(scale)
    t.alloc("ones", LS, c.causal)
    t.alloc("tril", LS, c.causal)
    t.free("ones")
    t.alloc("causal_bias", LS * 4, c.causal)  # additive, in the (upcast) query dtype
    t.free("tril")
    t.alloc("k_rep", KEf, c.gqa)
    t.alloc("v_rep", KEf, c.gqa)
    t.alloc("key_t", KEf)  # kᵀ * sqrt(scale): saved by bmm under grad
    t.alloc("attn", P * 4)
    t.free_if(~g, "key_t")
    t.alloc("softmax", P * 4)
    t.alloc("isneginf", P)
    t.transient("row_all", c.B * c.Hq * c.L)
    t.free("isneginf", "attn")
    t.alloc("drop_mask", P, d)
    t.alloc("drop_out", P * 4, d)
    t.free_if(~g, "drop_mask")
    t.free_if(~g & d, "softmax")
    t.alloc("attn_ret", P * c.es, half)  # the op's 2nd output attn.to(dtype), built first
    t.alloc("out32", Qf)
    t.alloc("out", Q, half)
    t.free_if(half, "out32")
    t.free("attn_ret", "q_acc", "k_acc", "k_rep", "bool_bias", "causal_bias")
    t.free_if(~g | c.gqa, "v_acc")
    t.free_if(~g, "v_rep", "query", "softmax", "drop_mask", "drop_out")
    t.mark("forward")
    if not np.any(g):
        return t
    # backward, autograd order: bmm(p, v) → dropout → softmax → bmm(q, kᵀ) → scale → casts
    t.alloc("g32", Qf, g & half)
    t.alloc("grad_v", KEf, g)
    t.alloc("grad_attn", P * 4, g)
    t.free("g32", "v_acc", "v_rep", "drop_out")
    t.alloc("grad_drop", P * 4, g & d)
    t.free_if(d, "grad_attn")
    t.free("drop_mask")
    t.alloc("sm_grad", P * 4, g)
    t.alloc("sm_tmp", P * 4, g)
    t.free("sm_tmp", "grad_attn", "grad_drop", "softmax")
    t.alloc("grad_query", Qf, g)
    t.alloc("grad_key_t", KEf, g)
    t.free("sm_grad", "query", "key_t")
    t.alloc("grad_q_s", Qf, g)
    t.free("grad_query")
    t.alloc("grad_k_s", KEf, g)
    t.free("grad_key_t")
    t.alloc("grad_k_sum", Kf, g & c.gqa)
    t.free_if(c.gqa, "grad_k_s")
    t.alloc("grad_v_sum", Kf, g & c.gqa)
    t.free_if(c.gqa, "grad_v")
    t.alloc("q_grad", Q, g & half)
    t.free_if(half, "grad_q_s")
    t.alloc("k_grad", K, g & (half | ~c.gqa))  # 16-bit cast, or fp32 AccumulateGrad's layout copy
    t.free("grad_k_s", "grad_k_sum")
    t.alloc("v_grad", K, g & half)
    t.free_if(half, "grad_v", "grad_v_sum")
    return t


@registry.register_timeline("eager")
def eager_timeline(c: Calls, inplace_fill: bool = False) -> Timeline:
    """The project's hand-written attention (validation/call/eager.py), op by op, and its autograd backward.
    `inplace_fill`: the in-place `masked_fill_` (forward only; in-place breaks autograd). Measured on the H200
    (validation/data/h200_inplace_masked_fill.csv): the same peak, one kernel fewer."""
    t, g, half, d = Timeline(), c.grad, ~c.fp32, c.has_dropout
    P, Q, K, KE = _sizes(c)
    LS, Ps = c.L * c.S, P * c.es
    masked_fill = c.causal | c.mask_bool
    t.alloc("k_rep", KE, c.gqa)
    t.alloc("v_rep", KE, c.gqa)
    t.alloc("qk", Ps)
    t.alloc("scores", Ps)  # * D**-0.5
    t.free("qk")
    t.alloc("ones", LS, c.causal)
    t.alloc("triu", LS, c.causal)  # saved by masked_fill under grad
    t.free("ones")
    t.alloc("not_mask", c.B * LS, c.mask_bool)  # ~mask, saved by masked_fill under grad
    new_scores = c.mask_float | (masked_fill & (not inplace_fill))
    t.alloc("scores2", Ps, new_scores)  # out-of-place masked_fill / + mask
    t.free_if(~g, "not_mask")
    t.free_if(new_scores, "scores")
    t.alloc("s32", P * 4, half)  # scores.float()
    t.alloc("sm", P * 4)  # softmax, saved under grad
    t.free("s32")
    t.alloc("p", Ps, half)  # .to(dtype)
    t.free_if(half & ~g, "sm")
    t.alloc("drop_mask", P, d)
    t.alloc("p_drop", Ps, d)
    t.free_if(~g, "drop_mask")
    t.free_if(d & half, "p")  # the 16-bit copy is not saved by anyone once dropped out
    t.free_if(d & ~g & ~half, "sm")
    t.alloc("out", Q)
    t.free("scores", "scores2")
    t.free_if(~g, "k_rep", "v_rep", "triu", "p", "p_drop", "drop_mask", "sm")
    t.mark("forward")
    if not np.any(g):
        return t
    t.alloc("grad_v", KE, g)
    t.alloc("grad_p", Ps, g)
    t.free("p", "p_drop", "v_rep")
    t.alloc("grad_pd", Ps, g & d)
    t.free_if(d, "grad_p")
    t.free("drop_mask")
    t.alloc("grad_s32", P * 4, g & half)
    t.free_if(half, "grad_p", "grad_pd")
    t.alloc("sm_grad", P * 4, g)
    t.alloc("sm_tmp", P * 4, g)
    t.free("sm_tmp", "grad_s32", "grad_p", "grad_pd", "sm")
    t.alloc("grad_s", Ps, g & half)
    t.free_if(half, "sm_grad")
    t.alloc("grad_m", Ps, g & masked_fill)
    t.free_if(masked_fill, "grad_s", "sm_grad")
    t.free("triu", "not_mask")
    t.alloc("grad_qk", Ps, g)
    t.free("grad_s", "sm_grad", "grad_m")
    t.alloc("grad_q", Q, g)
    t.alloc("grad_kt", KE, g)
    t.free("grad_qk", "k_rep")
    t.alloc("k_grad", K, g)  # GQA: repeat_interleave backward sums; else AccumulateGrad's layout copy
    t.free("grad_kt")
    t.alloc("v_grad", K, g & c.gqa)
    t.free_if(c.gqa, "grad_v")
    return t


@registry.register_timeline("flex", per_gpu=True)
def flex_timeline(c: Calls, sm_count: int) -> Timeline:
    """flex_attention compiled (torch/_higher_order_ops/flex_attention.py; the Triton template in
    torch/_inductor/kernel/flex/): the forward writes out and its logsumexp (fp32), saved for backward; the
    backward computes delta = rowsum(out · grad_out) (fp32), then dq, dk, dv in the input dtype, dk and dv per kv
    head (GQA inside the kernel, no expanded copies). The BlockMask is an input (built before the call). A
    decoding-shaped call (flex_time.decodes) runs the split-KV kernel, whose per-split partial outputs, row maxima
    and sums (flex_decoding.py: buf_ACC (B, SPLIT_KV, Hq, L, Dv), buf_M and buf_L (B, SPLIT_KV, Hq, L), fp32)
    live until their reduction into out."""
    t, g = Timeline(), c.grad
    P, Q, K, KE = _sizes(c)
    lse = c.B * c.Hq * c.L * 4
    _, split, _, _ = flex_time.decode_geometry(c, sm_count)
    t.alloc("decode_partials", c.B * split * c.Hq * c.L * (c.Dv + 2) * 4, flex_time.decodes(c))
    t.alloc("out", Q)
    t.alloc("lse", lse)
    t.free("decode_partials")
    t.free_if(~g, "lse")
    t.mark("forward")
    if not np.any(g):
        return t
    t.alloc("delta", lse, g)
    t.alloc("dq", Q, g)
    t.alloc("dk", K, g)
    t.alloc("dv", K, g)
    t.free("delta")
    return t


def flash_query_view(c: Calls):
    """(heads, query length) FA2 runs q as: a single-token GQA query without dropout (head_dim a multiple of 8) is
    viewed as (B, Hk, Hq/Hk, D) (flash_api.cpp: seqlenq_ngroups_swapped), else (B, Hq, L, D)."""
    swap = (c.L == 1) & c.gqa & ~c.has_dropout & (c.D % 8 == 0)
    return np.where(swap, c.Hk, c.Hq), np.where(swap, c.Hq // np.maximum(c.Hk, 1), c.L)


def flash_num_splits(c: Calls, heads, q_len, head_dim, sm_count):
    """FA2's split-KV heuristic (flash_api.cpp: set_params_splitkv / num_splits_heuristic), vectorized.

    block_n = 256/128/64 for head_dim ≤64/≤128/else; splits = the smallest eligible count whose wave
    efficiency is ≥ 85% of the best, when batch·heads·ceil(q_len/64) < 0.8·(2·SMs); 1 with dropout."""
    block_n = np.where(head_dim <= 64, 256, np.where(head_dim <= 128, 128, 64))
    n_blocks = cdiv(c.S, block_n)
    work = c.B * heads * cdiv(q_len, 64)
    sms2 = 2 * sm_count
    split = (work < 0.8 * sms2) & ~c.has_dropout & (n_blocks > 1)
    splits = np.ones(np.shape(work), dtype=np.int64)
    if not np.any(split):
        return splits
    idx = np.nonzero(np.atleast_1d(split))
    n_blocks, work = np.atleast_1d(n_blocks)[idx], np.atleast_1d(work)[idx].astype(np.float64)
    max_splits = np.minimum(np.minimum(128, sms2), n_blocks)
    candidates = []
    best = np.zeros(work.shape)
    for s in range(1, int(max_splits.max()) + 1):
        eligible = (s <= max_splits) & ((s == 1) | (cdiv(n_blocks, s) != cdiv(n_blocks, max(s - 1, 1))))
        waves = work * s / sms2
        eff = np.where(eligible, waves / np.ceil(waves), 0.0)
        candidates.append((s, eligible, eff))
        best = np.maximum(best, eff)
    chosen = np.zeros(work.shape, dtype=np.int64)
    for s, eligible, eff in candidates:
        chosen = np.where((chosen == 0) & eligible & (eff >= 0.85 * best), s, chosen)
    out = np.atleast_1d(splits).copy()
    out[idx] = np.maximum(chosen, 1)
    return out.reshape(np.shape(splits))


@registry.register_timeline("flash", "flash-attn", per_gpu=True)
def flash_timeline(c: Calls, sm_count: int) -> Timeline:
    """`_scaled_dot_product_flash_attention` (attention.cpp wrapper + cuda/flash_attn/flash_api.cpp)."""
    t, g = Timeline(), c.grad
    pad = c.D % 8 != 0
    D8 = round_up(c.D, 8)  # pad_last_dim<8>: real copies of q, k, v
    Q8 = c.B * c.Hq * c.L * D8 * c.es
    K8 = c.B * c.Hk * c.S * D8 * c.es
    t.alloc("q_pad", Q8, pad)
    t.alloc("k_pad", K8, pad)
    t.alloc("v_pad", K8, pad)
    t.alloc("out", Q8)
    heads, q_len = flash_query_view(c)  # decode with GQA: q viewed over the kv heads
    t.alloc("lse", c.B * heads * q_len * 4)
    splits = flash_num_splits(c, heads, q_len, D8, sm_count)
    d_round = round_up(D8, np.where(D8 <= 128, 32, 64))
    t.alloc("lse_accum", splits * c.B * heads * q_len * 4, splits > 1)
    t.alloc("out_accum", splits * c.B * heads * q_len * d_round * 4, splits > 1)
    t.alloc("rng_state", 16)
    t.alloc("unused", 8)
    t.free("lse_accum", "out_accum")
    t.free_if(~g, "q_pad", "k_pad", "v_pad", "lse", "rng_state", "unused")
    t.mark("forward")
    if not np.any(g):
        return t
    blhd_view_copy = (c.Hq > 1) & (c.L > 1)  # (B,L,H,D).contiguous() of BHLD memory is a copy
    t.alloc("grad_out_pad", Q8, g & pad)
    t.alloc("grad_out_c", Q8, g & blhd_view_copy)
    t.alloc("out_c", Q8, g & blhd_view_copy)
    t.alloc("dq", Q8, g)
    t.alloc("dk", K8, g)
    t.alloc("dv", K8, g)
    t.alloc("dk_exp", c.B * c.S * c.Hq * D8 * c.es, g & c.gqa)
    t.alloc("dv_exp", c.B * c.S * c.Hq * D8 * c.es, g & c.gqa)
    t.alloc("softmax_d", c.B * c.Hq * round_up(c.L, 128) * 4, g)
    t.alloc("dq_accum", c.B * round_up(c.L, 128) * c.Hq * d_round * 4, g)
    return t


def efficient_workspace_bytes(c: Calls):
    """Backward workspace = B·Hq·align4(gq + gk + gv)·4 (kernel_backward.h: workspace_size).

    gq: fp32 dQ tiles, one (BI × DN) block (+ a small per-block tail) per BI query rows, with
    (BI, DN) = (64, 64) for D ≤ 64, (128, 128) for D ≤ 128, (128, round64(D)) above.
    gk, gv: only where dK/dV do not fit in registers (16-bit, D > 128): num_splits_key·64·round128(D)
    each, the key splits capped at 200 // (B·Hq) (attention_backward.cu). Read off 442 H200 traces
    (validation/call/calibration_cases.py: efficient_backward_rows), where it matches every allocation exactly."""
    small, mid = c.D <= 64, c.D <= 128
    block_i = np.where(small, 64, 128)
    d_n = np.where(small, 64, np.where(mid, 128, round_up(c.D, 64)))
    tail = np.where(small, 4, np.where(mid, np.where(c.fp32, 8, 4), d_n // 16))
    gq = cdiv(c.L, block_i) * (block_i * d_n + tail)
    splits = np.minimum(cdiv(c.S, 64), np.maximum(1, 200 // (c.B * c.Hq)))
    gkv = np.where(~mid & ~c.fp32, 2 * splits * 64 * round_up(c.D, 128), 0)
    return c.B * c.Hq * round_up(gq + gkv, 4) * 4


@registry.register_timeline("efficient")
def efficient_timeline(c: Calls) -> Timeline:
    """`_scaled_dot_product_efficient_attention` (cuda/attention.cu, attention_backward.cu,
    mem_eff_attention/kernel_forward.h and kernel_backward.h)."""
    t, g = Timeline(), c.grad
    P, Q, K, KE = _sizes(c)
    O, V, _ = _value_sizes(c)
    t.alloc("bias", c.B * c.L * c.S * c.es, c.mask_bool)  # convert_boolean_attn_mask
    # preprocess_mask: a bias whose last dim is not a multiple of 8 is copied into a padded buffer
    pad = c.has_mask & (c.S % 8 != 0)
    t.alloc("bias_pad", c.B * c.L * round_up(c.S, 8) * c.es, pad)
    t.free_if(pad, "bias")
    t.alloc("out", O)
    t.alloc("lse", c.B * c.Hq * round_up(c.L, 32) * 4, g)  # kAlignLSE = 32; empty without grad
    big_d = (c.D > 128) & ~c.fp32
    t.transient("out_accum", c.B * c.L * c.Hq * c.Dv * 4, big_d)  # kNeedsOutputAccumulatorBuffer
    t.free_if(~g, "bias", "bias_pad", "lse")
    t.mark("forward")
    if not np.any(g):
        return t
    blhd_view_copy = (c.Hq > 1) & (c.L > 1)
    t.alloc("grad_out_c", O, g & blhd_view_copy)
    t.alloc("grad_q", Q, g)
    t.alloc("grad_k", K, g)
    t.alloc("grad_v", V, g)
    Qf = Q * 4 // c.es
    t.alloc("delta_prod", Qf, g & c.fp32)  # fp32: (grad_out.float() * out.float()).sum(-1)
    t.alloc("delta", c.B * c.Hq * c.L * 4, g)
    t.alloc("delta_t", c.B * c.Hq * c.L * 4, g & c.fp32)
    t.free("delta_t", "delta_prod")
    t.alloc("workspace", efficient_workspace_bytes(c), g)
    t.free("workspace", "delta", "grad_out_c", "lse")
    # grads come back as (B,L,H,D)-ordered views: AccumulateGrad copies each into q/k/v's layout
    _layout_copies(t, c, g, ("grad_q", Q, c.L), ("grad_k", K, c.S), ("grad_v", V, c.S))
    return t


@registry.register_timeline("cudnn")
def cudnn_timeline(c: Calls) -> Timeline:
    """`_scaled_dot_product_cudnn_attention` (aten/src/ATen/native/cudnn/MHA.cpp): output in q's layout,
    logsumexp only under grad, seed/offset scalars on the GPU, the graph's workspace via the
    caching allocator; backward dQ/dK/dV plus a workspace of one fp32 dQ accumulator and a row sum."""
    t, g = Timeline(), c.grad
    P, Q, K, KE = _sizes(c)
    O, V, VE = _value_sizes(c)
    t.alloc("bias", c.B * c.L * c.S * c.es, c.mask_bool)
    t.alloc("seed", 8)
    t.alloc("offset", 8)
    t.alloc("out", O)
    t.alloc("lse", c.B * c.Hq * c.L * 4, g)
    t.transient("workspace_fwd", CUDNN_FWD_WORKSPACE_BYTES)
    t.free_if(~g, "bias", "seed", "offset")
    t.mark("forward")
    if not np.any(g):
        return t
    t.alloc("dq", Q, g)
    t.alloc("dk", K, g)
    t.alloc("dv", V, g)
    t.alloc("dk_exp", KE, g & c.gqa)
    t.alloc("dv_exp", VE, g & c.gqa)
    t.transient("workspace_bwd", Q * 4 // c.es + c.B * c.Hq * c.L * 4, g)
    return t


def backend_timeline(c: Calls, backend: str, sm_count: int) -> Timeline:
    """The timeline registered for `backend` (flash and flash-attn: the same FA2 kernels; flash-attn's call has no
    mask tensor, which its inputs, not its timeline, account for)."""
    return registry.timeline(backend, c, sm_count)
