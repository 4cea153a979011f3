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
import math
import multiprocessing
import os
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from estimator.call.config import AttentionCall
from estimator.units import GIB, MIB
from validation.guard import MemoryGuard, fallback_peak_bound_bytes, input_bytes, mask_temporary_bytes
from validation.protocol import environment, is_oom_error, measure
from validation.rows import call_from_row, compare, number_or_none, predict_rows
from validation.schema import MEASURED, OUTPUT_FIELDS, STATUSES

# Runs of the call inside measure(): warm-up, peak, profiler, FLOP counter, then `repeats` timed runs.
RUNS_BEFORE_TIMING = 4
MAX_REPEATS = 1000
MAX_TIMEOUT_S = 7 * 24 * 3600.0
# Forced backends a CPU build lacks ("No viable backend"): `unsupported` without allocating anything.
CPU_ABSENT_BACKENDS = ("efficient", "cudnn")
# FLOP rate assumed for the predicted-time cap on a CPU (fp32 math path; a conservative single-socket figure,
# so that a case predicted over --timeout-s is skipped rather than started).
CPU_FLOPS_PER_S = 1e10


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
    isolate: bool = True  # measure in a child process that a watchdog can stop mid-operation

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device: expected cpu or cuda, got {self.device!r}")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device: cuda requested but torch sees no GPU (this machine runs on cpu)")
        repeats = self.repeats
        if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
            raise ValueError(f"repeats: expected an integer in [1, {MAX_REPEATS}], got {self.repeats!r}")
        t = self.timeout_s
        number = isinstance(t, (int, float)) and not isinstance(t, bool)
        if not number or not math.isfinite(t) or not 0 <= t <= MAX_TIMEOUT_S:
            raise ValueError(f"timeout_s: expected a number of seconds in [0, {MAX_TIMEOUT_S:g}] (0 = no limit), "
                             f"got {t!r}")
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


def guard_need(call: AttentionCall, pred: dict, device: str, gpu: str) -> tuple[int, float | None]:
    """(bytes, seconds for one run or None) that the guard checks, for the kernel that will really run here.

    Both devices: the inputs, plus the fp32 temporary a bool mask is drawn from. CUDA: the predicted peak of the
    selected backend; where the prediction says `unsupported` (or is missing), the peak of the requested
    backend's sequence as if it ran (a wrong `unsupported` must not run blind), else a generous bound. CPU: the
    math path runs (the eager reference for `eager`), so the estimator's math peak at float32 (the CPU math
    path computes reduced precision in fp32) plus fp32 copies of the inputs; time from its FLOPs at
    CPU_FLOPS_PER_S."""
    from estimator.call import flops
    from estimator.call.attention import peaks_for
    from estimator.call.shapes import Calls
    from estimator.hardware import get_gpu

    inputs = input_bytes(call) + mask_temporary_bytes(call)
    if device == "cpu":
        backend = "eager" if call.backend == "eager" else "math"
        wide = replace(call, dtype="float32", backend=backend)
        c = Calls.from_call(wide)
        peak = int(peaks_for(c, backend, get_gpu(gpu))[0])
        upcast = 0 if call.dtype == "float32" else input_bytes(wide)
        # One more fp32 score matrix: the CPU math path measured 1.3x the CUDA sequence's peak (bf16, dropout,
        # 4096 tokens: 411 MB against 310 MB); this margin covers it.
        upcast += 4 * call.batch * call.q_heads * call.q_len * call.kv_len
        seconds = float(flops.executed_flops(c, backend)) / CPU_FLOPS_PER_S
        return inputs + upcast + peak, seconds
    peak = number_or_none(pred.get("predicted_peak_extra_bytes"))
    if peak is None:
        backend = call.backend if call.backend in ("math", "flash", "efficient", "cudnn", "eager") else "math"
        try:
            peak = int(peaks_for(Calls.from_call(call), backend, get_gpu(gpu))[0])
        except (ValueError, KeyError, ArithmeticError):
            peak = fallback_peak_bound_bytes(call)
    t_ms = number_or_none(pred.get("predicted_time_ms"))
    return inputs + int(peak), (None if t_ms is None else t_ms / 1e3)


