"""Communication time of a parallel plan: tensor parallel (all-reduces per layer), context parallel (ring K/V
exchange), data parallel and ZeRO (all-reduce / reduce-scatter / all-gather of gradients and weights), from the
link bandwidths in the GPU catalog (estimator/hardware.py, each sourced).

Collectives are NCCL rings over p GPUs: all-reduce 2(p-1)/p · bytes / bw + 2(p-1)·latency; reduce-scatter and
all-gather (p-1)/p · bytes / bw + (p-1)·latency; bw = link bandwidth per direction × COLLECTIVE_EFFICIENCY.
Placement: tp innermost (consecutive GPUs), then cp, then data parallel; a group whose GPUs sit in one node of
`gpus_per_node` runs over NVLink when the GPU has it and the group fits in its NVLink domain, else PCIe; a
group that spans nodes runs at the network bandwidth per GPU. Overlap (stated, not measured):
- tensor parallel: none (each all-reduce sits between two GEMMs on the critical path, Megatron-LM's default);
- context parallel: each ring step's K/V send overlaps that block's attention; only the excess is exposed;
- data parallel / ZeRO: gradient buckets overlap the backward (DDP); exposed = max(comm - backward, last bucket);
  ZeRO-3 weight all-gathers are prefetched under the forward/backward compute, the excess exposed.
Not measured on GPUs: COLLECTIVE_EFFICIENCY and the latencies are assumptions (NCCL tests report bus bandwidths
near 80% of the link); the error band of communication is therefore wider than that of compute."""

from __future__ import annotations

from typing import TYPE_CHECKING

from estimator.call.config import DTYPE_BITS
from estimator.hardware import GPU

if TYPE_CHECKING:
    from estimator.model.inputs import PlanInputs

# What each kind's exposed time assumes about overlap (the module docstring's list, as surfaces show it).
OVERLAP = {
    "tp": "not overlapped: each all-reduce sits between two GEMMs on the critical path (Megatron-LM's default)",
    "cp": "each ring step's K/V send overlaps that block's attention; only the excess is exposed",
    "dp": "gradient buckets overlap the backward (DDP); exposed = max(collectives - backward, last bucket), so it "
          "stays the same for every ZeRO stage while the backward hides the collectives; ZeRO-3's prefetched "
          "weight all-gathers add only their excess over the forward and backward",
}
COLLECTIVE_EFFICIENCY = 0.8  # achieved bus bandwidth / link bandwidth (assumption)
LATENCY_MS = {"nvlink": 0.005, "pcie": 0.010, "network": 0.020}  # per ring hop (assumption)
BUCKET_BYTES = 25 << 20  # DDP's default bucket_cap_mb = 25


def link(gpu: GPU, group: int, stride: int, gpus_per_node: int) -> tuple[str, float]:
    """(link name, bytes/s per direction) of a group of `group` GPUs spaced `stride` apart."""
    span = group * stride if group > 1 else 1
    if span > gpus_per_node:
        return "network", float(gpu.network_bytes_per_s)
    if gpu.nvlink_bytes_per_s and span <= gpu.nvlink_domain:
        return "nvlink", float(gpu.nvlink_bytes_per_s)
    return "pcie", float(gpu.pcie_bytes_per_s)


def all_reduce_ms(nbytes: float, p: int, kind: str, bw: float) -> float:
    if p <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (p - 1) / p * nbytes / (bw * COLLECTIVE_EFFICIENCY) * 1e3 + 2 * (p - 1) * LATENCY_MS[kind]


def gather_ms(nbytes: float, p: int, kind: str, bw: float) -> float:
    """Reduce-scatter or all-gather of a tensor of `nbytes` (whole size) over p GPUs."""
    if p <= 1 or nbytes <= 0:
        return 0.0
    return (p - 1) / p * nbytes / (bw * COLLECTIVE_EFFICIENCY) * 1e3 + (p - 1) * LATENCY_MS[kind]


