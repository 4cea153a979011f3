"""Production traces: file formats, nearest-rank percentiles, malformed files, and the share that fits."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from estimator.model.budget import budget
from estimator.model.inputs import PlanInputs
from estimator.model.presets import get_preset
from estimator.model.trace import load_trace, nearest_rank, parse_trace, trace_report

DATA = Path(__file__).parent / "data"


def test_named_column_among_others():
    trace = load_trace(DATA / "trace.csv")  # 100 requests: 100, 200, ..., 10000 shuffled
    assert list(trace.lengths()) == [100 * i for i in range(1, 101)] and trace.skipped_rows == 0


def test_single_column_without_header():
    trace = load_trace(DATA / "trace_single_column.txt")
    assert trace.requests == 100 and max(trace.lengths()) == 10000


@pytest.mark.parametrize("header", ["seq_len", "N", "Tokens"])
def test_accepted_column_names(header):
    assert list(parse_trace(f"id,{header}\na,5\nb,7\n").lengths()) == [5, 7]


def test_nearest_rank():
    values = [100 * i for i in range(1, 101)]
    assert (nearest_rank(values, 50), nearest_rank(values, 90), nearest_rank(values, 99)) == (5000, 9000, 9900)
    assert nearest_rank([3], 99) == 3
    assert nearest_rank([1, 2, 3, 4], 50) == 2


def test_one_bad_row_is_skipped_and_reported():
    trace = parse_trace("tokens\n" + "\n".join(["1000"] * 20) + "\nabc\n")
    assert trace.requests == 20 and trace.skipped_rows == 1 and "line 22" in trace.skipped_examples[0]


@pytest.mark.parametrize("file, message", [
    ("trace_bad_column.csv", "no column named seq_len, n, tokens among request_id, latency_ms"),
    ("trace_bad_rows.csv", "3 of 5 rows are malformed, first line 3: 'abc'"),
    ("missing.csv", "trace: file not found"),
])
def test_malformed_files_are_one_line_errors(file, message):
    with pytest.raises(ValueError, match=message) as info:
        load_trace(DATA / file)
    assert "\n" not in str(info.value)


def test_empty_file():
    with pytest.raises(ValueError, match="empty file"):
        parse_trace("\n\n")
    with pytest.raises(ValueError, match="no valid sequence lengths"):
        parse_trace("seq_len\n")


def test_report_percentiles_and_share_that_fit():
    base = PlanInputs(model=get_preset("llama-3-8b"), seq_len=1, batch=64, gpu="l40s")
    report = trace_report(base, load_trace(DATA / "trace.csv"))
    p = report["percentiles"]
    assert [p[k]["seq_len"] for k in ("p50", "p90", "p99")] == [5000, 9000, 9900]
    assert p["p99"]["total_bytes"] == budget(replace(base, seq_len=9900)).total_bytes
    assert p["p50"]["decode_time_ms_per_token"] < p["p99"]["decode_time_ms_per_token"]
    assert report["sla_p99_decode_time_ms_per_token"] == p["p99"]["decode_time_ms_per_token"]
    limit = report["max_seq_len_that_fits"]
    assert report["share_that_fit"] == sum(1 for i in range(1, 101) if 100 * i <= limit) / 100
    assert 0 < report["share_that_fit"] < 1, "the fixture is chosen so that some requests do not fit"


# --- streamed, and a bad byte or row costs that row -------------------------------------------------------------

def test_one_bad_byte_costs_one_row_said_with_its_line_number():
    data = b"seq_len\n" + b"1000\n" * 50 + b"20\xff00\n" + b"3000\n" * 49
    trace = parse_trace(data)
    assert trace.requests == 99 and trace.skipped_rows == 1
    assert trace.skipped_examples == ("line 52: not UTF-8 text (byte 3 of the line)",)


def test_streamed_in_any_chunking_the_trace_is_the_same():
    from estimator.model.trace import read_trace

    rows = "".join(f'r{i},"{100 + i % 7}"\r\n' for i in range(300))
    data = ("\ufeffid,tokens\r\n" + rows + "x,abc\r\nlast,5").encode()
    whole = parse_trace(data)
    for size in (1, 3, 17, 1000):
        parts = read_trace(data[i:i + size] for i in range(0, len(data), size))
        assert parts == whole, size
    assert whole.requests == 301 and whole.skipped_examples == ("line 302: 'abc' is not a positive whole number "
                                                                "of tokens up to 16,777,216",)


def test_the_first_skipped_rows_are_the_earliest_lines():
    from estimator.model import trace as trace_module

    rows = [b"1000"] * 400
    rows[300] = b"\xfe"  # a bad byte late in the file
    rows[10], rows[20], rows[250] = b"x", b"y", b"z"  # bad cells, one of them distinct per row
    data = b"n\n" + b"\n".join(rows) + b"\n"
    trace = trace_module.read_trace(data[i:i + 97] for i in range(0, len(data), 97))
    assert [m.split(":")[0] for m in trace.skipped_examples] == ["line 12", "line 22", "line 252"]
    assert trace.skipped_rows == 4


def test_memory_follows_the_distinct_lengths_not_the_rows():
    trace = parse_trace(b"\n".join([b"4096", b"8192"] * 500_000))
    assert trace.counts == ((4096, 500_000), (8192, 500_000))


def test_a_line_longer_than_a_row_can_be_is_refused():
    from estimator.model.trace import MAX_LINE_BYTES

    with pytest.raises(ValueError, match="line 2 is larger than"):
        parse_trace(b"seq_len\n" + b"1" * (MAX_LINE_BYTES + 10))


def test_a_named_pipe_is_refused_before_anything_is_read(tmp_path):
    """A trace path that is a named pipe would block the reader for good; it is refused by name, as every file the
    command lines read is (estimator/textfile.py open_regular)."""
    import os

    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="trace: .*trace.csv is not a regular file"):
        load_trace(fifo)
