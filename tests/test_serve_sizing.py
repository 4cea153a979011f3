"""Sizing: the highest sustained rate, the fleet per GPU, the cost from the user's price only, the knee, honest
"no configuration" answers, and the bounds a browser-started simulation needs."""

from __future__ import annotations

import math

import pytest

from estimator.model.inputs import PlanInputs
from estimator.model.presets import get_preset
from estimator.serve.capacity import ServeInputs, serve
from estimator.serve.engines import EngineConfig
from estimator.serve.result import Targets
from estimator.serve.sizing import knee_rate, max_rate, rate_sweep, size_fleet
from estimator.serve.workload import synthetic_workload

TARGETS = Targets(ttft_p99_ms=1500, tpot_p99_ms=60)


def inputs(rate=4.0, targets=TARGETS, price=None, gpu="h200", tp=1,
           model="llama-3-8b", requests=80):
    wl = synthetic_workload(rate_per_s=rate, requests=requests, prompt_tokens="uniform:200:1200", output_tokens=48,
                            seed=5)
    return ServeInputs(plan=PlanInputs(model=get_preset(model), seq_len=2048, gpu=gpu, tp=tp, gpus=tp),
                       engine=EngineConfig(engine="vllm"), workload=wl, targets=targets, price_per_gpu_hour=price)


def test_max_rate_meets_the_targets_and_a_bit_more_does_not():
    si = inputs()
    found = max_rate(si)
    rate = found["rate_per_s"]
    assert rate is not None and found["probes"] <= 12
    own = (len(si.workload) - 1) / si.workload.duration_s
    at = lambda r: serve(ServeInputs(plan=si.plan, engine=si.engine, workload=si.workload.scaled(r / own),  # noqa
                                     targets=si.targets))
    assert at(rate).meets_targets
    if "bisected" in found["reason"]:
        assert not at(rate * 1.2).meets_targets


def test_fleet_cost_comes_only_from_the_price():
    priced = size_fleet(inputs(price=2.0), gpus=("h200", "h100-sxm"), tps=(1, 2), max_probes=6)
    assert priced["choices"] and priced["priced_gpu"] == "h200"
    for c in priced["choices"]:
        assert c["replicas"] == max(1, math.ceil(priced["rate_per_s"] / c["max_rate_per_replica"] - 1e-9))
        if c["gpu"] != "h200":  # the price was entered for the H200: none is invented for another GPU
            assert "cost_per_million_output_tokens" not in c
            continue
        tokens_per_hour = priced["rate_per_s"] * 48 * 3600
        assert c["cost_per_million_output_tokens"] == pytest.approx(2.0 * c["gpus"] / tokens_per_hour * 1e6,
                                                                    rel=1e-3)
    unpriced = size_fleet(inputs(), gpus=("h200",), tps=(1,), max_probes=6)
    assert all("cost_per_million_output_tokens" not in c for c in unpriced["choices"])


def test_an_impossible_target_is_an_honest_empty_answer():
    out = size_fleet(inputs(targets=Targets(tpot_p99_ms=0.01)), gpus=("h200", "l4"), tps=(1,), max_probes=4)
    assert out["choices"] == [] and out["verdict"] == "no configuration meets the targets"
    assert {s["gpu"] for s in out["skipped"]} == {"h200", "l4"}
    assert any("do not fit" in s["reason"] or "weights" in s["reason"] for s in out["skipped"] if s["gpu"] == "l4") \
        or all("misses" in s["reason"] for s in out["skipped"])


def test_sizing_needs_targets_and_a_rate():
    with pytest.raises(ValueError, match="^ttft_p99_ms: "):
        max_rate(inputs(targets=Targets()))
    offline = inputs(rate="inf")
    with pytest.raises(ValueError, match="^rate: "):
        size_fleet(offline)


def test_the_knee_is_where_throughput_stops_following_the_rate():
    si = inputs(requests=120)
    points = rate_sweep(si, [1, 4, 16, 64, 256])
    knee = knee_rate(points, 48)
    assert knee is not None and knee > 1
    below = [p for p in points if p["rate_per_s"] < knee]
    assert all(p["throughput_output_tokens_per_s"] >= 0.9 * p["rate_per_s"] * 48 for p in below)
    p99 = [p["ttft_p99_ms"] for p in points]
    assert p99 == sorted(p99)  # more rate, no lower P99 TTFT


def test_a_time_budget_bounds_the_simulation():
    si = inputs(requests=3000, rate=50)
    with pytest.raises(ValueError, match="^requests: simulating 3,000 requests took more than"):
        serve(si, time_budget_s=0.0)


def test_the_timeline_stays_small():
    r = serve(inputs(requests=1500, rate=8))
    assert r.simulation.steps > 2000
    assert len(r.simulation.timeline["time_s"]) <= 2001
    assert r.simulation.timeline["time_s"][-1] == pytest.approx(max(r.simulation.finish_s))


def test_a_workload_too_short_to_find_the_limit_says_so():
    si = inputs(requests=4, rate=1)
    found = max_rate(si)
    assert found["rate_per_s"] is not None and "a longer workload finds the limit" in found["reason"]
