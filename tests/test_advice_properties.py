"""Properties of the advisor on the real estimator, over random plans: it never crashes on a valid plan, its ids
are unique and in the decision tree's order, and each effect is the estimator re-run with the change."""

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from estimator.advice.plan_rules import PASSIVE, advise
from estimator.advice.tree import ADVICE_ORDER
from estimator.hardware import CATALOG
from estimator.model.inputs import PlanInputs
from estimator.model.presets import PRESETS
from tests.conftest import check_effect

plans = st.builds(
    dict,
    preset=st.sampled_from(sorted(PRESETS)),
    seq_len=st.sampled_from([257, 1024, 4097, 8192, 32768, 131072]),
    batch=st.sampled_from([1, 2, 8, 64]),
    dtype=st.sampled_from(["bfloat16", "float16", "float32"]),
    mode=st.sampled_from(["inference", "training"]),
    backend=st.sampled_from(["auto", "math", "flash", "efficient", "cudnn", "eager"]),
    gpu=st.sampled_from(sorted(CATALOG)),
    kv_dtype=st.sampled_from([None, "int8"]),
    mask=st.sampled_from(["none", "none", "bool", "float"]),
)


# no shrinking: one advise() re-runs the estimator dozens of times, and a failing example prints in full anyway
@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          phases=(Phase.explicit, Phase.reuse, Phase.generate))
@given(plans)
def test_any_valid_plan_gets_ordered_checked_advice(p):
    inputs = PlanInputs(model=PRESETS[p["preset"]], seq_len=p["seq_len"], batch=p["batch"], dtype=p["dtype"],
                        kv_dtype=p["kv_dtype"], mode=p["mode"], backend=p["backend"], gpu=p["gpu"])
    options = {"mask": p["mask"], "cached_len": 0}
    items = advise(inputs, **options)
    ids = [a.id for a in items]
    assert ids == sorted(ids, key=ADVICE_ORDER.index) and len(set(ids)) == len(ids)
    assert ids[-1] == "log-backend"
    assert "fits" not in ids or ids[0] == "fits"
    for advice in items:
        assert advice.title and advice.why and advice.expected_effect
        check_effect(inputs, options, advice)
    if any(i not in PASSIVE for i in ids):
        assert "profile-first" in ids