def skip_reason(call: AttentionCall, pred: dict, options: RunOptions, free: int | None) -> str:
    """Why a case should not run ('' if it should): predicted memory or time beyond what is available."""
    if options.force:
        return ""
    need, seconds = guard_need(call, pred, options.device, options.gpu)
    if free is not None and options.guard.blocks(need, free):
        what = "math path on the CPU" if options.device == "cpu" else "inputs + peak extra"
        return (f"predicted need {need / GIB:.2f} GiB ({what}) exceeds free {options.device} memory "
                f"{free / GIB:.2f} GiB with margin; --force runs it")
    if options.timeout_s and seconds is not None:
        total_s = seconds * (RUNS_BEFORE_TIMING + options.repeats)
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
    except (torch.cuda.OutOfMemoryError, MemoryError) as exc:
        result = {"status": "oom", "error": _first_line(exc)}
    except CaseTimeout as exc:
        result = {"status": "error", "error": f"timeout: {exc}"}
    except Exception as exc:  # noqa: BLE001 - one bad case never sinks the batch
        status = "oom" if is_oom_error(exc) else "error"
        result = {"status": status, "error": f"{type(exc).__name__}: {_first_line(exc)}"}
    finally:
        free_memory(options.device, collect=result.get("status") != "ok")
    if result.get("status") == "error" and "No viable backend" in str(result.get("error", "")):
        # CPU wording for a forced backend that this build lacks (efficient/cudnn on a CPU).
        result.update(status="unsupported", error="No available kernel (backend absent on this device)")
    return result


# --------------------------------------------------------------------------------------------
# The watchdog: each case runs in a child process that the parent can stop mid-operation


def _worker_main(conn, device: str, measure_ref: str) -> None:
    """The child's loop: ("free",) → free bytes; ("measure", call, repeats) → measure_row's result."""
    import importlib
    module, _, name = measure_ref.partition(":")
    measure_fn = getattr(importlib.import_module(module), name)
    options = RunOptions(device=device, timeout_s=0, isolate=False)
    conn.send("ready")
    while True:
        try:
            message = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if message is None:
            return
        if message[0] == "free":
            conn.send(free_bytes(device))
        else:
            _, call, repeats = message
            conn.send(measure_row(call, replace(options, repeats=repeats), measure_fn))


class CaseWorker:
    """One child process (spawned: a forked CUDA or OpenMP runtime is unsafe) that measures cases one at a
    time. A case that outlives its limit is stopped by killing the child (the SIGALRM limit only lands between
    operations); a child killed by SIGKILL (the kernel's out-of-memory killer) makes the case `oom`. A new
    child starts for the next case."""

    def __init__(self, device: str, measure_ref: str = "validation.protocol:measure") -> None:
        self.device, self.measure_ref = device, measure_ref
        self.proc = None
        self.conn = None

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, self.device, self.measure_ref),
                                daemon=True)
        self.proc.start()
        child.close()
        if not (self.conn.poll(600) and self.conn.recv() == "ready"):  # torch imported: the clock may start
            raise RuntimeError("validation: the measuring child process did not start")

    def _ask(self, message, timeout_s: float | None):
        """(answered, answer or exit code): the child's reply, or why none came (timeout: None)."""
        if self.proc is None or not self.proc.is_alive():
            self._start()
        try:
            self.conn.send(message)
            if not self.conn.poll(timeout_s):
                self.stop()  # the watchdog: kill the child mid-operation
                return False, None
            return True, self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            pass  # the child died
        self.proc.join(30)
        code = self.proc.exitcode
        self.stop()
        return False, code if code is not None else "unknown"

    def free_bytes(self) -> int | None:
        answered, value = self._ask(("free",), 600)
        return value if answered else None

    def measure(self, call: AttentionCall, options: RunOptions) -> dict:
        if self.proc is None or not self.proc.is_alive():
            self._start()  # importing torch is not the case's time
        started = time.monotonic()
        answered, value = self._ask(("measure", call, options.repeats), options.timeout_s or None)
        if answered:
            return value
        if value is None:
            waited = time.monotonic() - started
            return {"status": "error", "error": f"timeout: stopped by the watchdog after {waited:.1f} s "
                                                f"(--timeout-s {options.timeout_s:g})"}
        if value == -signal.SIGKILL:
            return {"status": "oom", "error": "the case's process was killed (SIGKILL), most likely by the "
                                              "kernel's out-of-memory killer"}
        return {"status": "error", "error": f"the case's process died (exit status {value})"}

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(10)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def done_ids(out_path: str) -> set[str]:
    """ids already in an earlier (interrupted) output, for --resume."""
    if not os.path.exists(out_path):
        return set()
    with open(out_path, newline="") as fh:
        return {row["id"] for row in csv.DictReader(fh) if row.get("id") and row.get("status")}


