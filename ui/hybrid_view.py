"""The plan page for a state-space / hybrid model (mamba2, falcon_h1, bamba: a hybrid preset or an uploaded
config.json): the verdict, where the memory goes and the time band of the prefill (with one decode step) or the
training step on transformers' torch fallback, and the advice (estimator/advice/hybrid_rules.py). Everything a user
typed is escaped (`md`) before it is shown."""

from __future__ import annotations

import streamlit as st

from estimator.model.hybrid import claims_config, get_hybrid_preset, hybrid_from_hf_config
from estimator.units import gib
from ui.text import md, one_line

TRUE_PRECISION = {"bfloat16": "bf16-true", "float16": "16-true"}


def hybrid_model(values, uploaded):
    """The HybridSpec the form names (a hybrid preset, or a config.json of a hybrid model_type), or None.
    ValueError (one line) for a hybrid config this planner refuses."""
    if values.get("source") == "preset":
        return get_hybrid_preset(values.get("preset", ""))
    if values.get("source") != "hf-config" or uploaded is None:
        return None
    from ui import uploads

    cfg = uploads.config_dict_or_none(uploaded)
    if cfg is None:
        return None
    if not claims_config(cfg):
        return None
    return hybrid_from_hf_config(cfg, name=uploads.config_name(getattr(uploaded, "name", "config")))


def _request(values) -> dict:
    """The plan arguments of the form, or ValueError naming the field that does not apply."""
    mode = values.get("mode", "inference")
    if mode not in ("inference", "training"):
        raise ValueError(f"mode: {mode!r} is not priced for a state-space/hybrid model (inference or training)")
    for key, unset in (("tp", 1), ("cp", 1), ("window", 0), ("zero", 0), ("checkpointing", "none"),
                       ("finetune", "full"), ("backend", "auto")):
        if values.get(key, unset) != unset:
            raise ValueError(f"{key}: does not apply to a state-space/hybrid plan (the torch fallback, one GPU)")
    dtype = values.get("dtype", "bfloat16")
    precision = values.get("precision", "auto")
    if mode == "training" and precision not in ("auto", TRUE_PRECISION.get(dtype)):
        raise ValueError(f"precision: a hybrid training step is priced as {TRUE_PRECISION.get(dtype, 'bf16-true')} "
                         f"(the model in {dtype}), not {precision}")
    return {"mode": "training" if mode == "training" else "prefill", "seq_len": int(values["seq_len"]),
            "batch": int(values["batch"]), "dtype": dtype, "gpu": values.get("gpu", "h200"),
            "optimizer": values.get("optimizer", "adamw")}


def render(top, spec, values) -> None:
    from estimator.advice.hybrid_rules import hybrid_advice
    from estimator.model.hybrid_plan import hybrid_plan

    req = _request(values)
    kw = {k: req[k] for k in ("seq_len", "batch", "dtype", "gpu")}
    plans = ([hybrid_plan(spec, mode="training", optimizer=req["optimizer"], **kw)] if req["mode"] == "training"
             else [hybrid_plan(spec, mode="prefill", **kw), hybrid_plan(spec, mode="decode", **kw)])
    with top:
        st.caption(md(f"{spec.name}: {spec.model_type}, {spec.params:,} parameters, {spec.mamba_layers} Mamba2 / "
                      f"{spec.attention_layers} attention layers. Priced path: {plans[0].path}."))
        for p in plans:
            say = st.success if p.fits else st.error
            say(md(f"{p.mode}: {p.verdict.text(gib)}"))
    st.subheader("Where the memory goes")
    rows = []
    for p in plans:
        parts = [("weights", p.weights_bytes), ("optimizer state", p.optimizer_bytes),
                 ("cache state (conv + ssm)", p.state_bytes), ("KV cache", p.kv_cache_bytes),
                 ("activations (+ gradients when training)", p.activation_bytes),
                 ("cuBLAS workspace + CUDA context", p.workspace_bytes + p.context_bytes)]
        rows += [{"step": p.mode, "component": c, "GiB": f"{b / 2**30:.2f}", "bytes": f"{b:,}"} for c, b in parts if b]
    st.table(rows)
    st.subheader("Time (estimates)")
    for p in plans:
        if p.time_ms is None:
            st.caption(md(f"{p.mode}: not modelled (the fallback's decode times measured on the H200 are not "
                          "explained by its kernels' prices; docs/hybrids.md)."))
        else:
            lo, hi = p.time_band_ms
            st.caption(md(f"{p.mode}: about {p.time_ms:,.0f} ms, measured band {lo:,.0f} to {hi:,.0f} ms "
                          "(estimator/model/hybrid_time.py)."))
    st.subheader("Advice")
    try:
        items = hybrid_advice(spec, **req)
    except ValueError as exc:
        st.warning(md(f"The advisor could not run: {one_line(exc)}"))
        return
    for item in items:
        with st.expander(f"**{md(item.title)}** · `{item.id}`"):
            st.markdown(f"**Why.** {md(item.why)}")
            st.markdown(f"**Expected effect.** {md(item.expected_effect)}")
