"""The kernels that the math and eager paths launch, one op at a time, with what each computes and moves.

math is ATen's `_scaled_dot_product_attention_math` (aten/src/ATen/native/transformers/attention.cpp, torch 2.11);
eager is validation/call/eager.py (the HF-style `softmax(q kᵀ·scale + mask) v` written in torch ops). Neither is one
kernel: each op below is one or more kernel launches, priced by `timing` as a roofline (GEMMs: max of FLOPs at
peak and operand + output bytes at HBM bandwidth, so the GEMV-shaped bmm of a short query over long keys costs
its bytes) or by bytes (everything else), and the launches themselves cost host time (`kernel_count`).

Shapes: q (B, Hq, L, D), k and v (B, Hk, S, D), scores P = B·Hq·L·S elements; with GQA both paths first copy k
and v to Hq heads (math: `repeat_interleave` in pre_process_group_query_attention_input; eager: the same). es is
the input's element size; math works in fp32 (it upcasts 16-bit q, k, v and casts out and the attention weights
back), eager in the input dtype except its fp32 softmax.

math forward (fp32 inputs: 9 kernels; 16-bit: 14):
  [16-bit] q, k, v .to(float32) (3)           GQA: k, v repeat_interleave to Hq heads (2)
  q·sqrt(scale), kᵀ·sqrt(scale) (2)            bmm q kᵀ (1)
  causal: ones(L, S).tril, logical_not, where(-inf, 0), add_ (6 launches with the scalar fills)
  bool mask: logical_not, where(-inf, 0), add_ (4)        float mask: add_ (1)
  _safe_softmax: softmax, eq(-inf), all over the row, where (fully masked rows to 0) and a 0-dim fill (5)
  dropout: native_dropout (1)                 bmm p v (1)
  [16-bit] out .to(input dtype) and the attention weights .to(input dtype) (2)
math backward (fp32: 9 more; 16-bit: 13 more):
  [16-bit] grad_out .to(float32) (1)          bmm dP = dO vᵀ, bmm dV = pᵀ dO (2)
  dropout: native_dropout_backward (1)        where (_safe_softmax's masked rows) (1), softmax_backward (1)
  bmm dQ = dS k, bmm dKᵀ = qᵀ dS (2)          the two sqrt(scale) muls' gradients (2)
  dK's transposed gradient made contiguous (1); GQA instead: dK and dV summed over each group (2)
  [16-bit] dq, dk, dv .to(input dtype) (3)
eager forward (fp32: 4 kernels; 16-bit: 6):
  GQA: k, v repeat_interleave (2)             bmm q kᵀ (1), ·scale (1)
  causal: ones, triu, masked_fill (3)         bool mask: ~mask, masked_fill (2)        float mask: add (1)
  [16-bit] scores .float() (1)                softmax (1)          [16-bit] .to(input dtype) (1)
  dropout (1)                                 bmm p v (1)
eager backward (fp32: 8 more; 16-bit: 10 more):
  bmm dP, bmm dV (2), dropout backward (1), [16-bit] cast (1), a P-sized elementwise pass and softmax_backward
  (2), [16-bit] cast (1), causal / bool mask: masked_fill of the gradient (1), ·scale (1), bmm dQ, bmm dKᵀ (2),
  dK's layout copy (1); GQA instead: dK and dV summed over each group (2)

The counts are checked against the profiler's kernel count of the measured rows (column n_kernels of
validation/data/h200_*.csv; tests/test_time_model.py). Calls over 2^31 elements launch more (TensorIterator splits
them for 32-bit indexing); those are long GPU-bound calls, where the host count does not matter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from estimator.call import registry
from estimator.call.shapes import Calls


@dataclass
class Op:
    """One op of the chain, vectorized over calls: kernel launches (0 where the op is absent), FLOPs and HBM bytes;
    kind 'gemm' (a bmm: roofline), 'ew' (elementwise, reduction, softmax: bytes) or 'dropout' (native_dropout);
    cls, for 'ew': the kernel family its launches run (`KERNEL_CLASS_BW_SHARE`), which sets the share of HBM bandwidth
    it reaches (with its element width, for the `ELEMENT_RATE_FAMILIES`)."""

    name: str
    kind: str
    kernels: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    gemm: tuple | None = None  # a bmm's (batch, m, n, k): `timing` pads it to cuBLAS's tiles and counts its waves
    cls: str = "vec"
    width: np.ndarray | int = 4  # bytes of an element of its operands (math works in fp32; eager in the input dtype)


def _f(x):
    return np.asarray(x, dtype=np.float64)


def _bmm(name, kernels, c: Calls, m, n, k, elem) -> Op:
    """One batched GEMM over the B·Hq heads, (m×k)·(k×n), operands and output of `elem` bytes; absent (0) where
    `kernels` is 0. Its cls is its role in the chain (`GEMM_ROLES`), which sets the share of its roofline it runs at."""
    batch = _f(c.B) * c.Hq
    on = kernels > 0
    flops = np.where(on, 2 * batch * _f(m) * n * k, 0.0)
    nbytes = np.where(on, batch * (_f(m) * k + _f(k) * n + _f(m) * n) * elem, 0.0)
    return Op(name, "gemm", kernels, flops, nbytes, (np.where(on, batch, 0.0), m, n, k), cls=GEMM_ROLES[name])


def _sizes(c: Calls):
    """What both chains are written in: element size, 16-bit / GQA / grad / dropout flags, the element counts of the
    scores P (B·Hq·L·S), q Q, k or v K (at the kv heads) and Ke (at the query heads), a (L, S) and a (B, L, S) mask,
    a zero of the right shape, and on(cond, n): n kernels where cond."""
    P = _f(c.B) * c.Hq * c.L * c.S
    one = np.ones_like(P)

    def on(cond, n=1):
        return np.where(cond, n, 0) * one

    return (_f(c.es), ~c.fp32, c.gqa, c.grad, c.has_dropout, P, _f(c.B) * c.Hq * c.L * c.D,
            _f(c.B) * c.Hk * c.S * c.D, _f(c.B) * c.Hq * c.S * c.D, _f(c.L) * c.S, _f(c.B) * c.L * c.S,
            np.zeros_like(P), on)


def math_ops(c: Calls) -> list[Op]:
    """math's chain (forward, plus backward where c.grad). Everything after the upcast is fp32 (4 bytes)."""
    es, half, gqa, grad, drop, P, Q, K, Ke, LS, BLS, zero, on = _sizes(c)

    ops = [
        Op("upcast q, k, v", "ew", on(half, 3), zero, np.where(half, (Q + 2 * K) * (es + 4), 0), cls="cast"),
        Op("repeat_interleave k, v", "ew", on(gqa, 2), zero, np.where(gqa, 2 * (K + Ke) * 4, 0), cls="copy"),
        Op("q, kT * sqrt(scale)", "ew", on(True, 2), zero, (Q + Ke) * 8),
        _bmm("bmm q kT", on(True), c, c.L, c.S, c.D, 4),
        Op("causal mask: ones.tril, logical_not, where, add_", "ew", on(c.causal, 6), zero,
           np.where(c.causal, LS * 8 + P * 8, 0), cls="broadcast"),
        Op("bool mask: logical_not, where, add_", "ew", on(c.mask_bool, 4), zero,
           np.where(c.mask_bool, BLS * 7 + P * 8, 0), cls="broadcast"),
        Op("float mask: add_", "ew", on(c.mask_float), zero, np.where(c.mask_float, BLS * es + P * 8, 0),
           cls="broadcast"),
        # _safe_softmax: softmax (read, write), eq (read 4, write 1), all over the row (read 1), where (read 4 + 1
        # broadcast, write 4) and a 0-dim fill
        Op("_safe_softmax: softmax", "ew", on(True), zero, P * 8, cls="softmax_fwd"),
        Op("_safe_softmax: eq(-inf), 0-dim fill", "ew", on(True, 2), zero, P * 5),
        Op("_safe_softmax: all over the row", "ew", on(True), zero, P * 1, cls="reduce"),
        Op("_safe_softmax: where", "ew", on(True), zero, P * 9, cls="broadcast"),
        Op("native_dropout", "dropout", on(drop), zero, np.where(drop, P * 9, 0), cls="dropout_fwd"),
        _bmm("bmm p v", on(True), c, c.L, c.Dv, c.S, 4),
        Op("out, attn .to(dtype)", "ew", on(half, 2), zero, np.where(half, (Q + P) * (4 + es), 0)),
    ]
    g = lambda cond=True, n=1: on(grad & cond, n)  # noqa: E731 - backward kernels
    b = lambda x: np.where(grad, x, 0)  # noqa: E731 - backward bytes or FLOPs
    ops += [
        Op("grad_out .to(float32)", "ew", g(half), zero, b(np.where(half, Q * (es + 4), 0)), cls="cast"),
        _bmm("bmm dO vT", g(), c, c.L, c.S, c.Dv, 4),
        _bmm("bmm pT dO", g(), c, c.S, c.Dv, c.L, 4),
        Op("native_dropout_backward", "dropout", g(drop), zero, b(np.where(drop, P * 9, 0)), cls="dropout_bwd"),
        Op("where backward", "ew", g(), zero, b(P * 12)),
        Op("softmax_backward", "ew", g(), zero, b(P * 12), cls="softmax_bwd"),
        _bmm("bmm dS k", g(), c, c.L, c.D, c.S, 4),
        _bmm("bmm qT dS", g(), c, c.D, c.S, c.L, 4),
        Op("sqrt(scale) mul backward", "ew", g(True, 2), zero, b((Q + Ke) * 8)),
        Op("dK contiguous", "ew", g(~gqa), zero, b(np.where(gqa, 0, K * 8)), cls="copy"),
        Op("dK, dV summed over the group", "ew", g(gqa, 2), zero, b(np.where(gqa, 2 * (Ke + K) * 4, 0)),
           cls="reduce"),
        Op("dq, dk, dv .to(dtype)", "ew", g(half, 3), zero, b(np.where(half, (Q + 2 * K) * (4 + es), 0))),
    ]
    return ops


