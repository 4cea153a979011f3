"""What a serving simulation answers: `ServeResult` with `to_dict()` giving every key of docs/contract.md §6.

API (stable):
- `ServeResult`: the engine's memory (`memory`: EngineMemory), the simulation (`simulation`: Simulation), the
  latency percentiles, throughput, the targets and whether they are met, the sizing (when asked).
- `percentiles(values)` -> {"p50", "p90", "p99"} (nearest rank, as estimator/model/trace.py).
- `ServeResult.to_dict(include_requests=False)`: the §6 keys (`kv_cache_bytes`, `kv_cache_tokens`, `num_blocks`,
  `block_size`, `max_batch_tokens`, `peak_bytes`, `throughput_output_tokens_per_s`, `throughput_tokens_per_s`,
  `ttft_ms`, `tpot_ms`, `e2e_ms`; with targets `meets_targets` and `sizing`) plus `memory` (the components),
  `timeline`, `engine`, `workload`, `assumptions`; `requests` (one row per request) when asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from estimator.model.trace import nearest_rank
from estimator.serve.memory import EngineMemory
from estimator.serve.simulate import Simulation


def percentiles(values) -> dict:
    """{"p50", "p90", "p99"} of `values` (nearest rank); None for each when there are none."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return {"p50": None, "p90": None, "p99": None}
    return {f"p{p}": round(float(nearest_rank(ordered, p)), 4) for p in (50, 90, 99)}


@dataclass(frozen=True, kw_only=True)
class Targets:
    """P99 latency targets; None = no target on that metric."""

    ttft_p99_ms: float | None = None
    tpot_p99_ms: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_p99_ms", "tpot_p99_ms"):
            value = getattr(self, name)
            if value is None:
                continue
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{name}: expected milliseconds, got {value!r}") from None
            if not 0 < number < 1e9:
                raise ValueError(f"{name}: expected a positive number of milliseconds, got {value!r}")
            object.__setattr__(self, name, number)

    @property
    def given(self) -> bool:
        return self.ttft_p99_ms is not None or self.tpot_p99_ms is not None

    def met(self, ttft: dict, tpot: dict) -> bool:
        ok = True
        if self.ttft_p99_ms is not None:
            ok &= ttft["p99"] is not None and ttft["p99"] <= self.ttft_p99_ms
        if self.tpot_p99_ms is not None:
            ok &= tpot["p99"] is None or tpot["p99"] <= self.tpot_p99_ms
        return bool(ok)


def request_latencies(sim: Simulation) -> tuple[list[float], list[float | None], list[float]]:
    """(ttft ms, tpot ms (None for one-token outputs), e2e ms) per request."""
    ttft, tpot, e2e = [], [], []
    for a, f, z, out in zip(sim.arrival_s, sim.first_token_s, sim.finish_s, sim.output_tokens, strict=True):
        ttft.append((f - a) * 1e3)
        e2e.append((z - a) * 1e3)
        tpot.append((z - f) * 1e3 / (out - 1) if out > 1 else None)
    return ttft, tpot, e2e


@dataclass(frozen=True, kw_only=True)
class ServeResult:
    """One simulated serving run on one replica (bytes per GPU)."""

    engine: str
    gpu: str
    tp: int
    memory: EngineMemory
    simulation: Simulation
    ttft_ms: dict
    tpot_ms: dict
    e2e_ms: dict
    throughput_output_tokens_per_s: float
    throughput_tokens_per_s: float
    peak_bytes: int
    targets: Targets
    meets_targets: bool | None
    settings: dict = field(hash=False)
    workload: dict = field(hash=False)
    assumptions: tuple[str, ...] = ()
    sizing: dict | None = field(default=None, hash=False)

    def to_dict(self, include_requests: bool = False) -> dict:
        mem, sim = self.memory, self.simulation
        out = {
            "engine": self.engine, "gpu": self.gpu, "tp": self.tp,
            "kv_cache_bytes": mem.kv_cache_bytes, "kv_cache_tokens": mem.kv_cache_tokens,
            "num_blocks": mem.num_blocks, "block_size": mem.block_size, "max_batch_tokens": mem.max_batch_tokens,
            "max_seqs": mem.max_seqs, "peak_bytes": self.peak_bytes, "capacity_bytes": mem.capacity_bytes,
            "fits": self.peak_bytes <= mem.capacity_bytes,
            # what torch.cuda.max_memory_allocated would report: the peak without the CUDA context
            "peak_allocated_bytes": self.peak_bytes - mem.context_bytes,
            "throughput_output_tokens_per_s": round(self.throughput_output_tokens_per_s, 3),
            "throughput_tokens_per_s": round(self.throughput_tokens_per_s, 3),
            "ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms,
            "memory": {"components": [{"component": c, "bytes": b} for c, b in mem.components],
                       "weights_bytes": mem.weights_bytes, "available_bytes": mem.available_bytes,
                       "kv_bytes_per_token": mem.kv_bytes_per_token, "static_bytes": mem.static_bytes,
                       "mask_bytes": mem.mask_bytes, "activation_bytes": mem.activation_bytes,
                       "layer_groups": {"full": mem.full_groups, "sliding": mem.sliding_groups,
                                        "window": mem.window, "window_blocks": mem.window_blocks},
                       "rule": mem.rule, "source": mem.source},
            "simulation": {"steps": sim.steps, "busy_s": round(sim.busy_s, 6),
                           "makespan_s": round(max(sim.finish_s) - min(sim.arrival_s), 6),
                           "preemptions": sum(sim.preemptions), "max_running": sim.max_running,
                           "max_batch_tokens_used": sim.max_batch_tokens_used,
                           "max_kv_read_tokens": sim.max_kv_read_tokens},
            "timeline": sim.timeline, "settings": self.settings, "workload": self.workload,
            "assumptions": list(self.assumptions),
        }
        if self.targets.given:
            out["targets"] = {"ttft_p99_ms": self.targets.ttft_p99_ms, "tpot_p99_ms": self.targets.tpot_p99_ms}
            out["meets_targets"] = self.meets_targets
        if self.sizing is not None:
            out["sizing"] = self.sizing
        if include_requests:
            ttft, tpot, e2e = request_latencies(sim)
            out["requests"] = [
                {"request": i, "arrival_s": a, "prompt_tokens": p, "output_tokens": o, "first_token_s": round(f, 6),
                 "finish_s": round(z, 6), "ttft_ms": round(t1, 4), "tpot_ms": None if t2 is None else round(t2, 4),
                 "e2e_ms": round(t3, 4), "preemptions": k}
                for i, (a, p, o, f, z, t1, t2, t3, k) in enumerate(zip(
                    sim.arrival_s, sim.prompt_tokens, sim.output_tokens, sim.first_token_s, sim.finish_s, ttft, tpot,
                    e2e, sim.preemptions, strict=True))]
        return out
