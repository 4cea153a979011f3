"""`python -m validation calibrate [--out FILE.json] [--quick] [--device cuda|cpu] [--budget-s S]`: measure the
kernel classes a transformer step is made of on the local GPU, for the time model (`plan --calibration FILE`).

Timing: warm-up calls, then the median of several repetitions. On CUDA each repetition is a pair of CUDA events
around `inner` back-to-back calls (inner = 1 unless one call is shorter than ~1 ms, then enough calls to fill
~1 ms), divided by `inner`, after `torch.cuda.synchronize()`; so `ms` is the time per call as a stream of eager
calls sees it (for tiny calls that is max(CPU launch cost, GPU time)). On the CPU: `time.perf_counter`.
Operands are created once per shape (small ones stay in L2, as weights of a decode step do not).

The JSON written (one object; every time is milliseconds per call; sizes are elements unless named bytes):

    device_name, torch_version, cuda_version (null on CPU), cudnn_version, measured_at (ISO 8601 UTC),
    quick (bool), elapsed_s, device {type, name, sm_count, total_memory_bytes, capability, and where torch
        exposes them l2_cache_bytes, clock_rate_khz, memory_clock_rate_khz, memory_bus_width (device properties),
        clock_rate_mhz_now (NVML)}, settings {float32_matmul_precision,
        allow_tf32_matmul, allow_bf16_reduced_precision_reduction, allow_fp16_reduced_precision_reduction},
    gemm: [{m, n, k, dtype, kind, ms, tflops}]  the layer y[M,N] = x[M,K] @ W[N,K].T; kind is
        forward     x @ W.T                      (M x K  @ K x N)
        grad_input  dY @ W      -> dX[M,K]       (M x N  @ N x K)
        grad_weight dY.T @ x    -> dW[N,K]       (N x M  @ M x K, dY transposed view)
        flops = 2*M*N*K for all three; tflops = flops / ms / 1e9.
    memory_bound: [{op, dtype, shape, elements, bytes, min_bytes, kernels, ms, gbps}]
        bytes = read + write of the eager kernels the op launches (formulas in `_memory_ops`,
        validation/timing/calibrate_sections.py), min_bytes = a fused kernel's (inputs once + outputs once), kernels =
        launches per call; gbps = bytes / ms / 1e6.
        ops: add, mul (a + b), cast_bf16_fp32, copy, rmsnorm (HF LlamaRMSNorm forward), silu_mul (HF MLP's
        act(gate) * up), rope (HF q * cos + rotate_half(q) * sin on (1, 32, S, 128)), softmax (fp32, last dim),
        cross_entropy_fwd_bwd (fp32 logits tokens x vocab, F.cross_entropy + backward); and the ops of
        transformers' grouped_mm experts, which run the non-vectorised elementwise kernel: masked_fill_rows
        (x.masked_fill(mask[rows, 1], 0)), silu_mul_chunked (silu(gate) * up of x.chunk(2, -1)), mul_rows
        (x * w[:, None]), gather_rows (x[perm]).
    launch_floor_ms  wall time per launch of a 1-element add in a loop of 1000 (CPU launch + GPU floor)
    sync_ms          one torch.cuda.synchronize() on an idle device (no CUDA graphs)
    launch_sync_ms   one 1-element add followed by torch.cuda.synchronize()
    attention: [{backend, mode, batch, q_heads, kv_heads, head_dim, q_len, kv_len, causal, dtype, ms, tflops,
        bytes, gbps}]  SDPA under `sdpa_kernel(backend)`, enable_gqa=True; mode forward or forward_backward;
        flops = 4*B*Hq*Lq*Lkv*D (x0.5 causal square, x3.5 forward_backward); bytes = q, k, v, out once
        (+ their gradients for forward_backward).
    optimizer: [{name, dtype, params, tensors, ms, ms_per_1e9_params}]  one .step() on `tensors` parameters
        totalling `params` elements with gradients set; names adamw (foreach=True, torch's CUDA default),
        adamw_fused (fused=True), sgd_momentum (momentum=0.9, foreach=True).
    grouped_gemm: [{experts, m, n, k, dtype, kind, ms, tflops}]  torch's grouped GEMM (F.grouped_mm, else
        torch._grouped_mm) over `experts` groups of m rows, x[E*m, K] @ W[E, N, K].mT with int32 offsets, as
        transformers' grouped_mm experts call it; kind forward or forward_backward (x3 flops).
    skipped: [{section, what, reason}]  measurements that raised (a backend without a kernel, out of memory)
        or were cut by the time budget.

On an H200 the full run takes about 40-60 s (budget 90 s by default: sections past their share are skipped
and listed). The JSON is rewritten after every section, so a crash leaves the sections done so far.
"""

from __future__ import annotations

import math
import statistics
import sys
import time

import torch

from estimator.files import strict_json, write_atomic
from validation.timing.calibrate_gemm import measure_gemms, measure_grouped_gemms
from validation.timing.calibrate_sections import (
    measure_attention,
    measure_launch,
    measure_memory_bound,
    measure_optimizers,
)


