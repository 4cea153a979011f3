"""Predicted duration of one attention call: a roofline over executed FLOPs and HBM bytes, scaled by
per-backend efficiencies measured on an H200 (validation/data/h200_calibration.csv, torch 2.11), plus
a fixed launch cost per kernel.

time = max(executed_flops / (peak_flops · flop_eff), hbm_bytes / (bandwidth · bw_eff)) + kernels · launch
The efficiencies are the median of (ideal roofline time / measured time) over the calibration rows of
that backend and mode whose time exceeds 0.2 ms (`python -m validation.fit_time` recomputes them).
"""

from __future__ import annotations

import numpy as np

from estimator.hardware import GPU
from estimator.shapes import Calls

LAUNCH_MS = 0.006  # per kernel; H200 median small-call time / kernel count (calibration rows < 0.05 ms)

# (flop efficiency, bandwidth efficiency) per backend and mode, from the H200 calibration set.
EFFICIENCY = {
    ("flash", False): (0.45, 0.6), ("flash", True): (0.35, 0.6),
    ("efficient", False): (0.35, 0.6), ("efficient", True): (0.25, 0.6),
    ("cudnn", False): (0.55, 0.6), ("cudnn", True): (0.45, 0.6),
    ("math", False): (0.6, 0.6), ("math", True): (0.6, 0.6),
    ("eager", False): (0.6, 0.6), ("eager", True): (0.6, 0.6),
}
# Kernels a call launches (forward, backward), from the profiler counts in the calibration set.
KERNELS = {"flash": (1, 3), "efficient": (1, 2), "cudnn": (1, 3), "math": (12, 20), "eager": (7, 14)}


def hbm_bytes(c: Calls, backend):
    """Bytes moved through HBM. Fused kernels read q, k, v and write out (≈3× that for backward);
    math and eager also stream the score matrix: ≈6 passes over it forward and ≈10 backward
    (write scores, read/write softmax, casts, mask), in fp32 for math and the input dtype for eager."""
    qo = 2 * c.B * c.Hq * c.L * c.D * c.es
    kv = 2 * c.B * c.Hk * c.S * c.D * c.es
    p = c.B * c.Hq * c.L * c.S
    fused_fwd = qo + kv
    math_fwd = fused_fwd + 6 * p * 4
    eager_fwd = fused_fwd + 4 * p * c.es + 2 * p * 4
    fwd = np.where(backend == "math", math_fwd, np.where(backend == "eager", eager_fwd, fused_fwd))
    bwd_factor = np.where(np.isin(backend, ("math", "eager")), 10.0 / 6.0, 3.0)
    return fwd * np.where(c.grad, 1.0 + bwd_factor, 1.0)


def time_ms(c: Calls, backend, executed, gpu: GPU):
    """Predicted milliseconds for the call on `gpu` (vectorized over calls)."""
    peak_half = gpu.peak_flops_per_s["bfloat16"]
    peak_fp32 = gpu.peak_flops_per_s["float32"]
    # the math path upcasts 16-bit inputs and runs fp32 SIMT GEMMs; everything fp32 runs at the fp32 rate
    peak = np.where(c.fp32 | (backend == "math"), peak_fp32, peak_half)
    flop_eff = np.ones(np.shape(executed), dtype=np.float64)
    bw_eff = np.ones(np.shape(executed), dtype=np.float64)
    kernels = np.zeros(np.shape(executed), dtype=np.float64)
    for (name, grad), (fe, be) in EFFICIENCY.items():
        sel = (backend == name) & (c.grad == grad)
        flop_eff = np.where(sel, fe, flop_eff)
        bw_eff = np.where(sel, be, bw_eff)
    for name, (kf, kb) in KERNELS.items():
        kernels = np.where(backend == name, kf + np.where(c.grad, kb, 0), kernels)
    compute_s = executed / (peak * flop_eff)
    memory_s = hbm_bytes(c, backend) / (gpu.hbm_bytes_per_s * bw_eff)
    return np.maximum(compute_s, memory_s) * 1e3 + kernels * LAUNCH_MS
