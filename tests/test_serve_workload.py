"""Workloads: the CSV reader's one-line errors naming the line and the column, the synthetic generator."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimator.serve.workload import (
    Workload,
    parse_length_dist,
    parse_workload_csv,
    synthetic_workload,
)


def test_reads_columns_in_any_order_and_skips_comments():
    text = "# a trace\noutput_tokens,arrival_s,prompt_tokens,user\n10,0.0,100,a\n20,0.5,200,b\n"
    wl = parse_workload_csv(text)
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in wl.requests] == [(0.0, 100, 10), (0.5, 200, 20)]
    assert wl.total_output_tokens == 30 and wl.max_sequence_tokens == 220


@pytest.mark.parametrize("text, match", [
    ("arrival_s,prompt_tokens\n0,1\n", "missing column.*output_tokens"),
    ("arrival_s,prompt_tokens,output_tokens\n0,-5,10\n", "line 2: prompt_tokens: '-5'"),
    ("arrival_s,prompt_tokens,output_tokens\n0,100,0\n", "line 2: output_tokens"),
    ("arrival_s,prompt_tokens,output_tokens\n0,100,1.5\n", "line 2: output_tokens: expected a whole number"),
    ("arrival_s,prompt_tokens,output_tokens\n0,999999999999,10\n", "line 2: prompt_tokens: .* outside"),
    ("arrival_s,prompt_tokens,output_tokens\n1.0,100,10\n0.5,100,10\n", "line 3: arrival_s 0.5 is earlier"),
    ("arrival_s,prompt_tokens,output_tokens\n-1,100,10\n", "line 2: arrival_s"),
    ("arrival_s,prompt_tokens,output_tokens\nnan,100,10\n", "line 2: arrival_s"),
    ("arrival_s,prompt_tokens,output_tokens\nabc,100,10\n", "line 2: arrival_s: expected seconds"),
    ("arrival_s,prompt_tokens,output_tokens\n", "a header but no requests"),
    ("", "empty"),
    ("arrival_s,prompt_tokens,output_tokens\n0,100\n", "line 2: 2 cells"),
])
def test_bad_csv_is_one_line_naming_the_field(text, match):
    with pytest.raises(ValueError, match=match) as info:
        parse_workload_csv(text, source="w.csv")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("rate", [0, -1, "nan", "fast"])
def test_rate_must_be_positive(rate):
    with pytest.raises(ValueError, match="^rate: "):
        synthetic_workload(rate_per_s=rate, requests=10, prompt_tokens=100, output_tokens=10)


@pytest.mark.parametrize("spec, field", [("uniform:10:5", "prompt_tokens"), ("lognormal:100:9", "prompt_tokens"),
                                         ("gamma:1:2", "prompt_tokens"), ("0", "prompt_tokens"),
                                         ("uniform:1", "prompt_tokens")])
def test_bad_length_distributions(spec, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        synthetic_workload(rate_per_s=1, requests=10, prompt_tokens=spec, output_tokens=10)


def test_synthetic_is_deterministic_and_poisson():
    a = synthetic_workload(rate_per_s=5, requests=4000, prompt_tokens="lognormal:512:0.5",
                           output_tokens="uniform:10:20", seed=7)
    b = synthetic_workload(rate_per_s=5, requests=4000, prompt_tokens="lognormal:512:0.5",
                           output_tokens="uniform:10:20", seed=7)
    assert a == b
    c = synthetic_workload(rate_per_s=5, requests=4000, prompt_tokens="lognormal:512:0.5",
                           output_tokens="uniform:10:20", seed=8)
    assert a != c
    rate = (len(a) - 1) / a.duration_s
    assert 4.6 < rate < 5.4  # 4000 exponential gaps: the mean within ~5% (3.5 standard errors)
    prompts = sorted(r.prompt_tokens for r in a.requests)
    assert 480 < prompts[len(prompts) // 2] < 545  # the lognormal's median
    assert all(10 <= r.output_tokens <= 20 for r in a.requests)


def test_offline_batch_arrives_at_once():
    wl = synthetic_workload(rate_per_s="inf", requests=50, prompt_tokens=100, output_tokens=10)
    assert wl.duration_s == 0 and all(r.arrival_s == 0 for r in wl.requests)


def test_scaled_doubles_the_rate():
    wl = synthetic_workload(rate_per_s=2, requests=100, prompt_tokens=100, output_tokens=10, seed=1)
    fast = wl.scaled(2.0)
    assert math.isclose(fast.duration_s, wl.duration_s / 2)
    assert [r.prompt_tokens for r in fast.requests] == [r.prompt_tokens for r in wl.requests]


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=30))
def test_any_length_spelling_is_parsed_or_refused_in_one_line(text):
    try:
        dist = parse_length_dist(text, "prompt_tokens")
    except ValueError as exc:
        assert str(exc).startswith("prompt_tokens: ") and "\n" not in str(exc)
    else:
        assert dist.kind in ("fixed", "uniform", "lognormal")


def test_workload_refuses_unsorted_requests_directly():
    wl = synthetic_workload(rate_per_s=2, requests=3, prompt_tokens=10, output_tokens=2)
    with pytest.raises(ValueError, match="^arrival_s: "):
        Workload(requests=tuple(reversed(wl.requests)))
