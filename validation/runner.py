"""Run a predict-style CSV through the measurement protocol (docs/contract.md §1 and §5).

Each row is measured, compared with the estimator's prediction and written (flushed) at once, so an
interrupted sweep keeps every finished row. Bookkeeping never sinks the batch: a malformed row, an
ineligible backend, an out-of-memory error or a time-out becomes that row's `status`, and the sweep
goes on. Imports only torch, pandas and the estimator (the GPU machine has nothing else).
"""

from __future__ import annotations

import csv
import gc
import json
import os
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from estimator.call.config import AttentionCall
from estimator.units import GIB, MIB
from validation.guard import MemoryGuard, fallback_peak_bound_bytes, input_bytes
from validation.protocol import environment, measure
from validation.rows import call_from_row, compare, number_or_none, predict_rows, truthy
from validation.schema import MEASURED, OUTPUT_FIELDS, STATUSES

# Runs of the call inside measure(): warm-up, peak, profiler, FLOP counter, then `repeats` timed runs.
RUNS_BEFORE_TIMING = 4


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    device: str = "cpu"  # cpu | cuda
    repeats: int = 5
    timeout_s: float = 120.0  # per case; 0 = no limit
    force: bool = False  # run cases predicted not to fit in free memory or time
    gpu: str = "h200"  # catalog name the predictions are made for
    torch_version: str | None = None  # passed to predict_frame; None = the estimator's default
    margin_fraction: float = 0.10  # free memory must exceed need·(1 + margin) + margin_bytes
    margin_bytes: int = 512 * MIB

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device: expected cpu or cuda, got {self.device!r}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device: cuda requested but torch sees no GPU (this machine runs on cpu)")
        if not isinstance(self.repeats, int) or self.repeats < 1:
            raise ValueError(f"repeats: expected a positive integer, got {self.repeats!r}")
        if self.timeout_s < 0:
            raise ValueError(f"timeout_s: must be >= 0, got {self.timeout_s!r}")
        MemoryGuard(margin_fraction=self.margin_fraction, margin_bytes=self.margin_bytes)  # checks the margins

    @property
    def guard(self) -> MemoryGuard:
        return MemoryGuard(margin_fraction=self.margin_fraction, margin_bytes=self.margin_bytes)


class CaseTimeout(BaseException):
    """Raised by the per-case alarm. A BaseException, so that no `except Exception` inside the
    protocol (the FLOP counter's, say) swallows it."""


