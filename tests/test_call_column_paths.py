"""estimator/call's column paths give the answers of the one-call paths they stand for: auto's choice picked by
index, registry columns filled in place, the replay's events converted for all rows at once, the tile FLOPs of a
lone backend name, and the column checks' per-distinct-value tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from estimator.call import backends, registry, timing
from estimator.call.attention import backend_timeline
from estimator.call.table import calls_from_frame
from estimator.hardware import get_gpu
from validation.call.grid import random_sample


def _calls(n: int = 600, seed: int = 5):
    c, backend, errors = calls_from_frame(pd.DataFrame(random_sample(n, seed=seed)).astype(str))
    return c, backend, errors


def test_select_over_columns_is_select_per_call():
    c, _, _ = _calls()
    for sm in (80, 90, 120):
        chosen = backends.select(c, sm)
        assert chosen.dtype == object
        assert chosen.tolist() == [str(backends.select(c.take(np.array([i])), sm)[0]) for i in range(len(chosen))]
        one = c.take(np.array([3]))
        scalar = type(c)(**{f: getattr(one, f)[0] for f in c.__dataclass_fields__})
        assert str(backends.select(scalar, sm)) == chosen[3]


def test_registry_column_is_the_chain_of_wheres():
    names = np.array([*registry.names(), "none", "bogus", "flash"] * 5)
    for value, default in ((lambda b: b.mask_input, "dense"), (lambda b: b.flops.head_dim_multiple, 1),
                           (lambda b: b.priced_as or b.name, "none")):
        out = registry.column(names, value, default)
        chain = default
        for b in registry._RECORDS.values():
            chain = np.where(names == b.name, value(b), chain)
        assert out.dtype == chain.dtype and np.array_equal(out, chain)
        assert [registry.column(n, value, default).item() for n in names.tolist()] == out.tolist()


def test_events_by_row_are_events_per_row():
    c, _, _ = _calls(300)
    for name in ("math", "eager", "cudnn", "efficient"):
        t = backend_timeline(c, name, get_gpu("h200"))
        rows = t.events_by_row(300)
        inputs = c.input_events_by_row(300)
        for i in (0, 1, 57, 299):
            assert rows[i] == t.events_for(i)
            assert inputs[i] == c.input_events(i)


def test_tile_flops_of_one_name_are_those_of_a_column_of_it():
    c, _, _ = _calls(400)
    executed = np.linspace(1.0, 1e12, 400)
    for name in (*registry.names(), "none"):
        column = np.full(400, name, dtype=object)
        for kw in ({}, {"per_score": True}, {"per_score": True, "score_passes": (1.0, 1.0)}):
            lone = timing.executed_tile_flops(c, name, executed, 132, **kw)
            assert np.array_equal(lone, timing.executed_tile_flops(c, column, executed, 132, **kw)), (name, kw)


def test_checks_test_each_distinct_spelling_like_every_row():
    frame = pd.DataFrame(random_sample(200, seed=9)).astype(str)
    for col, step, spellings in (("backend", 3, [" Flash", "AUTO", "", "foo"]),
                                 ("mask", 4, ["", "NaN", "Window:128", "window:x", " float "]),
                                 ("dtype", 5, ["torch.float16", " BF16", "x", "fp32"]),
                                 ("causal", 7, ["TRUE", "2", "1.0", "0.0"]), ("mode", 6, ["Forward", "train"])):
        frame.loc[::step, col] = np.resize(np.array(spellings, dtype=object), len(frame.loc[::step]))
    c, backend, errors = calls_from_frame(frame)
    assert backend.dtype == object and backend.tolist() == frame["backend"].str.strip().str.lower().tolist()
    for i in range(len(frame)):
        one_c, one_backend, one_error = calls_from_frame(frame.iloc[[i]])
        assert one_error[0] == errors[i] and one_backend[0] == backend[i]
        for f in c.__dataclass_fields__:
            whole = np.broadcast_to(np.atleast_1d(getattr(c, f)), (len(frame),))
            assert np.atleast_1d(getattr(one_c, f))[0] == whole[i], (i, f)
