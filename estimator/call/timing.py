"""Predicted duration of one attention call on a GPU.

time = executed_flops / (peak_flops · flop_fit) + hbm_bytes / (bandwidth · bw_fit) + overhead

Additive, not max(): each path runs as a chain of kernels whose GEMM and streaming phases do not
overlap much, and the fit was better that way. flop_fit, bw_fit and the per-call overhead (Python,
dispatch, launches) per backend and mode are a least-squares fit of relative error over the H200 rows
(validation/data/h200_calibration.csv + h200_heldout.csv, torch 2.11); `python -m validation.fit_time`
refits them. Median |relative error| on those rows is 11-30% by backend and mode, and the 90th
percentile 35-75%: a planning estimate, stated as such. These are fit factors, not hardware
efficiencies: a factor above 1 means the path beats the naive roofline term (e.g. eager's fp32 GEMMs, or
fused kernels moving less than we count).
"""

from __future__ import annotations

import numpy as np

from estimator.call.shapes import Calls
from estimator.hardware import GPU

# (flop_fit, bw_fit, overhead_ms) per (backend, forward_backward): fit factors of the roofline terms (not
# efficiencies: some exceed 1), fitted as described above.
FIT_FACTORS = {
    ("cudnn", False): (0.618, 0.725, 0.072), ("cudnn", True): (0.516, 1.640, 0.343),
    ("eager", False): (1.604, 0.373, 0.163), ("eager", True): (1.716, 0.518, 0.797),
    ("efficient", False): (0.609, 0.144, 0.081), ("efficient", True): (0.584, 0.100, 0.354),
    ("flash", False): (0.357, 0.621, 0.087), ("flash", True): (0.350, 2.135, 0.383),
    ("math", False): (0.877, 0.419, 0.258), ("math", True): (0.895, 1.030, 0.944),
}
# flex (not in the single-call fit): flash's factors at 85% of its FLOP rate, the share of FA2's throughput the
# FlexAttention paper reports (Dong et al. 2024, arXiv:2412.05496 §5), and a compiled graph's launch overhead.
FIT_FACTORS[("flex", False)] = (0.357 * 0.85, 0.621, 0.087)
FIT_FACTORS[("flex", True)] = (0.350 * 0.85, 2.135, 0.383)


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
    flop_fit = np.ones(np.shape(executed), dtype=np.float64)
    bw_fit = np.ones(np.shape(executed), dtype=np.float64)
    overhead = np.zeros(np.shape(executed), dtype=np.float64)
    for (name, grad), (fe, be, oh) in FIT_FACTORS.items():
        sel = (backend == name) & (c.grad == grad)
        flop_fit = np.where(sel, fe, flop_fit)
        bw_fit = np.where(sel, be, bw_fit)
        overhead = np.where(sel, oh, overhead)
    compute_s = executed / (peak * flop_fit)
    memory_s = hbm_bytes(c, backend) / (gpu.hbm_bytes_per_s * bw_fit)
    return (compute_s + memory_s) * 1e3 + overhead
