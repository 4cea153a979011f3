"""GPU validation from the app: the plan's attention calls, guarded, measured one at a time.

Guards: at most MAX_CALLS calls per job; a call runs only if its predicted inputs + peak extra pass
validation.call.guard.APP_GUARD (80% of the free memory less 1 GiB, at most 64 GiB: the rule `python -m validation
run` applies with its own margins); one GPU job at a time per server process (a
non-blocking lock: a second job is refused, never queued). torch is imported only when a page asks for it,
so the planner itself starts without it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

import pandas as pd

from estimator.call.config import CALL_COLUMNS, AttentionCall
from estimator.hardware import GPU
from estimator.units import GIB
from validation.call.guard import APP_GUARD, APP_GUARD_TEXT
from validation.errors import first_line

MAX_CALLS = 16
REPEATS = 5  # repetitions per call; a cancel is honoured between two of them
RUNS_PER_REPETITION = 5  # warm-up, peak, kernels, FLOPs, timed run: what one protocol measure() launches
_JOB_LOCK = threading.Lock()


class Busy(RuntimeError):
    """Another validation job holds the GPU on this server."""


class Cancelled(RuntimeError):
    """The user cancelled the job (between two repetitions)."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """GPU jobs from the browser: allowed or not, and the predicted-time budget of one job (seconds)."""

    enabled: bool
    budget_s: float
    why: str


PLANNER_TOML = str(__import__("pathlib").Path(__file__).resolve().parents[1] / ".streamlit" / "planner.toml")
_YES, _NO = ("true", "1", "yes", "on"), ("false", "0", "no", "off", "")


def settings(config_path: str = PLANNER_TOML, environ: dict | None = None) -> Settings:
    """Read `.streamlit/planner.toml` ([validate] enable_gpu_jobs = true|false, job_budget_s = 180) and the
    environment (PLANNER_ENABLE_GPU_JOBS, PLANNER_JOB_BUDGET_S override it). GPU jobs are opt-in: off unless a
    setting says true. The listen address proves nothing about who presses the button (a web page the operator
    visits can reach a localhost server, by DNS rebinding or by a form posted from another site), so it is not read."""
    import os
    import tomllib

    environ = os.environ if environ is None else environ
    conf: dict = {}
    try:
        with open(config_path, "rb") as f:
            conf = tomllib.load(f).get("validate", {})
    except (OSError, tomllib.TOMLDecodeError):
        conf = {}
    from_env = "PLANNER_ENABLE_GPU_JOBS" in environ
    raw = environ["PLANNER_ENABLE_GPU_JOBS"] if from_env else conf.get("enable_gpu_jobs", False)
    enable = str(raw).strip().lower()
    where = "PLANNER_ENABLE_GPU_JOBS" if from_env else "enable_gpu_jobs in .streamlit/planner.toml"
    try:
        budget = float(environ.get("PLANNER_JOB_BUDGET_S", conf.get("job_budget_s", 180)))
    except (TypeError, ValueError):
        budget = 180.0
    budget = budget if 0 < budget < float("inf") else 180.0
    if enable in _YES:
        return Settings(True, budget, f"enabled by {where}")
    how = "set enable_gpu_jobs = true in .streamlit/planner.toml or PLANNER_ENABLE_GPU_JOBS=true to allow them"
    if enable in _NO:
        return Settings(False, budget, f"GPU jobs are opt-in and {where} does not opt in; {how}")
    return Settings(False, budget, f"{where} is {raw!r}, not true or false, so they stay off; {how}")


def machine_gpu(status: dict | None) -> tuple[str | None, str]:
    """The catalog GPU of the CUDA device the job runs on (`torch.cuda.get_device_name`, mapped by
    estimator.hardware.gpu_from_device_name), and why not when it has none: the guard and the time budget are
    computed for this GPU, never for the plan's."""
    from estimator.hardware import gpu_from_device_name

    if status is None:
        return None, "no CUDA GPU on this server"
    name = gpu_from_device_name(str(status.get("name", "")))
    if name is None:
        return None, (f"this server's GPU ({status.get('name')}) is not in the catalog, so the guard and the time "
                      "budget cannot be computed for it")
    return name, ""


