"""Validate the plan on this server's GPU (guarded): the whole model and workload (ui/own_model.py), and the plan's
attention calls one by one; or display a validation CSV from elsewhere."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading

import pandas as pd
import streamlit as st

from estimator.call.registry import BACKENDS
from estimator.hardware import CATALOG, get_gpu
from estimator.units import GIB
from ui import cached, figures, gpu, own_model, state, uploads
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
status = gpu.cuda_status()
conf = gpu.settings()
machine, machine_why = gpu.machine_gpu(status)


def own_model_section() -> None:
    """This model, this workload, on this GPU: the plan's whole model run by `python -m validation model`."""
    st.subheader("This model, this workload, on this GPU")
    st.caption("Builds the plan's model (random weights, nothing downloaded) and runs the plan's workload once by "
               "`python -m validation model` (a child process; the same protocol as `validation.hf_models`), then "
               "puts each phase's measured peak and time beside the plan's.")
    # the guard, the budget and the plan beside the measurement: the GPU the job runs on, not the plan's
    run_inputs = dataclasses.replace(inputs, gpu=machine) if machine is not None else inputs
    try:
        cfg = own_model.config_for_plan(run_inputs, st.session_state.get("plan_config"))
        free = status["free_bytes"] if status else None
        full = cfg["num_hidden_layers"]
        fitted = own_model.fit_layers(run_inputs, cfg, free) if free is not None else full
        layers = int(st.number_input("decoder layers to build", min_value=1, max_value=full,
                                     value=max(1, min(fitted, full)), key="own_layers",
                                     help="fewer layers than the model has to fit this GPU: the plan beside the "
                                          "measurement is made for the same cut"))
        pre = own_model.preview(run_inputs, cfg, layers, free)
    except ValueError as exc:
        st.info(md(f"This plan is not measured as a whole model here: {one_line(exc)}"))
        return
    cut = f" (cut from {full}; planned for the same cut)" if layers < full else ""
    st.markdown(md(f"{inputs.model.name}: {layers} layers{cut}, {pre['case']['mode']} "
                   f"{pre['case']['precision']}, n = {inputs.seq_len:,}, batch {inputs.batch}; planned peak "
                   f"{pre['peak_bytes'] / GIB:,.2f} GiB, about {pre['predicted_s'] or 0:,.1f} s of GPU "
                   "work."))
    argv = own_model.command(run_inputs, "config.json", "measured.csv", layers=layers if layers < full else None,
                             timeout_s=conf.budget_s)
    if status is None or not conf.enabled or machine is None:
        st.warning("No CUDA GPU on this server, so nothing runs here." if status is None else
                   md(f"GPU jobs from the browser are off: {conf.why}.") if not conf.enabled else
                   md(f"GPU jobs are refused here: {machine_why}."))
        st.download_button("Download the model's config.json", data=json.dumps(cfg, indent=2, sort_keys=True),
                           file_name="config.json", mime="application/json", key="own_download_config",
                           on_click="ignore")
        st.code(" ".join(["python", *argv[1:]]), language="bash")
    else:
        if pre["reason"]:
            st.error(md(f"The guard refuses this run: {pre['reason']}."))
        over = (pre["predicted_s"] or 0) > conf.budget_s
        if over:
            st.error(md(f"Predicted {pre['predicted_s']:,.1f} s of GPU work, over the job budget of "
                        f"{duration(conf.budget_s * 1e3)}."))
        stop = st.session_state.setdefault("own_stop", threading.Event())
        c1, c2 = st.columns([1, 4])
        clicked = c1.button("Run this model", type="primary", key="own_run",
                       disabled=bool(pre["reason"]) or over or gpu.job_running())
        c2.button("Cancel", key="own_cancel", on_click=stop.set, disabled=not gpu.job_running())
        if clicked:
            stop.clear()
            bar = st.progress(0.0, text="starting")
            with tempfile.TemporaryDirectory() as folder:
                path = own_model.write_config(cfg, folder)
                run_argv = own_model.command(run_inputs, path, os.path.join(folder, "measured.csv"),
                                             layers=layers if layers < full else None, timeout_s=conf.budget_s)
                try:
                    table, lines = own_model.run_job(
                        run_argv, pre["case"]["mode"], conf.budget_s,
                        lambda f, text: bar.progress(min(f, 1.0), text=md(text)), should_stop=stop.is_set)
                except gpu.Busy as exc:
                    st.error(md(str(exc)))
                except gpu.Cancelled:
                    st.warning("Cancelled; the run was stopped and the GPU is free again.")
                except (RuntimeError, TimeoutError, OSError) as exc:
                    st.error(md(f"The run failed: {one_line(exc)}"))
                else:
                    st.session_state["own_result"] = table
    uploaded = st.file_uploader("…or upload a `validation model` result CSV", type=["csv"], key="own_upload")
    table = st.session_state.get("own_result")
    if uploaded is not None:
        try:
            table = own_model.read_result(uploads.read_bytes(uploaded, uploads.CSV_MAX_BYTES, "result CSV"))
        except ValueError as exc:
            st.error(md(f"Cannot use this file: {one_line(exc)}"))
            return
    if table is None or table.empty:
        return
    row = table.iloc[-1].to_dict()
    for line in own_model.explain(row):
        st.markdown(md(line))
    parts = own_model.parts_table(row)
    if len(parts):
        st.dataframe(parts[["phase", "component", "measured_shown", "planned_shown", "shown_unit", "error",
                            "within"]], hide_index=True, width="stretch", key="own_parts",
                     column_config={"error": st.column_config.NumberColumn(format="percent")})
        st.plotly_chart(own_model.parts_figure(parts), key="own_chart")
    st.download_button("Download the result (the command's CSV)", data=table.to_csv(index=False),
                       file_name="measured_model.csv", mime="text/csv", key="own_download", on_click="ignore")


