"""The plan a user asks for: the budget (`budget.py`) plus the solvers' largest seq_len and batch that fit."""

from __future__ import annotations

from dataclasses import replace

from estimator.model.budget import Plan, budget
from estimator.model.inputs import PlanInputs
from estimator.model.solve import max_batch, max_seq_len


def make_plan(inputs: PlanInputs, *, solve: bool = True) -> Plan:
    """The full plan; with `solve`, also the largest seq_len (at this batch) and batch (at this seq_len) that fit."""
    plan = budget(inputs)
    if not solve:
        return plan

    return replace(plan, max_seq_len=max_seq_len(inputs), max_batch=max_batch(inputs))