def predicted_job_s(guarded: pd.DataFrame) -> float:
    """Predicted GPU seconds of a job: each allowed call's predicted time × runs per repetition × repetitions."""
    rows = guarded[guarded["allowed"]]
    times = pd.to_numeric(rows["time_ms"], errors="coerce").fillna(0)
    return float(times.sum()) * RUNS_PER_REPETITION * REPEATS / 1e3


def cuda_status() -> dict | None:
    """{'name', 'free_bytes', 'total_bytes'} of CUDA device 0, or None where there is no CUDA GPU (or no torch)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return {"name": torch.cuda.get_device_name(), "free_bytes": int(free), "total_bytes": int(total)}


def plan_calls(inputs) -> list[AttentionCall]:
    """The attention calls one GPU runs for this plan, as the advisor prices them (`estimator.advice.attention_call`:
    heads split by tp, the query by cp, causal for decoders). Inference adds one decode step (q_len 1 against the
    cache); training's call is forward_backward."""
    from estimator.model.layer_attention import attention_call

    calls = [attention_call(inputs)]
    if inputs.mode == "inference" and inputs.model.kind == "decoder" and calls[0].q_len > 1:
        calls.append(attention_call(inputs, q_len=1, causal=False))
    return calls


def call_rows(calls: list[AttentionCall]) -> list[dict]:
    """Predict-style rows (contract §2 columns) with ids, for the CSV a user runs on a GPU machine."""
    rows = []
    for i, call in enumerate(calls):
        row = {"id": f"plan-{i:02d}"}
        row.update({k: getattr(call, k) for k in CALL_COLUMNS})
        row["causal"] = int(row["causal"])
        rows.append(row)
    return rows


def guard(calls: list[AttentionCall], gpu: GPU, free_bytes: int) -> pd.DataFrame:
    """Each call with its prediction and whether it may run here; the reason when not."""
    from estimator.call.attention import estimate_call

    allowance = APP_GUARD.allowance(free_bytes)
    rows = []
    for i, call in enumerate(calls):
        est = estimate_call(call, gpu)
        need = est.input_bytes + (est.peak_extra_bytes or 0)
        reason = ""
        if i >= MAX_CALLS:
            reason = f"over the cap of {MAX_CALLS} calls per job"
        elif not est.supported:
            reason = f"{call.backend} cannot run this call (predicted)"
        elif APP_GUARD.blocks(need, free_bytes):
            reason = (f"needs {need / GIB:,.2f} GiB predicted; the guard allows {max(allowance, 0) / GIB:,.2f} GiB "
                      f"({APP_GUARD_TEXT})")
        rows.append({**{k: getattr(call, k) for k in CALL_COLUMNS}, "predicted_backend": est.selected_backend,
                     "peak_extra_bytes": est.peak_extra_bytes, "input_bytes": est.input_bytes,
                     "time_ms": est.time_ms if est.supported else None, "allowed": not reason,
                     "blocked_because": reason})
    return pd.DataFrame(rows)


def measure(call: AttentionCall) -> dict:
    """One call measured by contract §1 on the local CUDA GPU (validation/call/protocol.py)."""
    from validation.call.protocol import measure as protocol_measure

    return protocol_measure(call, "cuda")