def eager_ops(c: Calls) -> list[Op]:
    """eager's chain (validation/call/eager.py): scores in the input dtype, softmax in fp32."""
    es, half, gqa, grad, drop, P, Q, K, Ke, LS, BLS, zero, on = _sizes(c)
    masked = c.causal | c.mask_bool

    ops = [
        Op("repeat_interleave k, v", "ew", on(gqa, 2), zero, np.where(gqa, 2 * (K + Ke) * es, 0), cls="copy"),
        _bmm("bmm q kT", on(True), c, c.L, c.S, c.D, es),
        Op("* scale", "ew", on(True), zero, P * 2 * es),
        Op("causal: ones, triu, masked_fill", "ew", on(c.causal, 3), zero, np.where(c.causal, LS * 3 + P * 2 * es, 0),
           cls="broadcast"),
        Op("bool mask: ~mask, masked_fill", "ew", on(c.mask_bool, 2), zero,
           np.where(c.mask_bool, BLS * 3 + P * 2 * es, 0), cls="broadcast"),
        Op("float mask: add", "ew", on(c.mask_float), zero, np.where(c.mask_float, BLS * es + P * 2 * es, 0),
           cls="broadcast"),
        Op(".float()", "ew", on(half), zero, np.where(half, P * (es + 4), 0), cls="cast"),
        Op("softmax", "ew", on(True), zero, P * 8, cls="softmax_fwd"),
        Op(".to(dtype)", "ew", on(half), zero, np.where(half, P * (4 + es), 0)),
        Op("dropout", "dropout", on(drop), zero, np.where(drop, P * (2 * es + 1), 0), cls="dropout_fwd"),
        _bmm("bmm p v", on(True), c, c.L, c.Dv, c.S, es),
    ]
    g = lambda cond=True, n=1: on(grad & cond, n)  # noqa: E731
    b = lambda x: np.where(grad, x, 0)  # noqa: E731
    ops += [
        _bmm("bmm dO vT", g(), c, c.L, c.S, c.Dv, es),
        _bmm("bmm pT dO", g(), c, c.S, c.Dv, c.L, es),
        Op("dropout backward", "dropout", g(drop), zero, b(np.where(drop, P * (2 * es + 1), 0)),
           cls="dropout_bwd"),
        Op("grad .to(float32)", "ew", g(half), zero, b(np.where(half, P * (es + 4), 0)), cls="cast"),
        # a P-sized fp32 pass beside softmax_backward (the profiler's vectorized BinaryFunctor before it: ~12 bytes an
        # element at 4.2 TB/s, validation/data/h200_kernel_probe.csv)
        Op("softmax backward's elementwise pass", "ew", g(), zero, b(P * 12)),
        Op("softmax_backward", "ew", g(), zero, b(P * 12), cls="softmax_bwd"),
        Op("grad .to(dtype)", "ew", g(half), zero, b(np.where(half, P * (4 + es), 0))),
        Op("masked_fill backward", "ew", g(masked), zero, b(np.where(masked, P * 2 * es + BLS, 0)), cls="broadcast"),
        Op("* scale backward", "ew", g(), zero, b(P * 2 * es)),
        _bmm("bmm dS k", g(), c, c.L, c.D, c.S, es),
        _bmm("bmm qT dS", g(), c, c.D, c.S, c.L, es),
        Op("dK layout copy", "ew", g(~gqa), zero, b(np.where(gqa, 0, K * 2 * es)), cls="copy"),
        Op("dK, dV summed over the group", "ew", g(gqa, 2), zero, b(np.where(gqa, 2 * (Ke + K) * es, 0)),
           cls="reduce"),
    ]
    for op in ops:  # its masks, copies and reductions work on elements of the input dtype
        if op.cls in ELEMENT_RATE_FAMILIES:
            op.width = es
    return ops


