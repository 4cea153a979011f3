"""Validate the plan's attention calls on this server's GPU (guarded), or display a validation CSV from elsewhere."""

from __future__ import annotations

import io

import pandas as pd
import streamlit as st

from estimator.call.config import BACKENDS
from estimator.hardware import CATALOG, get_gpu
from estimator.units import GIB
from ui import figures, gpu, state

st.title("Validate on a GPU")
st.caption("Measure the plan's attention calls by the project's protocol (peak bytes above the inputs during a "
           "warm call, the kernels that ran, the time) and compare them with the prediction.")

try:
    inputs = state.current_plan_inputs(st.session_state)
    calls = gpu.plan_calls(inputs)
except ValueError as exc:
    st.error(f"The plan is not valid: {exc}")
    st.stop()
catalog_gpu = get_gpu(inputs.gpu)
backend = st.selectbox("backend to measure", BACKENDS, index=BACKENDS.index(inputs.backend), key="validate_backend",
                       help="auto = what PyTorch picks on this GPU; eager = the hand-written reference computation")
calls = gpu.with_backend(calls, backend)
rows = gpu.call_rows(calls)
st.markdown(f"The plan (**{inputs.model.name}**, n = {inputs.seq_len:,}, batch {inputs.batch}, {inputs.dtype}, "
            f"{inputs.mode}) makes these attention calls per layer on one GPU:")
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="validate_calls")

status = gpu.cuda_status()
if status is None:
    st.warning("No CUDA GPU on this server, so nothing is measured here. Run the calls on a GPU machine and upload "
               "the result below.")
    csv_text = pd.DataFrame(rows).to_csv(index=False)
    st.download_button("Download these calls (plan_calls.csv)", data=csv_text, file_name="plan_calls.csv",
                       mime="text/csv", key="validate_download_calls", on_click="ignore")
    st.code("pip install -r requirements.txt   # with the CUDA build of torch\n"
            f"python -m validation run --in plan_calls.csv --out measured.csv --gpu {inputs.gpu}", language="bash")
else:
    st.success(f"CUDA GPU: {status['name']}, {status['free_bytes'] / GIB:,.1f} GiB free of "
               f"{status['total_bytes'] / GIB:,.1f} GiB.")
    guarded = gpu.guard(calls, catalog_gpu, status["free_bytes"])
    st.dataframe(guarded[["backend", "q_len", "kv_len", "mode", "predicted_backend", "allowed", "blocked_because"]],
                 hide_index=True, width="stretch", key="validate_guard")
    st.caption(f"Predictions use the catalog's {catalog_gpu.name} entry ({catalog_gpu.label}).")
    if st.button("Run validation", type="primary", key="validate_run", disabled=not guarded["allowed"].any()):
        bar = st.progress(0.0, text="starting")

        def on_progress(done: int, total: int, text: str) -> None:
            bar.progress(done / max(total, 1), text=f"{done}/{total} {text}")

        try:
            measured = gpu.run_job(calls, list(guarded["allowed"]), on_progress)
        except gpu.Busy as exc:
            st.error(str(exc))
        else:
            st.session_state["validate_result"] = measured

uploaded = st.file_uploader("…or upload a validation CSV (from `python -m validation run`)", type=["csv"],
                            key="validate_upload")
result = st.session_state.get("validate_result")
if uploaded is not None:
    try:
        result = pd.read_csv(io.BytesIO(uploaded.getvalue()))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        st.error(f"Cannot read this CSV: {str(exc).splitlines()[0]}")
        st.stop()
    missing = [c for c in ("measured_peak_extra_bytes", *gpu.CALL_COLUMNS) if c not in result.columns
               and c not in ("mask", "dropout", "causal")]
    if missing:
        st.error(f"Not a validation CSV: missing columns {', '.join(missing)}")
        st.stop()
if result is None or result.empty:
    st.stop()

compare_gpu = st.selectbox("compare with the prediction for", list(CATALOG), index=list(CATALOG).index(inputs.gpu),
                           key="validate_compare_gpu")
table = gpu.compare(result, get_gpu(compare_gpu))
shown = [c for c in ("id", "backend", "ran_backend", "predicted_backend", "status", "q_len", "kv_len", "mode",
                     "measured_peak_extra_bytes", "peak_extra_bytes", "relative_error", "predicted_peak_extra_bytes",
                     "rel_err_peak", "peak_within_tol", "measured_time_ms", "n_kernels", "device_name", "error")
         if c in table.columns]
st.caption(f"peak_extra_bytes and relative_error: this page's prediction for the {compare_gpu}; predicted_* and "
           "rel_err_peak: what `validation run` predicted for the GPU it ran on.")
st.dataframe(table[shown], hide_index=True, width="stretch", key="validate_result_table",
             column_config={"relative_error": st.column_config.NumberColumn(format="percent")})
ok = table["relative_error"].dropna() if "relative_error" in table.columns else pd.Series(dtype=float)
if len(ok):
    st.markdown(f"{len(ok)} rows compared; median |relative error| {ok.abs().median():.1%}, "
                f"worst {ok.abs().max():.1%}.")
st.plotly_chart(figures.measured_vs_predicted(table), key="validate_chart")
