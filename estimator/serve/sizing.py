"""Sizing a fleet for a workload and its P99 targets.

- `max_rate(inputs)`: the highest request rate one replica sustains within the targets, found by scaling the
  workload's arrival times (same requests, same order, arrivals divided by a factor) and bisecting on the factor;
  assumes latency does not fall as the rate rises (tests/test_serve_properties.py checks it on the model).
- `rate_sweep(inputs, rates)`: throughput and P99 latencies at each rate (the knee chart); `knee_rate(points, ...)`
  the rate where throughput stops following the offered load.
- `size_fleet(inputs, gpus=None, tps=(1, 2, 4, 8))`: for each catalog GPU, the fewest GPUs (replicas x tp) that
  meet the targets at the workload's own rate, replicas splitting the rate evenly; cost per million output tokens
  only from the user's `price_per_gpu_hour`, for the GPU it was entered for. An honest empty answer (with the
  reason per GPU) when nothing meets it.

Each probe is one simulation of the workload; `max_probes` bounds their number and `time_budget_s` each one's wall
time (a browser can start a sizing).
"""

from __future__ import annotations

import math
from dataclasses import replace

from estimator.hardware import CATALOG
from estimator.serve.capacity import ServeInputs, serve
from estimator.serve.workload import Workload

MAX_PROBES = 12
TPS = (1, 2, 4, 8)


def workload_rate(workload: Workload) -> float | None:
    """Requests per second of the workload: (N - 1) / (last arrival - first); None for an offline batch."""
    if workload.duration_s <= 0:
        return None
    return (len(workload) - 1) / workload.duration_s


def _at_rate(inputs: ServeInputs, rate: float) -> ServeInputs:
    own = workload_rate(inputs.workload)
    if own is None:
        raise ValueError("rate: an offline batch (every arrival at t = 0) has no rate to scale; give --rate")
    return replace(inputs, workload=inputs.workload.scaled(rate / own))


def rate_sweep(inputs: ServeInputs, rates, time_budget_s: float | None = None) -> list[dict]:
    """One point per rate: rate, P99 TTFT/TPOT, throughput, whether the targets are met."""
    points = []
    for rate in rates:
        r = serve(_at_rate(inputs, float(rate)), time_budget_s=time_budget_s)
        points.append({"rate_per_s": float(rate), "ttft_p99_ms": r.ttft_ms["p99"], "tpot_p99_ms": r.tpot_ms["p99"],
                       "e2e_p99_ms": r.e2e_ms["p99"],
                       "throughput_output_tokens_per_s": r.throughput_output_tokens_per_s,
                       "meets_targets": r.meets_targets})
    return points


def knee_rate(points: list[dict], output_tokens_per_request: float, share: float = 0.9) -> float | None:
    """The knee of a `rate_sweep`: the lowest rate whose output throughput falls under `share` of what the rate
    offers (rate x output tokens per request), i.e. where the replica stops keeping up and the queue grows;
    None if it keeps up at every swept rate."""
    for p in sorted(points, key=lambda p: p["rate_per_s"]):
        if p["throughput_output_tokens_per_s"] < share * p["rate_per_s"] * output_tokens_per_request:
            return p["rate_per_s"]
    return None


