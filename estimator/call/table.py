"""Many attention calls at once: a table of calls (contract §2 columns) in, the estimator's columns out.
Rows are validated column-wise; a malformed row gets a one-line `error` and empty predictions and never stops
the others. Extra input columns are copied through untouched."""

from __future__ import annotations

import numpy as np
import pandas as pd

from estimator.call import backends
from estimator.call.attention import estimate_columns
from estimator.call.config import (
    CALL_COLUMNS,
    DTYPE_ALIASES,
    DTYPE_BITS,
    MAX_ELEMENTS,
    MODES,
    SIZE_LIMITS,
    STRUCTURED_MASKS,
    parse_mask,
)
from estimator.call.registry import BACKENDS
from estimator.call.shapes import Calls
from estimator.hardware import get_gpu

INT_FIELDS = SIZE_LIMITS
REQUIRED = CALL_COLUMNS
OUTPUTS = ("supported", "selected_backend", "peak_extra_bytes", "fits", "flops", "time_ms")


class _Errors:
    def __init__(self, n: int) -> None:
        self.msg = np.full(n, "", dtype=object)
        self.clear = np.ones(n, dtype=bool)  # msg == "" (kept beside it: no string compare per check)

    def add(self, bad, text) -> None:
        bad = np.asarray(bad, dtype=bool) & self.clear
        if np.any(bad):
            self.msg[bad] = text if isinstance(text, str) else np.asarray(text, dtype=object)[bad]
            self.clear[bad] = self.msg[bad] == ""


def _plain_integers(series: pd.Series) -> np.ndarray | None:
    """A text column held by pyarrow (predict's reader) whose every cell is 1-15 ASCII digits, as floats (exact:
    below 2**53), converted by pyarrow; None for any other column."""
    if not (isinstance(series.dtype, pd.StringDtype) and series.dtype.storage == "pyarrow"):
        return None
    import pyarrow as pa
    import pyarrow.compute as pc

    cells = pa.array(series.array)
    # ^[0-9]{1,15}$ without a regex: non-empty ASCII decimal digits only, at most 15 bytes
    plain = pc.and_(pc.ascii_is_decimal(cells), pc.less_equal(pc.binary_length(cells), 15))
    if len(cells) == 0 or pc.all(plain, skip_nulls=False).as_py() is not True:
        return None
    return pc.cast(cells, pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64)


def _numeric(series: pd.Series) -> np.ndarray:
    """Floats from a column of strings; plain integers through pyarrow, else numpy's parser (fast), pandas'
    coercion if any is malformed."""
    plain = _plain_integers(series)
    if plain is not None:
        return plain
    try:
        return series.to_numpy(dtype=object).astype(np.float64)
    except (ValueError, TypeError):
        return pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)


class _Text:
    """A text column as codes into its distinct values (a column of calls holds few): each test runs once per
    distinct value, in Python, and is mapped back to the rows by the codes."""

    def __init__(self, series: pd.Series) -> None:
        codes, distinct = series.factorize(use_na_sentinel=False)
        self.codes, self.distinct = codes, np.asarray(distinct, dtype=object)

    @property
    def values(self) -> np.ndarray:
        return self.distinct[self.codes]

    def where(self, test) -> np.ndarray:
        return np.array([bool(test(v)) for v in self.distinct], dtype=bool)[self.codes]

    def isin(self, allowed) -> np.ndarray:
        allowed = tuple(allowed)
        return self.where(lambda v: v in allowed)

    def eq(self, text: str) -> np.ndarray:
        return self.where(lambda v: v == text)


def _text(df: pd.DataFrame, col: str) -> _Text:
    return _Text(df[col].astype(str).str.strip().str.lower())


def check_columns(columns) -> None:
    """ValueError (one line) for a header that lacks a call column or names one twice."""
    columns = list(columns)
    dupes = sorted({c for c in columns if columns.count(c) > 1})
    if dupes:
        raise ValueError(f"input CSV: duplicate column name(s) {', '.join(map(str, dupes))}")
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        raise ValueError(f"input CSV: missing column(s) {', '.join(missing)}")


