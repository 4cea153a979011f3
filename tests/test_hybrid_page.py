"""The plan page for a state-space / hybrid preset: the verdict of the prefill and decode (or the training step),
the memory table, the time band, the advice; a flag that does not apply is an error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _plain(elements) -> list[str]:
    return [str(e.value).replace("\\", "") for e in elements]  # the page escapes markdown


def _run(query: dict) -> AppTest:
    at = AppTest.from_file(str(ROOT / "pages" / "plan.py"), default_timeout=90)
    at.query_params.update(query)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.slow  # the 64-layer training step and its advice re-plans: ~15 s on CPU
def test_hybrid_preset_prefill_and_training():
    from estimator.model.hybrid import get_hybrid_preset
    from estimator.model.hybrid_plan import hybrid_plan

    at = _run({"preset": "mamba2-default", "seq_len": "4096", "gpu": "h200"})
    plan = hybrid_plan(get_hybrid_preset("mamba2-default"), seq_len=4096, gpu="h200")
    assert any(v.startswith("prefill: fits") for v in _plain(at.success))
    cells = str(at.table[0].value)
    assert f"{plan.state_bytes:,}" in cells and f"{plan.activation_bytes:,}" in cells
    assert any("measured band" in v for v in _plain(at.caption))
    at = _run({"preset": "mamba2-default", "seq_len": "4096", "gpu": "h200", "mode": "training"})
    assert any(v.startswith("training: does not fit") for v in _plain(at.error))
    assert any("mamba-fast-kernels" in ex.label for ex in at.expander)


def test_hybrid_preset_refuses_tensor_parallel_by_name():
    at = _run({"preset": "mamba2-default", "seq_len": "4096", "gpu": "h200", "tp": "2"})
    assert any("tp:" in v for v in _plain(at.error))
