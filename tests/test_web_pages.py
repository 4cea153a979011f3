"""Page probes (Streamlit's AppTest) for the web side's security findings: GPU jobs are opt-in, not inferred from the
listen address; the guard and the time budget come from the GPU the job runs on; uploads that are heavy, carry a
bad byte or a bad row cost only what is bad, said with its line number; a vision-language config says text-only."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from estimator.hardware import get_gpu
from tests.test_app_pages import app, plain  # noqa: F401 - the page harness, one home

ROOT = Path(__file__).resolve().parents[1]
H200 = {"name": "NVIDIA H200", "free_bytes": 140 << 30, "total_bytes": 141 << 30}


def texts(elements) -> list[str]:
    return [plain(e.value) for e in elements]


@pytest.fixture
def no_job(monkeypatch):
    import ui.gpu
    monkeypatch.setattr(ui.gpu, "measure", lambda call: pytest.fail("measured"))
    monkeypatch.delenv("PLANNER_ENABLE_GPU_JOBS", raising=False)
    monkeypatch.delenv("PLANNER_JOB_BUDGET_S", raising=False)
    return ui.gpu


def test_gpu_jobs_are_off_on_a_localhost_server_unless_opted_in(no_job, monkeypatch):
    """A server on localhost is reachable from any page its operator visits: no Run button by default."""
    monkeypatch.setattr(no_job, "cuda_status", lambda: H200)
    at = app("pages/validate.py")
    assert not any(b.label == "Run validation" for b in at.button)
    assert any("opt-in" in w for w in texts(at.warning))
    monkeypatch.setenv("PLANNER_ENABLE_GPU_JOBS", "true")
    at = app("pages/validate.py")
    assert any(b.label == "Run validation" for b in at.button)


def test_the_budget_is_computed_for_the_servers_gpu_not_the_plans(no_job, monkeypatch):
    """The default plan is on an H200; the server has an L4. A budget between the two predictions refuses the job."""
    from ui import gpu, state

    calls = gpu.plan_calls(state.current_plan_inputs({}))
    on = {name: gpu.predicted_job_s(gpu.guard(calls, get_gpu(name), 20 << 30)) for name in ("h200", "l4")}
    assert on["l4"] > 4 * on["h200"]
    monkeypatch.setattr(no_job, "cuda_status", lambda: {"name": "NVIDIA L4", "free_bytes": 20 << 30,
                                                        "total_bytes": 22 << 30})
    monkeypatch.setenv("PLANNER_ENABLE_GPU_JOBS", "true")
    monkeypatch.setenv("PLANNER_JOB_BUDGET_S", repr(math.sqrt(on["h200"] * on["l4"])))
    at = app("pages/validate.py")
    assert any("over the budget" in e for e in texts(at.error))
    assert next(b for b in at.button if b.label == "Run validation").disabled


def test_the_guard_prices_calls_on_the_servers_gpu(no_job, monkeypatch):
    """A T4 has no flash kernel for this call (sm75): the guard's predicted backend is the T4's, not the H200's."""
    from estimator.call.attention import estimate_call
    from ui import gpu, state

    calls = gpu.plan_calls(state.current_plan_inputs({}))
    expected = [estimate_call(c, get_gpu("t4")).selected_backend for c in calls]
    assert expected != [estimate_call(c, get_gpu("h200")).selected_backend for c in calls]
    monkeypatch.setattr(no_job, "cuda_status", lambda: {"name": "Tesla T4", "free_bytes": 14 << 30,
                                                        "total_bytes": 15 << 30})
    monkeypatch.setenv("PLANNER_ENABLE_GPU_JOBS", "true")
    at = app("pages/validate.py")
    guard = next(d.value for d in at.dataframe if "blocked_because" in d.value.columns)
    assert list(guard["predicted_backend"]) == expected


def test_an_unknown_gpu_is_refused_plainly(no_job, monkeypatch):
    monkeypatch.setattr(no_job, "cuda_status", lambda: {"name": "Acme Tensor Unit 9", "free_bytes": 80 << 30,
                                                        "total_bytes": 80 << 30})
    monkeypatch.setenv("PLANNER_ENABLE_GPU_JOBS", "true")
    at = app("pages/validate.py")
    assert not any(b.label == "Run validation" for b in at.button)
    assert any("Acme Tensor Unit 9" in e and "not in the catalog" in e for e in texts(at.error))


# --- the plan page: a vision-language config ----------------------------------------------------------------------

