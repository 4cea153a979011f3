"""The app's figures as pure functions: log-log axes, GiB values, a capacity line at the right height."""


import pandas as pd
import pytest

from estimator.units import GIB
from ui import figures


def _sweep():
    rows = []
    for n in (1024, 2048, 4096):
        rows.append({"n": n, "backend": "math", "total_bytes": 4 * n * n})
        rows.append({"n": n, "backend": "flash", "total_bytes": 1000 * n})
    rows.append({"n": 8192, "backend": "math", "total_bytes": None})  # unsupported point stays a gap
    rows.append({"n": 8192, "backend": "flash", "total_bytes": 1000 * 8192})
    return pd.DataFrame(rows)


def test_memory_vs_n_is_log_log_in_gib_with_capacity_line():
    fig = figures.memory_vs_n(_sweep(), capacity_bytes=80 * GIB, capacity_label="h100-sxm", current_n=2048)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert "GiB" in fig.layout.yaxis.title.text
    math_trace = next(t for t in fig.data if t.name.startswith("math"))
    assert "cannot run from n = 8,192" in math_trace.name
    assert list(math_trace.x) == [1024, 2048, 4096, 8192]
    assert math_trace.y[0] == pytest.approx(4 * 1024 * 1024 / GIB)
    assert math_trace.y[-1] is None  # no fake value where the backend cannot run
    cap = next(t for t in fig.data if t.name.startswith("h100-sxm"))
    # A trace, not a layout shape: its y is the data value on the log axis, and its name is the label.
    assert list(cap.y) == [80.0, 80.0] and "80.0 GiB" in cap.name
    assert list(cap.x) == [1024, 8192]
    assert "GiB" in math_trace.hovertemplate
    assert not fig.layout.shapes  # shapes on log axes would need log10 coordinates
    now = next(t for t in fig.data if t.name.startswith("your n"))
    assert list(now.x) == [2048, 2048]


def test_memory_vs_n_rejects_missing_columns():
    with pytest.raises(ValueError, match="total_bytes"):
        figures.memory_vs_n(pd.DataFrame({"n": [1], "backend": ["math"]}), capacity_bytes=1, capacity_label="x")


def test_budget_breakdown_stacks_components_in_gib():
    fig = figures.budget_breakdown([("weights", 16 * GIB), ("kv cache", GIB // 2), ("empty", 0)],
                                   capacity_bytes=140 * GIB, capacity_label="h200")
    assert fig.layout.barmode == "stack"
    names = [t.name for t in fig.data]
    assert names == ["weights", "kv cache", "capacity"]
    assert fig.data[0].y[0] == 16.0 and fig.data[1].y[0] == 0.5 and fig.data[2].y[0] == 140.0


def test_shares_adds_other_and_rejects_negative():
    fig = figures.shares({"attention": 0.25, "ffn": 0.5, "embedding": 0.05}, title="t")
    assert list(fig.data[0].labels) == ["attention", "ffn", "embedding", "other"]
    assert sum(fig.data[0].values) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="ffn"):
        figures.shares({"ffn": -0.1}, title="t")


def test_measured_vs_predicted_has_identity_line():
    df = pd.DataFrame({"backend": ["flash", "math"], "peak_extra_bytes": [GIB, 2 * GIB],
                       "measured_peak_extra_bytes": [GIB, 3 * GIB]})
    fig = figures.measured_vs_predicted(df)
    ident = next(t for t in fig.data if t.name == "measured = predicted")
    assert list(ident.x) == [1.0, 3.0]
    assert fig.layout.xaxis.type == "log"


def test_memory_chart_ticks_styles_and_cannot_run_legend():
    import pandas as pd

    from ui import figures

    rows = []
    for n in (256, 1024, 4096, 16384, 65536, 262144):
        rows.append({"n": n, "backend": "flash", "total_bytes": n * 2**20, "error": ""})
        rows.append({"n": n, "backend": "cudnn", "total_bytes": n * 2**20, "error": ""})
        rows.append({"n": n, "backend": "efficient", "total_bytes": None,
                     "error": "backend efficient cannot run this attention call: GQA is not supported"})
    fig = figures.memory_vs_n(pd.DataFrame(rows), capacity_bytes=141 << 30, capacity_label="h200")
    assert list(fig.layout.xaxis.ticktext)[:2] == ["256", "512"] or "1k" in fig.layout.xaxis.ticktext
    assert all(t.endswith("GiB") for t in fig.layout.yaxis.ticktext)
    flash, cudnn = (t for t in fig.data if t.name in ("flash", "cudnn"))
    assert flash.line.dash != cudnn.line.dash and flash.marker.symbol != cudnn.marker.symbol
    assert any(t.name.startswith("efficient: cannot run (GQA") for t in fig.data)
