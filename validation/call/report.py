"""`python -m validation report OUT.csv`: how far the estimator is from the measurements.

Pure pandas (plus `estimator.call.table` when a CSV has no predictions yet, e.g. early calibration
runs): no torch, so it runs and is tested anywhere. Sections: status counts; the peak error table per
backend × mode × dtype (share within max(3 %, 2 MiB), median and worst relative error, wrong backend
predictions, supported mismatches); the worst cases; the doubling check (doubling n should multiply
attention time by about 4 on the math path); eager kernel counts against the count expected from
validation/call/eager.py ("guess, then look").
"""

from __future__ import annotations

import io
import os

import pandas as pd

from estimator.call.config import SIZE_LIMITS
from estimator.hardware import gpu_from_device_name
from estimator.textfile import MAX_META_BYTES, MAX_TABLE_BYTES, read_bytes_limited, read_json_limited
from estimator.units import MIB
from validation.call.kernels import kernel_table
from validation.call.schema import CALL_FIELDS, TARGET_SHARE, tolerance_bytes
from validation.errors import first_line

PRED_COLS = ("supported", "selected_backend", "peak_extra_bytes", "fits", "flops", "time_ms")


# --------------------------------------------------------------------------------------------
# Loading


def load(path: str, gpu: str | None = None, torch_version: str | None = None,
         recorded: bool = False) -> tuple[pd.DataFrame, dict]:
    """The run's rows with predictions and comparisons filled in, and its provenance (meta.json).

    Predictions come from the current estimator (the measurements are the stable data; the estimator
    is what is being checked), for the GPU and torch version of the data; `recorded=True` keeps the
    predicted_* columns the run wrote instead, where it wrote them."""
    if not os.path.exists(path):
        raise ValueError(f"report: no such file {path}")
    data = read_bytes_limited(path, MAX_TABLE_BYTES, "report")  # a size cap before parsing (/dev/zero)
    try:
        frame = pd.read_csv(io.BytesIO(data), dtype={"id": str, "error": str, "predicted_error": str},
                            keep_default_na=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"report: {path} is not a readable CSV ({first_line(exc)})") from None
    if frame.columns.duplicated().any():
        raise ValueError(f"report: {path} names a column twice")
    missing = [c for c in ("status", "measured_peak_extra_bytes", *CALL_FIELDS[2:8]) if c not in frame.columns]
    if missing:
        raise ValueError(f"report: {path} lacks columns {', '.join(missing)}; is it a `validation run` output?")
    check_sizes(frame, path)
    meta = {}
    meta_path = f"{path}.meta.json"
    if os.path.exists(meta_path):
        meta = read_json_limited(meta_path, MAX_META_BYTES, "report meta")
        if not isinstance(meta, dict):
            raise ValueError(f"report meta {meta_path}: expected a JSON object")
    repredict = not (recorded and "predicted_peak_extra_bytes" in frame.columns)
    meta["predictions"] = "current estimator" if repredict else "as recorded by the run"
    df = prepare(frame, gpu=gpu or meta.get("gpu_catalog_name"), torch_version=torch_version, repredict=repredict)
    return df, meta


def check_sizes(frame: pd.DataFrame, path: str) -> None:
    """ValueError naming the field and the row for a measured (`ok`/`oom`) row whose call size is not a whole
    number in the estimator's limits: a corrupt file, not a measurement. Rows the run itself marked `error` (a
    malformed case) are left as they are."""
    measured = frame["status"].isin(["ok", "oom"])
    for field, limit in SIZE_LIMITS.items():
        raw = frame[field]
        values = pd.to_numeric(raw, errors="coerce")
        bad = measured & (values.isna() | (values < 1) | (values > limit) | (values % 1 != 0))
        if bad.any():
            row = int(bad.to_numpy().nonzero()[0][0])
            raise ValueError(f"report: {path} row {row + 2}: {field} {str(raw.iloc[row])[:40]!r} is not a whole "
                             f"number in [1, {limit:,}]")