def test_a_vision_language_config_is_planned_with_its_vision_tower_never_silently_as_text():
    cfg = {"model_type": "gemma3", "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                                                   "model_type": "gemma3_text", "num_hidden_layers": 34},
           "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}}
    at = app()
    at.radio(key="plan_source").set_value("hf-config").run()
    at.file_uploader(key="plan_config_file").upload("config.json", json.dumps(cfg).encode(), "application/json")
    next(b for b in at.button if b.label == "Plan").click()
    at.run()
    assert not at.exception and not at.error, texts(at.error)
    captions = [c.value for c in at.caption]
    assert any("vision encoder 4,096 per image" in c for c in captions), captions  # the tower's own tokens
    assert any("vision tower" in c and "language model" in c for c in captions), captions  # the budget by part


def test_a_json_string_upload_plans_no_server_file(tmp_path):
    real = tmp_path / "config.json"
    real.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 3, "hidden_size": 64,
                                "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}))
    at = app()
    at.radio(key="plan_source").set_value("hf-config").run()
    seen = []
    for path in (real, tmp_path / "absent.json"):
        at.file_uploader(key="plan_config_file").upload("c.json", json.dumps(str(path)).encode(), "application/json")
        next(b for b in at.button if b.label == "Plan").click()
        at.run()
        seen.append(texts(at.error))
    assert seen[0] == seen[1] and any("expected a JSON object" in e for e in seen[0]), seen


def test_a_bom_config_is_accepted_on_the_web():
    cfg = {"model_type": "llama", "num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100}
    at = app()
    at.radio(key="plan_source").set_value("hf-config").run()
    at.file_uploader(key="plan_config_file").upload("c.json", b"\xef\xbb\xbf" + json.dumps(cfg).encode(),
                                                   "application/json")
    next(b for b in at.button if b.label == "Plan").click()
    at.run()
    assert not at.exception, at.exception  # the Validate page's copy of the config read it too (ui/uploads.py)
    assert not at.error, texts(at.error)
    assert at.query_params["layers"] in ("3", ["3"])


# --- the trace page and the validate upload: a bad byte or row costs that row ----------------------------------

def test_one_bad_byte_costs_the_trace_one_row_with_its_line_number():
    body = b"seq_len\n" + b"\n".join(b"%d" % (1000 + i) for i in range(99)) + b"\n12\xff34\n"
    at = app("pages/trace.py")
    at.file_uploader(key="trace_file").upload("t.csv", body, "text/csv")
    at.run()
    assert not at.exception and not at.error, texts(at.error)
    table = next(d.value for d in at.dataframe if "percentile" in d.value.columns)
    assert list(table["percentile"]) == ["P50", "P90", "P99"]
    assert any("line 101" in w and "UTF-8" in w for w in texts(at.warning)), texts(at.warning)


VALID_ROW = {"id": "x", "backend": "flash", "dtype": "bfloat16", "batch": 1, "q_heads": 8, "kv_heads": 8,
             "head_dim": 128, "q_len": 4096, "kv_len": 4096, "causal": 1, "mask": "none", "dropout": 0.0,
             "mode": "forward", "status": "ok", "measured_peak_extra_bytes": 8 << 20, "ran_backend": "flash",
             "n_kernels": 1, "device_name": "NVIDIA H200", "torch_version": "2.11.0+cu130"}


def test_a_bad_byte_or_row_in_a_validation_csv_costs_that_row(monkeypatch):
    import ui.gpu
    monkeypatch.setattr(ui.gpu, "cuda_status", lambda: None)
    text = pd.DataFrame([VALID_ROW] * 5).to_csv(index=False).encode()
    lines = text.splitlines(keepends=True)
    lines[3] = lines[3].replace(b"flash", b"fl\xffsh", 1)  # a bad byte on line 4
    lines.insert(5, b'x,flash,"unclosed\n')  # a malformed row on line 6 (one field, an open quote)
    at = app("pages/validate.py")
    at.file_uploader(key="validate_upload").upload("m.csv", b"".join(lines), "text/csv")
    at.run()
    assert not at.exception and not at.error, texts(at.error)
    table = next(d.value for d in at.dataframe if "relative_error" in d.value.columns)
    assert pd.to_numeric(table["relative_error"], errors="coerce").notna().sum() == 4
    said = " ".join(texts(at.warning))
    assert "line 4" in said and "line 6" in said, said


def test_a_heavy_validation_csv_is_bounded_in_rows(monkeypatch):
    """A ~3 MiB result with 30,000 distinct calls: the page reads at most MAX_RESULT_ROWS of them (lowered here to
    keep the test short; still over INLINE_ROWS, so the worker process compares them) and says so."""
    import ui.gpu
    from ui import cached, result_csv
    monkeypatch.setattr(ui.gpu, "cuda_status", lambda: None)
    monkeypatch.setattr(result_csv, "MAX_RESULT_ROWS", cached.INLINE_ROWS + 20)
    rows = [{**VALID_ROW, "id": f"r{i}", "q_len": 1024 + i, "kv_len": 1024 + i} for i in range(30_000)]
    data = pd.DataFrame(rows).to_csv(index=False).encode()
    assert len(data) < 5 << 20
    at = app("pages/validate.py")
    at.file_uploader(key="validate_upload").upload("big.csv", data, "text/csv")
    at.run()
    assert not at.exception and not at.error, texts(at.error)
    table = next(d.value for d in at.dataframe if "relative_error" in d.value.columns)
    assert len(table) == result_csv.MAX_RESULT_ROWS < 30_000
    assert any(f"first {result_csv.MAX_RESULT_ROWS:,}" in w for w in texts(at.warning)), texts(at.warning)


def test_the_worker_is_stopped_at_its_time_limit_and_frees_the_slot():
    import time

    from ui import offload

    with pytest.raises(ValueError, match="took more than 1 s and was stopped"):
        offload.run(time.sleep, 3600, timeout_s=1)  # returns only because the worker is killed, not waited for
    assert offload.run(divmod, 7, 2, timeout_s=60) == (3, 1)  # the slot is free again
    with pytest.raises(ValueError, match="integer division or modulo by zero"):
        offload.run(divmod, 1, 0, timeout_s=60)
