"""Rows and summaries of a serving run (stdlib only): one row per request, one per engine step, one per run.

Definitions (the same for the measured and the predicted side):
  ttft_s  first token time - arrival (the first token comes out of the step that ends the prefill)
  tpot_s  (finish - first token) / (output_tokens - 1), for requests of at least 2 output tokens
  e2e_s   finish - arrival
  output_tokens_per_s  sum of output tokens / (last finish - first arrival); total_tokens_per_s counts the prompt
  tokens too. Percentiles are nearest rank, as the simulator's (estimator/serve/result.py percentiles).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class RequestRecord:
    index: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    finished: bool
    start_s: float | None = None
    finish_s: float | None = None
    generated_tokens: int = 0
    token_times_s: list[float] = field(default_factory=list)

    @property
    def first_token_s(self) -> float | None:
        return self.token_times_s[0] if self.token_times_s else None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        if self.first_token_s is None or self.finish_s is None or self.output_tokens < 2:
            return None
        return (self.finish_s - self.first_token_s) / (self.output_tokens - 1)

    @property
    def e2e_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.arrival_s


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    start_s: float
    requests: int
    decode_requests: int
    q_tokens: int
    max_kv_read: int
    free_blocks: int
    waiting: int
    # where the step's host time went (ms; filled in as the step runs, see validation/serving/engine.py _instrument;
    # a key is absent where the phase never ran, e.g. a step cut off by the timeout)
    phases: dict = field(default_factory=dict)


def latency_summary(rows: list[dict]) -> dict:
    """P50/P90/P99 of TTFT and TPOT (ms, nearest rank: estimator.serve.result.percentiles, the simulator's own)
    and the throughputs of rows {arrival_s, first_token_s, finish_s, prompt_tokens, output_tokens} (finished
    requests only count)."""
    from estimator.serve.result import percentiles

    done = [r for r in rows if r["finish_s"] is not None and r["first_token_s"] is not None]
    ttft = [(r["first_token_s"] - r["arrival_s"]) * 1e3 for r in done]
    tpot = [(r["finish_s"] - r["first_token_s"]) * 1e3 / (r["output_tokens"] - 1) for r in done
            if r["output_tokens"] > 1]
    out: dict = {}
    for name, values in (("ttft", ttft), ("tpot", tpot)):
        for key, v in percentiles(values).items():
            out[f"{name}_{key}_ms"] = v
    span = (max(r["finish_s"] for r in done) - min(r["arrival_s"] for r in rows)) if done else None
    output = sum(r["output_tokens"] for r in done)
    out["makespan_s"] = span
    out["output_tokens_per_s"] = output / span if span else None
    out["total_tokens_per_s"] = (output + sum(r["prompt_tokens"] for r in done)) / span if span else None
    return out


def measured_summary(records: list[RequestRecord]) -> dict:
    rows = [{"arrival_s": r.arrival_s, "first_token_s": r.first_token_s, "finish_s": r.finish_s,
             "prompt_tokens": r.prompt_tokens, "output_tokens": r.generated_tokens if r.finished else 0}
            for r in records]
    out = latency_summary(rows)
    out["requests"] = len(records)
    out["finished"] = sum(1 for r in records if r.finished)
    return out


def predicted_summary(requests: list, predicted: list[dict]) -> dict:
    rows = [{"arrival_s": q.arrival_s, "first_token_s": p["first_token_s"], "finish_s": p["finish_s"],
             "prompt_tokens": q.prompt_tokens, "output_tokens": q.output_tokens}
            for q, p in zip(requests, predicted, strict=False)]
    return latency_summary(rows)


def request_rows(run_id: str, records: list[RequestRecord], predicted: list[dict] | None) -> list[dict]:
    """One row per request: measured times beside the predicted ones (pred_* empty without a prediction)."""
    rows = []
    for r in records:
        p = predicted[r.index] if predicted else {}
        rows.append({
            "run": run_id, "request": r.index, "arrival_s": _f(r.arrival_s), "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens, "finished": int(r.finished), "generated_tokens": r.generated_tokens,
            "start_s": _f(r.start_s), "first_token_s": _f(r.first_token_s), "finish_s": _f(r.finish_s),
            "ttft_ms": _ms(r.ttft_s), "tpot_ms": _ms(r.tpot_s), "e2e_ms": _ms(r.e2e_s),
            "pred_first_token_s": _f(p.get("first_token_s")), "pred_finish_s": _f(p.get("finish_s")),
            "pred_ttft_ms": _ms(p.get("ttft_s")), "pred_tpot_ms": _ms(p.get("tpot_s")),
            "pred_e2e_ms": _ms(p.get("e2e_s")),
            "token_times_s": ";".join(f"{t:.6f}" for t in r.token_times_s),
        })
    return rows


REQUEST_COLUMNS = ["run", "request", "arrival_s", "prompt_tokens", "output_tokens", "finished", "generated_tokens",
                   "start_s", "first_token_s", "finish_s", "ttft_ms", "tpot_ms", "e2e_ms", "pred_first_token_s",
                   "pred_finish_s", "pred_ttft_ms", "pred_tpot_ms", "pred_e2e_ms", "token_times_s"]
STEP_PHASES = ("schedule_ms", "prepare_ms", "index_ms", "mask_ms", "forward_ms", "update_ms", "cpu_ms", "gc_ms")
STEP_COLUMNS = ["run", "step", "start_s", "duration_s", "requests", "decode_requests", "q_tokens", "max_kv_read",
                "free_blocks", "waiting", "read_full_tokens", "read_sliding_tokens", *STEP_PHASES]


def step_rows(run_id: str, steps: list[StepRecord], end_s: float | None) -> list[dict]:
    """One row per engine step; a step lasts until the next one is scheduled (the last one until `end_s`)."""
    rows = []
    for i, s in enumerate(steps):
        nxt = steps[i + 1].start_s if i + 1 < len(steps) else end_s
        rows.append({"run": run_id, "step": i, "start_s": _f(s.start_s),
                     "duration_s": _f(None if nxt is None else nxt - s.start_s), "requests": s.requests,
                     "decode_requests": s.decode_requests, "q_tokens": s.q_tokens, "max_kv_read": s.max_kv_read,
                     "free_blocks": s.free_blocks, "waiting": s.waiting,
                     **{k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in s.phases.items()}})
    return rows


def relative_error(predicted, measured) -> float | None:
    if predicted is None or measured in (None, 0):
        return None
    return (predicted - measured) / measured


def _f(x) -> str:
    return "" if x is None else f"{x:.6f}"


def _ms(x) -> str:
    return "" if x is None else f"{x * 1000.0:.3f}"


def median_or_none(values: list) -> float | None:
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None