@contextmanager
def time_limit(seconds: float):
    """SIGALRM-based limit for one case (main thread, POSIX). A kernel already running finishes first:
    the alarm lands when control returns to Python, so the limit is soft by one CUDA sync."""
    usable = seconds > 0 and hasattr(signal, "setitimer") and _on_main_thread()
    if not usable:
        yield
        return

    def _raise(signum, frame):
        raise CaseTimeout(f"timed out after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _on_main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()


# --------------------------------------------------------------------------------------------
# Safety


def free_bytes(device: str) -> int | None:
    """Memory a new case can use: free device memory plus what the caching allocator holds unused (CUDA);
    MemAvailable from /proc/meminfo (CPU); None when unknown."""
    if device == "cuda":
        free, _total = torch.cuda.mem_get_info()
        return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def skip_reason(call: AttentionCall, pred: dict, options: RunOptions, free: int | None) -> str:
    """Why a case should not run ('' if it should): predicted memory or time beyond what is available."""
    if options.force:
        return ""
    peak = number_or_none(pred.get("predicted_peak_extra_bytes"))
    if peak is None:
        peak = 0 if truthy(pred.get("predicted_supported")) is False else fallback_peak_bound_bytes(call)
    need = input_bytes(call) + int(peak)
    if free is not None and options.guard.blocks(need, free):
        return (f"predicted need {need / GIB:.2f} GiB (inputs + peak extra) exceeds free {options.device} memory "
                f"{free / GIB:.2f} GiB with margin; --force runs it")
    t_ms = number_or_none(pred.get("predicted_time_ms"))
    if options.device == "cuda" and options.timeout_s and t_ms is not None:
        total_s = t_ms * (RUNS_BEFORE_TIMING + options.repeats) / 1e3
        if total_s > options.timeout_s:
            return f"predicted {total_s:.1f} s for all runs exceeds --timeout-s {options.timeout_s:g}; --force runs it"
    return ""


def free_memory(device: str, collect: bool = True) -> None:
    """Drop what a failed case may still hold (tracebacks keep frames and their tensors alive: a full
    gc pass, ≈0.4 s with torch loaded, so only after a failure) and return cached CUDA blocks."""
    if collect:
        gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------------
# The sweep


class Progress:
    """A plain-text progress bar on stderr, one line per case (profiler chatter would break a \\r bar)."""

    def __init__(self, total: int, stream=None, width: int = 24):
        self.total, self.stream, self.width, self.start = total, stream or sys.stderr, width, time.monotonic()

    def update(self, done: int, label: str) -> None:
        frac = done / self.total if self.total else 1.0
        bar = "#" * int(frac * self.width)
        elapsed = time.monotonic() - self.start
        eta = elapsed / done * (self.total - done) if done else 0.0
        print(f"[{bar:<{self.width}}] {done}/{self.total} {frac:4.0%} eta {eta:5.0f}s  {label}",
              file=self.stream, flush=True)


def measure_row(call: AttentionCall, options: RunOptions, measure_fn) -> dict:
    """measure() under the time limit, with OOM and time-outs turned into statuses and memory freed."""
    result = {"status": "error", "error": "interrupted"}
    try:
        with time_limit(options.timeout_s):
            result = dict(measure_fn(call, options.device, repeats=options.repeats))
    except torch.cuda.OutOfMemoryError as exc:
        result = {"status": "oom", "error": _first_line(exc)}
    except CaseTimeout as exc:
        result = {"status": "error", "error": f"timeout: {exc}"}
    except Exception as exc:  # noqa: BLE001 - one bad case never sinks the batch
        result = {"status": "error", "error": f"{type(exc).__name__}: {_first_line(exc)}"}
    finally:
        free_memory(options.device, collect=result.get("status") != "ok")
    if result.get("status") == "error" and "No viable backend" in str(result.get("error", "")):
        # CPU wording for a forced backend that this build lacks (efficient/cudnn on a CPU).
        result.update(status="unsupported", error="No available kernel (backend absent on this device)")
    return result


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def done_ids(out_path: str) -> set[str]:
    """ids already in an earlier (interrupted) output, for --resume."""
    if not os.path.exists(out_path):
        return set()
    with open(out_path, newline="") as fh:
        return {row["id"] for row in csv.DictReader(fh) if row.get("id") and row.get("status")}


def sweep(inputs: list[str], rows: list[dict], out_path: str, options: RunOptions, *, measure_fn=measure,
          resume: bool = False, progress_stream=None) -> dict:
    """Measure every row and write it to out_path at once; return counts per status."""
    env = environment(options.device)
    preds, note = predict_rows(rows, options.gpu, options.torch_version)
    stream = progress_stream or sys.stderr
    print(f"validation: measuring {len(rows)} cases on {env['device_name']} ({options.device}), torch "
          f"{env['torch_version']}; predictions for gpu {options.gpu}", file=stream, flush=True)
    if options.device == "cpu":
        print("validation: no GPU used: this is the CPU path (peaks from profiler memory events; predictions "
              f"are the {options.gpu} figures)", file=stream, flush=True)
    if note:
        print(f"validation: {note}", file=stream, flush=True)
    if resume and "id" not in inputs:
        raise ValueError("--resume: the input has no id column to match rows by")
    skip = done_ids(out_path) if resume else set()
    fields = inputs + list(OUTPUT_FIELDS)
    append = bool(skip)
    if append:
        with open(out_path, newline="") as fh:
            if next(csv.reader(fh), []) != fields:
                raise ValueError(f"--resume: {out_path} has other columns than this input would write")
    counts = {s: 0 for s in STATUSES}
    progress = Progress(len(rows), stream)
    with open(out_path, "a" if append else "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        if not append:
            writer.writeheader()
            fh.flush()
        for i, (row, pred) in enumerate(zip(rows, preds, strict=True)):
            label = row.get("id") or str(i)
            if label in skip:
                progress.update(i + 1, f"{label} already measured")
                continue
            try:
                call = call_from_row(row)
            except ValueError as exc:
                result = {"status": "error", "error": _first_line(exc)}
            else:
                reason = skip_reason(call, pred, options, free_bytes(options.device))
                result = {"status": "skipped", "error": reason} if reason else measure_row(call, options, measure_fn)
            result = {**{c: "" for c in MEASURED}, **{k: ("" if v is None else v) for k, v in result.items()},
                      "torch_version": env["torch_version"], "device_name": env["device_name"]}
            writer.writerow({**{k: row.get(k, "") for k in inputs}, **result, **pred, **compare(result, pred)})
            fh.flush()
            counts[result["status"]] = counts.get(result["status"], 0) + 1
            peak = result.get("measured_peak_extra_bytes")
            progress.update(i + 1, f"{label} {result['status']}"
                            + (f" peak {int(peak) / MIB:.2f} MiB" if peak not in ("", None) else "")
                            + (f" ({result['error'][:80]})" if result.get("error") else ""))
    return counts


def write_meta(out_path: str, options: RunOptions, argv: list[str], counts: dict, started: str, note: str = "") -> str:
    """Provenance beside the CSV: torch version, device, driver and the exact command."""
    meta = {**environment(options.device), "gpu_catalog_name": options.gpu, "command": " ".join(argv),
            "started_utc": started, "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "repeats": options.repeats, "timeout_s": options.timeout_s, "force": options.force,
            "cuda": torch.version.cuda or "", "threads": torch.get_num_threads(), "counts": counts}
    if note:
        meta["note"] = note
    path = f"{out_path}.meta.json"
    with open(path, "w") as fh:
        json.dump(meta, fh, indent=1)
    return path
