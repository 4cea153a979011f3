"""Production trace: a CSV of sequence lengths → the plan's budget and decode latency at P50 / P90 / P99."""

from __future__ import annotations

import csv
import dataclasses

import streamlit as st

from estimator.hardware import get_gpu
from estimator.report.explain import host_bound_decode_note
from estimator.units import GIB
from ui import cached, figures, state, sweeps, uploads
from ui.text import md, one_line, plural

st.title("Production trace")
st.caption("Size the budget and the decode SLA from the production distribution of n, not a lab-fixed n "
           "(the serving SLA). The model, workload and hardware are the ones on the planning page.")

try:
    inputs = state.current_plan_inputs(st.session_state)
except ValueError as exc:
    st.error(md(f"The plan is not valid: {one_line(exc)}"))
    st.stop()
st.markdown(f"Plan: **{md(inputs.model.name)}**, batch {inputs.batch}, {inputs.dtype}, KV {inputs.kv_dtype}, "
            f"{inputs.mode}, backend {inputs.backend}, {inputs.gpus} × {get_gpu(inputs.gpu).label}.")

uploaded = st.file_uploader("CSV of sequence lengths (a column named seq_len, n or tokens, or a single column)",
                            type=["csv", "txt"], key="trace_file")
if uploaded is None:
    st.info("Upload a trace to see its percentiles.")
    st.stop()
try:
    data = uploads.read_bytes(uploaded, uploads.CSV_MAX_BYTES, "trace")
    trace = cached.trace(data, f"trace {uploads.config_name(uploaded.name)}")  # parsed once per file content
    report = cached.trace_report(inputs, trace)
except (ValueError, csv.Error, OverflowError, RecursionError) as exc:
    st.error(md(f"Cannot use this trace: {one_line(exc)}"))
    st.stop()  # nothing of an earlier file is shown: the page renders only this file's result
table = sweeps.trace_table(report)
st.success(md(f"{plural(report['requests'], 'request')}, n from {report['min_seq_len']:,} to "
              f"{report['max_seq_len_seen']:,}; {report['share_that_fit']:.1%} fit (n ≤ "
              f"{report['max_seq_len_that_fits']:,} at batch {inputs.batch})."))
if report["skipped_rows"]:
    st.warning(md(f"{plural(report['skipped_rows'], 'row')} skipped as absurd or malformed (not UTF-8 text, or not a "
                  "positive whole number of tokens within the estimator's range): "
                  f"{'; '.join(report['skipped_examples'])}" + ("; ..." if report["skipped_rows"] > 3 else "") + "."))
shown = table.assign(**{"total (GiB)": table["total_bytes"] / GIB, "KV cache (GiB)": table["kv_cache_bytes"] / GIB})
st.dataframe(shown[["percentile", "n", "total (GiB)", "KV cache (GiB)", "fits", "prefill_time_ms",
                    "decode_time_ms_per_token"]], hide_index=True, width="stretch", key="trace_table",
             column_config={"total (GiB)": st.column_config.NumberColumn(format="%.3f"),
                            "KV cache (GiB)": st.column_config.NumberColumn(format="%.3f"),
                            "prefill_time_ms": st.column_config.NumberColumn("prefill (ms)", format="%.2f"),
                            "decode_time_ms_per_token": st.column_config.NumberColumn("decode per token (ms)",
                                                                                      format="%.3f")})
worst = table.iloc[-1]
decode = worst["decode_time_ms_per_token"]
(st.success if worst["fits"] else st.error)(
    f"P99 (n = {worst['n']:,}): {worst['total_bytes'] / GIB:,.2f} GiB per GPU, "
    f"{'fits' if worst['fits'] else 'does not fit'}"
    + (f"; decode {decode:,.3f} ms per token." if decode is not None and decode == decode else "."))
decodes = table["decode_time_ms_per_token"].dropna().round(3)
if len(decodes) > 1 and decodes.nunique() == 1:  # the same decode at every percentile: say why
    note = host_bound_decode_note(cached.budget(dataclasses.replace(inputs, seq_len=int(worst["n"]))))
    st.info(md(note or "Decode per token is the same at every percentile: the step hardly depends on n here."))
c1, c2 = st.columns(2)
c1.plotly_chart(figures.percentile_bars(table, value="total_bytes", title="Total per GPU", unit="GiB"),
                key="trace_bytes_chart")
if table["decode_time_ms_per_token"].notna().any():
    c2.plotly_chart(figures.percentile_bars(table, value="decode_time_ms_per_token", title="Decode latency per token",
                                            unit="ms"), key="trace_decode_chart")