def communication(inputs: PlanInputs, gpu: GPU, params_gpu: int, times: dict) -> dict:
    """Exposed communication ms per GPU for the prefill (or training step) and per decoded token, with the
    per-kind detail. `times` holds the compute times (attention core per layer, backward) it may overlap."""
    m = inputs.model
    tp, cp, dp = inputs.tp, inputs.cp, inputs.dp
    gpn = inputs.gpus_per_node
    training = inputs.mode == "training"
    recipe = inputs.recipe
    es = (recipe.compute_bytes if (training and recipe) else DTYPE_BITS[inputs.dtype] // 8)
    b, n, H = inputs.batch_per_gpu, inputs.tokens_per_gpu, m.hidden
    k_acc = inputs.accumulation_steps if training else 1
    out = {"tp_ms": 0.0, "cp_ms": 0.0, "dp_ms": 0.0, "decode_ms_per_token": 0.0, "links": {}}
    if tp > 1:
        kind, bw = link(gpu, tp, 1, gpn)
        out["links"]["tp"] = kind
        act = b * n * H * es  # one layer output (sequence parallel: reduce-scatter + all-gather, same bytes)
        per_pass = (2 * m.layers + 1) * all_reduce_ms(act, tp, kind, bw)  # attention out, MLP out, embedding
        passes = 1.0
        if training:
            passes = 2.0 + (1.0 if inputs.checkpointing in ("full", "hf") else 0.0)  # forward, backward, recompute
        out["tp_ms"] = k_acc * per_pass * passes
        if m.kind == "decoder" and not training:
            out["decode_ms_per_token"] += (2 * m.layers + 1) * all_reduce_ms(b * H * es, tp, kind, bw)
    if cp > 1:
        kind, bw = link(gpu, cp, tp, gpn)
        out["links"]["cp"] = kind
        kv_block = 2 * b * n * inputs.kv_heads_per_gpu * m.head_dim * es
        send = (cp - 1) * (kv_block / (bw * COLLECTIVE_EFFICIENCY) * 1e3 + LATENCY_MS[kind])
        core = times.get("core_forward_ms_per_layer", 0.0)
        exposed = max(0.0, send - core) * m.layers
        if training:  # backward sends K/V again and the dK/dV partial sums
            exposed += max(0.0, 2 * send - times.get("core_backward_ms_per_layer", 0.0)) * m.layers
        out["cp_ms"] = k_acc * exposed
        if m.kind == "decoder" and not training:  # partial outputs and log-sum-exps combined per layer
            out["decode_ms_per_token"] += m.layers * all_reduce_ms(b * inputs.q_heads_per_gpu * m.head_dim * 4,
                                                                   cp, kind, bw)
    if training and dp > 1:
        kind, bw = link(gpu, dp, tp * cp, gpn)
        out["links"]["dp"] = kind
        grad_bytes = params_gpu * (recipe.optimizer_param_bytes if recipe else es)
        if recipe and recipe.autocast:
            grad_bytes = params_gpu * 4
        comm = all_reduce_ms(grad_bytes, dp, kind, bw)  # ZeRO-1/2: reduce-scatter + all-gather, the same bytes
        bucket = all_reduce_ms(min(BUCKET_BYTES, grad_bytes), dp, kind, bw)
        exposed = max(comm - times.get("backward_ms", 0.0), bucket)
        if inputs.zero >= 3:  # weights gathered for the forward and again for the backward, prefetched
            wbytes = params_gpu * (recipe.weight_bytes if recipe else es)
            gathers = 2 * k_acc * gather_ms(wbytes, dp, kind, bw)
            exposed += max(0.0, gathers - times.get("forward_ms", 0.0) - times.get("backward_ms", 0.0))
        out["dp_ms"] = exposed
        out["dp_collectives_ms"] = comm + (gathers if inputs.zero >= 3 else 0.0)  # before overlap
    out["total_ms"] = out["tp_ms"] + out["cp_ms"] + out["dp_ms"]
    return out
