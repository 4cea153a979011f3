"""Every page under Streamlit's AppTest: no exception, inputs change the numbers, bad input → st.error, the GPU
runner mocked on the validate page."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.presets import get_preset
from estimator.units import gib

ROOT = Path(__file__).resolve().parents[1]

TIMEOUT = 60  # seconds per script run: the first run imports pandas and plotly


def app(page: str | None = None, query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    if query:
        at.query_params.update(query)
    at.run()
    if page:
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def plain(markdown: str) -> str:
    """An alert's text as the browser shows it (the pages backslash-escape Markdown punctuation)."""
    return re.sub(r"\\(.)", r"\1", markdown)


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def submit(at: AppTest, label: str) -> AppTest:
    next(b for b in at.button if b.label == label).click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def frame_with(at: AppTest, column: str) -> pd.DataFrame:
    """The first st.dataframe on the page that has this column (AppTest does not look data frames up by key)."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def gib_text(value: int) -> str:
    return gib(value, mib_below_1gib=False)


def plan_for(**changes) -> dict:
    fields = dict(model=get_preset("llama-3-8b"), seq_len=8192, batch=1, dtype="bfloat16", kv_dtype="bfloat16",
                  mode="inference", backend="auto", gpu="h200", gpus=1)
    fields.update(changes)
    return make_plan(PlanInputs(**fields)).to_dict()


# --- plan page --------------------------------------------------------------------------------------------------

def test_plan_defaults_match_the_estimator():
    at = app()
    assert metric(at, "total per GPU") == gib_text(plan_for()["total_bytes"])
    assert any(f"Attention backend: {plan_for()['selected_backend']}" in plain(x.value) for x in at.success)
    assert not at.error
    assert at.query_params["seq_len"] == ["8192"] or at.query_params["seq_len"] == "8192"


def test_plan_changing_n_and_batch_changes_the_numbers():
    at = app()
    before = metric(at, "total per GPU")
    at.number_input(key="plan_seq_len").set_value(65536)
    at.number_input(key="plan_batch").set_value(4)
    submit(at, "Plan")
    after = metric(at, "total per GPU")
    assert after != before
    assert after == gib_text(plan_for(seq_len=65536, batch=4)["total_bytes"])


def test_plan_from_url_and_bad_url_parameter_warns():
    at = app(query={"seq_len": "32768", "gpu": "a100-80gb", "batch": "zero"})
    assert metric(at, "total per GPU") == gib_text(plan_for(seq_len=32768, gpu="a100-80gb")["total_bytes"])
    assert any("batch" in plain(w.value) for w in at.warning)


def test_plan_bad_custom_architecture_shows_error_not_exception():
    at = app()
    at.radio(key="plan_source").set_value("custom").run()
    at.number_input(key="plan_kv_heads").set_value(5)
    submit(at, "Plan")
    assert any("kv_heads" in plain(e.value) for e in at.error)
    assert not at.metric  # nothing rendered past the error


def test_plan_training_eager_and_tp_errors_are_one_line():
    at = app()
    at.selectbox(key="plan_mode").set_value("training")
    at.selectbox(key="plan_backend").set_value("eager")
    submit(at, "Plan")
    assert metric(at, "total per GPU") == gib_text(plan_for(mode="training", backend="eager")["total_bytes"])
    at.number_input(key="plan_tp").set_value(3)
    submit(at, "Plan")
    assert any("tp" in plain(e.value) for e in at.error)


def test_plan_training_with_zero_and_parallelism_from_url():
    query = {"preset": "llama-2-70b", "mode": "training", "seq_len": "4096", "batch": "64", "gpus": "64",
             "tp": "8", "zero": "3", "micro_batch": "1", "sequence_parallel": "1", "checkpointing": "full"}
    at = app(query=query)
    expected = plan_for(model=get_preset("llama-2-70b"), mode="training", seq_len=4096, batch=64, gpus=64, tp=8,
                        zero=3, micro_batch=1, sequence_parallel=True, checkpointing="full")
    assert metric(at, "total per GPU") == gib_text(expected["total_bytes"])
    at.selectbox(key="plan_zero").set_value(0)
    submit(at, "Plan")
    assert metric(at, "total per GPU") != gib_text(expected["total_bytes"])


def test_plan_hf_config_upload():
    cfg = {"model_type": "llama", "num_hidden_layers": 16, "hidden_size": 2048, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 128256, "tie_word_embeddings": True}
    at = app()
    at.radio(key="plan_source").set_value("hf-config").run()
    assert any("Upload" in plain(i.value) for i in at.info)
    at.file_uploader(key="plan_config_file").upload("config.json", json.dumps(cfg).encode(), "application/json")
    submit(at, "Plan")
    from estimator.model.hf_config import from_hf_config
    expected = plan_for(model=from_hf_config(cfg, name="config"))["total_bytes"]
    assert metric(at, "total per GPU") == gib_text(expected)
    assert at.query_params["layers"] in ("16", ["16"])
    at.file_uploader(key="plan_config_file").upload("config.json", b"{not json", "application/json")
    submit(at, "Plan")
    assert any("config" in plain(e.value) for e in at.error)


def test_plan_tabs_charts_advice_and_exports_render():
    at = app(query={"seq_len": "131072", "batch": "8"})
    assert [t.label for t in at.tabs] == ["Budget", "Charts", "Advice", "Export"]
    assert len(at.table) == 2 and not at.get("plotly_chart")  # lazy tabs: only the open one ran
    at.session_state["plan_view"] = "Charts"
    at.run()
    assert not at.exception and len(at.get("plotly_chart")) == 3
    at.session_state["plan_view"] = "Advice"
    at.run()
    from estimator.advice.plan_rules import advise
    expected = [a.title for a in advise(PlanInputs(model=get_preset("llama-3-8b"), seq_len=131072, batch=8,
                                                   gpu="h200"))]
    shown = [plain(e.label) for e in at.expander]
    assert expected and all(any(title in label for label in shown) for title in expected)
    assert at.get("graphviz_chart"), "the decision tree is drawn as a graph"
    at.session_state["plan_view"] = "Export"
    at.run()
    assert [b.label for b in at.get("download_button")] == ["Plan as CSV", "Plan as JSON"]
    submit(at, "Prepare the budget spreadsheet (.xlsx)")  # the workbook is built when asked, with a progress bar
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["Budget spreadsheet (.xlsx)", "Plan as CSV", "Plan as JSON"]
    assert not [b for b in at.button if b.label.startswith("Prepare")]  # prepared for this plan: no second build


# --- one attention call --------------------------------------------------------------------------------------------

def test_call_page_changes_and_errors():
    at = app("pages/call.py")
    before = metric(at, "peak extra (GiB)")
    at.number_input(key="call_q_len").set_value(32768)
    at.number_input(key="call_kv_len").set_value(32768)
    at.selectbox(key="call_backend").set_value("math")
    submit(at, "Estimate")
    assert metric(at, "peak extra (GiB)") != before
    at.selectbox(key="call_backend").set_value("eager")
    submit(at, "Estimate")
    assert metric(at, "backend that runs") == "eager"
    at.selectbox(key="call_backend").set_value("flash")
    at.selectbox(key="call_dtype").set_value("float32")
    submit(at, "Estimate")  # flash cannot run fp32: a plain error with the reason, not an exception
    assert any("flash" in plain(e.value) and "float16" in plain(e.value) for e in at.error)
    assert not at.metric  # no FLOPs 0 or empty peak for a call that cannot run
    at.number_input(key="call_kv_heads").set_value(5)
    submit(at, "Estimate")
    assert any("kv_heads" in plain(e.value) for e in at.error)


def page_alone(page: str, query: dict) -> AppTest:
    """One page run on its own with a query string (through app.py the planning page rewrites the URL first)."""
    at = AppTest.from_file(str(ROOT / page), default_timeout=TIMEOUT)
    at.query_params.update(query)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_call_page_causal_with_mask_gives_the_known_reason():
    at = page_alone("pages/call.py", {"causal": "1", "mask": "bool", "backend": "auto"})
    assert any("is_causal and attn_mask are both set" in plain(e.value) for e in at.error)
    assert not at.metric


def test_markdown_in_share_links_is_shown_as_text_on_every_page():
    query = {"gpu": "[Session expired](https://evil.example/login)", "dtype": "![x](http://127.0.0.1:9/track.png)"}
    for page in ("app.py", "pages/call.py"):
        at = page_alone(page, query)
        texts = [w.value for w in at.warning] + [e.value for e in at.error]
        assert texts and all("](" not in t for t in texts), texts  # no link or image can form
        assert any("evil.example" in plain(t) for t in texts)


def test_out_of_range_form_values_are_errors_not_plans():
    at = app()
    at.number_input(key="plan_batch").set_value(0)
    submit(at, "Plan")
    assert any("batch" in plain(e.value) for e in at.error) and not at.metric


def test_cannot_run_plan_shows_reason_and_fix_without_totals():
    at = app(query={"backend": "flash", "dtype": "float32"})
    assert any("Cannot run" in plain(e.value) and "float16" in plain(e.value) for e in at.error)
    assert any("auto" in plain(i.value) for i in at.info)
    assert not at.metric and "none" not in " ".join(plain(e.value) for e in at.error)


def test_preset_change_sets_its_default_n_and_notes_show_beside_the_verdict():
    at = app()
    at.selectbox(key="plan_preset").set_value("vit-l-16").run()
    assert at.number_input(key="plan_seq_len").value == 197
    at = app(query={"seq_len": "65536"})  # llama-3-8b was trained on 8,192 positions
    assert any("8,192 positions" in plain(w.value) for w in at.warning)


def test_precision_and_optimizer_reach_the_plan_and_the_url():
    at = app(query={"mode": "training", "seq_len": "4096", "precision": "bf16-true", "optimizer": "sgd"})
    expected = plan_for(mode="training", seq_len=4096, precision="bf16-true", optimizer="sgd")
    assert metric(at, "total per GPU") == gib_text(expected["total_bytes"])
    at.selectbox(key="plan_optimizer").set_value("adamw")
    submit(at, "Plan")
    assert at.query_params["optimizer"] in ("adamw", ["adamw"]) and at.query_params["precision"] in (
        "bf16-true", ["bf16-true"])


def test_uploaded_config_hostile_inputs_are_one_line_errors():
    at = app()
    at.radio(key="plan_source").set_value("hf-config").run()
    deep = ("[" * 100000 + "]" * 100000).encode()
    huge_int = ('{"num_hidden_layers": ' + "9" * 400 + "}").encode()
    for name, data in (("deep.json", deep), ("=1+2+cmd|' /C calc'!A0.json", huge_int), ("big.json", b" " * (2 << 20))):
        at.file_uploader(key="plan_config_file").upload(name, data, "application/json")
        submit(at, "Plan")
        assert at.error and all("\n" not in e.value for e in at.error), name


# --- production trace --------------------------------------------------------------------------------------------

def test_trace_page_percentiles_and_bad_file():
    at = app("pages/trace.py")
    assert any("Upload" in plain(i.value) for i in at.info)
    lengths = "\n".join(str(n) for n in [1000] * 90 + [20000] * 9 + [100000])
    at.file_uploader(key="trace_file").upload("trace.csv", f"prompt_tokens\n{lengths}\n".encode(), "text/csv")
    at.run()
    assert not at.exception
    table = frame_with(at, "percentile")
    assert list(table["percentile"]) == ["P50", "P90", "P99"] and list(table["n"]) == [1000, 1000, 20000]
    at.file_uploader(key="trace_file").upload("bad.csv", b"a,b\n1,2\n", "text/csv")
    at.run()
    assert any("no column named" in plain(e.value) for e in at.error)


# --- validate ----------------------------------------------------------------------------------------------------

def test_validate_without_gpu_shows_command_and_reads_upload(monkeypatch):
    import ui.gpu
    monkeypatch.setattr(ui.gpu, "cuda_status", lambda: None)
    at = app("pages/validate.py")
    assert any("No CUDA GPU" in plain(w.value) for w in at.warning)
    assert any("python -m validation run" in c.value for c in at.code)
    rows = pd.DataFrame([{"id": "x", "backend": "flash", "dtype": "bfloat16", "batch": 1, "q_heads": 8,
                          "kv_heads": 8, "head_dim": 128, "q_len": 4096, "kv_len": 4096, "causal": 1,
                          "mask": "none", "dropout": 0.0, "mode": "forward", "status": "ok",
                          "measured_peak_extra_bytes": 8 << 20, "ran_backend": "flash", "n_kernels": 1}])
    at.file_uploader(key="validate_upload").upload("measured.csv", rows.to_csv(index=False).encode(), "text/csv")
    at.run()
    assert not at.exception
    table = frame_with(at, "ran_backend")
    assert table["ran_backend"][0] == "flash" and pd.notna(table["relative_error"][0])
    at.file_uploader(key="validate_upload").upload("other.csv", b"a,b\n1,2\n", "text/csv")
    at.run()
    assert any("not a validation CSV" in plain(e.value) for e in at.error)


def test_validate_with_mocked_gpu_runs_guarded_job(monkeypatch):
    import ui.gpu
    calls = []

    def fake_measure(call):
        calls.append(call)
        return {"status": "ok", "measured_peak_extra_bytes": 123 << 20, "measured_time_ms": 1.5,
                "ran_backend": "flash", "n_kernels": 1, "torch_flops": None, "error": ""}

    monkeypatch.setattr(ui.gpu, "cuda_status",
                        lambda: {"name": "NVIDIA H200", "free_bytes": 140 << 30, "total_bytes": 141 << 30})
    monkeypatch.setattr(ui.gpu, "measure", fake_measure)
    monkeypatch.setenv("PLANNER_ENABLE_GPU_JOBS", "true")
    at = app("pages/validate.py")
    assert any("CUDA GPU: NVIDIA H200" in plain(s.value) for s in at.success)
    next(b for b in at.button if b.label == "Run validation").click()
    at.run()
    assert not at.exception
    assert len(calls) == 2 * ui.gpu.REPEATS  # inference plan: the prefill call and one decode step, repeated
    assert not ui.gpu.job_running()  # the lock is released
    table = frame_with(at, "ran_backend")
    assert list(table["ran_backend"]) == ["flash", "flash"]


def test_validate_gpu_jobs_off_off_localhost_and_over_budget(monkeypatch):
    import ui.gpu
    monkeypatch.setattr(ui.gpu, "cuda_status",
                        lambda: {"name": "NVIDIA H200", "free_bytes": 140 << 30, "total_bytes": 141 << 30})
    monkeypatch.setattr(ui.gpu, "measure", lambda call: pytest.fail("measured while jobs are off"))
    monkeypatch.setenv("PLANNER_ENABLE_GPU_JOBS", "false")
    at = app("pages/validate.py")
    assert any("off" in plain(w.value) for w in at.warning) and not any(b.label == "Run validation" for b in at.button)
    assert not ui.gpu.settings(environ={}).enabled  # opt-in: the checked-in planner.toml says false
    assert ui.gpu.settings(environ={"PLANNER_ENABLE_GPU_JOBS": "true"}).enabled
    monkeypatch.setenv("PLANNER_ENABLE_GPU_JOBS", "true")
    monkeypatch.setenv("PLANNER_JOB_BUDGET_S", "0.000001")
    at = app("pages/validate.py")
    assert any("over the budget" in plain(e.value) for e in at.error)
    assert next(b for b in at.button if b.label == "Run validation").disabled


def test_validate_cancel_stops_between_repetitions_and_releases_the_lock(monkeypatch):
    import ui.gpu
    from estimator.model.layer_attention import attention_call
    seen = []
    monkeypatch.setattr(ui.gpu, "measure", lambda call: seen.append(call) or {"status": "ok",
                        "measured_peak_extra_bytes": 1, "measured_time_ms": 1.0})
    call = attention_call(PlanInputs(model=get_preset("llama-3-8b"), seq_len=1024, gpu="h200"))
    with pytest.raises(ui.gpu.Cancelled):
        ui.gpu.run_job([call], [True], should_stop=lambda: len(seen) >= 2)
    assert len(seen) == 2 and not ui.gpu.job_running()


def test_validate_upload_uses_the_data_gpu_and_reports_bad_files(monkeypatch):
    import ui.gpu
    monkeypatch.setattr(ui.gpu, "cuda_status", lambda: None)
    row = {"id": "x", "backend": "flash", "dtype": "bfloat16", "batch": 1, "q_heads": 8, "kv_heads": 8,
           "head_dim": 128, "q_len": 4096, "kv_len": 4096, "causal": 1, "mask": "none", "dropout": 0.0,
           "mode": "forward", "status": "ok", "measured_peak_extra_bytes": 8 << 20, "ran_backend": "flash",
           "n_kernels": 1, "device_name": "NVIDIA A100-SXM4-80GB", "torch_version": "2.11.0+cu130"}
    at = app("pages/validate.py")
    at.file_uploader(key="validate_upload").upload("m.csv", pd.DataFrame([row]).to_csv(index=False).encode(),
                                                   "text/csv")
    at.run()
    assert any("a100-80gb" in plain(c.value) for c in at.caption)
    for data in (pd.DataFrame([{**row, "measured_peak_extra_bytes": "lots"}]).to_csv(index=False).encode(),
                 pd.DataFrame([{**row, "q_len": -1}]).to_csv(index=False).encode(), b"\xff\xfe\x00garbage"):
        at.file_uploader(key="validate_upload").upload("bad.csv", data, "text/csv")
        at.run()
        assert not at.exception and at.error and not at.get("plotly_chart"), data[:40]


def test_validate_guard_blocks_calls_that_do_not_fit(monkeypatch):
    import ui.gpu
    monkeypatch.setenv("PLANNER_ENABLE_GPU_JOBS", "true")
    monkeypatch.setattr(ui.gpu, "cuda_status",
                        lambda: {"name": "NVIDIA L4", "free_bytes": 1 << 30, "total_bytes": 2 << 30})
    monkeypatch.setattr(ui.gpu, "measure", lambda call: pytest.fail("a blocked call was measured"))
    at = app("pages/validate.py")
    guard = frame_with(at, "blocked_because")
    assert not guard["allowed"].any() and guard["blocked_because"].str.contains("guard allows").any()


# --- decision tree -----------------------------------------------------------------------------------------------

def test_tree_page_renders_the_tree():
    at = app("pages/tree.py")
    assert any("profile-first" in c.value for c in at.code)
    assert "#FFE08A" in at.get("graphviz_chart")[0].proto.spec  # the default plan's path is highlighted


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_validate_displays_a_real_cpu_validation_run(tmp_path, monkeypatch):
    """`python -m validation run` on the CPU (eager with GQA, and math), its CSV uploaded to the page."""
    import subprocess

    import ui.gpu
    monkeypatch.setattr(ui.gpu, "cuda_status", lambda: None)
    calls = pd.DataFrame([
        {"id": "a", "backend": "eager", "dtype": "float32", "batch": 1, "q_heads": 4, "kv_heads": 2, "head_dim": 32,
         "q_len": 128, "kv_len": 128, "causal": 1, "mask": "none", "dropout": 0.0, "mode": "forward"},
        {"id": "b", "backend": "math", "dtype": "float32", "batch": 1, "q_heads": 4, "kv_heads": 4, "head_dim": 32,
         "q_len": 1, "kv_len": 128, "causal": 0, "mask": "none", "dropout": 0.0, "mode": "forward"}])
    calls.to_csv(tmp_path / "calls.csv", index=False)
    subprocess.run([sys.executable, "-m", "validation", "run", "--in", str(tmp_path / "calls.csv"), "--out",
                    str(tmp_path / "measured.csv"), "--device", "cpu", "--repeats", "1"], cwd=ROOT, check=True,
                   capture_output=True)
    at = app("pages/validate.py")
    at.file_uploader(key="validate_upload").upload("measured.csv", (tmp_path / "measured.csv").read_bytes(),
                                                   "text/csv")
    at.run()
    assert not at.exception and not at.error
    table = frame_with(at, "ran_backend")
    assert list(table["ran_backend"]) == ["eager", "math"]
    assert list(table["status"]) == ["ok", "ok"]
    assert table["measured_peak_extra_bytes"].gt(0).all() and table["relative_error"].notna().all()
