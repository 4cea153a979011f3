"""Plan a model: the verdict and headline numbers (above the form), the form, then budget, charts, advice, exports."""

from __future__ import annotations

import time
from functools import partial

import streamlit as st

from estimator.hardware import get_gpu
from estimator.model.hf_config import TEXT_ONLY_NOTE
from estimator.model.hybrid import HYBRID_PRESET_CONFIGS
from estimator.model.presets import PRESETS
from estimator.model.vision_presets import VISION_PRESETS
from estimator.report.explain import communication_lines, zero_lines
from estimator.units import gib
from ui import cached, export, figures, forms, hybrid_view, state, sweeps, uploads, vision_view
from ui.text import duration, human, md, one_line
from ui.tree_graph import tree_dot

PREFIX = "plan_"
HEADLINE_FLUSH_S = 0.004  # see the sleep after the headline below (docs/speed.md)
SOURCE_LABELS = {"preset": "Preset", "custom": "Custom architecture", "hf-config": "Hugging Face config.json"}


gib_text = partial(gib, missing="—", mib_below_1gib=False)  # the page's style: always GiB


def xlsx_bytes(inputs, progress=None) -> bytes:
    """The budget workbook; `progress(fraction, text)` is told as its budgets are computed (most of the time)."""
    sweep = cached.plan_sweep(inputs, tuple(sweeps.n_grid(inputs.seq_len)))
    plan_fn = cached.budget if progress is None else export.counting_plan_fn(inputs, cached.budget, progress)
    return export.plan_xlsx(cached.plan(inputs), sweep, cached.advice(inputs), plan_fn=plan_fn)


def csv_text(inputs) -> str:
    return export.plan_csv(cached.plan(inputs))


def json_text(inputs) -> str:
    return export.plan_json(cached.plan(inputs), cached.advice(inputs))


def safe_advice(inputs) -> tuple:
    try:
        return cached.advice(inputs), ""
    except Exception as exc:  # noqa: BLE001 - a failing advisor must not take the budget down with it
        return (), f"The advisor could not run ({type(exc).__name__}): {one_line(exc)}"


def show_advice(items) -> None:
    for item in items:
        with st.expander(f"**{md(human(item.title))}** · `{item.id}`", expanded=False):
            st.markdown(f"**Why.** {md(human(item.why))}")
            st.markdown(f"**Expected effect.** {md(human(item.expected_effect))}")
            if item.bytes_before is not None and item.bytes_after is not None and item.bytes_before != item.bytes_after:
                st.caption(md(f"{human(item.bytes_metric)}: {gib_text(item.bytes_before)} → "
                              f"{gib_text(item.bytes_after)}"))


def text_inputs(values: dict, uploaded):
    """(inputs, config spec or None, caption or None) of a text model's form values; None when the form still
    needs a config.json; ValueError naming the field when the values cannot be planned."""
    config_spec = None
    if values.get("source") == "hf-config":
        if uploaded is None:
            return None
        config_spec = uploads.config_spec(uploaded)
        values.update(state.arch_values(config_spec))
    state.check_form_values(values)
    inputs = state.plan_inputs(values, config_spec)
    caption = None
    vit_n = vision_view.vit_tokens(values, inputs.model)  # a ViT at an image size: n comes from the image
    if vit_n is not None:
        from dataclasses import replace as _replace

        inputs = _replace(inputs, seq_len=vit_n, batch=inputs.batch * max(1, int(values.get("images", 1))))
        caption = (f"tokens: vision encoder {vit_n:,} per image ({values['image_size']} px, patch "
                   f"{inputs.model.patch_size}: (H//p)·(W//p) + 1 class token)")
    return inputs, config_spec, caption


