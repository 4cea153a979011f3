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
    lengths, skipped = load_trace(DATA / "trace.csv")  # 100 requests: 100, 200, ..., 10000 shuffled
    assert sorted(lengths) == [100 * i for i in range(1, 101)] and skipped == []


def test_single_column_without_header():
    lengths, _ = load_trace(DATA / "trace_single_column.txt")
    assert len(lengths) == 100 and max(lengths) == 10000


@pytest.mark.parametrize("header", ["seq_len", "N", "Tokens"])
def test_accepted_column_names(header):
    assert parse_trace(f"id,{header}\na,5\nb,7\n")[0] == [5, 7]


def test_nearest_rank():
    values = [100 * i for i in range(1, 101)]
    assert (nearest_rank(values, 50), nearest_rank(values, 90), nearest_rank(values, 99)) == (5000, 9000, 9900)
    assert nearest_rank([3], 99) == 3
    assert nearest_rank([1, 2, 3, 4], 50) == 2


def test_one_bad_row_is_skipped_and_reported():
    lengths, skipped = parse_trace("tokens\n" + "\n".join(["1000"] * 20) + "\nabc\n")
    assert len(lengths) == 20 and len(skipped) == 1 and "line 22" in skipped[0]


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
