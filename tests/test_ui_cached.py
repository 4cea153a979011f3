"""ui/cached.py: the solvers' memo hits when only the field a solver searches over changes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from estimator.model import solve
from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.presets import get_preset
from ui import cached


def _inputs(**changes) -> PlanInputs:
    base = PlanInputs(model=get_preset("llama-3-8b"), seq_len=8192, batch=1, dtype="bfloat16", kv_dtype="bfloat16",
                      mode="inference", backend="auto", gpu="h200", gpus=1)
    return replace(base, **changes)


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_changing_n_reuses_max_seq_len_and_changing_batch_reuses_max_batch(monkeypatch):
    calls = {"max_seq_len": 0, "max_batch": 0}
    for name in calls:
        real = getattr(solve, name)

        def counting(inputs, _real=real, _name=name):
            calls[_name] += 1
            return _real(inputs)

        monkeypatch.setattr(solve, name, counting)
    cached._max_seq_len.cache_clear()
    cached._max_batch.cache_clear()

    first = cached.plan(_inputs(seq_len=8192))
    second = cached.plan(_inputs(seq_len=16384))  # a new n: max_seq_len (at this batch) is already known
    assert calls == {"max_seq_len": 1, "max_batch": 2}
    third = cached.plan(_inputs(seq_len=16384, batch=2))  # a new batch: max_batch (at this n) is already known
    assert calls == {"max_seq_len": 2, "max_batch": 2}
    for got, inputs in ((first, _inputs(seq_len=8192)), (second, _inputs(seq_len=16384)),
                        (third, _inputs(seq_len=16384, batch=2))):
        expected = make_plan(inputs)
        assert (got.max_seq_len, got.max_batch) == (expected.max_seq_len, expected.max_batch)
