"""Process-wide memo of the estimator's answers (all inputs are frozen, hashable dataclasses; all answers are
pure), so that a re-run after a form submit recomputes only what changed. Shared by every session.

The solvers are memoised on what they depend on: the largest n that fits does not depend on the current n,
nor the largest batch on the current batch (both are binary searches over a total that grows with each,
estimator/solve.py), so changing n re-solves only the batch, and the other way round.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import pandas as pd

from estimator.call.backends import DEFAULT_TORCH


@lru_cache(maxsize=2048)
def budget(inputs):
    """The plan without solvers (`make_plan(inputs, solve=False)`)."""
    from estimator.model.plan import make_plan

    return make_plan(inputs, solve=False)


@lru_cache(maxsize=256)
def _max_seq_len(key, inputs):
    from estimator.model.solve import max_seq_len

    return max_seq_len(inputs)


@lru_cache(maxsize=256)
def _max_batch(key, inputs):
    from estimator.model.solve import max_batch

    return max_batch(inputs)


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
