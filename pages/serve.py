"""Serve: a request workload on an engine's paged KV pool -> latency percentiles, throughput, KV occupancy, and
the GPUs that meet P99 targets. The model and dtype are the planning page's; logic lives in ui/serve.py and
estimator/serve/."""

from __future__ import annotations

from functools import partial

import streamlit as st

from estimator.hardware import get_gpu
from estimator.model.presets import PRESETS
from estimator.serve.engines import ENGINES
from estimator.units import gib
from ui import forms, state, uploads
from ui import serve as sv
from ui.export import safe_file_stem
from ui.text import md, one_line, plural

PREFIX = "serve_"

st.title("Serve a workload")
st.caption("A stream of requests on one engine replica: its KV pool and blocks as the engine sizes them, its step "
           "loop simulated request by request, and the fleet that meets your P99 targets. The model and dtype are "
           "the planning page's.")
try:
    plan_values = st.session_state.get("plan__saved")
    if st.session_state.get("plan_inputs") is not None:
        plan = st.session_state["plan_inputs"]
    else:  # opened from a shared link: the model travels in the plan page's URL parameters
        plan_values, plan_errors = state.values_from_query(st.query_params, presets=tuple(PRESETS))
        for message in plan_errors:
            st.warning(md(message))
        plan = state.plan_inputs(plan_values)
except ValueError as exc:
    st.error(md(f"The plan is not valid: {one_line(exc)}"))
    st.stop()
if plan.model.kind != "decoder":
    st.error(md(f"{plan.model.name} is an encoder: serving needs a decoder (a KV cache). Pick one on the plan page."))
    st.stop()
st.markdown(f"Model: **{md(plan.model.name)}**, {plan.dtype} (from the planning page).")

url_values, url_errors = sv.values_from_query(st.query_params)
for message in url_errors:
    st.warning(md(message))
forms.seed_state(PREFIX, url_values)

with st.form("serve_form"):
    c1, c2, c3 = st.columns(3)
    with c1:
        forms.gpu_select(f"{PREFIX}gpu")
        st.number_input("tp (GPUs per replica)", step=1, key=f"{PREFIX}tp")
        st.selectbox("Engine", list(ENGINES), key=f"{PREFIX}engine")
        st.selectbox("CUDA graphs", sv.CUDA_GRAPHS, key=f"{PREFIX}cuda_graphs")
    with c2:
        st.number_input("Memory fraction (0 = engine default)", step=0.05, format="%.2f",
                        key=f"{PREFIX}memory_fraction")
        st.number_input("Block size (0 = default)", step=1, key=f"{PREFIX}block_size")
        st.number_input("Max batched tokens (0 = default)", step=256, key=f"{PREFIX}max_batch_tokens")
        st.number_input("Number of blocks (0 = from memory)", step=1, key=f"{PREFIX}num_blocks")
        st.number_input("Max sequences (0 = default)", step=1, key=f"{PREFIX}max_seqs")
    with c3:
        st.radio("Workload", sv.SOURCES, key=f"{PREFIX}source", horizontal=True,
                 format_func={"synthetic": "Synthetic", "upload": "Upload a CSV"}.get)
        st.text_input("Rate (requests/s, or inf)", key=f"{PREFIX}rate")
        st.number_input("Requests", step=50, key=f"{PREFIX}requests")
        st.text_input("Prompt tokens (N, uniform:LO:HI, lognormal:MEDIAN:SIGMA)", key=f"{PREFIX}prompt_tokens")
        st.text_input("Output tokens", key=f"{PREFIX}output_tokens")
        st.number_input("Seed", step=1, key=f"{PREFIX}seed")
    uploaded = st.file_uploader("Workload CSV (arrival_s,prompt_tokens,output_tokens; used with 'Upload a CSV')",
                                type=["csv", "txt"], key=f"{PREFIX}file")
    t1, t2, t3 = st.columns(3)
    t1.number_input("P99 TTFT target, ms (0 = none)", step=100.0, key=f"{PREFIX}ttft_p99_ms")
    t2.number_input("P99 TPOT target, ms (0 = none)", step=10.0, key=f"{PREFIX}tpot_p99_ms")
    t3.number_input("Your price per GPU-hour (0 = none)", step=0.5, key=f"{PREFIX}price_per_gpu_hour")
    size_all = st.checkbox("Size every catalog GPU (slower: many simulations)", key=f"{PREFIX}size_all")
    st.form_submit_button("Simulate")

raw = forms.read_values(PREFIX, sv.DEFAULTS)
try:
    values = sv.check_values(raw)
    if values["source"] == "upload":
        if uploaded is None:
            st.info("Upload a workload CSV in the form and press **Simulate**.")
            st.stop()
        workload, bad_rows = sv.parse_upload(uploads.read_bytes(uploaded, sv.UPLOAD_MAX_BYTES, "workload"),
                                             source=f"upload {uploads.config_name(uploaded.name)}")
    else:
        workload, bad_rows = sv.synthetic(values), []
    inputs = sv.serve_inputs(plan, values, workload)