own_model_section()
st.subheader("The plan's attention calls")
backend = st.selectbox("backend to measure", BACKENDS, index=BACKENDS.index(inputs.backend), key="validate_backend",
                       help="auto = what PyTorch picks on this GPU; eager = the hand-written reference computation")
calls = gpu.with_backend(calls, backend)
rows = gpu.call_rows(calls)
st.markdown(f"The plan (**{md(inputs.model.name)}**, n = {inputs.seq_len:,}, batch {inputs.batch}, {inputs.dtype}, "
            f"{inputs.mode}) makes these attention calls per layer on one GPU:")
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="validate_calls")

st.caption(f"GPU jobs from this page: {'allowed' if conf.enabled else 'off'} ({conf.why}). A job is refused when "
           f"its predicted GPU time is over {duration(conf.budget_s * 1e3)} (the budget, `job_budget_s` in "
           "`.streamlit/planner.toml`); it runs at most "
           f"{gpu.MAX_CALLS} calls, {gpu.REPEATS} repetitions each, one job per server at a time; **Cancel** stops it "
           "between two repetitions, and the GPU is released however the job ends.")
if status is None or not conf.enabled or machine is None:
    if status is None:
        st.warning("No CUDA GPU on this server, so nothing is measured here. Run the calls on a GPU machine and "
                   "upload the result below.")
    elif not conf.enabled:
        st.warning(md(f"This server has a CUDA GPU ({status['name']}), but GPU jobs from the browser are off: "
                      f"{conf.why}. Run the calls with the command below and upload the result."))
    else:
        st.error(md(f"GPU jobs are refused here: {machine_why}. Run the calls with the command below on a GPU the "
                    "catalog knows and upload the result."))
    csv_text = pd.DataFrame(rows).to_csv(index=False)
    st.download_button("Download these calls (plan_calls.csv)", data=csv_text, file_name="plan_calls.csv",
                       mime="text/csv", key="validate_download_calls", on_click="ignore")
    st.code("pip install -r requirements.txt   # with the CUDA build of torch\n"
            f"python -m validation run --in plan_calls.csv --out measured.csv --gpu {inputs.gpu}", language="bash")
else:
    st.success(md(f"CUDA GPU: {status['name']}, {status['free_bytes'] / GIB:,.1f} GiB free of "
                  f"{status['total_bytes'] / GIB:,.1f} GiB."))
    machine_entry = get_gpu(machine)  # the guard and the budget: the GPU the job runs on, not the plan's
    guarded = gpu.guard(calls, machine_entry, status["free_bytes"])
    st.dataframe(guarded[["backend", "q_len", "kv_len", "mode", "predicted_backend", "allowed", "blocked_because"]],
                 hide_index=True, width="stretch", key="validate_guard")
    predicted_s = gpu.predicted_job_s(guarded)
    over = predicted_s > conf.budget_s
    plan_gpu = "" if machine == catalog_gpu.name else f"; the plan's {catalog_gpu.name} is not the GPU that runs it"
    st.caption(md(f"The guard and the predictions use this server's GPU, the catalog's {machine_entry.name} entry "
                  f"({machine_entry.label}){plan_gpu}. Predicted GPU time of this job: {duration(predicted_s * 1e3)} "
                  f"(budget {duration(conf.budget_s * 1e3)})."))
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
            st.session_state["validate_result_gpu"] = machine

uploaded = st.file_uploader("…or upload a validation CSV (from `python -m validation run`)", type=["csv"],
                            key="validate_upload")
override = st.selectbox("compare with the prediction for", ["from the data", *CATALOG], key="validate_compare_gpu",
                        help="by default the GPU named in the data's device_name column; pick one to override")
wanted = None if override == "from the data" else override
if uploaded is not None:
    try:
        data = uploads.read_bytes(uploaded, uploads.CSV_MAX_BYTES, "validation CSV")
        with st.spinner("Comparing the file with the prediction (once per file)..."):
            table, compare_gpu, torch_version, said, data_gpu, notes = cached.validation_table(data, wanted)
    except ValueError as exc:
        st.error(md(f"Cannot use this file: {one_line(exc)}"))
        st.stop()  # the previous file's result is not shown
    for note in notes:
        st.warning(md(note))
    st.caption(md(f"The data says: {said}" + (f" (catalog: {data_gpu})" if data_gpu else
                                               " (no catalog GPU matches it)") + "."))
else:
    result = st.session_state.get("validate_result")
    if result is None or result.empty:
        st.stop()
    compare_gpu = wanted or st.session_state.get("validate_result_gpu") or inputs.gpu
    torch_version = None
    table = gpu.compare(result, get_gpu(compare_gpu), estimate=cached.estimate)
shown = [c for c in ("csv_line", "id", "backend", "ran_backend", "predicted_backend", "status", "q_len", "kv_len",
                     "mode",
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
