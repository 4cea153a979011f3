"""FLOPs of one attention call, in PyTorch's convention and as the hardware executes them, and its time.

PyTorch's convention is `torch/utils/flop_counter.py`: matmuls only, 2·m·k·n each, causal never
halved. Fused ops (`sdpa_flop_count`): forward 2·B·H·L·S·(Dq + Dv), backward 2·B·H·L·S·(3·Dq + 2·Dv).
The math path and the eager path are counted through their bmm calls: forward 4·B·H·L·S·D,
backward 8·B·H·L·S·D. Flash pads D to a multiple of 8 before its op is dispatched, so the counter
sees the padded head dim. PyTorch 2.11's counter asserts on GQA for fused ops; we report the
count 2.13 gives (query heads), as the contract asks.
"""

from __future__ import annotations

import numpy as np

from estimator.shapes import Calls, cdiv, round_up

CAUSAL_TILE = 128  # fused kernels skip key tiles above the diagonal; 128-row tiles (FA2 kBlockM) [approx]


def counted_flops(c: Calls, backend):
    """FlopCounterMode's total for the call (forward, plus backward in forward_backward mode)."""
    d_eff = np.where(backend == "flash", round_up(c.D, 8), c.D)
    bhls = c.B * c.Hq * c.L * c.S
    fused = np.isin(backend, ("flash", "efficient", "cudnn"))
    fwd = 4 * bhls * d_eff
    bwd = np.where(fused, 10 * bhls * d_eff, 8 * bhls * c.D)
    return np.where(backend == "none", 0, fwd + np.where(c.grad, bwd, 0))


def causal_fraction(c: Calls):
    """Share of score tiles a fused causal kernel computes: (n+1)/(2n) for n tiles of 128 rows, when L == S."""
    n = cdiv(c.L, CAUSAL_TILE)
    return np.where(c.causal & (c.L == c.S), (n + 1) / (2.0 * n), 1.0)


def executed_flops(c: Calls, backend):
    """FLOPs the GPU really performs: like the counter, but fused kernels skip masked causal tiles."""
    counted = counted_flops(c, backend)
    fused = np.isin(backend, ("flash", "efficient", "cudnn"))
    return np.where(fused, np.round(counted * causal_fraction(c)), counted).astype(np.int64)
