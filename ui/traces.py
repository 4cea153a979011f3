"""Production traces: sequence lengths from a CSV → the plan at the P50/P90/P99 lengths (seed 000: size the
budget and the P99 decode latency from the production distribution of n, not a lab-fixed n).

Pure functions: no Streamlit. A malformed row is counted and skipped, never fatal.
"""

from __future__ import annotations

import dataclasses
import io
import math

import pandas as pd

from estimator.config import MAX_SEQ_LEN

LENGTH_COLUMNS = ("seq_len", "n", "length", "tokens", "num_tokens", "prompt_tokens", "input_tokens", "total_tokens")
PERCENTILES = (50, 90, 99)
MAX_ROWS = 1_000_000


@dataclasses.dataclass(frozen=True, kw_only=True)
class Lengths:
    values: tuple[int, ...]
    column: str
    skipped_rows: int


def read_lengths(data: bytes | str) -> Lengths:
    """Sequence lengths from a CSV: the first column named like a length (seq_len, n, tokens, ...), or the only
    column. Rows that are not whole numbers in [1, MAX_SEQ_LEN] are skipped and counted. ValueError if none
    is usable."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    if not text.strip():
        raise ValueError("trace: the file is empty")
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, nrows=MAX_ROWS, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"trace: not a readable CSV ({str(exc).splitlines()[0]})") from None
    columns = {str(c).strip().lower(): c for c in frame.columns}
    column = next((columns[name] for name in LENGTH_COLUMNS if name in columns), None)
    if column is None:
        if len(frame.columns) != 1:
            raise ValueError(f"trace: no sequence-length column; name one of {', '.join(LENGTH_COLUMNS)}")
        column = frame.columns[0]
        if _as_length(column) is not None:  # a headerless single column: its first value became the header
            frame = pd.concat([pd.DataFrame({column: [column]}), frame], ignore_index=True)
    good = [n for n in (_as_length(v) for v in frame[column]) if n is not None]
    if not good:
        raise ValueError(f"trace: column {str(column)!r} has no positive whole-number lengths")
    return Lengths(values=tuple(good), column=str(column), skipped_rows=len(frame) - len(good))


def _as_length(value) -> int | None:
    try:
        number = float(str(value).strip())
    except ValueError:
        return None
    if math.isnan(number) or not number.is_integer() or not 1 <= number <= MAX_SEQ_LEN:
        return None
    return int(number)


def percentile_lengths(lengths: tuple[int, ...], percentiles=PERCENTILES) -> dict[int, int]:
    """Nearest-rank percentiles (a length that occurs in the trace, rounded up): P = ceil(p/100·N)-th smallest."""
    ordered = sorted(lengths)
    return {p: ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1] for p in percentiles}


def percentile_plans(inputs, lengths: tuple[int, ...], percentiles=PERCENTILES) -> pd.DataFrame:
    """The plan at each percentile's n: bytes per GPU, fit, prefill time and decode latency per token."""
    from estimator.plan import make_plan

    rows = []
    for p, n in percentile_lengths(lengths, percentiles).items():
        plan = make_plan(dataclasses.replace(inputs, seq_len=n)).to_dict()
        rows.append({"percentile": f"P{p}", "n": n, "total_bytes": int(plan["total_bytes"]),
                     "kv_cache_bytes": int(plan["kv_cache_bytes"]), "fits": bool(plan["fits"]),
                     "prefill_time_ms": float(plan["prefill_time_ms"]),
                     "decode_time_ms_per_token": _float_or_none(plan.get("decode_time_ms_per_token"))})
    return pd.DataFrame(rows)


def _float_or_none(value) -> float | None:
    return None if value is None else float(value)
