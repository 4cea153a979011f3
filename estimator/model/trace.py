"""Plan from a production trace: a CSV of per-request sequence lengths gives the budget and decode latency at
P50, P90 and P99 of n, and the share of requests that fit (plan from the production
distribution of n; the SLA is the P99 decode latency).

Accepted files: a header row with a column named `seq_len`, `n` or `tokens` (case-insensitive), or a file with
a single column (header optional). Percentiles use the nearest-rank definition: P_p = the smallest length with
at least p % of the requests at or below it (an observed length, never interpolated).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import islice
from pathlib import Path

from estimator.call.config import MAX_SEQ_LEN
from estimator.model.budget import budget
from estimator.model.inputs import PlanInputs
from estimator.textfile import MAX_TRACE_BYTES, open_regular

COLUMNS = ("seq_len", "n", "tokens")
PERCENTILES = (50, 90, 99)
MAX_BAD_SHARE = 0.10  # more than one malformed row and more than this share: the file is refused
MAX_LINE_BYTES = 128 << 10  # a trace has one number (and a few ids) per row
CHUNK_BYTES = 4 << 20  # read and count this much at a time: memory stays flat however long the file
_EXAMPLES = 3


@dataclasses.dataclass(frozen=True, kw_only=True)
class Trace:
    """A trace as counts of each length (memory grows with the distinct lengths, not the rows), the rows
    skipped and the first few of them with their line numbers."""

    counts: tuple[tuple[int, int], ...]  # (length, requests), ascending length
    skipped_rows: int = 0
    skipped_examples: tuple[str, ...] = ()

    def __post_init__(self):
        if not self.counts:
            raise ValueError("trace: no valid sequence lengths")

    @property
    def requests(self) -> int:
        return sum(c for _, c in self.counts)

    def lengths(self) -> Iterator[int]:
        """Every request's length, ascending."""
        for length, count in self.counts:
            for _ in range(count):
                yield length


def _length(cell: str) -> int | None:
    try:
        value = float(cell.strip().strip('"').strip())
    except ValueError:
        return None
    if value != value or not value.is_integer() or not 1 <= value <= MAX_SEQ_LEN:
        return None
    return int(value)


def _bad(line: int, cell: str) -> str:
    shown = cell if len(cell) <= 40 else cell[:37] + "..."
    return f"line {line}: {shown!r} is not a positive whole number of tokens up to {MAX_SEQ_LEN:,}"


class _Reader:
    """Counts the cells of one column, a block of lines at a time; each distinct cell is parsed once (a trace of
    30 M rows has a few thousand distinct lengths), so the per-row cost is a split and a dict update in C."""

    def __init__(self, source: str):
        self.source, self.line, self.column, self.header_done = source, 0, None, False
        self.cells: Counter = Counter()
        self.skipped_rows, self.examples = 0, []

    def skip(self, line: int, message: str) -> None:
        self.skipped_rows += 1
        self.examples = sorted([*self.examples, (line, message)])[:_EXAMPLES]

    def header(self, text: str) -> bool:
        """The first non-blank line: the column's index; True when the line is data (a bare single column)."""
        cells = next(csv.reader([text]))
        names = [c.strip().lower() for c in cells]
        self.column = next((names.index(name) for name in COLUMNS if name in names), None)
        self.header_done = True
        if self.column is None:
            if len(names) != 1:
                raise ValueError(f"{self.source}: no column named {', '.join(COLUMNS)} among {', '.join(cells)}")
            self.column = 0
            return _length(cells[0]) is not None
        return False

    def cell(self, text: str) -> str | None:
        if '"' in text:
            row = next(csv.reader([text]), [])
        else:
            row = text.split(",")
        return row[self.column] if self.column < len(row) else None

    def feed(self, block: bytes) -> None:
        """Whole lines of the file, in order, joined by newlines (no carriage returns, no final newline)."""
        try:
            joined = block.decode("utf-8")
            texts: list = joined.split("\n")
        except UnicodeDecodeError:  # the rare block with a bad byte: line by line, the bad lines skipped
            joined, texts = None, []
            for i, raw in enumerate(block.split(b"\n")):
                try:
                    texts.append(raw.decode("utf-8"))
                except UnicodeDecodeError as exc:
                    texts.append(None)
                    line = self.line + i + 1
                    self.skip(line, f"line {line}: not UTF-8 text (byte {exc.start + 1} of the line)")
        first = self.line + 1
        self.line += len(texts)
        if not self.header_done:
            for i, text in enumerate(texts):
                if text is None or not text.strip():
                    continue
                data = self.header(text.lstrip("\ufeff") if first + i == 1 else text)
                texts = texts[i:] if data else texts[i + 1:]
                first += i if data else i + 1
                break
            else:
                return
        if joined is not None:
            plain = '"' not in joined and "," not in joined
        else:
            plain = not any(t is not None and ('"' in t or "," in t) for t in texts)
        fast = self.column == 0 and plain
        if fast:  # a bare column: the line is the cell, and a blank line is no row
            cells = texts
        else:  # a blank line is no row; a row without the column is malformed
            cells = [None if t is None or not t.strip() else self._cell_or_empty(t) for t in texts]
        bad = set()
        for cell, count in Counter(cells).items():
            if cell is None or (fast and not cell.strip()):
                continue
            if cell in self.cells or _length(cell) is not None:
                self.cells[cell] += count
            else:
                self.skipped_rows += count
                bad.add(cell)
        if bad and len(self.examples) < _EXAMPLES:  # the block's first bad rows, in line order (one pass)
            found = islice(((first + i, c) for i, c in enumerate(cells) if c in bad), _EXAMPLES)
            self.examples = sorted(self.examples + [(line, _bad(line, c)) for line, c in found])
            del self.examples[_EXAMPLES:]

    def _cell_or_empty(self, text: str) -> str:
        cell = self.cell(text)
        return "" if cell is None else cell

    def trace(self) -> Trace:
        counts: Counter = Counter()
        for cell, count in self.cells.items():
            counts[_length(cell)] += count
        examples = [message for _, message in self.examples]
        if not counts:
            if not self.header_done:
                raise ValueError(f"{self.source}: empty file, expected a column of sequence lengths")
            first = examples[0] if examples else "no data rows"
            raise ValueError(f"{self.source}: no valid sequence lengths ({first})")
        total = sum(counts.values()) + self.skipped_rows
        if self.skipped_rows > 1 and self.skipped_rows > MAX_BAD_SHARE * total:
            raise ValueError(f"{self.source}: {self.skipped_rows} of {total} rows are malformed, first {examples[0]}")
        return Trace(counts=tuple(sorted(counts.items())), skipped_rows=self.skipped_rows,
                     skipped_examples=tuple(examples))