class Timer:
    """Median per-call time of fn() on one device."""

    def __init__(self, device: str, quick: bool):
        self.cuda = device == "cuda"
        self.warmup = 1 if quick else 3
        self.reps = 3 if quick else 10
        self.fill_ms = 0.2 if quick else 1.0

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def _once(self, fn, inner: int) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / inner
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - t0) * 1e3 / inner

    def __call__(self, fn) -> float:
        for _ in range(self.warmup):
            fn()
        self.sync()
        first = self._once(fn, 1)
        inner = 1 if first >= self.fill_ms else max(1, min(200, math.ceil(self.fill_ms / max(first, 1e-4))))
        reps = self.reps if first < 100 else max(3, self.reps // 3)
        samples = [self._once(fn, inner) for _ in range(reps)]
        return max(statistics.median(samples), 1e-6)


class Budget:
    """A global deadline and a share of it per section; measurements past either are skipped."""

    def __init__(self, total_s: float | None):
        self.start = time.perf_counter()
        self.total = total_s
        self.section_end = None

    def section(self, share_s: float | None):
        now = time.perf_counter()
        ends = [t for t in (self.start + self.total if self.total else None,
                            now + share_s if (share_s and self.total) else None) if t]
        self.section_end = min(ends) if ends else None

    def over(self) -> bool:
        return self.section_end is not None and time.perf_counter() > self.section_end

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


# ---------------------------------------------------------------- device info

def device_info(device: str) -> dict:
    info = {"type": device}
    if device != "cuda":
        import platform
        info["name"] = platform.processor() or platform.machine() or "cpu"
        info["threads"] = torch.get_num_threads()
        return info
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    info.update(name=p.name, sm_count=p.multi_processor_count, total_memory_bytes=p.total_memory,
                capability=f"{p.major}.{p.minor}")
    for attr, key in (("L2_cache_size", "l2_cache_bytes"), ("clock_rate", "clock_rate_khz"),
                      ("memory_clock_rate", "memory_clock_rate_khz"), ("memory_bus_width", "memory_bus_width")):
        value = getattr(p, attr, None)
        if isinstance(value, (int, float)) and value:
            info[key] = value
    try:  # current SM clock through NVML; absent without pynvml
        info["clock_rate_mhz_now"] = int(torch.cuda.clock_rate())
    except Exception:  # noqa: BLE001 - optional
        pass
    return info


# ---------------------------------------------------------------- driver

SECTIONS = (("gemm", measure_gemms, 30), ("memory_bound", measure_memory_bound, 15),
            ("attention", measure_attention, 25), ("optimizer", measure_optimizers, 15),
            ("grouped_gemm", measure_grouped_gemms, 10))


def calibrate(out_path: str, device: str | None = None, quick: bool = False, budget_s: float | None = 90.0,
              log=None) -> dict:
    """Measure everything and write `out_path`; returns the object written."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: cuda requested but torch sees no GPU (this machine runs on cpu)")
    budget = Budget(budget_s if budget_s and budget_s > 0 else None)
    timer = Timer(device, quick)
    info = device_info(device)
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    result = dict(device_name=info["name"], torch_version=torch.__version__, cuda_version=torch.version.cuda,
                  cudnn_version=cudnn, measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  quick=quick, elapsed_s=0.0, device=info,
                  settings=dict(float32_matmul_precision=torch.get_float32_matmul_precision(),
                                allow_tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                                allow_bf16_reduced_precision_reduction=(
                                    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction),
                                allow_fp16_reduced_precision_reduction=(
                                    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)),
                  gemm=[], memory_bound=[], launch_floor_ms=None, sync_ms=None, launch_sync_ms=None,
                  attention=[], optimizer=[], grouped_gemm=[], skipped=[])

    def write():  # the whole file each time, through a temporary file renamed over it: never half a JSON
        result["elapsed_s"] = round(budget.elapsed(), 2)
        write_atomic(out_path, strict_json(result, "calibrate", indent=1) + "\n", "--out")

    log(f"calibrate: {info['name']} ({device}), torch {torch.__version__}{' quick' if quick else ''}")
    result.update(measure_launch(device))
    log(f"  launch floor {result['launch_floor_ms'] * 1e3:.1f} us, sync {result['sync_ms'] * 1e3:.1f} us")
    write()
    for key, fn, share in SECTIONS:
        budget.section(None if quick else share)
        before = len(result["skipped"])
        t0 = time.perf_counter()
        result[key] = fn(timer, device, quick, budget, result["skipped"])
        if device == "cuda":
            torch.cuda.empty_cache()
        log(f"  {key}: {len(result[key])} measured, {len(result['skipped']) - before} skipped, "
            f"{time.perf_counter() - t0:.1f} s")
        write()
    log(f"wrote {out_path} in {budget.elapsed():.1f} s")
    return result

