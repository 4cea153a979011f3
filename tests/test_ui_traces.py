"""Reading production traces: length columns found by name, bad rows counted, nearest-rank percentiles."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ui import traces  # noqa: E402


def test_named_column_and_bad_rows_skipped():
    data = b"request_id,prompt_tokens\na,100\nb,200\nc,not-a-number\nd,-5\ne,1.5\nf,300\n"
    lengths = traces.read_lengths(data)
    assert lengths.values == (100, 200, 300) and lengths.column == "prompt_tokens" and lengths.skipped_rows == 3


def test_headerless_single_column_keeps_first_value():
    assert traces.read_lengths("512\n1024\n2048\n").values == (512, 1024, 2048)


def test_errors_are_one_line_and_name_the_problem():
    for data, match in ((b"", "empty"), (b"a,b\n1,2\n", "no sequence-length column"),
                        (b"n\nx\ny\n", "no positive whole-number")):
        with pytest.raises(ValueError, match=match):
            traces.read_lengths(data)


def test_nearest_rank_percentiles():
    lengths = tuple(range(1, 101))  # 1..100
    assert traces.percentile_lengths(lengths) == {50: 50, 90: 90, 99: 99}
    assert traces.percentile_lengths((7,)) == {50: 7, 90: 7, 99: 7}
    skewed = (100,) * 98 + (5000, 100000)
    assert traces.percentile_lengths(skewed) == {50: 100, 90: 100, 99: 5000}
