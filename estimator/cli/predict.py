"""`python -m estimator predict IN.csv -o OUT.csv --gpu NAME [--torch VERSION]` (contract §2).

Rows are validated column-wise; a malformed row gets a one-line `error` and empty predictions and
never stops the others. Extra input columns are copied through untouched.
"""

from __future__ import annotations

import argparse
import csv
import sys

import pandas as pd

from estimator.call import backends
from estimator.call.table import ROW_ERROR, predict_frame
from estimator.hardware import get_gpu


def read_csv_text(path) -> pd.DataFrame:
    """Every column as text, nothing turned into NaN (so extra columns go back out untouched).
    pyarrow's reader when available (several times faster on 100k rows); Python's csv module when a row
    has the wrong number of fields, so that only that row gets an error."""
    with open(path, newline="") as fh:
        header = next(csv.reader(fh), None)
    if not header:
        raise ValueError("input CSV: empty file (no header row)")
    try:
        import pyarrow as pa
        from pyarrow import csv as pacsv
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            column_types={name: pa.string() for name in header}, strings_can_be_null=False, null_values=[]))
        return table.to_pandas()
    except ImportError:
        pass
    except pa.ArrowInvalid:
        pass
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    width = len(header)
    errors = [f"row {i + 2}: expected {width} fields, got {len(r)}" if len(r) != width else ""
              for i, r in enumerate(rows)]
    df = pd.DataFrame([(r + [""] * width)[:width] for r in rows], columns=header, dtype=object)
    if any(errors):
        df[ROW_ERROR] = errors
    return df


def write_csv(df: pd.DataFrame, path) -> None:
    """pyarrow's writer when available (unquoted, or quoted throughout if any value holds a comma,
    quote or newline), pandas' otherwise."""
    try:
        import pyarrow as pa
        from pyarrow import csv as pacsv
    except ImportError:
        df.to_csv(path, index=False)
        return
    table = pa.Table.from_pandas(df, preserve_index=False)
    for quoting in ("none", "needed"):
        try:
            with open(path, "w", newline="") as fh:
                csv.writer(fh).writerow(df.columns)  # pyarrow would quote every header name
            with open(path, "ab") as fh:
                pacsv.write_csv(table, fh, write_options=pacsv.WriteOptions(include_header=False,
                                                                            quoting_style=quoting))
            return
        except pa.ArrowInvalid:
            continue


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m estimator predict", description=__doc__.splitlines()[0])
    parser.add_argument("input", help="CSV with contract §2 columns")
    parser.add_argument("-o", "--output", required=True, help="where to write the predictions CSV")
    parser.add_argument("--gpu", required=True, help="catalog name, e.g. h200, h100-sxm, a100-80gb")
    parser.add_argument("--torch", default=backends.DEFAULT_TORCH, help="PyTorch version modelled (2.11, 2.13)")
    args = parser.parse_args(argv)
    try:
        get_gpu(args.gpu)
        backends.check_torch_version(args.torch)
        df = read_csv_text(args.input)
        result = predict_frame(df, args.gpu, args.torch)
    except (ValueError, OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    write_csv(result, args.output)
    return 0
