"""Kernel calibration files (`python -m validation calibrate`, format in validation/timing/calibrate.py) read into
`KernelConstants` (estimator/model/kernel_prices.py) for the time model (estimator/model/step_time.py).
`plan --calibration FILE` uses the user's file; without it the H200 file shipped in estimator/model/data/ (a copy
of validation/data/h200_calibration_kernels.json) is used. Errors are one line naming the file and the field."""

from __future__ import annotations

import functools
import json
import os
import statistics
from pathlib import Path

from estimator.hardware import get_gpu, gpu_from_device_name
from estimator.model.kernel_prices import Gemm, GroupedGemm, KernelConstants, MemOp

MAX_BYTES = 4 << 20  # a calibration file is ~30 kB; refuse anything past 4 MiB
DEFAULT_FILE = Path(__file__).with_name("data") / "h200_calibration_kernels.json"
DEFAULT_SOURCE = ("validation/data/h200_calibration_kernels.json: `python -m validation calibrate --device cuda "
                  "--budget-s 120` on an NVIDIA H200, torch 2.11.0+cu130")


def _fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (a, b) of y = a + b·x; a single point gives (0, y/x)."""
    if len(xs) == 1:
        return 0.0, ys[0] / xs[0]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else my / mx
    return my - b * mx, b


def constants_from_json(data: dict, source: str) -> KernelConstants:
    """KernelConstants from a parsed calibration JSON (ValueError with one line on anything malformed)."""
    if not isinstance(data, dict):
        raise ValueError(f"calibration {source}: expected a JSON object")
    try:
        name = str(data["device_name"])
        catalog = gpu_from_device_name(name)
        if catalog is None:
            raise ValueError(f"calibration {source}: device {name!r} is not a catalog GPU (a CPU run cannot "
                             "calibrate GPU time)")
        ref = get_gpu(catalog)
        peaks = dict(ref.peak_flops_per_s)
        gemms = []
        for g in data["gemm"]:
            m, n, k, dt, ms = int(g["m"]), int(g["n"]), int(g["k"]), str(g["dtype"]), float(g["ms"])
            if min(m, n, k) <= 0 or ms <= 0 or dt not in peaks:
                raise ValueError(f"calibration {source}: gemm row {g!r} out of range")
            gemms.append(Gemm(m, n, k, dt, str(g.get("kind", "forward")), 2 * m * n * k / (ms * 1e-3) / peaks[dt], ms))
        grouped = []
        for g in data.get("grouped_gemm", []):
            e, m, n, k = int(g["experts"]), int(g["m"]), int(g["n"]), int(g["k"])
            dt, kind, ms = str(g["dtype"]), str(g["kind"]), float(g["ms"])
            if min(e, m, n, k) <= 0 or ms <= 0 or dt not in peaks or kind not in ("forward", "forward_backward"):
                raise ValueError(f"calibration {source}: grouped_gemm row {g!r} out of range")
            flops = 2.0 * e * m * n * k * (3 if kind == "forward_backward" else 1)
            grouped.append(GroupedGemm(e, m, n, k, dt, kind, flops / (ms * 1e-3) / peaks[dt]))
        big = [g for g in gemms if g.m <= 64 and g.n * g.k >= 50_000_000]
        stream = (statistics.median((g.n * g.k + g.m * g.k + g.m * g.n) * 2 / (g.ms * 1e-3) / ref.hbm_bytes_per_s
                                    for g in big) if big else 0.75)
        tiny = [g.ms for g in gemms if (g.n * g.k + g.m * g.k) * 2 / ref.hbm_bytes_per_s * 1e3 < 0.005
                and 2 * g.m * g.n * g.k / peaks[g.dtype] * 1e3 < 0.005]
        matmul_floor = min(tiny) if tiny else 0.02
        groups: dict = {}
        for r in data["memory_bound"]:
            key = (str(r["op"]), str(r["dtype"]))
            groups.setdefault(key, []).append((float(r["elements"]), float(r["ms"]), int(r.get("kernels", 1))))
        mem_ops = {}
        for key, rows in groups.items():
            a, b = _fit_line([e for e, _, _ in rows], [t for _, t, _ in rows])
            kernels = rows[0][2]
            launch = float(data["launch_floor_ms"])
            mem_ops[key] = MemOp(min(max(a, 0.0), kernels * launch), max(b, 0.0), kernels, key[1],
                                 min(e for e, _, _ in rows))
        dec: dict = {}
        for r in data.get("attention", []):
            if int(r["q_len"]) == 1 and r["mode"] == "forward":
                dec.setdefault(str(r["backend"]), []).append((float(r["bytes"]), float(r["ms"])))
        decode = {}
        for be, rows in dec.items():
            a, b = _fit_line([x for x, _ in rows], [t for _, t in rows])
            if b > 0:
                decode[be] = (max(a, 0.0), 1.0 / b)
        opt = {(str(o["name"]), str(o["dtype"])): float(o["ms_per_1e9_params"]) for o in data.get("optimizer", [])}
        return KernelConstants(
            source=source, device_name=name, ref_gpu=catalog, ref_hbm=float(ref.hbm_bytes_per_s), ref_peaks=peaks,
            gemms=tuple(gemms), grouped_gemms=tuple(grouped), stream_eff=stream, matmul_floor_ms=matmul_floor,
            launch_floor_ms=float(data["launch_floor_ms"]), sync_ms=float(data.get("sync_ms", 0.0)),
            mem_ops=mem_ops, decode_attention=decode, optimizer_ms_per_1e9=opt)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"calibration {source}: missing or malformed field {exc}") from None


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime: float, size: int) -> KernelConstants:
    del mtime, size  # cache keys only
    with open(path, "rb") as fh:
        raw = fh.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise ValueError(f"calibration {path}: larger than {MAX_BYTES >> 20} MiB")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"calibration {path}: not JSON ({str(exc).splitlines()[0]})") from None
    return constants_from_json(data, path)


def load_constants(path: str | None = None) -> KernelConstants:
    """The constants of `path` (default: the shipped H200 file); ValueError with one line on any problem."""
    target = str(DEFAULT_FILE if path is None else path)
    try:
        st = os.stat(target)
    except OSError as exc:
        raise ValueError(f"calibration: cannot read {target} ({exc.strerror})") from None
    consts = _load(target, st.st_mtime, st.st_size)
    if path is None:
        from dataclasses import replace
        consts = replace(consts, source=DEFAULT_SOURCE)
    return consts