def prepare(frame: pd.DataFrame, gpu: str | None = None, torch_version: str | None = None,
            repredict: bool = False) -> pd.DataFrame:
    """Normalise types, add predictions where absent (or always, with repredict), and (re)compute the
    comparison columns."""
    df = frame.copy()
    for col, default in (("backend", "auto"), ("dtype", "bfloat16"), ("causal", 0), ("mask", "none"),
                         ("dropout", 0.0), ("mode", "forward"), ("ran_backend", ""), ("device_name", ""),
                         ("n_kernels", float("nan")), ("measured_time_ms", float("nan")),
                         ("torch_flops", float("nan")), ("error", "")):
        if col not in df.columns:
            df[col] = default
    df["mask"] = df["mask"].fillna("none")
    df["ran_backend"] = df["ran_backend"].fillna("")
    df["error"] = df["error"].fillna("")
    if repredict or "predicted_peak_extra_bytes" not in df.columns:
        df = add_predictions(df, gpu or gpu_for(df), torch_version or torch_for(df))
    for col in ("measured_peak_extra_bytes", "predicted_peak_extra_bytes", "measured_time_ms", "predicted_time_ms",
                "torch_flops", "predicted_flops", "n_kernels"):
        df[col] = pd.to_numeric(df.get(col), errors="coerce")
    df["predicted_supported"] = df["predicted_supported"].map(_as_bool)
    df["predicted_selected_backend"] = df["predicted_selected_backend"].fillna("").astype(str)
    ok = df["status"].eq("ok")
    meas, pred = df["measured_peak_extra_bytes"], df["predicted_peak_extra_bytes"]
    diff = pred - meas
    compared = ok & meas.gt(0) & pred.notna()
    df["abs_err_peak_bytes"] = diff.where(compared)
    df["rel_err_peak"] = (diff / meas).where(compared)
    tol = tolerance_bytes(meas)
    df["tol_ratio"] = (diff.abs() / tol).where(compared)  # ≤ 1 means within max(3 %, 2 MiB)
    df["peak_within_tol"] = df["tol_ratio"].le(1.0).where(compared)
    t_ok = ok & df["measured_time_ms"].gt(0) & df["predicted_time_ms"].notna()
    df["rel_err_time"] = ((df["predicted_time_ms"] - df["measured_time_ms"]) / df["measured_time_ms"]).where(t_ok)
    f_ok = ok & df["torch_flops"].gt(0) & df["predicted_flops"].notna()
    df["rel_err_flops"] = ((df["predicted_flops"] - df["torch_flops"]) / df["torch_flops"]).where(f_ok)
    df["wrong_backend"] = (ok & df["predicted_selected_backend"].ne("")
                           & df["predicted_selected_backend"].ne(df["ran_backend"]))
    sup = df["predicted_supported"]
    df["supported_mismatch"] = (ok & sup.eq(False)) | (df["status"].eq("unsupported") & sup.eq(True))
    return df


def _as_bool(value):
    if value is None or (isinstance(value, float) and value != value):
        return None
    return str(value).strip().lower() in ("true", "1", "1.0", "yes")


def gpu_for(df: pd.DataFrame) -> str:
    """Catalog name from the data's device_name (h200 for CPU rows, as `validation run` does)."""
    names = df["device_name"].dropna().astype(str)
    for name in names:
        found = gpu_from_device_name(name)
        if found:
            return found
    return "h200"


def torch_for(df: pd.DataFrame) -> str | None:
    """'2.11' from '2.11.0+cu130' (the estimator's version key); None when the column is absent."""
    if "torch_version" not in df.columns or df["torch_version"].dropna().empty:
        return None
    return ".".join(str(df["torch_version"].dropna().iloc[0]).split("+")[0].split(".")[:2])


def add_predictions(df: pd.DataFrame, gpu: str, torch_version: str | None) -> pd.DataFrame:
    """predicted_* columns from estimator.call.table.predict_frame (pure Python, no torch)."""
    try:
        from estimator.call.table import predict_frame
    except ImportError as exc:
        raise ValueError(f"report: the CSV has no predictions and estimator.call.table is unavailable "
                         f"({exc})") from None
    inputs = df[[c for c in CALL_FIELDS if c in df.columns]].astype(object)
    kwargs = {"torch_version": torch_version} if torch_version else {}
    try:
        out = predict_frame(inputs, gpu, **kwargs).reset_index(drop=True)
    except ValueError:
        if not kwargs:
            raise
        out = predict_frame(inputs, gpu).reset_index(drop=True)  # a version the estimator does not model
    df = df.reset_index(drop=True)
    for col in PRED_COLS:
        df[f"predicted_{col}"] = out[col] if col in out.columns else None
    df["predicted_error"] = out["error"] if "error" in out.columns else ""
    return df


# --------------------------------------------------------------------------------------------
# Tables