# The plan is computed before anything is drawn, and the verdict and headline numbers are written before the form:
# a re-run then reaches the browser as one burst with the new numbers in it, ahead of the form's widgets (each
# burst of elements costs the browser a re-render of the page: docs/speed.md). The form's values as last
# submitted (and the other widgets' values) are in the session state before their widgets are drawn.
presets = [*PRESETS, *VISION_PRESETS, *HYBRID_PRESET_CONFIGS]
url_values, url_errors = state.values_from_query(st.query_params, presets=tuple(presets))
forms.seed_state(PREFIX, url_values)
values = forms.read_values(PREFIX, state.PLAN_DEFAULTS)
source = values.get("source", "preset")  # the "Model from" radio's value, drawn below
uploaded = st.session_state.get(f"{PREFIX}config_file") if source == "hf-config" else None
hybrid = image_model = prepared = plan = problem = None
try:
    hybrid = hybrid_view.hybrid_model(values, uploaded)
    if hybrid is None:
        image_model = vision_view.image_model(values, uploaded)
    if hybrid is None and image_model is None:
        prepared = text_inputs(values, uploaded)
        if prepared is not None:
            plan = cached.budget(prepared[0])  # the solvers (largest n and batch) run after the verdict, below
except ValueError as exc:
    problem = f"Cannot plan this: {one_line(exc)}"

st.title("Plan a model")
top = st.container()  # warnings and errors, then the verdict and headline numbers: above the form
verdict_box = st.container(key="plan_verdict")  # sticky (VERDICT_CSS): still in view after scrolling to Plan
heads = st.container()
for message in url_errors:
    top.warning(md(message))

_drawn: set[str] = set()


def draw_pick() -> None:
    """Once per run, under the headline: the sticky verdict's CSS, then the model source and the preset."""
    if "pick" in _drawn:
        return
    _drawn.add("pick")
    # The verdict stays at the top of the view while the page scrolls (the form's Plan button is below the fold at
    # 1280x720, and a re-run keeps the scroll position). Static CSS, no user text.
    st.html("<style>div:has(> .st-key-plan_verdict){position:sticky;top:3.75rem;z-index:990;"
            "background-color:var(--background-color, #fff);}</style>")  # the keyed block's wrapper is the flex item
    pick = st.columns([2, 3])
    with pick[0]:
        st.radio("Model from", state.MODEL_SOURCES, key=f"{PREFIX}source", horizontal=True,
                 format_func=SOURCE_LABELS.get)
    with pick[1]:
        if source == "preset":
            forms.preset_select(PREFIX, presets)


def draw_form() -> None:
    """Once per run: the model source and preset, then the form (the containers above keep their places)."""
    draw_pick()
    if "form" not in _drawn:
        _drawn.add("form")
        forms.plan_form(PREFIX, presets, source)


def stop() -> None:
    """End the run with the form on the page (every path that stops before the form is drawn)."""
    draw_form()
    st.stop()


if prepared is not None and prepared[2] is not None:
    top.caption(md(prepared[2]))  # a ViT's tokens from its image size
if problem is not None:
    top.error(md(problem))
    stop()

# --- a model with its own plan: a state-space / hybrid model (mamba2, falcon_h1, bamba) on the torch fallback, or
# a Swin or vision-language model planned tower by tower (tokens per modality first) --------------------------------
for special, view in ((hybrid, hybrid_view), (image_model, vision_view)):
    if special is None:
        continue
    try:
        state.check_form_values({k: v for k, v in values.items() if k not in state.ARCH_FIELDS})
        draw_form()
        view.render(top, special, values)
    except ValueError as exc:
        top.error(md(f"Cannot plan this: {one_line(exc)}"))
        stop()
    st.query_params.from_dict(state.query_from_values(values))
    forms.save_values(PREFIX, {k: v for k, v in values.items() if k in state.PLAN_DEFAULTS})
    st.stop()

if prepared is None:
    top.info("Upload a Hugging Face `config.json` in the form and press **Plan**.")
    stop()
