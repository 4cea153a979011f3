"""Time of a hybrid prefill or training step on transformers' torch fallback, priced op by op through the
project's kernel prices (estimator/model/kernel_prices.py, the H200 calibration): the kernels are those the
replay records (estimator/model/autograd_replay.py `Graph.kernels` / `backward_kernels`, built by
estimator/model/hybrid_train.py) - every linear layer a GEMM at the measured efficiency of the nearest shapes,
every memory-bound op the bytes it reads and writes at the measured streaming rate, the softmax attention calls
as the attention estimator times them, the optimizer update at its measured rate.

That price is a floor: the fallback's broadcast products and strided reductions over 6-D fp32 tensors run below
the streaming rate. On the H200 the measured time was 1.65x to 2.97x the price (median 2.05x) over every prefill
and training row of validation/data/h200_hf_hybrid*.csv that ran (`python -m validation.model.hybrid_report
validation/data/h200_hf_hybrid.csv validation/data/h200_hf_hybrid_heldout.csv
validation/data/h200_hf_hybrid_heldout2.csv validation/data/h200_hf_hybrid_train_fit.csv`, its time table), so
the plan gives the band [1.65, 3.0] x price and the median as its figure, never one confident number. The ratio
is measured, not modelled: which of the fallback's kernels run how far below the streaming rate is not split
here. Decode steps are not timed (their measured times, 2.6 to 65 ms per token, are not explained by the
kernels' prices).
"""

from __future__ import annotations

from estimator.model.autograd_replay import Graph
from estimator.model.layer_passes import Pass

# measured / priced over the H200 hybrid rows (see the module docstring): low, median, high
FALLBACK_TIME_RATIO = (1.65, 2.05, 3.0)


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
