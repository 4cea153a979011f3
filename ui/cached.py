"""Process-wide memo of the estimator's answers (all inputs are frozen, hashable dataclasses; all answers are
pure), so that a re-run after a form submit recomputes only what changed. Shared by every session.

The solvers are memoised on what they depend on: the largest n that fits does not depend on the current n,
nor the largest batch on the current batch (both are binary searches over a total that grows with each,
estimator/model/solve.py), so changing n re-solves only the batch, and the other way round.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from functools import lru_cache

import pandas as pd

from estimator.call.backends import DEFAULT_TORCH


@lru_cache(maxsize=2048)
def budget(inputs):
    """The plan without solvers (`make_plan(inputs, solve=False)`)."""
    from estimator.model.plan import make_plan

    return make_plan(inputs, solve=False)


class _KeyedMemo:
    """An LRU memo of one solver keyed on `key` alone. (An lru_cache over (key, inputs) never hit: `inputs`
    carries the very field the key leaves out, so every new n missed.) The answer is computed from the first
    inputs seen with the key, which is right because the solver's answer does not depend on that field."""

    def __init__(self, solver: str, maxsize: int = 256):
        self.solver, self.maxsize, self.hits, self.misses = solver, maxsize, 0, 0
        self._answers: OrderedDict = OrderedDict()

    def __call__(self, key, inputs):
        if key in self._answers:
            self.hits += 1
            self._answers.move_to_end(key)
            return self._answers[key]
        from estimator.model import solve

        self.misses += 1
        answer = self._answers[key] = getattr(solve, self.solver)(inputs)
        if len(self._answers) > self.maxsize:
            self._answers.popitem(last=False)
        return answer

    def cache_clear(self) -> None:
        self._answers.clear()
        self.hits = self.misses = 0


_max_seq_len = _KeyedMemo("max_seq_len")  # keyed on the inputs with seq_len left out
_max_batch = _KeyedMemo("max_batch")  # keyed on the inputs with batch left out


def plan(inputs, *, solve: bool = True):
    """`make_plan(inputs, solve=solve)`: the budget, plus (solve) the largest n at this batch and the largest
    batch at this n that fit."""
    if not solve:
        return budget(inputs)
    n_key = dataclasses.replace(inputs, seq_len=inputs.cp)
    batch_key = dataclasses.replace(inputs, batch=1)
    return dataclasses.replace(budget(inputs), max_seq_len=_max_seq_len(n_key, inputs),
                               max_batch=_max_batch(batch_key, inputs))


@lru_cache(maxsize=128)
def advice(inputs) -> tuple:
    from estimator.advice.plan_rules import advise

    return tuple(advise(inputs, make_plan=plan, estimate_call=estimate))  # the advisor re-plans through the memo


@lru_cache(maxsize=4096)
def estimate(call, gpu, torch_version: str = DEFAULT_TORCH):
    """`estimate_call(call, gpu, torch_version)` (AttentionCall and GPU are frozen, hashable dataclasses)."""
    from estimator.call.attention import estimate_call

    return estimate_call(call, gpu, torch_version)


def plan_sweep(inputs, ns: tuple[int, ...]) -> pd.DataFrame:
    """ui.sweeps.plan_sweep with each (n, backend) point memoised: a new n costs one new point per backend."""
    from ui.sweeps import plan_sweep as sweep

    return sweep(inputs, ns, plan_fn=budget)


_RESULTS: OrderedDict = OrderedDict()


INLINE_ROWS = 200  # a file with more rows is compared in the worker process (ui/offload.py)


def validation_table(data: bytes, gpu_name: str | None, torch_version: str | None = None) -> tuple:
    """(table, GPU compared with, torch, what the data says, data's GPU, notes on skipped rows) for an uploaded
    validation CSV, memoised on the file's SHA-256 and the GPU compared with: a re-run of the page never pays
    again. Reading is bounded (ui.result_csv: MAX_RESULT_ROWS rows, a bad line costs that line); more than
    INLINE_ROWS rows are predicted in a worker process under a time budget, off the other sessions' GIL.
    ValueError when the file is not a validation result."""
    import hashlib

    from ui import gpu as gpu_module
    from ui import offload, result_csv

    key = (hashlib.sha256(data).hexdigest(), gpu_name, torch_version)
    if key in _RESULTS:
        _RESULTS.move_to_end(key)
        return _RESULTS[key]
    frame, notes = result_csv.read_result_csv(data)
    data_gpu, data_torch, said = gpu_module.data_gpu(frame)
    compare_gpu = gpu_name or data_gpu or "h200"
    torch_version = torch_version or data_torch
    if len(frame) > INLINE_ROWS:
        table = offload.run(result_csv.compare_bounded, frame, compare_gpu, torch_version)
    else:
        table = result_csv.compare_bounded(frame, compare_gpu, torch_version)
    stopped = int(table["error"].astype(str).str.startswith("not predicted:").sum()) if "error" in table else 0
    if stopped:
        notes = [*notes, f"{stopped:,} rows were not predicted: the time budget of "
                         f"{result_csv.COMPARE_BUDGET_S:,.0f} s for one file ran out"]
    answer = _RESULTS[key] = (table, compare_gpu, torch_version, said, data_gpu, tuple(notes))
    if len(_RESULTS) > 8:
        _RESULTS.popitem(last=False)
    return answer


_TRACES: OrderedDict = OrderedDict()


def trace(data: bytes, source: str):
    """`estimator.model.trace.parse_trace` of an uploaded trace, memoised on the file's SHA-256 (a re-run of the
    page does not parse the file again). ValueError when it is not a trace."""
    import hashlib

    from estimator.model.trace import parse_trace

    key = (hashlib.sha256(data).hexdigest(), source)
    if key in _TRACES:
        _TRACES.move_to_end(key)
        return _TRACES[key]
    answer = _TRACES[key] = parse_trace(data, source)
    if len(_TRACES) > 16:
        _TRACES.popitem(last=False)
    return answer


@lru_cache(maxsize=64)
def trace_report(inputs, trace) -> dict:
    """`estimator.model.trace.trace_report` (PlanInputs and Trace are frozen and hashable): a re-run of the trace
    page does not solve the largest n again."""
    from estimator.model.trace import trace_report as report

    return report(inputs, trace)