inputs, config_spec, _ = prepared
share_query = state.query_from_values(values)  # the URL that shares this plan: set after the headline, below
forms.save_values(PREFIX, {k: v for k, v in values.items() if k in state.PLAN_DEFAULTS})
st.session_state["plan_inputs"] = inputs  # the trace and validate pages work on this plan
# the uploaded config.json itself, for the Validate page to build the model from (ui/own_model.py)
st.session_state["plan_config"] = uploads.config_dict(uploaded) if config_spec is not None else None


def draw_form_and_caveats() -> None:
    """The form, then (under it) what the uploaded config's plan leaves out."""
    draw_form()
    if config_spec is not None and config_spec.windowed:
        st.caption("The shared URL carries this config's architecture, not its per-layer sliding windows.")
    if config_spec is not None and TEXT_ONLY_NOTE in config_spec.source:
        st.warning("This config is a vision-language model; the plan covers its text model only: the vision "
                   "tower's weights, activations and image tokens are not planned.")


gpu = get_gpu(inputs.gpu)
notes = [a for a in plan.assumptions if a.startswith("Note:")]

# --- a plan that cannot run: the reason and the fix, no totals or times ---------------------------------------
if not plan.supported:
    with top:
        st.error(md(f"Cannot run: {plan.verdict}"))
        for note in notes:
            st.warning(md(note))
        advice, advisor_error = safe_advice(inputs)
        fixes = [a for a in advice if a.id not in ("profile-first", "log-backend", "split-prefill-decode")]
        if inputs.backend != "auto":
            st.info("Fix: choose the attention backend **auto** (PyTorch then picks one that can run), or one "
                    "that the table below says can run.")
        for item in fixes[:3]:
            st.info(md(f"Fix ({item.id}): {human(item.title)}. {human(item.expected_effect)}"))
        if advisor_error:
            st.error(md(advisor_error))
    st.query_params.from_dict(share_query)
    draw_form_and_caveats()
    from estimator.model.layer_attention import priced_attention_call

    st.subheader("Which backends can run this call")
    st.table(sweeps.backend_text(sweeps.backend_table(priced_attention_call(inputs), gpu,
                                                      torch_version=inputs.torch_version,
                                                      estimate=cached.estimate)))
    st.stop()

# --- verdict -------------------------------------------------------------------------------------------------
fit = plan.fit  # the one verdict: the CLI table, the JSON, the advice and the workbook say the same
where = gpu.label + (f" (× {inputs.gpus}: tp {inputs.tp}, cp {inputs.cp}, dp {inputs.dp})" if inputs.gpus > 1 else "")
runs = f" Attention backend: {plan.selected_backend}."
sentence = fit.text(gib_text)
banner = verdict_box.success if fit.fits else verdict_box.error
banner(md(f"{sentence[0].upper()}{sentence[1:]} (the {where}).{runs}"))
with heads:
    for note in notes:
        st.warning(md(note.removeprefix("Note: ")))
    c1, c2, c3, c4, c5 = st.columns(5)
    c1.metric("total per GPU", gib_text(fit.total_bytes))
    c2.metric("allocator reserve", gib_text(fit.allocator_reserve_bytes),
              help="the step's largest single block, kept free: near the limit the caching allocator runs out in "
                   "fragments")
    c3.metric("headroom" if fit.fits else "short by", gib_text(fit.headroom_bytes if fit.fits else fit.short_by_bytes),
              help="capacity − total − allocator reserve")
    max_n_slot, max_batch_slot = c4.empty(), c5.empty()  # filled when the solvers have run, next
# A few milliseconds without the interpreter: the server's sender thread sends the headline as one burst (while the
# solvers below hold the interpreter it gets it back once per message), which the browser renders while the
# solvers and the backend table are computed; only then come the widgets (each burst of elements the browser
# receives re-renders the page: docs/speed.md).
time.sleep(HEADLINE_FLUSH_S)
st.query_params.from_dict(share_query)  # the browser's address bar: one more message, after the headline
solved = cached.plan(inputs)  # the largest n and batch: binary searches over the budget (memoised)
max_n_slot.metric("largest n that fits", f"{solved.max_seq_len:,}", help=f"at batch {inputs.batch}")
max_batch_slot.metric("largest batch that fits", f"{solved.max_batch:,}", help=f"at n = {inputs.seq_len:,}")
from estimator.model.layer_attention import priced_attention_call  # noqa: E402 - the page's script, not a module

