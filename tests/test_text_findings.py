"""Text a user meets, as people write it: no doubled units, the trace page says why decode does not move across
percentiles (host-bound), advice effects in words."""

from __future__ import annotations

from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.presets import get_preset
from estimator.report.explain import decode_split_ms, host_bound_decode_note
from ui.text import human


def test_human_never_says_per_gpu_twice():
    assert human("total_bytes per GPU") == "total memory per GPU"
    assert "per GPU per GPU" not in human("total_bytes per GPU: 1.00 GiB → 2.00 GiB")


def test_host_bound_decode_note_only_when_launches_dominate():
    plan = make_plan(PlanInputs(model=get_preset("llama-3-8b"), seq_len=1000, gpu="h200"), solve=False)
    host_ms, gpu_ms = decode_split_ms(plan)
    note = host_bound_decode_note(plan)
    assert (host_ms > gpu_ms) == bool(note)
    if note:
        assert "host-bound" in note and f"{host_ms:,.2f} ms" in note


def test_trace_page_explains_identical_decode_percentiles():
    from tests.test_app_pages import app, frame_with, plain

    at = app("pages/trace.py")
    lengths = "\n".join(str(n) for n in [1000] * 50 + [1100] * 40 + [1200] * 10)
    at.file_uploader(key="trace_file").upload("trace.csv", f"n\n{lengths}\n".encode(), "text/csv")
    at.run()
    assert not at.exception
    table = frame_with(at, "percentile")
    decodes = table["decode_time_ms_per_token"].round(3)
    assert decodes.nunique() == 1  # the case: the same decode at P50, P90 and P99
    assert any("host-bound" in plain(i.value) for i in at.info)
