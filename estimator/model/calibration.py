"""Kernel calibration files (`python -m validation calibrate`, format in validation/timing/calibrate.py) read into
`KernelConstants` (estimator/model/kernel_prices.py) for the time model (estimator/model/step_time.py).
`plan --calibration FILE` uses the user's file; without it the H200 file shipped in estimator/model/data/ (a copy
of validation/data/h200_calibration_kernels.json) is used. Errors are one line naming the file and the field."""

from __future__ import annotations

import functools
import math
import os
import stat
import statistics
from pathlib import Path

from estimator.hardware import get_gpu, gpu_from_device_name
from estimator.model.kernel_prices import Gemm, GroupedGemm, KernelConstants, MemOp
from estimator.textfile import read_json_limited

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


# Bounds on the numbers a calibration file may hold. `python -m validation calibrate` floors every time at
# 1e-6 ms (validation/timing/calibrate.py, Timer.__call__); a call slower than an hour, a launch floor or sync over
# a second, or a size past 2**48 elements is no measurement of a transformer's kernels.
MIN_MS, MAX_MS = 1e-6, 3.6e6
MAX_FLOOR_MS = 1000.0
MAX_SIZE = float(1 << 48)


def _number(source: str, where: str, value, low: float, high: float, *, integer: bool = False,
            zero: bool = False) -> float:
    """`value` as a finite number in [low, high] (or 0 with zero=True); ValueError naming the field otherwise
    (NaN, Infinity, a boolean, text, a negative or absurd figure)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"calibration {source}: {where}: expected a number, got {value!r}"[:300])
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise ValueError(f"calibration {source}: {where}: expected a number, got {value!r}"[:300]) from None
    if not math.isfinite(number):
        raise ValueError(f"calibration {source}: {where}: expected a finite number, got {value!r}")
    if integer and not number.is_integer():
        raise ValueError(f"calibration {source}: {where}: expected an integer, got {value!r}")
    if not (low <= number <= high or (zero and number == 0)):
        raise ValueError(f"calibration {source}: {where}: expected a number in [{low:g}, {high:g}], got {value!r}")
    return int(number) if integer else number


def _rows(data: dict, key: str, source: str, required: bool) -> list:
    if key not in data and not required:
        return []
    rows = data[key]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"calibration {source}: {key}: expected a list of objects")
    return rows


def constants_from_json(data: dict, source: str) -> KernelConstants:
    """KernelConstants from a parsed calibration JSON (ValueError with one line on anything malformed)."""
    if not isinstance(data, dict):
        raise ValueError(f"calibration {source}: expected a JSON object")

    def size(where, value):
        return _number(source, where, value, 1, MAX_SIZE, integer=True)

    def ms_of(where, value):
        return _number(source, where, value, MIN_MS, MAX_MS)

    try:
        name = str(data["device_name"])
        catalog = gpu_from_device_name(name)
        if catalog is None:
            raise ValueError(f"calibration {source}: device {name!r} is not a catalog GPU (a CPU run cannot "
                             "calibrate GPU time)")
        ref = get_gpu(catalog)
        peaks = dict(ref.peak_flops_per_s)
        launch = _number(source, "launch_floor_ms", data["launch_floor_ms"], MIN_MS, MAX_FLOOR_MS)
        sync = _number(source, "sync_ms", data.get("sync_ms", 0.0), MIN_MS, MAX_FLOOR_MS, zero=True)
        gemms = []
        for i, g in enumerate(_rows(data, "gemm", source, True)):
            at = f"gemm[{i}]"
            m, n, k = (size(f"{at}.{f}", g[f]) for f in ("m", "n", "k"))
            dt, ms = str(g["dtype"]), ms_of(f"{at}.ms", g["ms"])
            if dt not in peaks:
                raise ValueError(f"calibration {source}: {at}.dtype: {dt!r} is not one of {', '.join(peaks)}")
            gemms.append(Gemm(m, n, k, dt, str(g.get("kind", "forward")), 2 * m * n * k / (ms * 1e-3) / peaks[dt], ms))
        grouped = []
        for i, g in enumerate(_rows(data, "grouped_gemm", source, False)):
            at = f"grouped_gemm[{i}]"
            e, m, n, k = (size(f"{at}.{f}", g[f]) for f in ("experts", "m", "n", "k"))
            dt, kind, ms = str(g["dtype"]), str(g["kind"]), ms_of(f"{at}.ms", g["ms"])
            if dt not in peaks or kind not in ("forward", "forward_backward"):
                raise ValueError(f"calibration {source}: grouped_gemm row {i}: dtype {dt!r} or kind {kind!r} out of "
                                 "range")
            flops = 2.0 * e * m * n * k * (3 if kind == "forward_backward" else 1)
            grouped.append(GroupedGemm(e, m, n, k, dt, kind, flops / (ms * 1e-3) / peaks[dt]))
        big = [g for g in gemms if g.m <= 64 and g.n * g.k >= 50_000_000]
        stream = (statistics.median((g.n * g.k + g.m * g.k + g.m * g.n) * 2 / (g.ms * 1e-3) / ref.hbm_bytes_per_s
                                    for g in big) if big else 0.75)
        tiny = [g.ms for g in gemms if (g.n * g.k + g.m * g.k) * 2 / ref.hbm_bytes_per_s * 1e3 < 0.005
                and 2 * g.m * g.n * g.k / peaks[g.dtype] * 1e3 < 0.005]
        matmul_floor = min(tiny) if tiny else 0.02
        groups: dict = {}
        for i, r in enumerate(_rows(data, "memory_bound", source, True)):
            at = f"memory_bound[{i}]"
            key = (str(r["op"]), str(r["dtype"]))
            groups.setdefault(key, []).append((float(size(f"{at}.elements", r["elements"])), ms_of(f"{at}.ms", r["ms"]),
                                               size(f"{at}.kernels", r.get("kernels", 1))))
        mem_ops = {}
        for key, rows in groups.items():
            a, b = _fit_line([e for e, _, _ in rows], [t for _, t, _ in rows])
            kernels = rows[0][2]
            mem_ops[key] = MemOp(min(max(a, 0.0), kernels * launch), max(b, 0.0), kernels, key[1],
                                 min(e for e, _, _ in rows))
        dec: dict = {}
        for i, r in enumerate(_rows(data, "attention", source, False)):
            at = f"attention[{i}]"
            if size(f"{at}.q_len", r["q_len"]) == 1 and r["mode"] == "forward":
                dec.setdefault(str(r["backend"]), []).append((float(size(f"{at}.bytes", r["bytes"])),
                                                              ms_of(f"{at}.ms", r["ms"])))
        decode = {}
        for be, rows in dec.items():
            a, b = _fit_line([x for x, _ in rows], [t for _, t in rows])
            if b > 0:
                decode[be] = (max(a, 0.0), 1.0 / b)
        opt = {(str(o["name"]), str(o["dtype"])): ms_of(f"optimizer[{i}].ms_per_1e9_params", o["ms_per_1e9_params"])
               for i, o in enumerate(_rows(data, "optimizer", source, False))}
        return KernelConstants(
            source=source, device_name=name, ref_gpu=catalog, ref_hbm=float(ref.hbm_bytes_per_s), ref_peaks=peaks,
            gemms=tuple(gemms), grouped_gemms=tuple(grouped), stream_eff=stream, matmul_floor_ms=matmul_floor,
            launch_floor_ms=launch, sync_ms=sync,
            mem_ops=mem_ops, decode_attention=decode, optimizer_ms_per_1e9=opt)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"calibration {source}: missing or malformed field {exc}") from None


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime: float, size: int) -> KernelConstants:
    del mtime, size  # cache keys only
    data = read_json_limited(path, MAX_BYTES, "calibration")  # regular file, size and depth checked first
    return constants_from_json(data, path)


def load_constants(path: str | None = None) -> KernelConstants:
    """The constants of `path` (default: the shipped H200 file); ValueError with one line on any problem."""
    target = str(DEFAULT_FILE if path is None else path)
    try:
        st = os.stat(target)
    except OSError as exc:
        raise ValueError(f"calibration: cannot read {target} ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"calibration: {target} is not a regular file (a folder, pipe or device); give a file")
    consts = _load(target, st.st_mtime, st.st_size)
    if path is None:
        from dataclasses import replace
        consts = replace(consts, source=DEFAULT_SOURCE)
    return consts
