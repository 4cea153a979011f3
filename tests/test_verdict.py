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


def test_workbook_interpolation_bound_holds_between_grid_points():
    """Edited to n and batch between grid points, the interpolated total + reserve is within the bound the sheet
    states of the estimator's own (grid.interpolation_bound mirrors the sheet's t_bound), and 0 on grid points."""
    import dataclasses
    import random

    from estimator.report import grid

    fn = lambda i: make_plan(i, solve=False)  # noqa: E731
    inputs = PlanInputs(model=get_preset("llama-3-8b"), seq_len=8192, gpu="h100-sxm")
    ns, bs, table = grid._complete(inputs, fn, grid.n_grid(inputs), grid.batch_grid(inputs))
    width = len(next(iter(table["values"].values())))
    assert grid.interpolation_bound(table, ns, bs, inputs.seq_len, inputs.batch) == 0
    rng = random.Random(25)
    bounded = 0
    for _ in range(12):
        n, b = rng.randint(ns[0], 8 * inputs.seq_len), rng.randint(1, 7)
        plan = fn(dataclasses.replace(inputs, seq_len=n, batch=b))
        interpolated = sum(grid.interpolate(table, ns, bs, c, n, b) for c in range(width))
        bound = grid.interpolation_bound(table, ns, bs, n, b)
        assert abs(interpolated - plan.total_bytes - plan.allocator_reserve_bytes) <= bound, (n, b)
        bounded += bound > 0
    assert bounded >= 6  # most random points are off the grid: the bound is real there, not a blanket 0


@pytest.mark.slow
@pytest.mark.skipif(__import__("shutil").which("soffice") is None, reason="LibreOffice (soffice) is not installed")
def test_workbook_recalculated_in_libreoffice_keeps_the_reserve_and_states_the_bound(tmp_path):
    """The near-capacity workbook recalculated by LibreOffice: at the plan's n its verdict is the plan's ('no',
    though total <= capacity); edited to an n between grid points, the bound row is the mirror's and the verdict
    is the estimator's or asks for a re-plan, never the opposite of the estimator."""
    import dataclasses

    from estimator.report import grid
    from estimator.report.xlsx import RESERVE_LABEL, plan_xlsx
    from tests.test_ui_export import recalculated

    plan = make_plan(near_inputs(), solve=False)
    data = plan_xlsx(plan)
    wb = recalculated(data, {"seq_len": plan.inputs.seq_len}, tmp_path)
    rows = {wb["Budget"].cell(r, 1).value: wb["Budget"].cell(r, 2).value for r in range(1, wb["Budget"].max_row + 1)}
    assert rows["fits"] == "no" and rows[RESERVE_LABEL] == plan.allocator_reserve_bytes
    assert rows["headroom (capacity − total − allocator reserve)"] == plan.fit.headroom_bytes
    n = 100_000  # between grid points
    edited = make_plan(dataclasses.replace(plan.inputs, seq_len=n), solve=False)
    (tmp_path / "e").mkdir()
    wb = recalculated(data, {"seq_len": n}, tmp_path / "e")
    rows = {wb["Budget"].cell(r, 1).value: wb["Budget"].cell(r, 2).value for r in range(1, wb["Budget"].max_row + 1)}
    fn = lambda i: make_plan(i, solve=False)  # noqa: E731
    ns, bs, table = grid._complete(plan.inputs, fn, grid.n_grid(plan.inputs), grid.batch_grid(plan.inputs))
    bound = rows["interpolation bound here (0 on a grid point; Tables sheet)"]
    assert bound == grid.interpolation_bound(table, ns, bs, n, plan.inputs.batch) > 0
    assert abs(rows["total"] + rows[RESERVE_LABEL] - edited.total_bytes - edited.allocator_reserve_bytes) <= bound
    assert rows["fits"] in (("yes" if edited.fits else "no"), "within the interpolation bound of the limit: re-plan")


@pytest.mark.slow
@pytest.mark.skipif(__import__("shutil").which("soffice") is None, reason="LibreOffice (soffice) is not installed")
def test_workbook_on_a_grid_point_next_to_an_unrunnable_one_says_what_the_plan_says(tmp_path):
    """gemma-2-9b at n = 3,641 through flash fits; the n grid's next point crosses its 4,096-token window, where a
    dense window mask keeps flash out. On the plan's own n (a grid point) the recalculated workbook reads that point
    alone: 'yes', never 'cannot run' (found by the 200-plan agreement run, validation/data/one_truth_agreement.md)."""
    import dataclasses

    from estimator.report import grid
    from estimator.report.xlsx import plan_xlsx
    from tests.test_ui_export import recalculated

    inputs = PlanInputs(model=get_preset("gemma-2-9b"), seq_len=3641, batch=2, dtype="float16", kv_dtype="float16",
                        mode="inference", gpu="h100-sxm", backend="flash")
    plan = make_plan(inputs, solve=False)
    assert plan.supported and plan.fits
    ns = grid.n_grid(inputs)
    above = ns[ns.index(3641) + 1]
    assert not make_plan(dataclasses.replace(inputs, seq_len=above), solve=False).supported
    wb = recalculated(plan_xlsx(plan), {"seq_len": 3641}, tmp_path)
    rows = {wb["Budget"].cell(r, 1).value: wb["Budget"].cell(r, 2).value for r in range(1, wb["Budget"].max_row + 1)}
    assert rows["fits"] == "yes"
