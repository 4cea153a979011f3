"""The planning page with images: tokens per modality first, then the budget by part; bad image input is an
error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _run(query: dict) -> AppTest:
    at = AppTest.from_file(str(ROOT / "pages" / "plan.py"), default_timeout=90)
    at.query_params.update(query)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_vlm_preset_shows_tokens_per_modality_first():
    at = _run({"preset": "qwen2-vl-2b", "image_size": "1344", "images": "2", "seq_len": "1000", "gpu": "h200"})
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["vision tokens per image"] == "4,900"
    assert metrics["language-model tokens"] == f"{1000 + 2 * 1227:,}"
    assert at.metric[0].label == "vision tokens per image"
    assert any("vision tower weights" in str(t.value) for t in at.table)


def test_vit_with_image_size_plans_its_patches():
    at = _run({"preset": "vit-h-14", "image_size": "1024", "gpu": "h200"})
    assert any("5,330 per image" in c.value for c in at.caption)


def test_bad_image_size_is_an_error_naming_the_field():
    at = _run({"preset": "qwen2-vl-2b", "image_size": "huge", "gpu": "h200"})
    assert any("image_size" in w.value.replace("\\", "") for w in at.warning)