def status_table(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return pd.DataFrame()
    table = df.fillna({"backend": "?", "status": "?"}).groupby(["backend", "status"]).size().unstack(fill_value=0)
    table.columns.name = None
    table["all"] = table.sum(axis=1)
    return table.reset_index()


def error_table(df: pd.DataFrame, by=("backend", "mode", "dtype")) -> pd.DataFrame:
    """Peak error per group: share within max(3 %, 2 MiB), median |rel err|, the worst case's (furthest out
    of tolerance) signed relative and absolute error, FLOPs equal to FlopCounterMode's (where it counted),
    time median |rel err|, wrong backend predictions and supported mismatches."""
    rows = []
    for key, g in df.groupby(list(by), sort=True):
        c = g[g["peak_within_tol"].notna()]
        worst = c.loc[c["tol_ratio"].idxmax()] if len(c) else None  # the case furthest out of tolerance
        rows.append({**dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True)),
                     "cases": len(g), "ok": int(g["status"].eq("ok").sum()), "compared": len(c),
                     "within_tol": _pct(c["peak_within_tol"].mean()) if len(c) else "",
                     "median_abs_rel_err": _pct(c["rel_err_peak"].abs().median()) if len(c) else "",
                     "worst_rel_err": _pct(worst["rel_err_peak"]) if worst is not None else "",
                     "worst_err_MiB": round(worst["abs_err_peak_bytes"] / MIB, 2) if worst is not None else "",
                     "time_median_abs_rel_err": _pct(g["rel_err_time"].abs().median())
                     if g["rel_err_time"].notna().any() else "",
                     "flops_exact": f"{int(g['rel_err_flops'].eq(0).sum())}/{int(g['rel_err_flops'].notna().sum())}",
                     "wrong_backend": int(g["wrong_backend"].sum()),
                     "supported_mismatch": int(g["supported_mismatch"].sum())})
    return pd.DataFrame(rows)


def overall(df: pd.DataFrame) -> dict:
    c = df[df["peak_within_tol"].notna()]
    share = float(c["peak_within_tol"].mean()) if len(c) else float("nan")
    return {"compared": len(c), "within": int(c["peak_within_tol"].sum()) if len(c) else 0, "share": share,
            "passes": bool(len(c)) and share >= TARGET_SHARE}


def shape_label(r) -> str:
    """'B2 H16/4 L1024 S1024 D128 causal mask=bool p=0.1'; 'malformed row' where a size is not a number."""
    try:
        return _shape_label(r)
    except (TypeError, ValueError):
        return "malformed row"


def _shape_label(r) -> str:
    kv = f"/{int(r['kv_heads'])}" if int(r["kv_heads"]) != int(r["q_heads"]) else ""
    text = f"B{int(r['batch'])} H{int(r['q_heads'])}{kv} L{int(r['q_len'])} S{int(r['kv_len'])} D{int(r['head_dim'])}"
    if str(r["causal"]) in ("1", "True", "true", "1.0"):
        text += " causal"
    if r["mask"] != "none":
        text += f" mask={r['mask']}"
    if float(r["dropout"] or 0) > 0:
        text += f" p={float(r['dropout']):g}"
    return text


def worst_cases(df: pd.DataFrame, n: int = 15) -> pd.DataFrame:
    c = df[df["tol_ratio"].notna()].sort_values("tol_ratio", ascending=False).head(n)
    if c.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "id": c.get("id", pd.Series(c.index, index=c.index)).astype(str), "backend": c["backend"],
        "ran": c["ran_backend"], "predicted": c["predicted_selected_backend"], "dtype": c["dtype"],
        "mode": c["mode"], "shape": c.apply(shape_label, axis=1),
        "measured_MiB": (c["measured_peak_extra_bytes"] / MIB).round(2),
        "predicted_MiB": (c["predicted_peak_extra_bytes"] / MIB).round(2),
        "rel_err": c["rel_err_peak"].map(_pct), "x_tol": c["tol_ratio"].round(1)})


KEY_FIELDS = ("backend", "dtype", "batch", "q_heads", "kv_heads", "head_dim", "causal", "mask", "dropout", "mode",
              "device_name")


def doubling_table(df: pd.DataFrame) -> pd.DataFrame:
    """The doubling check: for square prefill shapes (q_len = kv_len) that differ only in n,
    the time (and peak) ratio at each doubling, measured and predicted. Quadratic paths approach 4×."""
    ok = df[df["status"].eq("ok") & df["q_len"].eq(df["kv_len"]) & df["measured_time_ms"].gt(0)]
    rows = []
    for key, g in ok.groupby(list(KEY_FIELDS), dropna=False, sort=True):
        g = g.sort_values("q_len").drop_duplicates("q_len")
        by_n = g.set_index("q_len")
        pairs = [n for n in by_n.index if 2 * n in by_n.index]
        if not pairs:
            continue
        t = [by_n.at[2 * n, "measured_time_ms"] / by_n.at[n, "measured_time_ms"] for n in pairs]
        p = [by_n.at[2 * n, "measured_peak_extra_bytes"] / by_n.at[n, "measured_peak_extra_bytes"] for n in pairs
             if by_n.at[n, "measured_peak_extra_bytes"] > 0]
        pt = [by_n.at[2 * n, "predicted_time_ms"] / by_n.at[n, "predicted_time_ms"] for n in pairs
              if by_n.at[n, "predicted_time_ms"] > 0]
        k = dict(zip(KEY_FIELDS, key, strict=True))
        ran = g["ran_backend"].iloc[-1]
        rows.append({"backend": k["backend"] if k["backend"] == ran or not ran else f"{k['backend']}→{ran}",
                     "dtype": k["dtype"], "mode": k["mode"], "device": k["device_name"],
                     "n": f"{pairs[0]}→{2 * pairs[-1]}", "time_x_per_doubling": _ratios(t),
                     "last_time_x": round(t[-1], 2), "predicted_last_time_x": round(pt[-1], 2) if pt else "",
                     "peak_x_last": round(p[-1], 2) if p else "", "memory": _memory(p[-1]) if p else "",
                     "verdict": _verdict(ran or k["backend"], t[-1])})
    return pd.DataFrame(rows)


