"""Time of a hybrid prefill or training step on transformers' torch fallback, priced op by op through the
project's kernel prices (estimator/model/kernel_prices.py, the H200 calibration): the kernels are those the
replay records (estimator/model/autograd_replay.py `Graph.kernels` / `backward_kernels`, built by
estimator/model/hybrid_train.py) - every linear layer a GEMM at the measured efficiency of the nearest shapes,
every memory-bound op the bytes it reads and writes at the measured streaming rate, the softmax attention calls
as the attention estimator times them, the optimizer update at its measured rate.

The fallback's broadcast products and its sums over an innermost dim run far below the streaming rate; they are
priced at their own rates, measured on the H200 (validation/data/h200_hybrid_scan_ops.csv, below). What is left
unexplained is shown as a band: over every prefill and training row of validation/data/h200_hf_hybrid*.csv that
ran (49 rows: `python -m validation.model.hybrid_report validation/data/h200_hf_hybrid.csv
validation/data/h200_hf_hybrid_heldout.csv validation/data/h200_hf_hybrid_heldout2.csv
validation/data/h200_hf_hybrid_train_fit.csv`, its time line) the measured time was 0.93x to 1.34x the price
(median 1.07x), so a plan gives the median as its figure and the band [0.92, 1.35] x price, never one number
alone. Decode steps are not timed (their measured times, 2.6 to 65 ms per token, are not explained by the
kernels' prices).
"""

from __future__ import annotations

from estimator.model.autograd_replay import Graph
from estimator.model.layer_passes import Pass

# measured / priced over the H200 hybrid rows (see the module docstring): low, median, high
FALLBACK_TIME_RATIO = (0.92, 1.07, 1.35)  # the band rounded outward
# The fallback's own kernel classes, measured on the H200 (validation/data/h200_hybrid_scan_ops.csv: the chunked
# scan's broadcast products and their reductions at four shapes, CUDA events): a broadcast product writes its
# output at 1.39 TB/s (median; 1.18-1.66 over the shapes); a sum over the innermost dim of size n reads at a rate
# that grows with n: 0.61, 1.15, 2.21, 3.2 TB/s at n = 32, 64, 128, 256 (G = (C·B).sum(-1) and
# C_times_states.sum(-1) agree); against 4.8 TB/s of HBM. Scaled by the HBM bandwidth on other GPUs.
H200_HBM_BYTES_PER_S = 4.8e12
BROADCAST_WRITE_BYTES_PER_S = 1.39e12
REDUCE_LAST_READ_BYTES_PER_S = ((32, 0.61e12), (64, 1.15e12), (128, 2.21e12), (256, 3.2e12))


def reduce_last_rate(n: int) -> float:
    """Read rate of a sum over an innermost dim of size n on the H200: the measured points, linear between them,
    proportional below the first, the last beyond."""
    pts = REDUCE_LAST_READ_BYTES_PER_S
    if n <= pts[0][0]:
        return pts[0][1] * n / pts[0][0]
    for (n0, r0), (n1, r1) in zip(pts, pts[1:], strict=False):
        if n <= n1:
            return r0 + (r1 - r0) * (n - n0) / (n1 - n0)
    return pts[-1][1]


def graph_time_ms(g: Graph, kern, dtype: str) -> dict:
    """GPU ms of the replayed kernels at the kernel prices: forward and backward apart, each the larger of GPU
    and host (launch) time; and their kernel counts."""
    out = {}
    for name, kernels in (("forward", g.kernels), ("backward", g.backward_kernels)):
        p = Pass()
        for kind, what in kernels:
            if kind == "gemm":
                m, n, k = what
                p.add("gemm", kern.gemm_ms(m, n, k, dtype), kern.k.matmul_floor_ms)
            elif kind == "fixed":
                p.add("attention", what, kern.k.launch_floor_ms)
            elif kind in ("broadcast", "reduce_last"):
                nbytes, rate = (what, BROADCAST_WRITE_BYTES_PER_S) if kind == "broadcast" else \
                    (what[0], reduce_last_rate(what[1]))
                ms = nbytes / (rate * kern.gpu.hbm_bytes_per_s / H200_HBM_BYTES_PER_S) * 1e3
                p.add("memory_bound", max(ms, 0.002), kern.k.launch_floor_ms)
            else:
                p.add("memory_bound", max(what / kern.stream_rate() * 1e3, 0.002), kern.k.launch_floor_ms)
        out[name + "_ms"] = p.total(0.0)
        out[name + "_kernels"] = p.kernels
    return out


def fallback_time(spec, *, mode: str, seq_len: int, batch: int, dtype: str, gpu, optimizer: str = "adamw",
                  graph: Graph | None = None) -> dict:
    """{"priced_ms", "time_ms", "band_ms": (low, high)} of a prefill or a training step (forward, backward and
    the optimizer update); `graph`: the training step's replay when already built."""
    from estimator.call.config import element_bytes
    from estimator.model.calibration import load_constants
    from estimator.model.hybrid_train import train_graph
    from estimator.model.kernel_prices import Kernels

    kern = Kernels(load_constants(), gpu)
    training = mode == "training"
    if graph is None:
        graph = train_graph(spec, batch, seq_len, element_bytes(dtype), gpu, backward=training)
    t = graph_time_ms(graph, kern, dtype)
    priced = t["forward_ms"] + (t["backward_ms"] + kern.optimizer_ms(optimizer, dtype, spec.params)
                                if training else 0.0)
    lo, mid, hi = FALLBACK_TIME_RATIO
    return {"priced_ms": priced, "time_ms": priced * mid, "band_ms": (priced * lo, priced * hi),
            "kernels": t["forward_kernels"] + (t["backward_kernels"] if training else 0)}
