"""Plan from a production trace: a CSV of per-request sequence lengths gives the budget and decode latency at
P50, P90 and P99 of n, and the share of requests that fit (plan from the production
distribution of n; the SLA is the P99 decode latency).

Accepted files: a header row with a column named `seq_len`, `n` or `tokens` (case-insensitive), or a file with
a single column (header optional). Percentiles use the nearest-rank definition: P_p = the smallest length with
at least p % of the requests at or below it (an observed length, never interpolated).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import replace
from pathlib import Path

from estimator.call.config import MAX_SEQ_LEN
from estimator.model.budget import budget
from estimator.model.inputs import PlanInputs
from estimator.textfile import MAX_TRACE_BYTES, read_text_limited

COLUMNS = ("seq_len", "n", "tokens")
PERCENTILES = (50, 90, 99)
MAX_BAD_SHARE = 0.10  # more than one malformed row and more than this share: the file is refused


def parse_trace(text: str, source: str = "trace") -> tuple[list[int], list[str]]:
    """Lengths and one message per skipped row. ValueError (one line) for a file that is not a trace."""
    rows = [r for r in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in r)]
    if not rows:
        raise ValueError(f"{source}: empty file, expected a column of sequence lengths")
    header = [c.strip().lower() for c in rows[0]]
    column = next((header.index(name) for name in COLUMNS if name in header), None)
    body = rows[1:]
    if column is None:
        if len(header) != 1:
            raise ValueError(f"{source}: no column named {', '.join(COLUMNS)} among {', '.join(rows[0])}")
        column = 0
        if _length(rows[0][0]) is not None:  # no header: the first row is data
            body = rows
    lengths, skipped = [], []
    first_line = 1 if body is rows else 2
    for line, row in enumerate(body, start=first_line):
        value = _length(row[column]) if column < len(row) else None
        if value is None:
            cell = row[column] if column < len(row) else ""
            skipped.append(f"line {line}: {cell!r} is not a positive whole number of tokens up to {MAX_SEQ_LEN:,}")
        else:
            lengths.append(value)
    if not lengths:
        raise ValueError(f"{source}: no valid sequence lengths ({skipped[0] if skipped else 'no data rows'})")
    if len(skipped) > 1 and len(skipped) > MAX_BAD_SHARE * (len(lengths) + len(skipped)):
        raise ValueError(f"{source}: {len(skipped)} of {len(lengths) + len(skipped)} rows are malformed, "
                         f"first {skipped[0]}")
    return lengths, skipped


def _length(cell: str) -> int | None:
    try:
        value = float(cell.strip())
    except ValueError:
        return None
    if value != value or not value.is_integer() or not 1 <= value <= MAX_SEQ_LEN:
        return None
    return int(value)


def load_trace(path) -> tuple[list[int], list[str]]:
    """Read a trace file (at most MAX_TRACE_BYTES, checked before parsing); ValueError naming the file on a
    missing, unreadable, oversized or malformed file."""
    path = Path(path)
    text = read_text_limited(path, MAX_TRACE_BYTES, "trace")
    return parse_trace(text, source=f"trace {path.name}")


def nearest_rank(sorted_values: list[int], percent: float) -> int:
    """Nearest-rank percentile: sorted_values[ceil(p/100 · N) - 1]."""
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def trace_report(inputs: PlanInputs, trace: tuple[list[int], list[str]] | list[int]) -> dict:
    """Budget and decode latency at P50/P90/P99 of n (at inputs.batch concurrent sequences) and the share of
    requests whose n fits. Lengths below cp are planned at cp."""
    lengths, skipped = trace if isinstance(trace, tuple) else (list(trace), [])
    ordered = sorted(lengths)
    from estimator.model.solve import max_seq_len

    limit = max_seq_len(inputs)
    points = {}
    for p in PERCENTILES:
        n = nearest_rank(ordered, p)
        plan = budget(replace(inputs, seq_len=max(n, inputs.cp)))
        points[f"p{p}"] = {"seq_len": n, "total_bytes": plan.total_bytes, "kv_cache_bytes": plan.kv_cache_bytes,
                           "fits": plan.fits, "prefill_time_ms": plan.prefill_time_ms,
                           "decode_time_ms_per_token": plan.decode_time_ms_per_token}
    fitting = sum(1 for n in lengths if n <= limit)
    return {"requests": len(lengths), "skipped_rows": len(skipped), "skipped_examples": skipped[:3],
            "min_seq_len": ordered[0], "max_seq_len_seen": ordered[-1], "percentiles": points,
            "max_seq_len_that_fits": limit, "share_that_fit": fitting / len(lengths),
            "sla_p99_decode_time_ms_per_token": points["p99"]["decode_time_ms_per_token"],
            "percentile_method": "nearest rank"}


def format_trace(report: dict) -> str:
    lines = [f"production trace: {report['requests']:,} requests (skipped {report['skipped_rows']} malformed rows), "
             f"n from {report['min_seq_len']:,} to {report['max_seq_len_seen']:,}"]
    for name, point in report["percentiles"].items():
        decode = point["decode_time_ms_per_token"]
        decode_text = "-" if decode is None else f"{decode:,.3f} ms/token"
        lines.append(f"  {name.upper():<4} n={point['seq_len']:>9,}  total {point['total_bytes'] / 2**30:8.2f} GiB  "
                     f"{'fits' if point['fits'] else 'DOES NOT FIT':<12}  decode {decode_text}")
    lines.append(f"  {report['share_that_fit']:.1%} of requests fit (n <= {report['max_seq_len_that_fits']:,} "
                 "at this batch)")
    return "\n".join(lines)
