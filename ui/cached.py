"""Process-wide memo of the estimator's answers (all inputs are frozen, hashable dataclasses; all answers are
pure), so that a re-run after a form submit recomputes only what changed. Shared by every session."""

from __future__ import annotations

from functools import lru_cache

import pandas as pd


@lru_cache(maxsize=256)
def plan(inputs):
    from estimator.plan import make_plan

    return make_plan(inputs)


@lru_cache(maxsize=256)
def plan_dict(inputs) -> dict:
    return plan(inputs).to_dict()


@lru_cache(maxsize=128)
def advice(inputs) -> tuple:
    from estimator.advice import advise

    return tuple(advise(inputs))


@lru_cache(maxsize=64)
def plan_sweep(inputs, ns: tuple[int, ...]) -> pd.DataFrame:
    from ui.sweeps import plan_sweep as sweep

    return sweep(inputs, ns)
