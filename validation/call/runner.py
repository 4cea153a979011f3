"""Run one case of a sweep (docs/contract.md §1 and §5): its options (`RunOptions`), the time limit, the memory
guard that skips a case predicted beyond free memory (`guard_need`, `skip_reason`), `measure_row` (OOM and
time-outs become statuses) and the watchdog child process (`CaseWorker`). The sweep over a CSV is
validation/call/sweep.py. Imports only torch, pandas and the estimator (the GPU machine has nothing else).
"""

from __future__ import annotations

import gc
import math
import multiprocessing
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from estimator.call.config import AttentionCall
from estimator.units import GIB, MIB
from validation.call.guard import MemoryGuard, fallback_peak_bound_bytes, input_bytes, mask_temporary_bytes
from validation.call.rows import number_or_none
from validation.errors import first_line, is_oom

# Runs of the call inside measure(): warm-up, peak, profiler, FLOP counter, then `repeats` timed runs.
RUNS_BEFORE_TIMING = 4
MAX_REPEATS = 1000
MAX_TIMEOUT_S = 7 * 24 * 3600.0
# FLOP rate assumed for the predicted-time cap on a CPU (fp32 math path; a conservative single-socket figure,
# so that a case predicted over --timeout-s is skipped rather than started).
CPU_FLOPS_PER_S = 1e10


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    device: str = "cpu"  # cpu | cuda
    repeats: int = 5
    timeout_s: float = 120.0  # per case; 0 = no limit
    force: bool = False  # run cases predicted not to fit in free memory or time; replace an earlier output
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
    from estimator.call import flops, registry
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
        backend = call.backend if call.backend in registry.names(traced=True) else "math"
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
# One case, measured in this process


def measure_row(call: AttentionCall, options: RunOptions, measure_fn) -> dict:
    """measure() under the time limit, with OOM and time-outs turned into statuses and memory freed."""
    result = {"status": "error", "error": "interrupted"}
    try:
        with time_limit(options.timeout_s):
            result = dict(measure_fn(call, options.device, repeats=options.repeats))
    except (torch.cuda.OutOfMemoryError, MemoryError) as exc:
        result = {"status": "oom", "error": first_line(exc, 200)}
    except CaseTimeout as exc:
        result = {"status": "error", "error": f"timeout: {exc}"}
    except Exception as exc:  # noqa: BLE001 - one bad case never sinks the batch
        status = "oom" if is_oom(exc) else "error"
        result = {"status": status, "error": f"{type(exc).__name__}: {first_line(exc, 200)}"}
    finally:
        free_memory(options.device, collect=result.get("status") != "ok")
    if result.get("status") == "error" and "No viable backend" in str(result.get("error", "")):
        # CPU wording for a forced backend that this build lacks (efficient/cudnn on a CPU).
        result.update(status="unsupported", error="No available kernel (backend absent on this device)")
    return result


# --------------------------------------------------------------------------------------------
# The watchdog: each case runs in a child process that the parent can stop mid-operation


# The child's warm-up before it reports ready (so the first case's --timeout-s does not pay for it): the device's
# runtime (CUDA context, allocator) and a tiny call of each mode, which loads the attention and GEMM kernels.
WARMUP_CALLS = tuple(AttentionCall(batch=1, q_heads=1, kv_heads=1, head_dim=16, q_len=16, kv_len=16, dtype=dtype,
                                   mode=mode)
                     for dtype in ("float32", "bfloat16") for mode in ("forward", "forward_backward"))
# The error of a case whose process died (killed, or a crash of its own): not an out-of-memory result (a real
# CUDA out-of-memory error is caught in the child and recorded `oom`), so --resume measures it again.
CRASH = "crash:"


def _warm_up(device: str, measure_fn) -> None:
    free_bytes(device)
    for call in WARMUP_CALLS:
        try:
            measure_row(call, RunOptions(device=device, timeout_s=0, isolate=False, repeats=1), measure_fn)
        except Exception:  # noqa: BLE001 - a warm-up that fails leaves the cases to say why
            pass


def _worker_main(conn, device: str, measure_ref: str) -> None:
    """The child's loop: ("free",) → free bytes; ("measure", call, repeats) → measure_row's result. Ctrl-C is
    the parent's to handle (it stops this process); a parent gone away ends the loop quietly."""
    import importlib
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        module, _, name = measure_ref.partition(":")
        measure_fn = getattr(importlib.import_module(module), name)
        options = RunOptions(device=device, timeout_s=0, isolate=False)
        _warm_up(device, measure_fn)
        conn.send("ready")
        while True:
            message = conn.recv()
            if message is None:
                return
            if message[0] == "free":
                conn.send(free_bytes(device))
            else:
                _, call, repeats = message
                conn.send(measure_row(call, replace(options, repeats=repeats), measure_fn))
    except (EOFError, BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        return


class CaseWorker:
    """One child process (spawned: a forked CUDA or OpenMP runtime is unsafe) that measures cases one at a
    time. A case that outlives its limit is stopped by killing the child (the SIGALRM limit only lands between
    operations); a child that dies (SIGKILL, a crash) makes the case an `error` marked as a crash, which --resume
    measures again - only a CUDA out-of-memory error raised in the child is `oom`. A new child starts (and warms
    up, off the clock) for the next case."""

    def __init__(self, device: str, measure_ref: str = "validation.call.protocol:measure") -> None:
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
            return {"status": "error", "error": f"{CRASH} the case's process was killed (SIGKILL: the kernel's "
                                                "out-of-memory killer or an operator; no CUDA out-of-memory error "
                                                "was raised); --resume measures it again"}
        return {"status": "error", "error": f"{CRASH} the case's process died (exit status {value}); --resume "
                                            "measures it again"}

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(10)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None


