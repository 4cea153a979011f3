"""Imports go one way (style rule 1): estimator loads no torch/streamlit/plotly; validation no UI."""

from __future__ import annotations

import subprocess
import sys

import pytest


def loaded(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_estimator_imports_no_torch_or_ui():
    mods = loaded("estimator") | loaded("estimator.model.plan")
    mods |= loaded("estimator.advice.plan_rules") | loaded("estimator.cli.predict")
    assert not {"torch", "streamlit", "plotly"} & mods


@pytest.mark.slow  # over 10 s on the 2-core machine (pytest --durations)
def test_validation_imports_no_ui():
    assert not {"streamlit", "plotly"} & loaded("validation.call.runner")
