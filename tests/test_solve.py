"""The solvers with memory that is not monotone in n (padding): the answer fits, and so do the sizes below it
where dips occur."""

from __future__ import annotations

from dataclasses import replace

from estimator.model import solve
from estimator.model.budget import budget
from estimator.model.inputs import PlanInputs
from estimator.model.presets import get_preset


def test_largest_prefix_steps_below_a_dip_that_plain_bisection_misses():
    # memory rises with x, but every odd x below 1024 pays a padding surcharge
    def mem(x):
        return x + (300 if x % 2 and x < 1024 else 0)

    def fits(x):
        return mem(x) <= 1000

    assert solve.largest_fitting(fits, 1, 4096, 1000) == 1000  # fits(1000), yet 701..999 odd do not
    found = solve._largest_prefix(fits, 1, 4096, 1000)
    assert fits(found) and all(fits(p) for p in solve.dip_points(found, 1))
    assert found <= 700


def test_dip_points_are_below_and_within_range():
    points = solve.dip_points(20000, 1)
    assert points[:3] == [19999, 19998, 19997] and 16383 in points and 12287 in points
    assert all(1 <= p < 20000 for p in points)
    assert solve.dip_points(1, 1) == []


def test_plans_are_not_monotone_and_max_seq_len_accounts_for_it():
    inputs = PlanInputs(model=get_preset("vit-l-16"), seq_len=16384, batch=7, dtype="bfloat16", mode="inference",
                        backend="efficient", gpu="h200", window=127)
    dear, cheap = budget(replace(inputs, seq_len=16383)).total_bytes, budget(inputs).total_bytes
    assert dear > cheap  # padding: one token fewer costs more (this is why the solver checks dip points)
    n = solve.max_seq_len(inputs)
    assert n >= 1 and budget(replace(inputs, seq_len=n)).fits
    assert all(budget(replace(inputs, seq_len=m)).fits for m in range(max(1, n - 64), n))