def max_rate(inputs: ServeInputs, max_probes: int = MAX_PROBES, time_budget_s: float | None = None) -> dict:
    """{"rate_per_s": highest sustained rate (None if even the lowest probe fails), "probes": n, "floor": ...}.
    The floor is the workload at 1/1000 of its rate: if that misses the targets, no rate meets them on one
    replica (the targets are below what one request alone takes)."""
    if not inputs.targets.given:
        raise ValueError("ttft_p99_ms: give --ttft-p99-ms and/or --tpot-p99-ms to find the highest rate")
    own = workload_rate(inputs.workload)
    if own is None:
        raise ValueError("rate: an offline batch (every arrival at t = 0) has no rate to scale; give --rate")
    probes = 0
    saturated = False  # every request of the workload ran at once: a higher rate cannot be told apart

    def ok(rate: float) -> bool:
        nonlocal probes, saturated
        probes += 1
        result = serve(_at_rate(inputs, rate), time_budget_s=time_budget_s)
        saturated = result.simulation.max_running >= len(inputs.workload)
        return bool(result.meets_targets)

    low = own / 1000
    if not ok(low):
        return {"rate_per_s": None, "probes": probes,
                "reason": f"even at {low:.4g} requests/s one replica misses the targets (each request alone takes "
                          "longer than the target)"}
    high = own
    while True:
        if probes >= max_probes:
            return {"rate_per_s": low, "probes": probes, "reason": "probe budget spent; a lower bound"}
        if not ok(high):
            break
        if saturated:
            return {"rate_per_s": high, "probes": probes,
                    "reason": f"a lower bound: at {high:.4g} requests/s all {len(inputs.workload)} requests run at "
                              "once and still meet the targets; a longer workload finds the limit"}
        low, high = high, high * 4
    while probes < max_probes and high / low > 1.05:
        mid = math.sqrt(low * high)
        if ok(mid):
            low = mid
        else:
            high = mid
    return {"rate_per_s": low, "probes": probes, "reason": f"bisected to within {high / low - 1:.1%}"}


def size_fleet(inputs: ServeInputs, gpus=None, tps=TPS, max_probes: int = 6,
               time_budget_s: float | None = None) -> dict:
    """For each GPU (default: the catalog), the fewest GPUs meeting the targets at the workload's rate. Tensor
    parallel degrees are tried in increasing order and the search stops once the best total is no more than the
    next degree (a larger tp cannot use fewer GPUs). The cost per million output tokens is given only for the GPU
    the price was entered for (`inputs.plan.gpu`): no price is invented for the others."""
    rate = workload_rate(inputs.workload)
    if rate is None:
        raise ValueError("rate: sizing needs arrivals over time (an offline batch has no rate)")
    if not inputs.targets.given:
        raise ValueError("ttft_p99_ms: sizing needs --ttft-p99-ms and/or --tpot-p99-ms")
    out_per_request = inputs.workload.total_output_tokens / len(inputs.workload)
    rows, skipped = [], []
    for name in (gpus or CATALOG):
        best = None
        for tp in sorted(tps):
            if best is not None and best["gpus"] <= tp:
                break
            try:
                plan = replace(inputs.plan, gpu=name, tp=tp, gpus=tp)
                trial = replace(inputs, plan=plan)
                found = max_rate(trial, max_probes=max_probes, time_budget_s=time_budget_s)
            except ValueError as exc:
                skipped.append({"gpu": name, "tp": tp, "reason": str(exc)})
                continue
            if found["rate_per_s"] is None:
                skipped.append({"gpu": name, "tp": tp, "reason": found["reason"]})
                continue
            replicas = max(1, math.ceil(rate / found["rate_per_s"] - 1e-9))
            total = replicas * tp
            if best is None or total < best["gpus"]:
                best = {"gpu": name, "tp": tp, "replicas": replicas, "gpus": total,
                        "max_rate_per_replica": round(found["rate_per_s"], 4)}
        if best is not None:
            if inputs.price_per_gpu_hour is not None and name == inputs.plan.gpu:
                tokens_per_hour = rate * out_per_request * 3600
                best["cost_per_million_output_tokens"] = round(
                    inputs.price_per_gpu_hour * best["gpus"] / tokens_per_hour * 1e6, 4)
            rows.append(best)
    rows.sort(key=lambda r: (r["gpus"], r["gpu"]))
    return {"rate_per_s": rate, "choices": rows, "skipped": skipped,
            "verdict": "no configuration meets the targets" if not rows else f"{len(rows)} GPU kinds meet them",
            "price_per_gpu_hour": inputs.price_per_gpu_hour, "priced_gpu": inputs.plan.gpu}
