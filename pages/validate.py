"""Validate the plan's attention calls on this server's GPU (guarded), or display a validation CSV from elsewhere."""

from __future__ import annotations

import threading

import pandas as pd
import streamlit as st

from estimator.call.registry import BACKENDS
from estimator.hardware import CATALOG, get_gpu
from estimator.units import GIB
from ui import cached, figures, gpu, state, uploads
from ui.text import duration, md, one_line, plural

st.title("Validate on a GPU")
st.caption("Measure the plan's attention calls by the project's protocol (peak bytes above the inputs during a "
           "warm call, the kernels that ran, the time) and compare them with the prediction.")

try:
    inputs = state.current_plan_inputs(st.session_state)
    calls = gpu.plan_calls(inputs)
except ValueError as exc:
    st.error(md(f"The plan is not valid: {one_line(exc)}"))
    st.stop()
catalog_gpu = get_gpu(inputs.gpu)
backend = st.selectbox("backend to measure", BACKENDS, index=BACKENDS.index(inputs.backend), key="validate_backend",
                       help="auto = what PyTorch picks on this GPU; eager = the hand-written reference computation")
calls = gpu.with_backend(calls, backend)
rows = gpu.call_rows(calls)
st.markdown(f"The plan (**{md(inputs.model.name)}**, n = {inputs.seq_len:,}, batch {inputs.batch}, {inputs.dtype}, "
            f"{inputs.mode}) makes these attention calls per layer on one GPU:")
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="validate_calls")

status = gpu.cuda_status()
conf = gpu.settings(st.get_option("server.address"))
st.caption(f"GPU jobs from this page: {'allowed' if conf.enabled else 'off'} ({conf.why}). A job is refused when "
           f"its predicted GPU time is over {duration(conf.budget_s * 1e3)} (the budget, `job_budget_s` in "
           "`.streamlit/planner.toml`); it runs at most "
           f"{gpu.MAX_CALLS} calls, {gpu.REPEATS} repetitions each, one job per server at a time; **Cancel** stops it "
           "between two repetitions, and the GPU is released however the job ends.")
if status is None or not conf.enabled:
    if status is None:
        st.warning("No CUDA GPU on this server, so nothing is measured here. Run the calls on a GPU machine and "
                   "upload the result below.")
    else:
        st.warning(md(f"This server has a CUDA GPU ({status['name']}), but GPU jobs from the browser are off: "
                      f"{conf.why}. Run the calls with the command below and upload the result."))
    csv_text = pd.DataFrame(rows).to_csv(index=False)
    st.download_button("Download these calls (plan_calls.csv)", data=csv_text, file_name="plan_calls.csv",
                       mime="text/csv", key="validate_download_calls", on_click="ignore")
    st.code("pip install -r requirements.txt   # with the CUDA build of torch\n"
            f"python -m validation run --in plan_calls.csv --out measured.csv --gpu {inputs.gpu}", language="bash")
else:
    st.success(md(f"CUDA GPU: {status['name']}, {status['free_bytes'] / GIB:,.1f} GiB free of "
                  f"{status['total_bytes'] / GIB:,.1f} GiB."))
    guarded = gpu.guard(calls, catalog_gpu, status["free_bytes"])
    st.dataframe(guarded[["backend", "q_len", "kv_len", "mode", "predicted_backend", "allowed", "blocked_because"]],
                 hide_index=True, width="stretch", key="validate_guard")
    predicted_s = gpu.predicted_job_s(guarded)
    over = predicted_s > conf.budget_s
    st.caption(md(f"Predictions use the catalog's {catalog_gpu.name} entry ({catalog_gpu.label}). Predicted GPU time "
                  f"of this job: {duration(predicted_s * 1e3)} (budget {duration(conf.budget_s * 1e3)})."))
    if over:
        st.error(md(f"This job is predicted to take {duration(predicted_s * 1e3)}, over the budget of "
                    f"{duration(conf.budget_s * 1e3)}: make n or the batch smaller, or raise job_budget_s."))
    stop = st.session_state.setdefault("validate_stop", threading.Event())
    b1, b2 = st.columns([1, 4])
    run = b1.button("Run validation", type="primary", key="validate_run",
                    disabled=over or not guarded["allowed"].any() or gpu.job_running())
    b2.button("Cancel", key="validate_cancel", on_click=stop.set, disabled=not gpu.job_running())
    if run:
        stop.clear()
        bar = st.progress(0.0, text="starting")

        def on_progress(done: int, total: int, text: str) -> None:
            bar.progress(min(done / max(total, 1), 1.0), text=f"{done}/{total} {text}")

        try:
            measured = gpu.run_job(calls, list(guarded["allowed"]), on_progress, should_stop=stop.is_set)
        except gpu.Busy as exc:
            st.error(md(str(exc)))
        except gpu.Cancelled:
            st.warning("Cancelled; the GPU is free again.")
        else:
            st.session_state["validate_result"] = measured

