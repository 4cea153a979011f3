"""A validation result CSV uploaded to the Validate page, read so that a bad byte or a bad row costs that row (said
with its line number), bounded in rows, and compared with the prediction under a time budget.

One row per line: `python -m validation run` writes one-line cells (validation/call/runner.py keeps an error's first
line), so each line is decoded and split on its own, and an unclosed quote cannot swallow the rows after it.
"""

from __future__ import annotations

import csv
import io
import time

import pandas as pd

from estimator.call.config import CALL_COLUMNS
from validation.errors import first_line

MAX_RESULT_ROWS = 2_000  # rows compared per file: ~4 ms of prediction each on the measuring host (see docs/app.md)
COMPARE_BUDGET_S = 30.0  # CPU-bound prediction of one file stops here; the rows left are marked, not dropped
LINE_COLUMN = "csv_line"
_EXAMPLES = 3


def read_result_csv(data: bytes) -> tuple[pd.DataFrame, list[str]]:
    """(the rows, notes on what was skipped). The frame has a `csv_line` column (the row's line in the file). A line
    that is not UTF-8, not one CSV record or has another number of fields than the header is skipped; rows past
    MAX_RESULT_ROWS are counted, not read. ValueError (one line) when the file is not a validation result."""
    lines = data.split(b"\n")
    try:
        header_text = lines[0].rstrip(b"\r").decode("utf-8-sig")
        header = next(csv.reader([header_text], strict=True))
    except (UnicodeDecodeError, csv.Error, StopIteration):
        raise ValueError("cannot read this CSV: its first line is not a UTF-8 CSV header") from None
    missing = [c for c in ("measured_peak_extra_bytes", *CALL_COLUMNS) if c not in header
               and c not in ("mask", "dropout", "causal")]
    if missing:
        raise ValueError(f"not a validation CSV: missing columns {', '.join(missing)}")
    kept, numbers, skipped, over = [header_text], [], [], 0
    for number, raw in enumerate(lines[1:], start=2):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue
        if len(numbers) >= MAX_RESULT_ROWS:
            over += 1
            continue
        try:
            text = raw.decode("utf-8")
            fields = len(next(csv.reader([text], strict=True)))
        except UnicodeDecodeError as exc:
            skipped.append(f"line {number}: not UTF-8 text (byte {exc.start + 1} of the line)")
            continue
        except csv.Error as exc:
            skipped.append(f"line {number}: not one CSV record ({exc})")
            continue
        if fields != len(header):
            skipped.append(f"line {number}: {fields} fields, the header has {len(header)}")
            continue
        kept.append(text)
        numbers.append(number)
    if not numbers:
        raise ValueError("no row could be read" + (f" ({skipped[0]})" if skipped else ""))
    try:
        frame = pd.read_csv(io.StringIO("\n".join(kept)))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError, OverflowError) as exc:
        raise ValueError(f"cannot read this CSV: {first_line(exc)}") from None
    frame.insert(0, LINE_COLUMN, numbers)
    measured = pd.to_numeric(frame["measured_peak_extra_bytes"], errors="coerce")
    if not measured.notna().any():
        raise ValueError("no row has a numeric measured_peak_extra_bytes")
    notes = []
    if skipped:
        more = f"; and {len(skipped) - _EXAMPLES:,} more" if len(skipped) > _EXAMPLES else ""
        notes.append(f"{len(skipped):,} row{'s' if len(skipped) != 1 else ''} skipped: "
                     + "; ".join(skipped[:_EXAMPLES]) + more)
    if over:
        notes.append(f"only the first {MAX_RESULT_ROWS:,} rows are compared; {over:,} more are not read "
                     "(split the file, or compare it with `python -m validation report`)")
    return frame, notes


def compare_bounded(frame: pd.DataFrame, gpu_name: str, torch_version: str | None,
                    budget_s: float = COMPARE_BUDGET_S) -> pd.DataFrame:
    """ui.gpu.compare of the rows, stopping after budget_s seconds of work: the rows left get an `error` saying so.
    Runs in the worker process (ui/offload.py) for a large file."""
    from functools import lru_cache

    from estimator.call.attention import estimate_call
    from estimator.hardware import get_gpu
    from ui.gpu import compare

    deadline = time.monotonic() + budget_s
    return compare(frame, get_gpu(gpu_name), torch_version, estimate=lru_cache(maxsize=4096)(estimate_call),
                   should_stop=lambda: time.monotonic() > deadline)