# share of HBM bandwidth each kernel family reaches on the H200 (torch 2.11), from every kernel of 664 math and eager
# calls timed one by one: python -m validation.timing.kernel_classes (validation/data/h200_kernel_probe.csv).
# vec: vectorized elementwise kernels over contiguous operands; cast: the unrolled dtype-conversion copy; copy: a
# non-vectorized copy of a permuted or expanded view (repeat_interleave, layout copies); broadcast: a non-vectorized
# elementwise kernel with a broadcast operand (mask add, where, masked_fill); reduce: reduce_kernel (group sums,
# all()); softmax_fwd/bwd:<kernel>: the softmax kernel PyTorch picks by row length (`softmax_kernel`); dropout_fwd:
# fused_dropout_kernel_vec (a Philox draw, the kept mask and the scaled output), dropout_bwd: masked_scale_kernel.
# The non-vectorized kernels (copy, broadcast, reduce: ELEMENT_RATE_FAMILIES) compute an offset per element of each
# operand (TensorIterator's OffsetCalculator, one integer division per dimension): they are bound by elements a
# second, not bytes, so on 16-bit elements (eager's scores in fp16/bf16, ":16-bit") they move about half the bytes
# of the same kernels on fp32 elements (the broadcast family 0.298 of HBM bandwidth on eager's 16-bit scores, 0.575
# on fp32 ones).
KERNEL_CLASS_BW_SHARE = {
    "broadcast": 0.575, "broadcast:16-bit": 0.298, "cast": 0.429, "copy": 0.363, "copy:16-bit": 0.213,
    "reduce": 0.319, "reduce:16-bit": 0.171, "vec": 0.855, "dropout_fwd": 0.666, "dropout_bwd": 0.896,
    "softmax_bwd:block": 0.705, "softmax_bwd:block_long": 0.564, "softmax_bwd:smem": 0.874, "softmax_bwd:warp": 0.888,
    "softmax_fwd:block": 0.698, "softmax_fwd:block_long": 0.422, "softmax_fwd:reg": 0.406, "softmax_fwd:warp": 0.753,
}
ELEMENT_RATE_FAMILIES = ("broadcast", "copy", "reduce")
TOP_BW_SHARE = max(KERNEL_CLASS_BW_SHARE.values())  # the most of HBM any family reached: HBM-bound, not SM-bound
SHARES_MEASURED_ON = "h200"  # the catalog GPU of the probe (timing.elementwise_bytes_per_ms scales to others)


