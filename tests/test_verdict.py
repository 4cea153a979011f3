"""One verdict on every surface: `fit_verdict` (estimator/model/budget.py) decides fits / does not fit / cannot
run with the allocator reserve counted, and the page, the CLI table, the JSON, the advice and the workbook all
show that verdict, its headroom (or short by) and the reserve as its own figure."""

from __future__ import annotations

import io
import json
import re

import openpyxl
import pytest

from estimator.model.budget import Verdict, fit_verdict
from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.presets import get_preset
from estimator.units import GIB, gib

# Near capacity: 76.66 GiB of 79.11 GiB, but the step's largest block (7.00 GiB) must stay free too.
NEAR = dict(preset="llama-3.1-8b", seq_len=131072, batch=2, gpu="h100-sxm")


def near_inputs(**changes) -> PlanInputs:
    kw = {**NEAR, **changes}
    return PlanInputs(model=get_preset(kw.pop("preset")), **kw)


def test_fit_verdict_counts_the_reserve_and_never_shows_a_negative_short_by():
    v = fit_verdict(total_bytes=76 * GIB, capacity_bytes=79 * GIB, allocator_reserve_bytes=7 * GIB)
    assert v.status == "does not fit" and not v.fits
    assert v.headroom_bytes == -4 * GIB and v.short_by_bytes == 4 * GIB
    assert "short by 4.00 GiB" in v.text() and "-" not in re.sub(r"\w-\w", "", v.text())
    ok = fit_verdict(total_bytes=70 * GIB, capacity_bytes=79 * GIB, allocator_reserve_bytes=7 * GIB)
    assert ok.fits and ok.headroom_bytes == 2 * GIB and ok.short_by_bytes == 0 and "headroom 2.00 GiB" in ok.text()
    cannot = fit_verdict(total_bytes=1, capacity_bytes=2, allocator_reserve_bytes=0, cannot_run="backend x: no")
    assert cannot.status == "cannot run" and not cannot.fits and cannot.text() == "backend x: no"
    with pytest.raises(ValueError, match="status"):
        Verdict(status="fits", total_bytes=76 * GIB, capacity_bytes=79 * GIB, allocator_reserve_bytes=7 * GIB)
    with pytest.raises(ValueError, match="allocator_reserve_bytes"):
        fit_verdict(total_bytes=1, capacity_bytes=2, allocator_reserve_bytes=-1)


def test_plan_fields_come_from_the_verdict():
    plan = make_plan(near_inputs(), solve=False)
    fit = plan.fit
    assert plan.total_bytes <= plan.capacity_bytes  # under capacity, yet it does not fit: the reserve decides
    assert fit.status == "does not fit" and plan.fits is False and plan.verdict == fit.text()
    assert fit.short_by_bytes == plan.total_bytes + plan.allocator_reserve_bytes - plan.capacity_bytes > 0
    doc = plan.to_dict()
    assert doc["fit_status"] == "does not fit" and doc["headroom_bytes"] == -fit.short_by_bytes
    assert doc["allocator_reserve_bytes"] == plan.allocator_reserve_bytes


def test_cli_table_shows_the_reserve_and_a_positive_short_by(capsys):
    from estimator.cli.plan import main

    args = [f"--{k.replace('_', '-')}={v}" for k, v in NEAR.items()]
    assert main(args) == 0
    table = capsys.readouterr().out
    plan = make_plan(near_inputs(), solve=False)
    reserve_row = next(line for line in table.splitlines() if "allocator reserve" in line)
    assert f"{plan.allocator_reserve_bytes:,} B" in reserve_row
    short_row = next(line for line in table.splitlines() if line.strip().startswith("short by"))
    assert f"{plan.fit.short_by_bytes:,} B" in short_row
    assert "short by -" not in table and "headroom" not in table.split("-> ")[0]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["fits"] is False and doc["fit_status"] == "does not fit" and doc["verdict"] == plan.verdict


def test_advice_over_budget_says_short_by_after_the_reserve():
    from estimator.advice.plan_rules import advise

    plan = make_plan(near_inputs(), solve=False)
    items = advise(near_inputs())
    assert all("fits" != a.id for a in items)
    text = " ".join(a.why + " " + a.expected_effect for a in items)
    assert f"short by {gib(plan.fit.short_by_bytes)}" in text
    assert "by -" not in text and "accumulate gradients" not in text  # inference: queue requests instead


def test_fits_advice_headroom_is_the_verdicts():
    from estimator.advice.plan_rules import advise

    inputs = near_inputs(seq_len=32768, batch=1)
    plan = make_plan(inputs, solve=False)
    assert plan.fits
    item = next(a for a in advise(inputs) if a.id == "fits")
    assert f"Headroom {gib(plan.fit.headroom_bytes)}" in item.expected_effect


def _budget_values(data: bytes) -> dict:
    wb = openpyxl.load_workbook(io.BytesIO(data), data_only=True)
    ws = wb["Budget"]
    return {ws.cell(r, 1).value: ws.cell(r, 2).value for r in range(1, ws.max_row + 1)}


def test_workbook_counts_the_reserve_as_its_own_row():
    from estimator.report.xlsx import RESERVE_LABEL, plan_xlsx

    plan = make_plan(near_inputs(), solve=False)
    data = plan_xlsx(plan)
    rows = _budget_values(data)
    assert rows[RESERVE_LABEL] == plan.allocator_reserve_bytes
    assert rows["headroom (capacity − total − allocator reserve)"] == plan.fit.headroom_bytes
    assert rows["fits"] == "no"  # total <= capacity: a formula without the reserve said "yes"
    wb = openpyxl.load_workbook(io.BytesIO(data))
    ws = wb["Budget"]
    formula = next(ws.cell(r, 2).value for r in range(1, ws.max_row + 1) if ws.cell(r, 1).value == "fits")
    assert "allocator_reserve_bytes" in formula


def test_plan_page_banner_and_metrics_say_the_verdict():
    from streamlit.testing.v1 import AppTest

    from tests.test_app_pages import ROOT, TIMEOUT, plain

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({k: str(v) for k, v in NEAR.items()})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    plan = make_plan(near_inputs(), solve=False)
    page_gib = lambda b: gib(b, mib_below_1gib=False)  # noqa: E731 - the page's style
    banner = " ".join(plain(e.value) for e in at.error)
    assert f"short by {page_gib(plan.fit.short_by_bytes)}" in banner and "short by -" not in banner
    assert "largest block" in banner
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["allocator reserve"] == page_gib(plan.allocator_reserve_bytes)
    assert metrics["short by"] == page_gib(plan.fit.short_by_bytes) and "headroom" not in metrics
