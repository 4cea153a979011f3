"""`python -m estimator predict IN.csv -o OUT.csv --gpu NAME [--torch VERSION]` (contract §2).

Rows are validated column-wise; a malformed row gets a one-line `error` and empty predictions and
never stops the others. Extra input columns are copied through untouched. The file is streamed in chunks of
CHUNK_ROWS rows (memory does not grow with the number of rows); a file that cannot be a case list (no header,
duplicate or missing columns, a line longer than MAX_LINE_CHARS) is a one-line error and exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from collections import deque
from collections.abc import Iterator

import numpy as np
import pandas as pd

from estimator.call import backends
from estimator.call.table import check_columns, predict_frame
from estimator.files import atomic_output, refuse_same_file
from estimator.hardware import get_gpu

CHUNK_ROWS = 50_000
MAX_FIELD_CHARS = 131_072  # a longer cell makes its row an error (Python's csv default limit)
MAX_LINE_CHARS = 1 << 24  # a longer physical line (or an endless file such as /dev/zero) stops the file
_UNDECODABLE = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, kept by surrogateescape


class _Lines:
    """Physical lines of the file, none longer than MAX_LINE_CHARS (readline with a limit: an endless line stops
    there), each with its line number; `taken` holds the lines of the record being read, and lines can be
    pushed back (the lines a stray quote swallowed are read again as rows)."""

    def __init__(self, fh, source: str):
        self.fh, self.source = fh, source
        self.number = 0
        self.pending: deque[tuple[int, str]] = deque()
        self.taken: list[tuple[int, str]] = []
        self.first_of_batch = 1

    def __iter__(self):
        return self

    def _read(self) -> tuple[int, str] | None:
        if self.pending:
            number, line = self.pending.popleft()
            self.number = max(self.number, number)  # a line of a pushed-back batch is read now
        else:
            line = self.fh.readline(MAX_LINE_CHARS)
            if not line:
                return None
            self.number += 1
            number = self.number
        if len(line) >= MAX_LINE_CHARS and not line.endswith("\n"):
            raise ValueError(f"{self.source}: line {number} is longer than {MAX_LINE_CHARS:,} characters")
        return number, line

    def batch(self, n: int) -> tuple[list[str], bool]:
        """Up to n more physical lines straight from the file (none may be pending), and whether they are plain:
        the batch stops early, not plain, at a line longer than MAX_FIELD_CHARS (so it holds at most about n times
        that); push_back() returns its lines to be read one by one."""
        out = []
        readline = self.fh.readline
        plain = True
        for _ in range(n):
            line = readline(MAX_LINE_CHARS)
            if not line:
                break
            out.append(line)
            if len(line) > MAX_FIELD_CHARS:
                plain = False
                break
        self.first_of_batch = self.number + 1
        return out, plain

    def took(self, batch: list[str]) -> None:
        """The lines of the last batch() were read as rows."""
        self.number += len(batch)

    def push_back(self, batch: list[str]) -> None:
        """The lines of the last batch(), to be read one by one (the careful reader)."""
        self.pending.extend(enumerate(batch, start=self.first_of_batch))

    def __next__(self) -> str:
        item = self._read()
        if item is None:
            raise StopIteration
        self.taken.append(item)
        return item[1]

def _stray_quote(text: str) -> bool:
    """A record's text that a strict reader refuses: a quote left open to the end of the file, or a quote that
    closes where no field ends (`"auto,...` on one line closed by the `"` of a later quoted cell). A quoted cell
    that holds a line break (written by any CSV writer) reads strictly without fault."""
    try:
        for _ in csv.reader(io.StringIO(text, newline=""), strict=True):
            pass
    except csv.Error:
        return True
    return False


def _row_error(cells: list[str], width: int, record: int) -> str:
    if _UNDECODABLE.search("".join(cells)):
        return f"row {record}: not UTF-8 text"
    if len(cells) != width:
        return f"row {record}: expected {width} fields, got {len(cells)}"
    if any(len(cell) > MAX_FIELD_CHARS for cell in cells):
        return f"row {record}: a field is longer than {MAX_FIELD_CHARS:,} characters"
    return ""


def _clean(cell: str) -> str:
    """A cell that held non-UTF-8 bytes, with those bytes shown as U+FFFD (the output is UTF-8)."""
    return cell.encode("utf-8", "surrogateescape").decode("utf-8", "replace") if _UNDECODABLE.search(cell) else cell


def _plain_frame(batch: list[str], header: list[str]) -> pd.DataFrame | None:
    """The frame of a batch of lines that every reader reads alike, parsed by pyarrow's CSV reader (C++, as
    pandas' own read_csv with engine="pyarrow"), or None where the line-by-line reader must decide: a quote
    (quoted cells, stray quotes), a NUL, a carriage return that does not end a line with its line feed, a blank
    line (skipped, but counted in row numbers), bytes that are not UTF-8 or a field count other than the
    header's (pyarrow refuses the batch). Every cell is text, as the line-by-line reader gives it."""
    try:
        import pyarrow as pa
        from pyarrow import csv as pacsv
    except ImportError:  # pragma: no cover - pyarrow is in requirements.txt
        return None
    text = "".join(batch)
    if not text or '"' in text or "\x00" in text or text.count("\r") != text.count("\r\n"):
        return None
    if text[0] in "\r\n" or "\n\n" in text or "\n\r\n" in text:
        return None
    if not text.isascii() and _UNDECODABLE.search(text):
        return None
    try:
        table = pacsv.read_csv(
            io.BytesIO(text.encode("utf-8")),
            read_options=pacsv.ReadOptions(column_names=header, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(newlines_in_values=False),
            convert_options=pacsv.ConvertOptions(column_types={name: pa.string() for name in header},
                                                 strings_can_be_null=False, quoted_strings_can_be_null=False))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != len(batch):
        return None
    return table.to_pandas()


def read_csv_chunks(path, chunk_rows: int = CHUNK_ROWS) -> tuple[list[str], Iterator[tuple[pd.DataFrame,
                                                                                          np.ndarray]]]:
    """The header, and an iterator of (frame of text cells, per-row reader errors) of at most chunk_rows rows.
    The header is checked at once (ValueError, one line); rows the reader garbles (wrong field count, bytes that
    are not UTF-8, an over-long field) get an error of their own. A UTF-8 BOM is dropped."""
    fh = open(path, encoding="utf-8-sig", errors="surrogateescape", newline="")  # noqa: SIM115 - closed by rows()
    lines = _Lines(fh, "input CSV")
    previous = csv.field_size_limit()
    try:
        csv.field_size_limit(MAX_LINE_CHARS)
        reader = csv.reader(lines)
        header = next(reader, None)
    except csv.Error as exc:
        fh.close()
        raise ValueError(f"input CSV: unreadable header ({exc})") from None
    except BaseException:
        fh.close()
        raise
    finally:
        csv.field_size_limit(previous)
    if not header:
        fh.close()
        raise ValueError("input CSV: empty file (no header row)")
    if _UNDECODABLE.search("".join(header)):
        fh.close()
        raise ValueError("input CSV: the header row is not UTF-8 text")
    try:
        check_columns(header)
    except ValueError:
        fh.close()
        raise
    width = len(header)
    record = 1  # records read so far, the header included (row numbers in error messages)

    def records() -> Iterator[tuple[list[str], str]]:
        """(cells, reader error) per record. A record that spans several lines and reads wrongly under a strict
        reader (_stray_quote), or whose field outgrows the size limit, holds a stray quote: its first line is an
        error row that says so, and the lines it swallowed are read again as rows."""
        nonlocal reader, record
        while True:
            lines.taken = []
            try:
                raw = next(reader, None)
            except csv.Error as exc:  # a field past the size limit: a stray quote swallowing the file, or garbage
                if len(lines.taken) < 2:
                    raise ValueError(f"input CSV: unreadable at line {lines.number} ({exc})") from None
                raw = None
                stray = True
            else:
                if raw is None:
                    return
                stray = len(lines.taken) > 1 and _stray_quote("".join(t for _, t in lines.taken))
            record += 1
            if stray:
                first, text = lines.taken[0]
                lines.pending.extendleft(reversed(lines.taken[1:]))
                reader = csv.reader(lines)  # a fresh parser state for the lines pushed back
                cells = [_clean(c)[:MAX_FIELD_CHARS] for c in next(csv.reader([text.replace('"', "")]), [])]
                yield cells, (f"row {record} (line {first}): unbalanced quote (a field opened with \" on this line "
                              "is not closed on it); the lines after it are read as rows")
                continue
            if not raw:
                continue  # a blank line is no row (as pyarrow's reader and pandas skip it)
            error = _row_error(raw, width, record)
            if error:
                raw = [_clean(c)[:MAX_FIELD_CHARS] for c in raw]
            yield raw, error

    def rows() -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
        """Chunks of chunk_rows rows (the last shorter). A chunk of plain lines (_plain_frame) is parsed at once;
        any other goes through records() line by line, which gives the same cells."""
        nonlocal record
        previous = csv.field_size_limit()
        yielded = False
        source = records()
        try:
            csv.field_size_limit(MAX_LINE_CHARS)
            while True:
                if not lines.pending:
                    batch, plain = lines.batch(chunk_rows)
                    frame = _plain_frame(batch, header) if plain else None
                    if frame is not None:
                        record += len(batch)
                        lines.took(batch)
                        yielded = True
                        yield frame, np.full(len(batch), "", dtype=object)
                        if len(batch) < chunk_rows:
                            return
                        continue
                    lines.push_back(batch)
                cells, errors = [], []
                for raw, error in source:
                    cells.append((raw + [""] * width)[:width])
                    errors.append(error)
                    if len(cells) >= chunk_rows:
                        break
                if not cells and yielded:
                    return
                yielded = True
                yield pd.DataFrame(cells, columns=header, dtype=object), np.asarray(errors, dtype=object)
                if len(cells) < chunk_rows:
                    return
        finally:
            csv.field_size_limit(previous)
            fh.close()

    return header, rows()


def _csv_bytes(df: pd.DataFrame, header: bool) -> bytes:
    """One chunk as CSV bytes, LF line ends throughout: pyarrow's writer when available (unquoted, or quoted
    throughout if any value holds a comma, quote or newline), pandas' otherwise."""
    buffer = io.StringIO()
    if header:
        csv.writer(buffer, lineterminator="\n").writerow(df.columns)  # pyarrow would quote every header name
    head = buffer.getvalue().encode("utf-8")
    try:
        import pyarrow as pa
        from pyarrow import csv as pacsv
    except ImportError:
        return head + df.to_csv(index=False, header=False, lineterminator="\n").encode("utf-8")
    table = pa.Table.from_pandas(df, preserve_index=False)
    for quoting in ("none", "needed"):
        sink = io.BytesIO()
        try:
            pacsv.write_csv(table, sink, write_options=pacsv.WriteOptions(include_header=False,
                                                                          quoting_style=quoting))
        except pa.ArrowInvalid:
            continue
        return head + sink.getvalue()
    raise ValueError("output: a value cannot be written as CSV")  # pragma: no cover - "needed" quotes anything


def error_column(header) -> str:
    """The column predict writes its row errors to: `error` (contract §2), or, when the input has a column of
    that name already (a validation run's output, say), `predict_error` (then `predict_error_2`, ...), so the
    user's own column is copied through untouched like every other extra column."""
    if "error" not in header:
        return "error"
    name, n = "predict_error", 2
    while name in header:
        name, n = f"predict_error_{n}", n + 1
    return name


def predict_file(src, dst, gpu: str, torch_version: str = backends.DEFAULT_TORCH,
                 chunk_rows: int = CHUNK_ROWS, note=None) -> int:
    """Stream src through predict_frame into dst, chunk by chunk; returns the number of rows. dst is written
    through a temporary file renamed when every row is written (estimator/files.py), so a failure leaves an
    earlier dst as it was; dst being src (also through a link) is refused."""
    get_gpu(gpu)
    torch_version = backends.check_torch_version(torch_version)
    refuse_same_file(dst, [src], "-o")
    header, chunks = read_csv_chunks(src, chunk_rows)
    ours = error_column(header)
    kept = None
    if ours != "error":
        kept = "\x00error"  # the user's column, renamed while predict_frame writes its own `error`
        if note is not None:
            note(f"the input has its own `error` column (copied through); predict's row errors are in `{ours}`")
    rows = 0
    try:
        with atomic_output(dst, "-o", "wb") as out:
            first = next(chunks)  # always one, an empty frame for a file with no rows
            second = next(chunks, None)
            # One chunk: an error column only when a row has an error (as ever). Several: always, so that every
            # chunk writes the same columns.
            several = second is not None

            def all_chunks():
                yield first
                if several:
                    yield second
                    yield from chunks

            for df, errors in all_chunks():
                if kept:
                    df = df.rename(columns={"error": kept})
                result = predict_frame(df, gpu, torch_version, row_errors=errors)
                if several and "error" not in result.columns:
                    result["error"] = ""
                if kept:
                    result = result.rename(columns={"error": ours}).rename(columns={kept: "error"})
                out.write(_csv_bytes(result, header=rows == 0))
                rows += len(df)
    finally:
        chunks.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m estimator predict", description=__doc__.splitlines()[0])
    parser.add_argument("input", help="CSV with contract §2 columns")
    parser.add_argument("-o", "--output", required=True, help="where to write the predictions CSV")
    parser.add_argument("--gpu", required=True, help="catalog name, e.g. h200, h100-sxm, a100-80gb")
    parser.add_argument("--torch", default=backends.DEFAULT_TORCH, help="PyTorch version modelled (2.11, 2.13)")
    args = parser.parse_args(argv)
    try:
        predict_file(args.input, args.output, args.gpu, args.torch,
                     note=lambda text: print(f"note: {text}", file=sys.stderr))
    except ValueError as exc:
        print(f"error: {(str(exc).splitlines() or ['invalid input'])[0]}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = exc.filename or args.output
        print(f"error: {where}: {exc.strerror or str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    return 0
