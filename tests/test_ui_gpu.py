"""The Validate page's helpers: the plan's calls, the guards (size, count), one job at a time, the comparison."""

from __future__ import annotations

import pandas as pd
import pytest

from estimator.call.attention import estimate_call
from estimator.hardware import get_gpu
from estimator.model.inputs import PlanInputs
from estimator.model.presets import get_preset
from ui import gpu
from validation.call.guard import APP_GUARD

H200 = get_gpu("h200")


def inputs(**kw):
    return PlanInputs(model=get_preset("llama-3-8b"), **{"seq_len": 8192, "gpu": "h200", **kw})


def test_plan_calls_inference_has_prefill_and_decode_training_has_backward():
    prefill, decode = gpu.plan_calls(inputs(tp=2, gpus=2))
    assert (prefill.q_heads, prefill.kv_heads, prefill.q_len, prefill.kv_len) == (16, 4, 8192, 8192)
    assert prefill.causal and prefill.mode == "forward"
    assert (decode.q_len, decode.kv_len, decode.causal) == (1, 8192, False)
    (train,) = gpu.plan_calls(inputs(mode="training"))
    assert train.mode == "forward_backward"
    rows = gpu.call_rows(gpu.with_backend([prefill], "eager"))
    assert rows[0]["backend"] == "eager" and rows[0]["causal"] == 1 and rows[0]["id"] == "plan-00"


def test_guard_blocks_by_predicted_size_and_caps_the_count():
    calls = gpu.plan_calls(inputs(seq_len=32768, backend="math"))
    need = [estimate_call(c, H200).input_bytes + estimate_call(c, H200).peak_extra_bytes for c in calls]
    free = int((max(need) - 1) * (1 + APP_GUARD.margin_fraction) + APP_GUARD.margin_bytes)  # the biggest misses
    table = gpu.guard(calls, H200, free)
    assert list(table["allowed"]) == [n < max(need) for n in need]
    assert table["blocked_because"][need.index(max(need))].startswith("needs")
    many = gpu.plan_calls(inputs())[:1] * (gpu.MAX_CALLS + 2)
    table = gpu.guard(many, H200, 1 << 50)
    assert table["allowed"].sum() == gpu.MAX_CALLS
    assert "cap" in table["blocked_because"].iloc[-1]


def test_one_job_at_a_time(monkeypatch):
    calls = gpu.plan_calls(inputs())
    monkeypatch.setattr(gpu, "measure", lambda call: {"status": "ok", "measured_peak_extra_bytes": 1})
    assert gpu._JOB_LOCK.acquire(blocking=False)
    try:
        with pytest.raises(gpu.Busy):
            gpu.run_job(calls, [True] * len(calls))
    finally:
        gpu._JOB_LOCK.release()
    seen = []
    result = gpu.run_job(calls, [True, False], lambda done, total, text: seen.append((done, total)))
    assert len(result) == 1 and seen[-1] == (gpu.REPEATS, gpu.REPEATS)
    assert not gpu._JOB_LOCK.locked()


def test_compare_adds_prediction_and_relative_error():
    call = gpu.plan_calls(inputs())[0]
    predicted = estimate_call(call, H200).peak_extra_bytes
    row = {**gpu.call_rows([call])[0], "measured_peak_extra_bytes": predicted * 2, "status": "ok"}
    bad = {**row, "kv_heads": 5, "measured_peak_extra_bytes": 1}
    table = gpu.compare(pd.DataFrame([row, bad]), H200)
    assert table["peak_extra_bytes"][0] == predicted
    assert table["relative_error"][0] == pytest.approx(-0.5)
    assert "kv_heads" in table["error"][1]
