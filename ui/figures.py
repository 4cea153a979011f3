"""Plotly figures for the app: pure functions of estimator data, tested without Streamlit.

Bytes arrive as exact ints and are shown in GiB (2**30) only here, at the formatting edge. Log axes
and layout shapes do not mix well (a shape's y on a log axis is log10 of the value), so capacity
lines are drawn as ordinary two-point traces: they sit at the right height and carry their label in
the legend and the hover text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import pandas as pd
import plotly.graph_objects as go

from estimator.units import GIB
from ui.text import chart_text

BACKEND_COLORS = {"math": "#d62728", "flash": "#1f77b4", "efficient": "#2ca02c", "cudnn": "#9467bd",
                  "eager": "#ff7f0e", "flex": "#8c564b", "flash-attn": "#17becf", "auto": "#7f7f7f"}
BACKEND_DASHES = {"math": "solid", "flash": "dash", "efficient": "dot", "cudnn": "dashdot", "eager": "longdash",
                  "flex": "longdashdot", "flash-attn": "dash", "auto": "solid"}
BACKEND_MARKERS = {"math": "circle", "flash": "square", "efficient": "diamond", "cudnn": "triangle-up",
                   "eager": "x", "flex": "star", "flash-attn": "hexagon", "auto": "circle-open"}
_HOVER_GIB = "%{y:,.3f} GiB"


def _n_ticks(ns: list[int]) -> tuple[list[int], list[str]]:
    """Powers of two across the range (every other one past 8 ticks), labelled 256, 1k, 32k, 1M."""
    lo, hi = max(min(ns), 1), max(ns)
    powers = [1 << k for k in range(lo.bit_length() - 1, hi.bit_length() + 1) if lo <= 1 << k <= hi] or [lo]
    step = max(1, -(-len(powers) // 8))
    powers = powers[::step]

    def label(n: int) -> str:
        return f"{n >> 20}M" if n >= 1 << 20 else f"{n >> 10}k" if n >= 1 << 10 else str(n)

    return powers, [label(n) for n in powers]


def _gib_ticks(values: list[float]) -> tuple[list[float], list[str]]:
    """1-2-5 steps in GiB across the range: 0.5 GiB, 1 GiB, 2 GiB, 5 GiB, 10 GiB, ..."""
    lo, hi = min(values), max(values)
    ticks = []
    for exp in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2):
        for m in (1, 2, 5):
            v = m * 10.0 ** exp
            if lo / 1.5 <= v <= hi * 1.5:
                ticks.append(v)
    if len(ticks) > 9:  # a wide range: one tick per power of ten
        ticks = [v for v in ticks if f"{v:g}".lstrip("0.").startswith("1")]
    return ticks, [f"{v:,g} GiB" for v in ticks]


def gib(value_bytes: int | float | None) -> float | None:
    """Bytes → GiB (2**30) for display; None and NaN stay None."""
    if value_bytes is None or (isinstance(value_bytes, float) and math.isnan(value_bytes)):
        return None
    return value_bytes / GIB


def memory_vs_n(sweep: pd.DataFrame, *, capacity_bytes: int, capacity_label: str, y_column: str = "total_bytes",
                title: str = "Memory against sequence length", current_n: int | None = None) -> go.Figure:
    """Log-log memory against n, one line per backend, with the GPU's capacity as a labelled line.

    `sweep` has columns n, backend and `y_column` (bytes, NaN or None where that backend cannot run).
    """
    for column in ("n", "backend", y_column):
        if column not in sweep.columns:
            raise ValueError(f"sweep: missing column {column!r}")
    fig = go.Figure()
    ns = sorted(int(n) for n in sweep["n"].unique())
    for backend, rows in sweep.groupby("backend", sort=False):
        rows = rows.sort_values("n")
        y = [gib(v) if pd.notna(v) else None for v in rows[y_column]]
        name = chart_text(backend)
        if all(v is None for v in y):  # cannot run at any n: named in the legend with the reason
            reason = ""
            if "error" in rows.columns:
                reason = next((str(e) for e in rows["error"] if isinstance(e, str) and e), "")
                reason = reason.split(": ", 1)[-1].split(";")[0]
                reason = reason if len(reason) <= 48 else reason[:47] + "…"
            name = chart_text(f"{backend}: cannot run" + (f" ({reason})" if reason else ""))
        else:
            missing = [int(n) for n, v in zip(rows["n"], y, strict=True) if v is None]
            if missing:
                name = chart_text(f"{backend} (cannot run from n = {min(missing):,})" if min(missing) > min(ns)
                                  else f"{backend} (cannot run at some n)")
        fig.add_trace(go.Scatter(
            x=list(rows["n"].astype(int)), y=y, mode="lines+markers", name=name,
            line={"color": BACKEND_COLORS.get(str(backend)), "dash": BACKEND_DASHES.get(str(backend), "solid")},
            marker={"symbol": BACKEND_MARKERS.get(str(backend), "circle"), "size": 7}, connectgaps=False,
            visible=True if any(v is not None for v in y) else "legendonly",
            hovertemplate=f"{chart_text(backend)}<br>n = %{{x:,}}<br>{_HOVER_GIB}<extra></extra>"))
    if ns:
        cap = capacity_bytes / GIB
        fig.add_trace(go.Scatter(
            x=[ns[0], ns[-1]], y=[cap, cap], mode="lines", name=chart_text(f"{capacity_label}: {cap:,.1f} GiB"),
            line={"color": "black", "dash": "dash"},
            hovertemplate=f"{chart_text(capacity_label)} capacity<br>{cap:,.2f} GiB<extra></extra>"))
    if current_n is not None:
        shown = [v for trace in fig.data for v in trace.y if v is not None and v > 0]
        if shown:
            fig.add_trace(go.Scatter(
                x=[current_n, current_n], y=[min(shown), max(shown)], mode="lines", name=f"your n = {current_n:,}",
                line={"color": "grey", "dash": "dot"}, hoverinfo="skip"))
    x_ticks, x_text = _n_ticks(ns) if ns else ([], [])
    fig.update_xaxes(type="log", title_text="sequence length n (tokens)", tickvals=x_ticks, ticktext=x_text)
    shown = [v for trace in fig.data for v in (trace.y or ()) if v is not None and v > 0]
    if shown:
        y_ticks, y_text = _gib_ticks(shown)
        fig.update_yaxes(type="log", title_text="memory per GPU (GiB)", tickvals=y_ticks, ticktext=y_text)
    else:
        fig.update_yaxes(type="log", title_text="memory per GPU (GiB)")
    fig.update_layout(title=chart_text(title), legend_title_text="backend", hovermode="closest",
                      legend={"orientation": "h", "yanchor": "top", "y": -0.22, "xanchor": "left", "x": 0},
                      margin={"l": 10, "r": 10, "t": 50, "b": 10}, height=520)
    return fig


def budget_breakdown(components: Sequence[tuple[str, int]], *, capacity_bytes: int, capacity_label: str,
                     title: str = "Memory budget per GPU") -> go.Figure:
    """One stacked bar of the budget's components (GiB) beside a bar for the GPU's capacity."""
    fig = go.Figure()
    for name, value in components:
        if value is None or value <= 0:
            continue
        fig.add_trace(go.Bar(x=["plan"], y=[value / GIB], name=chart_text(name),
                             hovertemplate=f"{chart_text(name)}<br>{_HOVER_GIB}<extra></extra>"))
    fig.add_trace(go.Bar(x=[chart_text(capacity_label)], y=[capacity_bytes / GIB], name="capacity",
                         marker={"color": "lightgrey"},
                         hovertemplate=f"{chart_text(capacity_label)} capacity<br>{_HOVER_GIB}<extra></extra>"))
    fig.update_layout(barmode="stack", title=chart_text(title), yaxis_title="GiB",
                      margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def shares(parts: dict[str, float], *, title: str) -> go.Figure:
    """A donut of shares (fractions that sum to at most 1; the rest is shown as 'other')."""
    labels, values = [], []
    for name, value in parts.items():
        if value is None or value < 0:
            raise ValueError(f"shares: {name} must be a non-negative fraction, got {value!r}")
        labels.append(chart_text(name))
        values.append(float(value))
    rest = 1.0 - sum(values)
    if rest > 1e-9:
        labels.append("other")
        values.append(rest)
    # labels inside the slices (an outside label of a small slice was clipped by the margins); a slice too small
    # for its label hides it: the legend and the hover name it
    fig = go.Figure(go.Pie(labels=labels, values=values, hole=0.45, sort=False, textposition="inside",
                           textinfo="percent", insidetextorientation="horizontal",
                           hovertemplate="%{label}: %{percent}<extra></extra>"))
    fig.update_layout(title=chart_text(title), margin={"l": 10, "r": 10, "t": 50, "b": 10},
                      uniformtext={"minsize": 10, "mode": "hide"})
    return fig


def measured_vs_predicted(df: pd.DataFrame, *, measured: str = "measured_peak_extra_bytes",
                          predicted: str = "peak_extra_bytes", color: str = "backend") -> go.Figure:
    """Log-log scatter of measured against predicted bytes (GiB) with the y = x line."""
    rows = df.dropna(subset=[measured, predicted])
    rows = rows[(rows[measured].astype(float) > 0) & (rows[predicted].astype(float) > 0)]
    fig = go.Figure()
    groups: Iterable = rows.groupby(color, sort=False) if color in rows.columns else [("all", rows)]
    for name, part in groups:
        fig.add_trace(go.Scatter(
            x=part[predicted].astype(float) / GIB, y=part[measured].astype(float) / GIB, mode="markers",
            name=chart_text(name), marker={"color": BACKEND_COLORS.get(str(name))},
            hovertemplate=f"{chart_text(name)}<br>predicted %{{x:,.4f}} GiB<br>measured %{{y:,.4f}} GiB"
                          "<extra></extra>"))
    if len(rows):
        values = pd.concat([rows[measured], rows[predicted]]).astype(float) / GIB
        lo, hi = float(values.min()), float(values.max())
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="measured = predicted",
                                 line={"color": "black", "dash": "dash"}, hoverinfo="skip"))
    fig.update_xaxes(type="log", title_text="predicted peak extra (GiB)")
    fig.update_yaxes(type="log", title_text="measured peak extra (GiB)")
    fig.update_layout(title="Measured against predicted", margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig


def percentile_bars(table: pd.DataFrame, *, value: str, title: str, unit: str) -> go.Figure:
    """Bars for a percentile table (column `percentile` plus `value`), e.g. the trace page's P50/P90/P99."""
    y = table[value].astype(float)
    if unit == "GiB":
        y = y / GIB
    fig = go.Figure(go.Bar(x=[chart_text(p) for p in table["percentile"]], y=list(y),
                           hovertemplate=f"%{{x}}: %{{y:,.3f}} {chart_text(unit)}<extra></extra>"))
    fig.update_layout(title=chart_text(title), yaxis_title=chart_text(unit),
                      margin={"l": 10, "r": 10, "t": 50, "b": 10})
    return fig
