"""GPU validation from the app: the plan's attention calls, guarded, measured one at a time.

Guards: at most MAX_CALLS calls per job; a call runs only if its predicted inputs + peak extra pass
validation.guard.APP_GUARD (80% of the free memory less 1 GiB, at most 64 GiB: the rule `python -m validation
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
from validation.guard import APP_GUARD, APP_GUARD_TEXT

MAX_CALLS = 16
_JOB_LOCK = threading.Lock()


class Busy(RuntimeError):
    """Another validation job holds the GPU on this server."""


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
    from estimator.model.inputs import attention_call

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
    """One call measured by contract §1 on the local CUDA GPU (validation/protocol.py)."""
    from validation.protocol import measure as protocol_measure

    return protocol_measure(call, "cuda")


def run_job(calls: list[AttentionCall], allowed: list[bool],
            on_progress: Callable[[int, int, str], None] = lambda done, total, text: None) -> pd.DataFrame:
    """Measure the allowed calls one after another, holding the server's GPU lock; Busy if it is held."""
    if not _JOB_LOCK.acquire(blocking=False):
        raise Busy("another validation job is running on this server; try again when it finishes")
    try:
        rows, total = [], sum(allowed)
        done = 0
        for call, ok in zip(calls, allowed, strict=True):
            if not ok:
                continue
            on_progress(done, total, f"measuring {call.backend} q_len={call.q_len} kv_len={call.kv_len} {call.mode}")
            result = measure(call)
            rows.append({**{k: getattr(call, k) for k in CALL_COLUMNS}, **result})
            done += 1
            on_progress(done, total, "done")
        return pd.DataFrame(rows)
    finally:
        _JOB_LOCK.release()


def compare(measured: pd.DataFrame, gpu: GPU) -> pd.DataFrame:
    """Measured rows beside the estimator's prediction for each (predicted peak, relative error, backend)."""
    from estimator.call.attention import estimate_call

    rows = []
    for row in measured.to_dict("records"):
        out = dict(row)
        try:
            call = AttentionCall(**{k: row[k] for k in CALL_COLUMNS if k in row and pd.notna(row[k]) and row[k] != ""})
        except (ValueError, TypeError) as exc:
            out["error"] = str(exc)
            rows.append(out)
            continue
        est = estimate_call(call, gpu)
        out.setdefault("predicted_backend", est.selected_backend)
        if pd.isna(out.get("peak_extra_bytes", float("nan"))):
            out["peak_extra_bytes"] = est.peak_extra_bytes
        measured_bytes = pd.to_numeric(pd.Series([row.get("measured_peak_extra_bytes")]), errors="coerce")[0]
        predicted = out["peak_extra_bytes"]
        out["relative_error"] = ((float(predicted) - measured_bytes) / measured_bytes
                                 if predicted is not None and pd.notna(measured_bytes) and measured_bytes > 0
                                 else None)
        rows.append(out)
    return pd.DataFrame(rows)


def with_backend(calls: list[AttentionCall], backend: str) -> list[AttentionCall]:
    return [dataclasses.replace(c, backend=backend) for c in calls]