call = priced_attention_call(inputs)  # the widest layer's call as the plan prices it (the Budget view's table)


def backend_rows():
    return sweeps.backend_table(call, gpu, torch_version=inputs.torch_version, estimate=cached.estimate)


VIEWS = ("Budget", "Charts", "Advice", "Export")
# the Budget view is the open one (the tabs' state is the open tab's label): its table is computed before the widgets
backends = backend_rows() if st.session_state.get("plan_view", VIEWS[0]) == VIEWS[0] else None
draw_form_and_caveats()

parts = [(c.label, c.bytes) for c in plan.components]  # the budget's rows as (label, bytes per GPU)
budget_tab, charts_tab, advice_tab, export_tab = st.tabs(VIEWS, key="plan_view", on_change="rerun")
# Only the open tab runs (lazy tabs): the first render and a re-run after a submit skip the charts' sweep.

# --- budget --------------------------------------------------------------------------------------------------
if budget_tab.open:
    with budget_tab:
        st.table(sweeps.budget_text(sweeps.budget_table(parts, plan.total_bytes)).set_index("component"))
        st.caption(f"Textbook score matrix (b·h·L·S·element): {gib_text(plan.textbook_scores_bytes)}; what the "
                   f"chosen backend materialises: {gib_text(plan.attention_scores_bytes)}. KV cache per token: "
                   f"{plan.kv_cache_bytes_per_token:,} bytes.")
        if inputs.mode == "training":
            st.caption(f"Parameters: {plan.params:,} in the model, {plan.trainable_params:,} trainable per GPU "
                       f"({inputs.finetune} fine-tuning).")
        st.subheader("Attention backend")
        # `call`: the widest layer's call as the plan prices it (a window through SDPA: the dense bool-masked call);
        # its backend table was computed above when this view was open before the run
        if backends is None:
            backends = backend_rows()
        st.markdown(f"Per layer, each GPU makes the call **q ({call.batch}, {call.q_heads}, {call.q_len}, "
                    f"{call.head_dim}), k/v ({call.batch}, {call.kv_heads}, {call.kv_len}, {call.head_dim})**, "
                    f"{call.dtype}, {'causal, ' if call.causal else ''}"
                    f"{f'{call.mask} mask, ' if call.mask != 'none' else ''}{call.mode}. "
                    + ("It runs the hand-written **eager** path." if inputs.backend == "eager"
                       else f"PyTorch {inputs.torch_version} will run **{plan.selected_backend}**."))
        st.table(sweeps.backend_text(backends))
        st.subheader("FLOPs and time")
        t1, t2, t3, t4 = st.columns(4)
        t1.metric("prefill FLOPs", f"{plan.prefill_flops:.3e}")
        t2.metric("prefill time", duration(plan.prefill_time_ms))
        if inputs.mode == "training":
            t3.metric("training step FLOPs", f"{plan.training_step_flops:.3e}")
            t4.metric("training step time", duration(plan.step_time_ms))
        else:
            t3.metric("decode FLOPs per token", "—" if plan.decode_flops_per_token is None
                      else f"{plan.decode_flops_per_token:.3e}")
            t4.metric("decode time per token", duration(plan.decode_time_ms_per_token))
        comm_lines = communication_lines(plan)
        if comm_lines:
            st.subheader("Communication")
            st.markdown("Exposed per GPU, what overlap leaves on the critical path:\n"
                        + "\n".join(f"- {md(line)}" for line in comm_lines))
        zero = zero_lines(plan, cached.budget)
        if zero:
            st.subheader("ZeRO stages")
            st.markdown(f"Each stage re-planned over the {inputs.dp} data-parallel replicas:\n"
                        + "\n".join(f"- {md(line)}" for line in zero))
        with st.expander("Assumptions behind these numbers"):
            st.markdown("\n".join(f"- {md(a)}" for a in plan.assumptions) or "none listed")
            st.json(plan.echoed_inputs(), expanded=False)