def share_key(op: Op, c: Calls):
    """`op`'s KERNEL_CLASS_BW_SHARE key per call: its family, with ":16-bit" for an element-rate family's kernels
    on 16-bit elements, and the softmax families by the kernel the row length picks (`softmax_kernel`)."""
    if op.cls.startswith("softmax_"):
        kernel = softmax_kernel(op.cls.removeprefix("softmax_"), c.S)
        return np.char.add(op.cls + ":", kernel.astype(str))
    if op.cls in ELEMENT_RATE_FAMILIES:
        return np.where(np.asarray(op.width) == 2, op.cls + ":16-bit", op.cls)
    return np.asarray(op.cls)


def softmax_kernel(direction: str, S):
    """The softmax kernel aten/src/ATen/native/cuda/SoftMax.cu (torch 2.11) runs for rows of S elements, as the
    probe saw it: forward warp-per-row up to 2048, the register kernel up to 8192, the block kernel above (its
    three passes over a row stay in L2 at 16384, not at 32768 and more: block_long); backward warp up to 1024, the
    shared-memory kernel up to 8192 (rows a multiple of 4; else the block kernel), the block kernel above."""
    S = np.asarray(S)
    if direction == "fwd":
        return np.select([S <= 2048, S <= 8192, S <= 16384], ["warp", "reg", "block"], "block_long")
    return np.select([S <= 1024, (S <= 8192) & (S % 4 == 0), S <= 16384], ["warp", "smem", "block"], "block_long")


