"""The measured kernel classes of one GPU and their prices: `KernelConstants` (the GEMMs, memory-bound ops,
decode attention and optimizers of a calibration file, read by estimator/model/calibration.py) and `Kernels`, which
prices one GEMM, memory-bound op, optimizer update or q_len = 1 attention call on a target GPU from them (GEMM
efficiency at the nearest measured shapes, streams scaled by the HBM bandwidths; see estimator/model/step_time.py,
which assembles the passes from these prices)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from estimator.call.config import DTYPE_BITS
from estimator.hardware import GPU

# GPU time of a tiny kernel (assumption: not separable from the host's launch cost in the calibration, whose
# tiny-op times are host-bound); memory-bound ops below their smallest measured size scale down to it.
GPU_KERNEL_FLOOR_MS = 0.002
# memory-bound ops whose bytes scale with the element size (a rate measured in one dtype serves the others)
BYTE_SCALED = ("add", "mul", "copy", "masked_fill_rows", "mul_rows", "gather_rows", "silu_mul_chunked")


@dataclass(frozen=True)
class Gemm:
    m: int
    n: int
    k: int
    dtype: str
    kind: str
    eff: float  # achieved / datasheet peak of the measuring GPU
    ms: float


@dataclass(frozen=True)
class GroupedGemm:
    """One measured grouped GEMM: `experts` groups of m rows, [m, k] x [k, n] each (torch's grouped_mm as
    transformers' grouped_mm experts call it); kind forward or forward_backward."""
    experts: int
    m: int
    n: int
    k: int
    dtype: str
    kind: str
    eff: float  # achieved / datasheet peak of the measuring GPU (flops 2·E·m·n·k, x3 for forward_backward)


@dataclass(frozen=True)
class MemOp:
    a_ms: float  # fixed part per call (kernel tails)
    b_ms_per_element: float  # on the measuring GPU
    kernels: int
    dtype: str
    min_elements: float = 0.0  # smallest measured size: below it the time scales down to GPU_KERNEL_FLOOR_MS


@dataclass(frozen=True)
class KernelConstants:
    """Measured kernel classes of one GPU (see calibration.constants_from_json)."""

    source: str  # file and command
    device_name: str
    ref_gpu: str  # catalog name of the measuring GPU (peaks the efficiencies are relative to)
    ref_hbm: float
    ref_peaks: dict = field(hash=False)
    gemms: tuple = ()
    grouped_gemms: tuple = ()  # GroupedGemm rows; without them an expert GEMM is priced as a dense GEMM
    stream_eff: float = 0.75
    matmul_floor_ms: float = 0.022
    launch_floor_ms: float = 0.0095
    sync_ms: float = 0.0075
    mem_ops: dict = field(default_factory=dict, hash=False)
    decode_attention: dict = field(default_factory=dict, hash=False)  # backend -> (a_ms, bytes per ms at ref)
    optimizer_ms_per_1e9: dict = field(default_factory=dict, hash=False)  # (name, dtype) -> ms
    gemm_efficiency: float | None = None  # manual overrides (--gemm-efficiency / --hbm-efficiency)
    hbm_efficiency: float | None = None

    def with_overrides(self, gemm: float | None, hbm: float | None) -> KernelConstants:
        return self if gemm is None and hbm is None else replace(self, gemm_efficiency=gemm, hbm_efficiency=hbm)


class Kernels:
    """Prices kernels of one GPU from the constants."""

    def __init__(self, k: KernelConstants, gpu: GPU):
        self.k, self.gpu = k, gpu
        self.bw_scale = k.ref_hbm / gpu.hbm_bytes_per_s  # time of a streaming kernel scales with 1/bandwidth
        if k.hbm_efficiency is not None:  # manual: every streaming kernel at this fraction of the datasheet
            self.bw_scale = None

    # --- GEMM
    def gemm_eff(self, m: int, n: int, k: int, dtype: str, kind: str) -> float:
        if self.k.gemm_efficiency is not None:
            return self.k.gemm_efficiency
        rows = [g for g in self.k.gemms if g.dtype == dtype and g.kind == kind and g.m >= 256]
        if len(rows) < 2:
            rows = [g for g in self.k.gemms if g.dtype == dtype and g.kind == "forward" and g.m >= 256]
        if len(rows) < 2:
            rows = [g for g in self.k.gemms if g.dtype == "bfloat16" and g.m >= 256]
        if not rows:
            return 0.7
        lm, ln, lk = math.log2(max(m, 1)), math.log2(max(n, 1)), math.log2(max(k, 1))
        scored = sorted(((math.log2(g.m) - lm) ** 2 + (math.log2(g.n) - ln) ** 2 + (math.log2(g.k) - lk) ** 2, g.eff)
                        for g in rows)[:3]
        w = [1.0 / (d + 0.25) for d, _ in scored]
        return sum(wi * e for wi, (_, e) in zip(w, scored, strict=True)) / sum(w)

    def gemm_ms(self, m: int, n: int, k: int, dtype: str, kind: str = "forward") -> float:
        """GPU ms of one GEMM [m, k] x [k, n] in `dtype`."""
        if m <= 0 or n <= 0 or k <= 0:
            return 0.0
        es = DTYPE_BITS[dtype] // 8
        peak = self.gpu.peak_flops_per_s[dtype]
        ref_peak = self.k.ref_peaks.get(dtype, peak)
        eff = self.gemm_eff(max(m, 256), n, k, dtype, kind)
        if self.k.gemm_efficiency is None:  # efficiency relative to the measuring GPU; the target's peak
            compute = 2 * m * n * k / (ref_peak * eff) * (ref_peak / peak)
        else:
            compute = 2 * m * n * k / (peak * eff)
        stream = (m * k + n * k + m * n) * es / self.stream_rate()
        return max(compute, stream) * 1e3

    def _grouped_eff(self, m: int, n: int, k: int, dtype: str, kind: str) -> float | None:
        rows = [g for g in self.k.grouped_gemms if g.dtype == dtype and g.kind == kind]
        if not rows:
            return None
        lm, ln, lk = math.log2(max(m, 1)), math.log2(max(n, 1)), math.log2(max(k, 1))
        scored = sorted(((math.log2(g.m) - lm) ** 2 + (math.log2(g.n) - ln) ** 2 + (math.log2(g.k) - lk) ** 2, g.eff)
                        for g in rows)[:3]
        w = [1.0 / (d + 0.25) for d, _ in scored]
        return sum(wi * e for wi, (_, e) in zip(w, scored, strict=True)) / sum(w)

    def grouped_gemm_ms(self, experts: int, m: int, n: int, k: int, dtype: str, kind: str = "forward") -> float:
        """GPU ms of one grouped GEMM over `experts` groups of m rows ([m, k] x [k, n] each) in `dtype`; kind
        forward, or backward (grad_input and grad_weight: the measured forward_backward less the forward).
        Efficiency at the nearest measured grouped shapes (fp32 runs torch's loop fallback, far below the dense
        fp32 GEMM); without grouped rows in the calibration, `experts` dense GEMMs. At least the expert weights'
        stream (a decode step reads every routed expert's weights)."""
        if experts <= 0 or m <= 0 or n <= 0 or k <= 0:
            return 0.0
        weights = experts * n * k * (DTYPE_BITS[dtype] // 8) / self.stream_rate() * 1e3
        peak = self.gpu.peak_flops_per_s[dtype]
        flops = 2.0 * experts * m * n * k
        ref_peak = self.k.ref_peaks.get(dtype, peak)
        fwd_eff = self._grouped_eff(m, n, k, dtype, "forward") if self.k.gemm_efficiency is None else None
        fb_eff = self._grouped_eff(m, n, k, dtype, "forward_backward") if self.k.gemm_efficiency is None else None
        if fwd_eff is None or (kind == "backward" and fb_eff is None):  # dense GEMMs, or the manual efficiency
            if kind == "forward":
                return max(experts * self.gemm_ms(m, n, k, dtype), weights)
            return max(experts * (self.gemm_ms(m, n, k, dtype, "grad_input") +
                                  self.gemm_ms(m, n, k, dtype, "grad_weight")), 2 * weights)
        fwd = flops / (ref_peak * fwd_eff) * (ref_peak / peak) * 1e3
        if kind == "forward":
            return max(fwd, weights)
        fb = 3 * flops / (ref_peak * fb_eff) * (ref_peak / peak) * 1e3
        return max(fb - fwd, 2 * weights)

    def stream_rate(self) -> float:
        if self.k.hbm_efficiency is not None:
            return self.gpu.hbm_bytes_per_s * self.k.hbm_efficiency
        return self.gpu.hbm_bytes_per_s * self.k.stream_eff

    # --- memory-bound
    def mem_ms(self, op: str, elements: float, dtype: str = "bfloat16") -> tuple[float, int]:
        """(GPU ms, kernels) of one memory-bound op over `elements` elements."""
        c = self.k.mem_ops.get((op, dtype)) or self.k.mem_ops.get((op, "bfloat16")) or self.k.mem_ops.get(
            (op, "float32"))
        if c is None:  # not measured: a copy of the same bytes
            c = self.k.mem_ops[("copy", "bfloat16")]
        scale = (DTYPE_BITS[dtype] // 8) / (DTYPE_BITS[c.dtype] // 8) if op in BYTE_SCALED else 1.0
        per = c.b_ms_per_element * scale
        if self.bw_scale is None:  # --hbm-efficiency: the measured rate re-expressed at that fraction
            per *= (self.k.ref_hbm / self.gpu.hbm_bytes_per_s) * (self.k.stream_eff / self.k.hbm_efficiency)
        else:
            per *= self.bw_scale
        if elements < c.min_elements:  # below the measured range: proportional, down to the per-kernel floor
            at_min = c.a_ms + per * c.min_elements
            return max(at_min * elements / c.min_elements, c.kernels * GPU_KERNEL_FLOOR_MS), c.kernels
        return c.a_ms + per * elements, c.kernels

    def optimizer_ms(self, name: str, dtype: str, params: int) -> float:
        key = {"adamw": "adamw", "adamw-fused": "adamw_fused", "sgd": "sgd_momentum",
               "adamw-8bit": "adamw_fused"}[name]
        ms = self.k.optimizer_ms_per_1e9.get((key, dtype)) or self.k.optimizer_ms_per_1e9.get((key, "bfloat16"))
        if ms is None:  # not measured: AdamW reads/writes param, grad, two moments (~16 B/param in 16-bit)
            ms = 1e9 * (8 if dtype != "float32" else 16) * 2 / (self.k.ref_hbm * 0.8) * 1e3
        scale = self.bw_scale if self.bw_scale is not None else self.k.ref_hbm / self.gpu.hbm_bytes_per_s
        return ms * params / 1e9 * scale

    def decode_attention_ms(self, backend: str, kv_bytes: float) -> float:
        """GPU ms of one q_len = 1 SDPA call over `kv_bytes` of cache: the slope of the measured rows (the device's
        stream; their fixed part is host cost, which a decode step charges per launched kernel instead)."""
        _, rate = self.k.decode_attention.get(backend) or self.k.decode_attention.get("flash") or (0.05, 4e9)
        scale = self.bw_scale if self.bw_scale is not None else self.k.ref_hbm / self.gpu.hbm_bytes_per_s
        return max(kv_bytes / rate * scale, GPU_KERNEL_FLOOR_MS)
