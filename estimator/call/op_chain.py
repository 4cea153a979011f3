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
  bmm dP, bmm dV (2), dropout backward (1), [16-bit] cast (1), softmax_backward (1), [16-bit] cast (1),
  causal / bool mask: masked_fill of the gradient (1), ·scale (1), bmm dQ, bmm dKᵀ (2),
  the bmm gradients' layout copies (2); GQA: dK, dV summed over each group instead of one of them (net +1)

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
    kind 'gemm' (a bmm: roofline), 'ew' (elementwise, reduction, softmax: bytes) or 'dropout' (native_dropout)."""

    name: str
    kind: str
    kernels: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    gemm: tuple | None = None  # a bmm's (batch, m, n, k): `timing` pads it to cuBLAS's tiles and counts its waves


def _f(x):
    return np.asarray(x, dtype=np.float64)


def _bmm(name, kernels, c: Calls, m, n, k, elem) -> Op:
    """One batched GEMM over the B·Hq heads, (m×k)·(k×n), operands and output of `elem` bytes; absent (0) where
    `kernels` is 0."""
    batch = _f(c.B) * c.Hq
    on = kernels > 0
    flops = np.where(on, 2 * batch * _f(m) * n * k, 0.0)
    nbytes = np.where(on, batch * (_f(m) * k + _f(k) * n + _f(m) * n) * elem, 0.0)
    return Op(name, "gemm", kernels, flops, nbytes, (np.where(on, batch, 0.0), m, n, k))


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
        Op("upcast q, k, v", "ew", on(half, 3), zero, np.where(half, (Q + 2 * K) * (es + 4), 0)),
        Op("repeat_interleave k, v", "ew", on(gqa, 2), zero, np.where(gqa, 2 * (K + Ke) * 4, 0)),
        Op("q, kT * sqrt(scale)", "ew", on(True, 2), zero, (Q + Ke) * 8),
        _bmm("bmm q kT", on(True), c, c.L, c.S, c.D, 4),
        Op("causal mask: ones.tril, logical_not, where, add_", "ew", on(c.causal, 6), zero,
           np.where(c.causal, LS * 8 + P * 8, 0)),
        Op("bool mask: logical_not, where, add_", "ew", on(c.mask_bool, 4), zero,
           np.where(c.mask_bool, BLS * 7 + P * 8, 0)),
        Op("float mask: add_", "ew", on(c.mask_float), zero, np.where(c.mask_float, BLS * es + P * 8, 0)),
        # softmax (read, write), eq (read 4, write 1), all (read 1), where (read 4 + 1, write 4), 0-dim fill
        Op("_safe_softmax", "ew", on(True, 5), zero, P * 8 + P * 5 + P * 1 + P * 9),
        Op("native_dropout", "dropout", on(drop), zero, np.where(drop, P * 9, 0)),
        _bmm("bmm p v", on(True), c, c.L, c.Dv, c.S, 4),
        Op("out, attn .to(dtype)", "ew", on(half, 2), zero, np.where(half, (Q + P) * (4 + es), 0)),
    ]
    g = lambda cond=True, n=1: on(grad & cond, n)  # noqa: E731 - backward kernels
    b = lambda x: np.where(grad, x, 0)  # noqa: E731 - backward bytes or FLOPs
    ops += [
        Op("grad_out .to(float32)", "ew", g(half), zero, b(np.where(half, Q * (es + 4), 0))),
        _bmm("bmm dO vT", g(), c, c.L, c.S, c.Dv, 4),
        _bmm("bmm pT dO", g(), c, c.S, c.Dv, c.L, 4),
        Op("native_dropout_backward", "dropout", g(drop), zero, b(np.where(drop, P * 9, 0))),
        Op("where backward, softmax_backward", "ew", g(True, 2), zero, b(P * 9 + P * 12)),
        _bmm("bmm dS k", g(), c, c.L, c.D, c.S, 4),
        _bmm("bmm qT dS", g(), c, c.D, c.S, c.L, 4),
        Op("sqrt(scale) mul backward", "ew", g(True, 2), zero, b((Q + Ke) * 8)),
        Op("dK contiguous", "ew", g(~gqa), zero, b(np.where(gqa, 0, K * 8))),
        Op("dK, dV summed over the group", "ew", g(gqa, 2), zero, b(np.where(gqa, 2 * (Ke + K) * 4, 0))),
        Op("dq, dk, dv .to(dtype)", "ew", g(half, 3), zero, b(np.where(half, (Q + 2 * K) * (4 + es), 0))),
    ]
    return ops


def eager_ops(c: Calls) -> list[Op]:
    """eager's chain (validation/call/eager.py): scores in the input dtype, softmax in fp32."""
    es, half, gqa, grad, drop, P, Q, K, Ke, LS, BLS, zero, on = _sizes(c)
    masked = c.causal | c.mask_bool

    ops = [
        Op("repeat_interleave k, v", "ew", on(gqa, 2), zero, np.where(gqa, 2 * (K + Ke) * es, 0)),
        _bmm("bmm q kT", on(True), c, c.L, c.S, c.D, es),
        Op("* scale", "ew", on(True), zero, P * 2 * es),
        Op("causal: ones, triu, masked_fill", "ew", on(c.causal, 3), zero, np.where(c.causal, LS * 3 + P * 2 * es, 0)),
        Op("bool mask: ~mask, masked_fill", "ew", on(c.mask_bool, 2), zero,
           np.where(c.mask_bool, BLS * 3 + P * 2 * es, 0)),
        Op("float mask: add", "ew", on(c.mask_float), zero, np.where(c.mask_float, BLS * es + P * 2 * es, 0)),
        Op(".float(), softmax, .to(dtype)", "ew", on(True) + on(half, 2), zero,
           P * 8 + np.where(half, 2 * P * (es + 4), 0)),
        Op("dropout", "dropout", on(drop), zero, np.where(drop, P * (2 * es + 1), 0)),
        _bmm("bmm p v", on(True), c, c.L, c.Dv, c.S, es),
    ]
    g = lambda cond=True, n=1: on(grad & cond, n)  # noqa: E731
    b = lambda x: np.where(grad, x, 0)  # noqa: E731
    ops += [
        _bmm("bmm dO vT", g(), c, c.L, c.S, c.Dv, es),
        _bmm("bmm pT dO", g(), c, c.S, c.Dv, c.L, es),
        Op("dropout backward", "dropout", g(drop), zero, b(np.where(drop, P * (2 * es + 1), 0))),
        Op("casts' and softmax backward", "ew", g() + g(half, 2), zero,
           b(P * 12 + np.where(half, 2 * P * (es + 4), 0))),
        Op("masked_fill backward", "ew", g(masked), zero, b(np.where(masked, P * 2 * es + BLS, 0))),
        Op("* scale backward", "ew", g(), zero, b(P * 2 * es)),
        _bmm("bmm dS k", g(), c, c.L, c.D, c.S, es),
        _bmm("bmm qT dS", g(), c, c.D, c.S, c.L, es),
        Op("layout copies of the bmm gradients", "ew", g(True, 2), zero, b((Q + K) * 2 * es)),
        Op("dK, dV summed over the group", "ew", g(gqa, 1), zero, b(np.where(gqa, 2 * (Ke + K) * es, 0))),
    ]
    return ops


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