uploaded = st.file_uploader("…or upload a validation CSV (from `python -m validation run`)", type=["csv"],
                            key="validate_upload")
override = st.selectbox("compare with the prediction for", ["from the data", *CATALOG], key="validate_compare_gpu",
                        help="by default the GPU named in the data's device_name column; pick one to override")
wanted = None if override == "from the data" else override
if uploaded is not None:
    try:
        data = uploads.read_bytes(uploaded, uploads.CSV_MAX_BYTES, "validation CSV")
        table, compare_gpu, torch_version, said, data_gpu = cached.validation_table(data, wanted)
    except ValueError as exc:
        st.error(md(f"Cannot use this file: {one_line(exc)}"))
        st.stop()  # the previous file's result is not shown
    st.caption(md(f"The data says: {said}" + (f" (catalog: {data_gpu})" if data_gpu else
                                               " (no catalog GPU matches it)") + "."))
else:
    result = st.session_state.get("validate_result")
    if result is None or result.empty:
        st.stop()
    compare_gpu = wanted or inputs.gpu
    torch_version = None
    table = gpu.compare(result, get_gpu(compare_gpu), estimate=cached.estimate)
shown = [c for c in ("id", "backend", "ran_backend", "predicted_backend", "status", "q_len", "kv_len", "mode",
                     "measured_peak_extra_bytes", "peak_extra_bytes", "relative_error", "within_tolerance",
                     "predicted_peak_extra_bytes",
                     "rel_err_peak", "peak_within_tol", "measured_time_ms", "n_kernels", "device_name", "error")
         if c in table.columns]
st.caption(md(f"peak extra bytes and relative error: this page's prediction for the {compare_gpu}"
              + (f" with torch {torch_version}" if torch_version else "") + "; predicted_* and rel_err_peak: what "
              "`validation run` predicted for the GPU it ran on."))
st.dataframe(table[shown], hide_index=True, width="stretch", key="validate_result_table",
             column_config={"relative_error": st.column_config.NumberColumn(format="percent")})
ok = pd.to_numeric(table["relative_error"], errors="coerce").dropna() if "relative_error" in table.columns \
    else pd.Series(dtype=float)
errors = int(table["error"].astype(str).str.len().gt(0).sum()) if "error" in table.columns else 0
if len(ok):
    unpredicted = f" {plural(errors, 'row')} could not be predicted." if errors else ""
    within = int(table["within_tolerance"].eq(True).sum()) if "within_tolerance" in table.columns else 0
    st.markdown(f"{plural(len(ok), 'row')} compared: {within} within max(3%, 2 MiB); median \\|relative error\\| "
                f"{ok.abs().median():.1%}, worst {ok.abs().max():.1%} (small calls are judged by the 2 MiB floor)."
                f"{unpredicted}")
else:
    st.error("No row could be compared: every row lacks a numeric measurement or a valid call.")
    st.stop()
st.plotly_chart(figures.measured_vs_predicted(table), key="validate_chart")
