"""The Serve page: ui/serve.py's pure functions (query round trip, the row-by-row workload reader, the bounded
simulation, figures, knee, exports) without Streamlit, and pages/serve.py under AppTest."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from estimator.model.inputs import PlanInputs
from estimator.model.presets import get_preset
from ui import serve as sv

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 120


def plan() -> PlanInputs:
    return PlanInputs(model=get_preset("llama-3-8b"), seq_len=4096, batch=1, dtype="bfloat16", kv_dtype="bfloat16",
                      mode="inference", backend="auto", gpu="h200")


def small_values(**over) -> dict:
    values = dict(sv.DEFAULTS, requests=40, rate="4", prompt_tokens="256", output_tokens="32")
    values.update(over)
    return sv.check_values(values)


# ---------------------------------------------------------------------------------------------- pure functions

def test_query_round_trip_keeps_every_field():
    values = small_values(engine="vllm", tp=2, memory_fraction=0.8, ttft_p99_ms=1500.0, seed=7)
    back, errors = sv.values_from_query(sv.query_from_values(values))
    assert errors == []
    assert back == values


def test_query_bad_parameter_is_dropped_with_its_name():
    back, errors = sv.values_from_query({"sv_rate": "0", "sv_requests": "-3", "sv_engine": "nope", "gpu": "x"})
    assert back["rate"] == sv.DEFAULTS["rate"] and back["requests"] == sv.DEFAULTS["requests"]
    assert len(errors) == 3
    assert any("sv_rate" in e for e in errors) and any("sv_requests" in e for e in errors)
    assert any("sv_engine" in e for e in errors)


def test_check_values_names_the_field():
    with pytest.raises(ValueError, match="^requests"):
        sv.check_values(dict(sv.DEFAULTS, requests=sv.MAX_REQUESTS + 1))
    with pytest.raises(ValueError, match="^prompt_tokens"):
        sv.check_values(dict(sv.DEFAULTS, prompt_tokens="uniform:9:3"))
    with pytest.raises(ValueError, match="^memory_fraction"):
        sv.check_values(dict(sv.DEFAULTS, memory_fraction=1.5))


def test_upload_bad_rows_cost_only_their_row_with_line_numbers():
    text = ("# a comment\narrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,abc,10\n0.4,150,10\n1.0,-5,3\n"
            "1.0,200\n2.0,300,20\n1.5,50,5\n")
    workload, bad = sv.parse_upload(text.encode())
    assert [r.prompt_tokens for r in workload.requests] == [100, 150, 300]
    assert len(bad) == 4
    assert bad[0].startswith("line 4: prompt_tokens")
    assert bad[1].startswith("line 6: prompt_tokens")
    assert bad[2].startswith("line 7: 2 cells")
    assert bad[3].startswith("line 9: arrival_s 1.5 is earlier")


@pytest.mark.parametrize("data, message", [
    (b"", "empty"), (b"a,b\n1,2\n", "missing column"), (b"\xff\xfe\x00", "not UTF-8"),
    (b"arrival_s,prompt_tokens,output_tokens\nx,1,1\n", "no usable row"),
])
def test_upload_unusable_files_are_one_line_errors(data, message):
    with pytest.raises(ValueError, match=message):
        sv.parse_upload(data)


def test_upload_bounds(monkeypatch):
    monkeypatch.setattr(sv, "UPLOAD_MAX_ROWS", 3)
    rows = "arrival_s,prompt_tokens,output_tokens\n" + "0,10,2\n" * 4
    with pytest.raises(ValueError, match="at most 3"):
        sv.parse_upload(rows.encode())
    monkeypatch.setattr(sv, "UPLOAD_MAX_BYTES", 10)
    with pytest.raises(ValueError, match="MiB"):
        sv.parse_upload(rows.encode())


def test_simulation_is_bounded_in_time():
    inputs = sv.serve_inputs(plan(), small_values(requests=400), sv.synthetic(small_values(requests=400)))
    with pytest.raises(ValueError, match="^requests: the simulation ran past"):
        sv.simulate(inputs, limit_s=0.0)


def test_simulation_reports_progress_and_the_page_inputs_reach_the_engine():
    values = small_values(gpu="h100-sxm", block_size=32, max_seqs=8)
    inputs = sv.serve_inputs(plan(), values, sv.synthetic(values))
    seen = []
    result = sv.simulate(inputs, progress=seen.append)
    assert seen and seen[-1] == pytest.approx(1.0) and all(0 <= f <= 1 for f in seen)
    d = result.to_dict()
    assert d["gpu"] == "h100-sxm" and d["block_size"] == 32 and d["max_seqs"] == 8


def test_knee_with_and_without_targets():
    pts = [{"rate_per_s": r, "ttft_p99_ms": t, "tpot_p99_ms": 10.0, "throughput_output_tokens_per_s": r * 100,
            "meets_targets": m} for r, t, m in ((1, 100, True), (2, 150, True), (4, 900, False))]
    assert sv.knee(pts)["rate_per_s"] == 2
    for p in pts:
        p["meets_targets"] = None
    assert sv.knee(pts)["rate_per_s"] == 2  # 900 > 2 x 100
    assert sv.knee([]) is None


def test_sweep_and_figures():
    values = small_values(ttft_p99_ms=5000.0)
    inputs = sv.serve_inputs(plan(), values, sv.synthetic(values))
    points = sv.sweep(inputs)
    assert [p["rate_per_s"] for p in points] == pytest.approx([4 * f * 39 / 39 for f in sv.SWEEP_FACTORS], rel=0.5)
    assert len(points) == len(sv.SWEEP_FACTORS)
    fig = sv.rate_figure(points, sv.knee(points), ttft_target=5000.0)
    names = [t.name for t in fig.data]
    assert "P99 TTFT (ms)" in names and any(n.startswith("TTFT target") for n in names)
    cdf = sv.latency_cdf([3.0, 1.0, 2.0], title="TTFT", target_ms=2.5)
    assert list(cdf.data[0].x) == [1.0, 2.0, 3.0] and list(cdf.data[0].y) == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert cdf.data[1].x[0] == 2.5
    tl = sv.timeline_figure({"time_s": [0, 1], "kv_blocks_used": [5, 10], "running": [1, 2], "waiting": [0, 3]}, 20)
    assert list(tl.data[0].y) == [0.25, 0.5]
    offline = sv.serve_inputs(plan(), small_values(rate="inf"), sv.synthetic(small_values(rate="inf")))
    assert sv.sweep(offline) == []


def test_exports_neutralise_user_text():
    values = small_values()
    inputs = sv.serve_inputs(plan(), values, sv.synthetic(values))
    data = sv.simulate(inputs).to_dict(include_requests=True)
    text = sv.result_csv(data, values, "=HYPERLINK(\"x\")")
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[1] == ["model", "'=HYPERLINK(\"x\")"]
    assert any(r[:1] == ["request"] for r in rows)
    book = sv.result_xlsx(data, values, "=1+2", sv.sweep(inputs), None)
    assert book[:2] == b"PK"
    import zipfile
    with zipfile.ZipFile(io.BytesIO(book)) as z:
        shared = z.read("xl/sharedStrings.xml").decode()
        assert "=1+2" in shared  # written as a string, not a formula
        assert not any("<f>" in z.read(n).decode() for n in z.namelist() if n.startswith("xl/worksheets/"))


# ---------------------------------------------------------------------------------------------------- the page

def page(query: dict | None = None) -> AppTest:
    """The app, then the Serve page with `query` in the URL (the plan page, run first, rewrites the URL)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.query_params.update({"sv_requests": "60", **(query or {})})
    at.switch_page("pages/serve.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def shared_link(query: dict) -> AppTest:
    """The Serve page opened straight from a link, in a fresh session (no plan built yet)."""
    at = AppTest.from_file(str(ROOT / "pages" / "serve.py"), default_timeout=TIMEOUT)
    at.query_params.update({"sv_requests": "60", **query})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def plain(markdown: str) -> str:
    """An alert's text as the browser shows it (the pages backslash-escape Markdown punctuation)."""
    return re.sub(r"\\(.)", r"\1", markdown)


def param(at: AppTest, key: str) -> str:
    value = at.query_params[key]
    return value[-1] if isinstance(value, list) else value


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_page_renders_from_a_shared_link_and_writes_it_back():
    at = shared_link({"sv_block_size": "64", "sv_gpu": "h100-sxm", "preset": "mistral-7b", "sv_rate": "3"})
    assert not at.error
    assert "mistral" in at.markdown[0].value.lower()
    assert at.text_input(key="serve_rate").value == "3"
    assert param(at, "sv_block_size") == "64" and param(at, "sv_gpu") == "h100-sxm"
    assert param(at, "preset") == "mistral-7b"  # the model travels with the link
    assert metric(at, "KV blocks")


def test_page_follows_the_plan_page_model_and_changes_with_the_gpu():
    at = page()
    assert "llama" in at.markdown[0].value.lower()
    blocks = metric(at, "KV blocks")
    other = page({"sv_gpu": "h100-sxm"})
    assert metric(other, "KV blocks") != blocks


def test_page_bad_field_is_an_error_naming_it():
    at = page()
    at.text_input(key="serve_rate").set_value("0")
    next(b for b in at.button if b.label == "Simulate").click()
    at.run()
    assert not at.exception
    assert at.error and plain(at.error[0].value).startswith("Cannot simulate: rate:")


def test_page_bad_url_parameter_warns_and_uses_the_default():
    at = page({"sv_tp": "zero"})
    assert any("sv_tp" in plain(w.value) for w in at.warning)
    assert not at.error


def test_page_targets_give_a_verdict():
    at = page({"sv_ttft_p99_ms": "0.001"})
    assert any("misses the P99 targets" in plain(e.value) for e in at.error)