def sweep(inputs: list[str], rows: list[dict], out_path: str, options: RunOptions, *, measure_fn=None,
          resume: bool = False, progress_stream=None) -> dict:
    """Measure every row and write it to out_path at once; return counts per status. Without a measure_fn,
    cases run in a watched child process (options.isolate) or in this one; a measure_fn (tests) runs here."""
    worker = CaseWorker(options.device) if measure_fn is None and options.isolate else None
    try:
        return _sweep(inputs, rows, out_path, options, measure_fn or measure, worker, resume, progress_stream)
    finally:
        if worker is not None:
            worker.stop()


def _sweep(inputs, rows, out_path, options, measure_fn, worker, resume, progress_stream) -> dict:
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
                result = _run_case(call, pred, options, measure_fn, worker)
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


def _run_case(call: AttentionCall, pred: dict, options: RunOptions, measure_fn, worker: CaseWorker | None) -> dict:
    if options.device == "cpu" and call.backend in CPU_ABSENT_BACKENDS:
        return {"status": "unsupported", "error": "No available kernel (backend absent on a CPU; not run)"}
    free = worker.free_bytes() if worker is not None else free_bytes(options.device)
    reason = skip_reason(call, pred, options, free)
    if reason:
        return {"status": "skipped", "error": reason}
    if worker is not None:
        return worker.measure(call, options)
    return measure_row(call, options, measure_fn)


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


# --------------------------------------------------------------------------------------------
# Several local GPUs: one worker process per GPU


def spread(inputs: list[str], rows: list[dict], out_path: str, options: RunOptions, workers: int,
           progress_stream=None) -> dict:
    """`run --gpus N`: rows i, i+N, i+2N, ... go to worker i, a `python -m validation run` child with
    CUDA_VISIBLE_DEVICES=i (NCCL multicast off, as validation/distributed.py); the workers' outputs are merged
    into out_path in input order, with the header one worker writes. Returns counts per status."""
    import subprocess
    import tempfile

    stream = progress_stream or sys.stderr
    tmp = tempfile.mkdtemp(prefix="validation-gpus-", dir=os.path.dirname(os.path.abspath(out_path)) or None)
    procs, outs = [], []
    for i in range(workers):
        shard = rows[i::workers]
        if not shard:
            continue
        inp, out = os.path.join(tmp, f"in{i}.csv"), os.path.join(tmp, f"out{i}.csv")
        with open(inp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=inputs, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(shard)
        cmd = [sys.executable, "-m", "validation", "run", "--in", inp, "--out", out, "--device", options.device,
               "--gpu", options.gpu, "--repeats", str(options.repeats), "--timeout-s", f"{options.timeout_s:g}"]
        cmd += ["--force"] if options.force else []
        cmd += ["--torch", options.torch_version] if options.torch_version else []
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(i), "NCCL_NVLS_ENABLE": "0",
               "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
        log = open(os.path.join(tmp, f"log{i}.txt"), "w")
        procs.append((i, subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), log))
        outs.append((i, out))
        print(f"validation: worker {i} (CUDA_VISIBLE_DEVICES={i}): {len(shard)} cases", file=stream, flush=True)
    failed = []
    for i, proc, log in procs:
        if proc.wait() != 0:
            failed.append(i)
        log.close()
    parts = {}
    header = None
    for i, out in outs:
        if not os.path.exists(out):
            continue
        with open(out, newline="") as fh:
            reader = csv.DictReader(fh)
            header = header or reader.fieldnames
            parts[i] = list(reader)
    if failed or header is None:
        raise ValueError(f"--gpus: worker(s) {', '.join(map(str, failed)) or 'all'} failed; their logs and "
                         f"partial outputs are in {tmp}")
    counts = {s: 0 for s in STATUSES}
    with open(out_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=header, extrasaction="ignore")
        writer.writeheader()
        for k in range(len(rows)):
            part = parts.get(k % workers, [])
            row = part[k // workers] if k // workers < len(part) else None
            if row is None:
                raise ValueError(f"--gpus: worker {k % workers} wrote fewer rows than it was given (see {tmp})")
            writer.writerow(row)
            counts[row["status"]] = counts.get(row["status"], 0) + 1
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return counts