def bw_share(op: Op, c: Calls):
    """The share of HBM bandwidth `op`'s kernels reach (KERNEL_CLASS_BW_SHARE at `share_key`), per call."""
    key = share_key(op, c)
    names = [k for k in KERNEL_CLASS_BW_SHARE if k == op.cls or k.startswith(op.cls + ":")]
    return np.select([key == k for k in names], [KERNEL_CLASS_BW_SHARE[k] for k in names])


# each bmm's role: the operand layouts cuBLAS sees (q·kᵀ and pᵀ·dO run its "tn" kernels, p·v and qᵀ·dS "nn",
# dO·vᵀ and dS·k "nt", in the kernel names the profiler records)
GEMM_ROLES = {"bmm q kT": "qk", "bmm p v": "pv", "bmm dO vT": "dp", "bmm pT dO": "dv", "bmm dS k": "dq",
              "bmm qT dS": "dk"}
# the share of its roofline (max of FLOPs at the executed tile padding over the peak, bytes over HBM bandwidth:
# timing.gemm_roofline_ms) each role's cuBLAS kernels reach on the H200 (torch 2.11), per `gemm_class`: 16-bit
# (eager) with every leading dimension a multiple of 8 elements (16 bytes: cuBLAS's sm90 nvjet kernels), 16-bit with
# one of them only even (its sm80 CUTLASS *_align2 kernels, no wgmma: a third to a half of the rate; head_dim 100 or a
# key length of 500) or odd (the sm75 *_align1 kernels: key length 4097), and fp32 (math, and eager on fp32 inputs):
# python -m validation.timing.kernel_classes
GEMM_ROOFLINE_SHARE = {
    "16-bit": {"qk": 0.654, "pv": 0.796, "dp": 0.815, "dv": 0.652, "dq": 0.798, "dk": 0.792},
    "16-bit align1": {"qk": 0.115, "pv": 0.232, "dp": 0.283, "dv": 0.115, "dq": 0.276, "dk": 0.231},
    "16-bit align2": {"qk": 0.263, "pv": 0.362, "dp": 0.426, "dv": 0.263, "dq": 0.348, "dk": 0.275},
    "fp32": {"qk": 0.566, "pv": 0.718, "dp": 0.644, "dv": 0.61, "dq": 0.76, "dk": 0.693},
}
GEMM_ALIGN = 8  # elements of a 16-bit leading dimension in 16 bytes, the nvjet kernels' operand alignment


def gemm_class(c: Calls, fp32):
    """Each call's GEMM_ROOFLINE_SHARE key: the bmms' leading dimensions are head_dim (q, k, v, out, dO) and the key
    length (the score matrix), so their alignment decides which cuBLAS kernels run."""
    dims = np.gcd(np.gcd(c.D, c.Dv), c.S)
    half = np.select([dims % GEMM_ALIGN == 0, dims % 2 == 0], ["16-bit", "16-bit align2"], "16-bit align1")
    return np.where(np.asarray(fp32), "fp32", half)


# an fp32 p·v of 2-4 query rows runs cuBLAS's gemmSN_NN kernel (M a template argument: 2, 3, 4), which walks the
# reduction (the S keys) in one CTA per batch: GEMM_SN_US_PER_K a key whatever the batch and width (the median of
# 57 such kernels of the probe, 0.030-0.033 us at the quartiles; the six of them cuBLAS ran as its 256-thread variant
# walked at about 0.020: not told apart)
GEMM_SN_US_PER_K = 0.0315
GEMM_SN_ROWS = (2, 4)


def runs_gemm_sn(op: Op, c: Calls, fp32):
    """Where `op` runs cuBLAS's gemmSN_NN kernel: an fp32 p·v of GEMM_SN_ROWS query rows (per call)."""
    lo, hi = GEMM_SN_ROWS
    return (op.cls == "pv") & np.asarray(fp32) & (c.L >= lo) & (c.L <= hi) & (op.kernels > 0)


CHAINS = {"math": math_ops, "eager": eager_ops}  # one per registry.OP_CHAIN backend (a test checks)


def chain_ops(c: Calls, backend: str) -> list[Op]:
    return CHAINS[backend](c)


def kernel_count(c: Calls, backend) -> np.ndarray:
    """Kernels the call launches: the op chain's for math and eager; fused backends 0 (not modelled: their few
    launches are in the fitted overhead)."""
    backend = np.asarray(backend)
    out = np.float64(0.0)
    for name in registry.OP_CHAIN:
        rows = backend == name
        if not rows.any():  # a chain no call runs is not built (the common case: one backend's rows at a time)
            continue
        n = sum(op.kernels for op in chain_ops(c, name))
        out = np.where(rows, n, out)
    return out