def _verdict(backend: str, last: float) -> str:
    if 3.0 <= last <= 5.0:
        return "≈4× as n² work expects" if backend in ("math", "eager") else "≈4×: FLOPs dominate"
    if last > 5.0:
        return f"{last:.1f}×: above 4× (caches spill or noise)"
    return f"{last:.1f}×: below 4× (launch- or IO-bound at this n)"


def _memory(ratio: float) -> str:
    """Peak growth per doubling: ≈4× is a materialised score matrix, ≈2× is linear (fused kernels)."""
    return "n² (scores)" if ratio >= 3.0 else "linear" if 1.6 <= ratio <= 2.4 else f"{ratio:.1f}×"


def _ratios(values) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def _pct(x) -> str:
    return "" if x is None or x != x else f"{100 * x:+.1f}%" if x < 0 else f"{100 * x:.1f}%"


# --------------------------------------------------------------------------------------------
# Markdown


def markdown_table(df: pd.DataFrame) -> str:
    """A GitHub Markdown table (no `tabulate` dependency)."""
    if df is None or df.empty:
        return "_(no rows)_\n"
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for rec in df.itertuples(index=False):
        lines.append("| " + " | ".join("" if v is None or (isinstance(v, float) and v != v) else str(v)
                                       for v in rec) + " |")
    return "\n".join(lines) + "\n"


def build_report(df: pd.DataFrame, *, meta: dict | None = None, title: str = "", worst: int = 15) -> str:
    meta = meta or {}
    o = overall(df)
    devices = ", ".join(sorted(df["device_name"].dropna().astype(str).unique())) or "unknown"
    parts = [f"# Validation report: {title}\n",
             f"Rows: {len(df)}; device: {devices}; torch: "
             f"{', '.join(sorted(df['torch_version'].dropna().astype(str).unique())) if 'torch_version' in df else '?'}"
             + (f"; driver {meta['driver']}" if meta.get("driver") else "")
             + (f"; predictions: {meta['predictions']}" if meta.get("predictions") else "")
             + (f"; command: `{meta['command']}`" if meta.get("command") else "") + "\n"]
    if o["compared"]:
        verdict = "meets" if o["passes"] else "does NOT meet"
        parts.append(f"**Peak within max(3%, 2 MiB): {o['within']}/{o['compared']} = {100 * o['share']:.1f}%** "
                     f"of measured calls with a prediction ({verdict} the 95% target).\n")
    else:
        parts.append("No measured call has a prediction to compare with.\n")
    if devices == "cpu":
        parts.append("CPU data: peaks come from profiler memory events; predictions are for the GPU named in the "
                     "run, so backend choice (auto → CPU flash) and times are not comparable. Math and eager "
                     "forward peaks follow the CUDA formulas; training peaks are one fp32 score matrix lower (CUDA's "
                     "softmax backward allocates grad·p, the CPU's does not) and CPU dropout keeps a score-sized "
                     "noise tensor instead of a bool mask (docs/validation.md).\n")
    parts += ["\n## Status counts\n\n", markdown_table(status_table(df)),
              "\n## Peak error per backend × mode × dtype\n\n",
              "rel err = (predicted − measured) / measured; worst = the case furthest out of tolerance; "
              "flops_exact = predicted FLOPs equal to FlopCounterMode's count / rows where it counted; "
              "wrong backend = predicted selected backend ≠ the one the profiler saw; "
              "supported mismatch = predicted unsupported but ran, or the reverse.\n\n",
              markdown_table(error_table(df)),
              "\n## Per backend\n\n", markdown_table(error_table(df, by=("backend",))),
              f"\n## Worst {worst} cases (by error over tolerance)\n\n", markdown_table(worst_cases(df, worst)),
              "\n## Doubling n (attention time should grow ≈4× per doubling on the math path)\n\n",
              markdown_table(doubling_table(df)),
              "\n## Kernels launched (CUDA; eager expected from the reference computation)\n\n",
              markdown_table(kernel_table(df))]
    errors = df[df["status"].eq("error")]
    if len(errors):
        parts += ["\n## Errors\n\n", markdown_table(errors.assign(shape=errors.apply(shape_label, axis=1))
                                                    [["backend", "dtype", "mode", "shape", "error"]].head(20))]
    return "".join(parts)
