"""Sweeps and tables the pages show: pure functions over the estimator (no Streamlit, no plotly).

Each returns a pandas DataFrame with exact-int byte columns; pages only format them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

import pandas as pd

from estimator.call import registry
from estimator.call.backends import DEFAULT_TORCH, PRIORITY_CUDNN_FIRST
from estimator.call.config import MAX_SEQ_LEN, AttentionCall
from estimator.hardware import GPU
from estimator.units import GIB

SWEEP_BACKENDS = registry.names()
# the backend table's rows: SDPA's kernels in the order torch 2.11 tries them on sm90 and newer, then the others
TABLE_BACKENDS = (*PRIORITY_CUDNN_FIRST, *registry.names(sdpa=False))


def n_grid(current_n: int, *, low: int = 256, high: int | None = None) -> list[int]:
    """Powers of two from `low` to at least 4× the current n (at least 128k), plus the current n itself."""
    top = min(MAX_SEQ_LEN, high or max(4 * current_n, 1 << 17))
    ns = {1 << k for k in range(int(math.log2(low)), int(math.log2(top)) + 1)}
    ns.add(int(current_n))
    return sorted(n for n in ns if 1 <= n <= MAX_SEQ_LEN)


def _with_n(call: AttentionCall, n: int) -> AttentionCall:
    """The call at sequence length n: kv_len = n; q_len follows unless the call is a decode step (q_len < kv_len)."""
    q_len = n if call.q_len == call.kv_len else min(call.q_len, n)
    return dataclasses.replace(call, q_len=q_len, kv_len=n)


def call_sweep(call: AttentionCall, gpu: GPU, ns: Iterable[int], *, torch_version: str = DEFAULT_TORCH,
               backends: Sequence[str] = SWEEP_BACKENDS, estimate=None) -> pd.DataFrame:
    """Per n and backend: peak extra bytes (contract §1), inputs and their sum; NaN where unsupported.
    `estimate` defaults to `estimator.call.attention.estimate_call` (the app passes a memoised one)."""
    from estimator.call.attention import estimate_call

    estimate_call = estimate or estimate_call

    rows = []
    for n in ns:
        for backend in backends:
            est = estimate_call(dataclasses.replace(_with_n(call, n), backend=backend), gpu, torch_version)
            total = est.input_bytes + est.peak_extra_bytes if est.supported and est.peak_extra_bytes is not None \
                else None
            rows.append({"n": int(n), "backend": backend, "supported": bool(est.supported),
                         "peak_extra_bytes": est.peak_extra_bytes if est.supported else None,
                         "input_bytes": est.input_bytes, "total_bytes": total,
                         "time_ms": est.time_ms if est.supported else None})
    return pd.DataFrame(rows)


def backend_table(call: AttentionCall, gpu: GPU, *, torch_version: str = DEFAULT_TORCH, estimate=None) -> pd.DataFrame:
    """One row per backend for this call: can it run, why not, its peak, time and FLOPs."""
    from estimator.call.attention import estimate_call

    estimate_call = estimate or estimate_call

    auto = estimate_call(dataclasses.replace(call, backend="auto"), gpu, torch_version)
    rows = []
    for backend in TABLE_BACKENDS:
        est = estimate_call(dataclasses.replace(call, backend=backend), gpu, torch_version)
        reasons = auto.reasons.get(backend, ()) if not registry.get(backend).always_runs else ()
        rows.append({
            "backend": backend,
            "auto picks it": backend == auto.selected_backend,
            "can run": bool(est.supported),
            "why not": "; ".join(reasons) if reasons else ("" if est.supported else "; ".join(
                est.reasons.get(backend, ())) or "not supported"),
            "peak extra (GiB)": (est.peak_extra_bytes / GIB) if est.supported and est.peak_extra_bytes is not None
            else None,
            "peak_extra_bytes": est.peak_extra_bytes if est.supported else None,
            "fits": bool(est.fits) if est.supported else None,
            "time (ms)": est.time_ms if est.supported else None,
            "flops": est.flops if est.supported else None,
        })
    return pd.DataFrame(rows)


def budget_table(components: Sequence[tuple[str, int]], total_bytes: int | None = None) -> pd.DataFrame:
    """component, bytes (exact int), GiB, share of the total (total = sum of parts unless given)."""
    total = sum(int(b) for _, b in components) if total_bytes is None else int(total_bytes)
    rows = [{"component": name, "bytes": int(b), "GiB": int(b) / GIB, "share": (int(b) / total) if total else 0.0}
            for name, b in components]
    rows.append({"component": "total", "bytes": total, "GiB": total / GIB, "share": 1.0 if total else 0.0})
    return pd.DataFrame(rows)


def plan_sweep(inputs, ns: Iterable[int], *, backends: Sequence[str] = SWEEP_BACKENDS, plan_fn=None) -> pd.DataFrame:
    """Per n and forced backend: the plan's total bytes per GPU (None where the backend cannot run).
    `plan_fn(inputs)` defaults to `make_plan(inputs, solve=False)` (the app passes a memoised one)."""
    from estimator.model.plan import make_plan

    plan_fn = plan_fn or (lambda inp: make_plan(inp, solve=False))

    rows = []
    for n in ns:
        for backend in backends:
            total, fits, error = None, None, ""
            try:
                plan = plan_fn(dataclasses.replace(inputs, seq_len=int(n), backend=backend))
            except ValueError as exc:
                error = str(exc)
            else:
                if plan.supported:
                    total, fits = int(plan.total_bytes), bool(plan.fits)
                else:
                    error = plan.verdict
            rows.append({"n": int(n), "backend": backend, "total_bytes": total, "fits": fits, "error": error})
    return pd.DataFrame(rows)


def trace_table(report: dict) -> pd.DataFrame:
    """`estimator.model.trace.trace_report`'s percentiles as rows: percentile, n, bytes, fit, prefill and decode
    times."""
    rows = []
    for name, point in report["percentiles"].items():
        rows.append({"percentile": name.upper(), "n": int(point["seq_len"]), "total_bytes": int(point["total_bytes"]),
                     "kv_cache_bytes": int(point["kv_cache_bytes"]), "fits": bool(point["fits"]),
                     "prefill_time_ms": float(point["prefill_time_ms"]),
                     "decode_time_ms_per_token": None if point["decode_time_ms_per_token"] is None
                     else float(point["decode_time_ms_per_token"])})
    return pd.DataFrame(rows)


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return format(value, spec)


def budget_text(table: pd.DataFrame) -> pd.DataFrame:
    """The budget table as display strings (a static st.table: light in the browser): exact bytes, GiB, share."""
    return pd.DataFrame({"component": table["component"], "bytes": [_fmt(int(b), ",d") for b in table["bytes"]],
                         "GiB": [_fmt(g, ",.3f") for g in table["GiB"]],
                         "share": [_fmt(s, ".1%") for s in table["share"]]})


def backend_text(table: pd.DataFrame) -> pd.DataFrame:
    """The backend table as display strings."""
    return pd.DataFrame({
        "backend": table["backend"], "auto picks it": ["yes" if v else "" for v in table["auto picks it"]],
        "can run": ["yes" if v else "no" for v in table["can run"]], "why not": table["why not"],
        "peak extra (GiB)": [_fmt(v, ",.3f") for v in table["peak extra (GiB)"]],
        "time (ms)": [_fmt(v, ",.3f") for v in table["time (ms)"]],
        "FLOPs": [_fmt(v, ".3e") for v in table["flops"]]}).set_index("backend")