def calls_from_frame(df: pd.DataFrame) -> tuple[Calls, np.ndarray, np.ndarray]:
    """Columns → (Calls, backend column, error messages). Bad rows get placeholder sizes of 1."""
    n = len(df)
    errors = _Errors(n)
    check_columns(df.columns)
    ints = {}
    for field, limit in INT_FIELDS.items():
        raw = _numeric(df[field])
        bad_num = ~np.isfinite(raw) | (raw != np.floor(raw))
        if bad_num.any():
            shown = df[field].astype(str).to_numpy(dtype=object)
            errors.add(bad_num, np.array([f"{field}: expected a positive integer, got {v!r}" for v in shown]))
        errors.add(~bad_num & (raw < 1), f"{field}: must be at least 1")
        errors.add(~bad_num & (raw > limit), f"{field}: absurdly large (limit {limit:,})")
        ints[field] = np.where(bad_num | (raw < 1) | (raw > limit), 1, raw).astype(np.int64)
    errors.add(ints["q_heads"] % ints["kv_heads"] != 0, "kv_heads: q_heads must be divisible by kv_heads")
    score = ints["batch"].astype(np.float64) * ints["q_heads"] * ints["q_len"] * ints["kv_len"]
    errors.add(score > MAX_ELEMENTS, "q_len: batch·q_heads·q_len·kv_len is absurdly large")
    widest = (ints["batch"].astype(np.float64) * ints["q_heads"] * np.maximum(ints["q_len"], ints["kv_len"])
              * ints["head_dim"])
    errors.add(widest > MAX_ELEMENTS, "head_dim: batch·q_heads·seq·head_dim is absurdly large")
    dtype = _Text(df["dtype"].astype(str).str.strip().str.lower().str.removeprefix("torch.").replace(DTYPE_ALIASES))
    errors.add(~dtype.isin(DTYPE_BITS), f"dtype: unknown; expected one of {', '.join(DTYPE_BITS)}")
    backend = _text(df, "backend")
    errors.add(~backend.isin(BACKENDS), f"backend: unknown; expected one of {', '.join(BACKENDS)}")
    mask = _text(df, "mask")
    parsed = []
    for text in mask.distinct:  # few distinct spellings: parse each once
        try:
            parsed.append(parse_mask("none" if text in ("", "nan") else text))
        except ValueError:
            parsed.append(("?", 0, 1))
    kind = _Text(pd.Series([p[0] for p in parsed], dtype=object))
    kind.codes = kind.codes[mask.codes]  # the kind of each row, through its spelling
    window = np.array([p[1] for p in parsed], dtype=np.int64)[mask.codes] if n else np.zeros(0, np.int64)
    documents = np.array([p[2] for p in parsed], dtype=np.int64)[mask.codes] if n else np.ones(0, np.int64)
    errors.add(kind.eq("?"), "mask: unknown; expected none, bool, float, window:W or document:K")
    structured = kind.isin(STRUCTURED_MASKS)
    mode = _text(df, "mode")
    errors.add(~mode.isin(MODES), f"mode: unknown; expected one of {', '.join(MODES)}")
    causal_txt = _text(df, "causal")
    causal_ok = causal_txt.isin(("0", "1", "0.0", "1.0", "true", "false"))
    errors.add(~causal_ok, "causal: expected 0 or 1")
    dropout = _numeric(df["dropout"])
    errors.add(~((dropout >= 0) & (dropout < 1)), "dropout: expected a probability in [0, 1)")
    bits = np.where(dtype.eq("float32"), 32, 16).astype(np.int64)
    causal = causal_txt.isin(("1", "1.0", "true"))
    c = Calls(B=ints["batch"], Hq=ints["q_heads"], Hk=ints["kv_heads"], D=ints["head_dim"], L=ints["q_len"],
              S=ints["kv_len"], bits=bits, bf16=dtype.eq("bfloat16"),
              causal=causal & ~structured, mask_bool=kind.eq("bool") | structured,
              mask_float=kind.eq("float"), dropout=np.nan_to_num(dropout), grad=mode.eq("forward_backward"),
              W=window, docs=documents, scausal=causal & structured)
    return c, backend.values, errors.msg


def predict_frame(df: pd.DataFrame, gpu: str, torch_version: str = backends.DEFAULT_TORCH, *,
                  row_errors=None) -> pd.DataFrame:
    """Contract §2: every input column plus supported, selected_backend, peak_extra_bytes, fits, flops,
    time_ms (and error for malformed rows). `row_errors`: one message per row ('' for none) that the reader
    found (wrong field count, bad bytes); it takes precedence over the column checks. Unsupported calls have
    empty peak, flops and time (no call runs)."""
    device = get_gpu(gpu)
    torch_version = backends.check_torch_version(torch_version)
    out = df.copy()
    if len(df) == 0:
        for col in (*OUTPUTS, "error"):
            out[col] = pd.Series(dtype=object)
        return out
    c, backend, errors = calls_from_frame(df)
    if row_errors is not None:
        garbled = np.asarray(row_errors, dtype=object)
        errors = np.where(garbled != "", garbled, errors)
    cols = estimate_columns(c, np.where(errors == "", backend, "math"), device, torch_version)
    bad = errors != ""
    sup = cols["supported"] & ~bad

    def masked(values, when):
        return pd.array(np.where(when, values, None), dtype=object)

    out["supported"] = masked(np.where(cols["supported"], "true", "false"), ~bad)
    out["selected_backend"] = masked(cols["selected_backend"], ~bad)
    out["peak_extra_bytes"] = pd.array(np.where(sup, cols["peak_extra_bytes"], 0), dtype="Int64")
    out.loc[~sup, "peak_extra_bytes"] = pd.NA
    out["fits"] = masked(np.where(cols["fits"], "true", "false"), ~bad)
    flops = np.asarray(cols["flops"])
    if flops.dtype == object:  # beyond int64: exact Python ints, written as text
        out["flops"] = pd.array(np.where(sup, flops.astype(str), None), dtype=object)
    else:
        out["flops"] = pd.array(flops, dtype="Int64")
        out.loc[~sup, "flops"] = pd.NA
    out["time_ms"] = np.where(sup, np.round(cols["time_ms"], 4), np.nan)
    if bad.any() or "error" in out.columns:
        out["error"] = errors
    return out