def measure_repeated(call: AttentionCall, repeats: int, should_stop: Callable[[], bool]) -> dict:
    """The call measured `repeats` times (one protocol repetition each); stops between two repetitions when
    `should_stop()`; the largest peak and the median time."""
    results = []
    for _ in range(repeats):
        if should_stop():
            raise Cancelled("cancelled")
        results.append(measure(call))
        if results[-1].get("status") != "ok":
            break
    out = dict(results[-1])
    peaks = [r["measured_peak_extra_bytes"] for r in results if r.get("measured_peak_extra_bytes") is not None]
    times = sorted(r["measured_time_ms"] for r in results if r.get("measured_time_ms") is not None)
    if peaks:
        out["measured_peak_extra_bytes"] = max(peaks)
    if times:
        out["measured_time_ms"] = times[len(times) // 2]
    return out


def run_job(calls: list[AttentionCall], allowed: list[bool],
            on_progress: Callable[[int, int, str], None] = lambda done, total, text: None,
            should_stop: Callable[[], bool] = lambda: False, repeats: int = REPEATS) -> pd.DataFrame:
    """Measure the allowed calls one after another, holding the server's GPU lock; Busy if it is held. The lock is
    released on every exit (done, cancelled, an exception, the script stopped by a re-run)."""
    if not _JOB_LOCK.acquire(blocking=False):
        raise Busy("another validation job is running on this server; try again when it finishes")
    try:
        rows, total = [], sum(allowed) * repeats
        done = 0
        for call, ok in zip(calls, allowed, strict=True):
            if not ok:
                continue
            on_progress(done, total, f"measuring {call.backend} q_len={call.q_len} kv_len={call.kv_len} {call.mode}")

            def stop_or_progress() -> bool:
                nonlocal done
                if should_stop():
                    return True
                on_progress(min(done, total), total, "repetition")
                done += 1
                return False

            result = measure_repeated(call, repeats, stop_or_progress)
            rows.append({**{k: getattr(call, k) for k in CALL_COLUMNS}, **result})
        on_progress(total, total, "done")
        return pd.DataFrame(rows)
    finally:
        _JOB_LOCK.release()


def job_running() -> bool:
    return _JOB_LOCK.locked()


def data_gpu(measured: pd.DataFrame) -> tuple[str | None, str | None, str]:
    """(catalog GPU, modelled torch version, what the data says) from a result's device_name/torch_version."""
    from estimator.call.backends import check_torch_version
    from estimator.hardware import gpu_from_device_name

    device = torch = None
    if "device_name" in measured.columns and measured["device_name"].notna().any():
        device = str(measured["device_name"].dropna().mode().iloc[0])
    if "torch_version" in measured.columns and measured["torch_version"].notna().any():
        torch = str(measured["torch_version"].dropna().mode().iloc[0])
    name = gpu_from_device_name(device) if device else None
    try:
        modelled = check_torch_version(torch) if torch else None
    except ValueError:
        modelled = None
    said = ", ".join(x for x in (device and f"device {device}", torch and f"torch {torch}") if x) or "no device named"
    return name, modelled, said


def compare(measured: pd.DataFrame, gpu: GPU, torch_version: str | None = None, estimate=None,
            should_stop: Callable[[], bool] = lambda: False) -> pd.DataFrame:
    """Measured rows beside the estimator's prediction for each (predicted peak, relative error, backend). Once
    `should_stop()` (a time budget) the remaining rows are kept with an `error` saying they were not predicted."""
    from estimator.call.attention import estimate_call
    from estimator.call.backends import DEFAULT_TORCH
    from validation.call.schema import tolerance_bytes

    estimate = estimate or estimate_call
    torch_version = torch_version or DEFAULT_TORCH

    rows = []
    for row in measured.to_dict("records"):
        out = dict(row)
        if should_stop():
            out["error"] = "not predicted: the page's time budget for one file ran out"
            rows.append(out)
            continue
        try:
            call = AttentionCall(**{k: row[k] for k in CALL_COLUMNS if k in row and pd.notna(row[k]) and row[k] != ""})
        except (ValueError, TypeError, OverflowError) as exc:
            text = first_line(exc)
            out["error"] = text if len(text) <= 200 else text[:197] + "..."  # a 5,000-digit cell echoed
            rows.append(out)
            continue
        est = estimate(call, gpu, torch_version)
        out.setdefault("predicted_backend", est.selected_backend)
        if pd.isna(out.get("peak_extra_bytes", float("nan"))):
            out["peak_extra_bytes"] = est.peak_extra_bytes
        measured_bytes = pd.to_numeric(pd.Series([row.get("measured_peak_extra_bytes")]), errors="coerce")[0]
        predicted = out["peak_extra_bytes"]
        comparable = predicted is not None and pd.notna(measured_bytes) and measured_bytes > 0
        out["relative_error"] = (float(predicted) - measured_bytes) / measured_bytes if comparable else None
        out["abs_error_bytes"] = float(predicted) - measured_bytes if comparable else None
        # the project's tolerance, max(3%, 2 MiB): a tiny decode call can be 90% off by a fraction of a MiB
        out["within_tolerance"] = (abs(float(predicted) - measured_bytes) <= tolerance_bytes(float(measured_bytes))
                                   if comparable else None)
        rows.append(out)
    return pd.DataFrame(rows)


def with_backend(calls: list[AttentionCall], backend: str) -> list[AttentionCall]:
    return [dataclasses.replace(c, backend=backend) for c in calls]
