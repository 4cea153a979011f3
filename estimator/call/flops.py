"""FLOPs of one attention call, in PyTorch's convention and as the hardware executes them, and its time.

PyTorch's convention is `torch/utils/flop_counter.py`: matmuls only, 2·m·k·n each, causal never
halved. Fused ops (`sdpa_flop_count`): forward 2·B·H·L·S·(Dq + Dv), backward 2·B·H·L·S·(3·Dq + 2·Dv).
The math path and the eager path are counted through their bmm calls: forward 2·B·H·L·S·(Dq + Dv),
backward 4·B·H·L·S·(Dq + Dv); Dv = Dq unless the call has its own value width (MLA). Flash pads D to a
multiple of 8 before its op is dispatched, so the counter sees the padded head dim. PyTorch 2.11's counter
asserts on GQA for fused ops; we report the count 2.13 gives (query heads), as the contract asks.
"""

from __future__ import annotations

import numpy as np

from estimator.call import registry
from estimator.call.shapes import Calls
from estimator.units import cdiv, round_up

CAUSAL_TILE = 128  # fused kernels skip key tiles above the diagonal; 128-row tiles (FA2 kBlockM) [approx]


def exact_product(*factors):
    """Elementwise product of integer columns, exact: int64 where it cannot overflow, Python ints otherwise."""
    approx = np.ones(np.broadcast(*factors).shape)
    for f in factors:
        approx = approx * np.asarray(f, dtype=np.float64)
    if np.all(approx < 2.0**62):
        out = np.int64(1)
        for f in factors:
            out = out * np.asarray(f, dtype=np.int64)
        return out
    out = np.ones(np.broadcast(*factors).shape, dtype=object)
    for f in factors:
        out = out * np.asarray(f, dtype=np.int64).astype(object)
    return out if isinstance(out, np.ndarray) and out.ndim else int(out)


def counted_flops(c: Calls, backend):
    """FlopCounterMode's total for the call (forward, plus backward in forward_backward mode), by each backend's
    `FlopsRule` (estimator/call/registry.py); 0 for "none"."""
    multiple = registry.column(backend, lambda b: b.flops.head_dim_multiple, 1)
    d_eff, dv_eff = round_up(c.D, multiple), round_up(c.Dv, multiple)
    fused = np.isin(backend, registry.names_where(lambda b: b.flops.counted == "sdpa"))
    # fused: 2·(Dq + Dv) forward, 2·(3·Dq + 2·Dv) backward; the bmm chain: Q·Kᵀ and P·V forward, then dV = Pᵀ·dO
    # and dP = dO·Vᵀ at Dv, dQ = dS·K and dK = dSᵀ·Q at Dq
    per_score = 2 * (d_eff + dv_eff) + np.where(c.grad, np.where(fused, 6 * d_eff + 4 * dv_eff,
                                                                  4 * (c.D + c.Dv)), 0)
    per_score = np.where(backend == "none", 0, per_score)
    return exact_product(c.B, c.Hq, c.L, c.S, per_score)


def causal_fraction(c: Calls):
    """Share of score tiles a fused causal kernel computes: (n+1)/(2n) for n tiles of 128 rows, when L == S."""
    n = cdiv(c.L, CAUSAL_TILE)
    return np.where(c.causal & (c.L == c.S), (n + 1) / (2.0 * n), 1.0)


def block_fraction(c: Calls):
    """Share of the (128 x 128)-element blocks a flex_attention BlockMask keeps (partial blocks included):
    causal (n+1)/(2n); a window of W keys ~ (ceil(W/128) + 1) kv blocks per query block (2·ceil(W/128) + 1
    without causal); K equal documents, causal or not within each. torch's _DEFAULT_SPARSE_BLOCK_SIZE = 128."""
    nq, nk = cdiv(c.L, CAUSAL_TILE), cdiv(c.S, CAUSAL_TILE)
    total = (nq * nk).astype(np.float64) if hasattr(nq * nk, "astype") else float(nq * nk)
    causal = c.causal | c.scausal
    full = np.where(causal & (c.L == c.S), (nq + 1) / (2.0 * nq), 1.0)
    wb = cdiv(np.maximum(c.W, 1), CAUSAL_TILE)
    window = np.minimum(np.where(c.scausal, wb + 1, 2 * wb + 1), nk) / nk
    docs = np.maximum(c.docs, 1)
    db = cdiv(cdiv(c.L, docs), CAUSAL_TILE) + 1  # blocks one document touches (one boundary block shared)
    doc = np.minimum(docs * np.where(c.scausal, db * (db + 1) / 2.0, db * db) / total, 1.0)
    return np.where(c.W > 0, np.minimum(window, full), np.where(c.docs > 1, doc, full))


def executed_flops(c: Calls, backend, counted=None):
    """FLOPs the GPU really performs (float64, an estimate): like the counter, but SDPA's fused kernels skip
    masked causal tiles, and flex and flash-attn every block their window or documents leave out. `counted`:
    counted_flops(c, backend) where the caller has it already."""
    counted = np.asarray(counted_flops(c, backend) if counted is None else counted, dtype=np.float64)
    causal_tiles = np.isin(backend, registry.names_where(lambda b: b.flops.executed == "causal_tiles"))
    blocks = np.isin(backend, registry.names_where(lambda b: b.flops.executed == "blocks"))
    return np.where(blocks, counted * block_fraction(c),
                    np.where(causal_tiles, counted * causal_fraction(c), counted))