# --- charts --------------------------------------------------------------------------------------------------
if charts_tab.open:
    with charts_tab:
        sweep = cached.plan_sweep(inputs, tuple(sweeps.n_grid(inputs.seq_len)))
        st.plotly_chart(figures.memory_vs_n(sweep, capacity_bytes=plan.capacity_bytes, capacity_label=gpu.name,
                                            title="Total per GPU against n, each backend forced",
                                            current_n=inputs.seq_len), key="memory_chart")
        left, right = st.columns(2)
        left.plotly_chart(figures.budget_breakdown(parts, capacity_bytes=plan.capacity_bytes,
                                                   capacity_label=gpu.name), key="budget_chart")
        right.plotly_chart(figures.shares(
            {"attention": plan.attention_share, "FFN": plan.ffn_share, "embedding": plan.embedding_share},
            title=f"Share of the {'training step' if inputs.mode == 'training' else 'prefill'} time"),
            key="shares_chart")
        right.caption("Attention = q/k/v/o projections + the attention core; 'other' = norms and residual adds.")

# --- advice --------------------------------------------------------------------------------------------------
if advice_tab.open:
    with advice_tab:
        advice, advisor_error = safe_advice(inputs)
        if advisor_error:
            st.error(md(advisor_error))
        show_advice(advice)
        st.markdown("**The decision tree the advice follows** (this plan's path highlighted)")
        st.graphviz_chart(tree_dot({a.id for a in advice}), width="stretch")

# --- export --------------------------------------------------------------------------------------------------
if export_tab.open:
    with export_tab:
        stem = f"plan-{export.safe_file_stem(inputs.model.name)}-n{inputs.seq_len}-b{inputs.batch}-{inputs.gpu}"
        st.caption("Every row of the spreadsheet's Budget sheet is a formula of its Inputs sheet: edit n or batch "
                   "there and the total and the verdict recompute (the backend-specific rows from the estimator's "
                   "values tabulated over n and batch; between grid points the sheet states its interpolation "
                   "bound and, that near the limit, asks for a re-plan). `python -m estimator plan ... --xlsx PATH` "
                   "writes the same "
                   "workbook.")
        e1, e2, e3 = st.columns(3)
        # The workbook tabulates some 600-1,100 budgets (seconds): built when asked, with a progress bar, kept for
        # this session's plan; the CSV and JSON are generated when clicked (deferred). A re-run of the form pays
        # for none of them.
        ready = st.session_state.get("xlsx_workbook")  # (inputs, bytes) of the workbook last prepared in this session
        slot = e1.empty()  # the Prepare button, then its progress bar, then nothing
        if (ready is None or ready[0] != inputs) and slot.button("Prepare the budget spreadsheet (.xlsx)",
                                                                 key="prepare_xlsx"):
            bar = slot.progress(0.0, text="Tabulating the budgets over n and batch")
            data = xlsx_bytes(inputs, progress=lambda fraction, text: bar.progress(fraction, text=text))
            slot.empty()
            st.session_state["xlsx_workbook"] = ready = (inputs, data)
        if ready is not None and ready[0] == inputs:
            e1.download_button("Budget spreadsheet (.xlsx)", data=ready[1], file_name=f"{stem}.xlsx",
                               key="download_xlsx", on_click="ignore",
                               mime="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet")
        e2.download_button("Plan as CSV", data=partial(csv_text, inputs), file_name=f"{stem}.csv",
                           mime="text/csv", key="download_csv", on_click="ignore")
        e3.download_button("Plan as JSON", data=partial(json_text, inputs), file_name=f"{stem}.json",
                           mime="application/json", key="download_json", on_click="ignore")