def read_trace(chunks: Iterable[bytes], source: str = "trace", max_bytes: int = MAX_TRACE_BYTES) -> Trace:
    """A trace from its bytes, streamed block by block: a line that is not UTF-8 or not a length costs that row,
    said with its line number; ValueError (one line) for a file that is not a trace, larger than max_bytes or
    with a line over MAX_LINE_BYTES."""
    reader, rest, total = _Reader(source), b"", 0
    for chunk in chunks:
        total += len(chunk)
        if total > max_bytes:
            raise ValueError(f"{source} is larger than {max_bytes:,} bytes; not a trace file")
        block = rest + chunk
        cut = block.rfind(b"\n")
        if cut < 0:
            rest = block
        else:
            rest = block[cut + 1:]
            reader.feed(block[:cut].replace(b"\r", b""))
        if len(rest) > MAX_LINE_BYTES:
            raise ValueError(f"{source}: line {reader.line + 1} is larger than {MAX_LINE_BYTES:,} bytes; "
                             "a trace has one number per row")
    if rest:
        reader.feed(rest.replace(b"\r", b""))
    return reader.trace()


def _blocks(data: bytes) -> Iterator[bytes]:
    for start in range(0, len(data), CHUNK_BYTES):
        yield data[start:start + CHUNK_BYTES]


def parse_trace(data: bytes | str, source: str = "trace") -> Trace:
    """A trace from its whole content (an upload's bytes; text is encoded first)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return read_trace(_blocks(data), source)


def load_trace(path) -> Trace:
    """Read a trace file, streamed (at most MAX_TRACE_BYTES, a regular file's size checked before reading);
    ValueError naming the file on a missing, unreadable, oversized or malformed file."""
    path = Path(path)
    with open_regular(path, "trace") as fh:  # missing, a folder, a pipe or a device: one line naming the file
        if os.fstat(fh.fileno()).st_size > MAX_TRACE_BYTES:
            raise ValueError(f"trace: {path} is larger than {MAX_TRACE_BYTES:,} bytes; not a trace file")
        return read_trace(iter(lambda: fh.read(CHUNK_BYTES), b""), f"trace {path.name}")


def nearest_rank(sorted_values: list[int], percent: float) -> int:
    """Nearest-rank percentile: sorted_values[ceil(p/100 · N) - 1]."""
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def trace_report(inputs: PlanInputs, trace: Trace | list[int]) -> dict:
    """Budget and decode latency at P50/P90/P99 of n (at inputs.batch concurrent sequences) and the share of
    requests whose n fits. Lengths below cp are planned at cp."""
    if not isinstance(trace, Trace):
        trace = Trace(counts=tuple(sorted(Counter(trace).items())))
    from estimator.model.solve import max_seq_len

    limit = max_seq_len(inputs)
    requests = trace.requests
    points = {}
    for p in PERCENTILES:
        n = _nearest_rank_counts(trace.counts, requests, p)
        plan = budget(replace(inputs, seq_len=max(n, inputs.cp)))
        points[f"p{p}"] = {"seq_len": n, "total_bytes": plan.total_bytes, "kv_cache_bytes": plan.kv_cache_bytes,
                           "fits": plan.fits, "prefill_time_ms": plan.prefill_time_ms,
                           "decode_time_ms_per_token": plan.decode_time_ms_per_token}
    fitting = sum(c for n, c in trace.counts if n <= limit)
    return {"requests": requests, "skipped_rows": trace.skipped_rows,
            "skipped_examples": list(trace.skipped_examples),
            "min_seq_len": trace.counts[0][0], "max_seq_len_seen": trace.counts[-1][0], "percentiles": points,
            "max_seq_len_that_fits": limit, "share_that_fit": fitting / requests,
            "sla_p99_decode_time_ms_per_token": points["p99"]["decode_time_ms_per_token"],
            "percentile_method": "nearest rank"}


def _nearest_rank_counts(counts: tuple[tuple[int, int], ...], requests: int, percent: float) -> int:
    """nearest_rank over the expanded lengths, from the counts: the first length whose running count reaches
    ceil(p/100 · N)."""
    rank, seen = max(1, math.ceil(percent / 100 * requests)), 0
    for length, count in counts:
        seen += count
        if seen >= rank:
            return length
    return counts[-1][0]


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
