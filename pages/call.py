"""One attention call: which backend PyTorch picks and why the others cannot run, its peak, FLOPs and time."""

from __future__ import annotations

import streamlit as st

from estimator.call.backends import DEFAULT_TORCH
from estimator.call.config import AttentionCall
from estimator.hardware import get_gpu
from estimator.units import GIB
from ui import cached, figures, forms, state, sweeps
from ui.text import duration, md, one_line

PREFIX = "call_"
TORCH_VERSION = DEFAULT_TORCH

st.title("One attention call")
st.caption("One `scaled_dot_product_attention` call (or the hand-written eager path): q (batch, q_heads, q_len, "
           "head_dim), k and v (batch, kv_heads, kv_len, head_dim). Peak extra bytes follow the project's "
           "measurement protocol: memory above the inputs during a warm call.")

top = st.container()  # warnings, the verdict and the headline numbers: above the form, in view at 1280x720
url_values, url_errors = state.call_values_from_query(st.query_params)
for message in url_errors:
    top.warning(md(message))
forms.seed_state(PREFIX, url_values)
forms.call_form(PREFIX)
values = forms.read_values(PREFIX, state.CALL_DEFAULTS)

try:
    gpu = get_gpu(values["gpu"])
    call = AttentionCall(**state.call_kwargs(values))  # the mask kind and its size as one mask (window:W)
except ValueError as exc:
    top.error(md(f"Cannot estimate this call: {one_line(exc)}"))
    st.stop()
st.query_params.from_dict(state.call_query_from_values(values))
forms.save_values(PREFIX, values)

try:
    est = cached.estimate(call, gpu, TORCH_VERSION)
except ValueError as exc:
    top.error(md(f"Cannot estimate this call: {one_line(exc)}"))
    st.stop()


def known_reasons(est) -> list[str]:
    """Why the call cannot run: the asked backend's reasons; for auto, the reasons every backend shares first."""
    own = list(est.reasons.get(call.backend, ()))
    if own:
        return own
    every = [set(r) for r in est.reasons.values() if r]
    shared = set.intersection(*every) if every else set()
    rest = [r for rs in est.reasons.values() for r in rs if r not in shared]
    return sorted(shared) + list(dict.fromkeys(rest))


if not est.supported:
    reasons = known_reasons(est)
    top.error(md(f"The {call.backend} backend cannot run this call on the {gpu.label}: "
                + ("; ".join(reasons) if reasons else "no backend accepts it (no reason recorded)")))
    st.subheader("Backends")
    st.table(sweeps.backend_text(sweeps.backend_table(call, gpu, torch_version=TORCH_VERSION,
                                                      estimate=cached.estimate)))
    st.stop()
else:
    total = est.input_bytes + est.peak_extra_bytes
    verdict = top.success if est.fits else top.error
    verdict(f"{'Fits' if est.fits else 'Does not fit'}: inputs {est.input_bytes / GIB:,.3f} GiB + peak extra "
            f"{est.peak_extra_bytes / GIB:,.3f} GiB = {total / GIB:,.3f} GiB of {gpu.memory_bytes / GIB:,.1f} GiB "
            f"on the {gpu.label}.")
m1, m2, m3, m4 = top.columns(4)
m1.metric("backend that runs", est.selected_backend)
m2.metric("peak extra (GiB)", f"{est.peak_extra_bytes / GIB:,.3f}")
m3.metric("time", duration(est.time_ms))
m4.metric("FLOPs (FlopCounterMode)", f"{est.flops:.3e}")
lo, hi = est.error_band
top.caption(f"peak extra {est.peak_extra_bytes:,} bytes · score matrix (textbook B·H·L·S·element) "
           f"{est.scores_bytes:,} bytes · executed FLOPs {est.executed_flops:.3e} · measured error band "
           f"{lo:+.1%} / {hi:+.1%}")

st.subheader("Backends")
table = sweeps.backend_table(call, gpu, torch_version=TORCH_VERSION, estimate=cached.estimate)
st.table(sweeps.backend_text(table))

st.subheader("Memory against n")
n_now = call.kv_len
sweep = sweeps.call_sweep(call, gpu, sweeps.n_grid(n_now), torch_version=TORCH_VERSION, estimate=cached.estimate)
st.plotly_chart(figures.memory_vs_n(sweep, capacity_bytes=gpu.memory_bytes, capacity_label=gpu.name,
                                    title="Inputs + peak extra for one call, per backend", current_n=n_now),
                key="call_memory_chart")
