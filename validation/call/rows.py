"""A case list in, predictions and comparisons out: the bookkeeping of `python -m validation run` that needs no
torch (reading the CSV, the estimator's predictions per row, the max(3 %, 2 MiB) comparison)."""

from __future__ import annotations

import csv
import io
import os
import re

from estimator.call.config import AttentionCall
from estimator.textfile import MAX_TRACE_BYTES, read_bytes_limited
from validation.call.schema import (
    CALL_DEFAULTS,
    CALL_FIELDS,
    COMPARED,
    OUTPUT_FIELDS,
    PREDICTED,
    REQUIRED_FIELDS,
    tolerance_bytes,
)

MAX_CASES_BYTES = MAX_TRACE_BYTES  # 256 MiB: millions of cases, more than any sweep measures
_UNDECODABLE = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, kept by surrogateescape


def _clean(value: str) -> str:
    """A cell with bytes that were not UTF-8 (kept by surrogateescape), those bytes shown as U+FFFD."""
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def read_cases(path: str) -> tuple[list[str], list[dict]]:
    """The input header (minus any output columns from an earlier run) and its rows as strings.
    ValueError with a one-line reason for a file that cannot be a case list. A row holding bytes that are not
    UTF-8 costs that row only: its cells are kept with U+FFFD in their place and call_from_row refuses it with
    its line number."""
    if not os.path.exists(path):
        raise ValueError(f"--in {path}: no such file")
    data = read_bytes_limited(path, MAX_CASES_BYTES, "--in")  # a regular file, a size cap before parsing
    text = data.decode("utf-8-sig", errors="surrogateescape")
    try:
        with io.StringIO(text, newline="") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames
            if not header:
                raise ValueError(f"--in {path}: empty file, expected a header row of predict columns")
            if _UNDECODABLE.search("".join(header)):
                raise ValueError(f"--in {path}: not a text CSV file (the header row is not UTF-8)")
            header = [h.strip() for h in header]
            if len(set(header)) != len(header):
                dupes = sorted({h for h in header if header.count(h) > 1})
                raise ValueError(f"--in {path}: duplicate columns {', '.join(dupes)}")
            missing = [c for c in REQUIRED_FIELDS if c not in header]
            if missing:
                raise ValueError(f"--in {path}: missing columns {', '.join(missing)} "
                                 f"(need {', '.join(REQUIRED_FIELDS)}; optional {', '.join(CALL_FIELDS[:2])}, "
                                 f"{', '.join(CALL_FIELDS[8:])})")
            rows = []
            for raw in reader:
                row = {k.strip(): v for k, v in raw.items() if k is not None}
                if None in raw:  # more cells than header fields
                    row["__extra__"] = raw[None]
                if any(isinstance(v, str) and _UNDECODABLE.search(v) for v in row.values()):
                    row = {k: _clean(v) if isinstance(v, str) else v for k, v in row.items()}
                    row["__bad__"] = (f"line {reader.line_num}: not UTF-8 text (the row is kept with U+FFFD in its "
                                      "place)")
                rows.append(row)
    except csv.Error as exc:
        raise ValueError(f"--in {path}: not a readable CSV ({exc})") from None
    inputs = [h for h in header if h not in OUTPUT_FIELDS]
    return inputs, rows


def call_from_row(row: dict) -> AttentionCall:
    """The AttentionCall of one CSV row; ValueError naming the field for a malformed row."""
    if row.get("__bad__"):
        raise ValueError(row["__bad__"])
    if row.get("__extra__"):
        raise ValueError("row: more cells than header columns")
    for name in REQUIRED_FIELDS:
        if row.get(name) in (None, ""):
            raise ValueError(f"{name}: missing value")
    return AttentionCall(**{k: str(row[k]).strip() for k in CALL_FIELDS if row.get(k) not in (None, "")})


def predict_rows(rows: list[dict], gpu: str, torch_version: str | None) -> tuple[list[dict], str]:
    """predicted_* columns per row from estimator.call.table.predict_frame, and a note ('' when all is well).
    An estimator that is missing or fails leaves the predictions empty rather than stopping the sweep."""
    empty = [{c: "" for c in PREDICTED} for _ in rows]
    if not rows:
        return empty, ""
    try:
        import pandas as pd

        from estimator.call.table import predict_frame
    except ImportError as exc:
        return empty, f"no predictions: estimator.call.table is not available ({exc})"
    frame = pd.DataFrame([{k: row.get(k) if row.get(k) not in (None, "") else CALL_DEFAULTS.get(k, "")
                           for k in CALL_FIELDS} for row in rows], dtype=object)
    kwargs = {} if torch_version is None else {"torch_version": torch_version}
    try:
        out = predict_frame(frame, gpu, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a failing estimator must not stop measurements
        return empty, f"no predictions: predict_frame failed ({type(exc).__name__}: {str(exc)[:200]})"
    if len(out) != len(rows):
        return empty, f"no predictions: predict_frame returned {len(out)} rows for {len(rows)}"
    preds = []
    for rec in out.to_dict("records"):
        pred = {}
        for col in PREDICTED:
            value = rec.get(col.removeprefix("predicted_"), "")
            pred[col] = "" if _missing(value) else value
        pred["predicted_error"] = "" if _missing(rec.get("error", "")) else str(rec.get("error"))
        preds.append(pred)
    return preds, ""


def _missing(value) -> bool:
    """None, NaN, pandas' NA or an empty cell."""
    if value is None or (isinstance(value, float) and value != value):
        return True
    try:
        return bool(value == "")
    except TypeError:  # pd.NA refuses to be a bool
        return True


def number_or_none(value) -> float | None:
    if _missing(value):
        return None
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def truthy(value) -> bool | None:
    if _missing(value):
        return None
    return str(value).strip().lower() in ("true", "1", "1.0", "yes")


def compare(measured: dict, pred: dict) -> dict:
    """Relative errors (predicted - measured) / measured, and the max(3 %, 2 MiB) peak check."""
    out = {c: "" for c in COMPARED}
    if measured.get("status") != "ok":
        return out
    m_peak = number_or_none(measured.get("measured_peak_extra_bytes"))
    p_peak = number_or_none(pred.get("predicted_peak_extra_bytes"))
    if m_peak is not None and p_peak is not None:
        diff = p_peak - m_peak
        out["abs_err_peak_bytes"] = int(diff)
        out["rel_err_peak"] = round(diff / m_peak, 6) if m_peak else ""
        out["peak_within_tol"] = abs(diff) <= tolerance_bytes(m_peak)
    for key, m_col, p_col in (("rel_err_time", "measured_time_ms", "predicted_time_ms"),
                              ("rel_err_flops", "torch_flops", "predicted_flops")):
        m, p = number_or_none(measured.get(m_col)), number_or_none(pred.get(p_col))
        if m and p is not None:
            out[key] = round((p - m) / m, 6)
    return out