except ValueError as exc:
    st.error(md(f"Cannot simulate: {one_line(exc)}"))
    st.stop()
forms.save_values(PREFIX, values)
st.query_params.from_dict({**(state.query_from_values(plan_values) if plan_values else {}),
                           **sv.query_from_values(values)})
if bad_rows:
    st.warning(md(f"{plural(len(bad_rows), 'row')} skipped: " + "; ".join(bad_rows[:sv.BAD_ROWS_SHOWN])
                  + ("; ..." if len(bad_rows) > sv.BAD_ROWS_SHOWN else "")))

bar = st.progress(0.0, text=f"Simulating {len(workload):,} requests")
try:
    result = sv.simulate(inputs, progress=lambda f: bar.progress(f, text=f"Simulating: {f:.0%} of requests done"))
    points = sv.sweep(inputs, progress=lambda f: bar.progress(f, text=f"Rate sweep: {f:.0%}"))
except ValueError as exc:
    bar.empty()
    st.error(md(f"Cannot simulate: {one_line(exc)}"))
    st.stop()
bar.empty()
data = result.to_dict(include_requests=True)
gpu = get_gpu(values["gpu"])

if result.meets_targets is not None:
    (st.success if result.meets_targets else st.error)(
        "One replica meets the P99 targets at this workload." if result.meets_targets else
        "One replica misses the P99 targets at this workload.")
m = st.columns(6)
m[0].metric("KV blocks", f"{data['num_blocks']:,}", help=f"{data['block_size']} tokens each")
m[1].metric("Max batched tokens", f"{data['max_batch_tokens']:,}")
m[2].metric("Peak per GPU", gib(data["peak_bytes"], mib_below_1gib=False),
            help=f"of {gib(data['capacity_bytes'], mib_below_1gib=False)} on {gpu.label}")
m[3].metric("Output tokens/s", f"{data['throughput_output_tokens_per_s']:,.0f}")
m[4].metric("P99 TTFT", f"{data['ttft_ms']['p99']:,.0f} ms")
m[5].metric("P99 TPOT", "—" if data["tpot_ms"]["p99"] is None else f"{data['tpot_ms']['p99']:,.1f} ms")
st.caption(md(f"{workload.source}. Engine rule: {data['memory']['rule']} ({data['memory']['source']})."))

requests = data["requests"]
c1, c2 = st.columns(2)
c1.plotly_chart(sv.latency_cdf([r["ttft_ms"] for r in requests], title="Time to first token",
                               target_ms=values["ttft_p99_ms"] or None), key="serve_ttft_cdf")
c2.plotly_chart(sv.latency_cdf([r["tpot_ms"] for r in requests], title="Time per output token",
                               target_ms=values["tpot_p99_ms"] or None), key="serve_tpot_cdf")
st.plotly_chart(sv.timeline_figure(data["timeline"], data["num_blocks"]), key="serve_timeline")
if points:
    st.plotly_chart(sv.rate_figure(points, sv.knee(points), ttft_target=values["ttft_p99_ms"] or None,
                                   tpot_target=values["tpot_p99_ms"] or None), key="serve_rates")
else:
    st.caption("An offline batch (every request at t = 0) has no rate to sweep.")

sizing = None
if size_all and inputs.targets.given and points:
    from estimator.serve.sizing import size_fleet

    with st.spinner("Sizing every catalog GPU"):
        try:
            sizing = size_fleet(inputs)
        except ValueError as exc:
            st.error(md(f"Cannot size: {one_line(exc)}"))
    if sizing is not None:
        st.subheader("Fleet sizing")
        rows = sv.sizing_rows(sizing)
        if rows:
            st.dataframe(rows, hide_index=True, key="serve_sizing")
        else:
            st.error("No configuration of any catalog GPU meets the targets at this rate.")
elif size_all:
    st.info("Fleet sizing needs a P99 target and a workload with a rate (not an offline batch).")

stem = safe_file_stem(plan.model.name)
d1, d2 = st.columns(2)
d1.download_button("Results as CSV", data=partial(sv.result_csv, data, values, plan.model.name),
                   file_name=f"{stem}-serve.csv", mime="text/csv", key="serve_csv")
d2.download_button("Results workbook (.xlsx)", data=partial(sv.result_xlsx, data, values, plan.model.name, points,
                                                            sizing),
                   file_name=f"{stem}-serve.xlsx", key="serve_xlsx",
                   mime="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet")
st.caption("Share this simulation: the page's URL carries every field above.")
with st.expander("Assumptions"):
    for line in data["assumptions"]:
        st.markdown(f"- {md(line)}")
