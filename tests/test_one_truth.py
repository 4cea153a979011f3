"""One truth on every surface, for seeded random plans: the plan page (AppTest), `plan --json`, the budget workbook
recalculated by LibreOffice, and `advise` agree on the verdict and the total, and every advice effect is the
estimator's re-plan of its change (tests/agreement.py does the work).

Slow (each plan tabulates a workbook and renders the page): `pytest -m slow tests/test_one_truth.py`. The suite
checks 20 plans (CI time); AGREEMENT_PLANS=200 runs the full-size check, and
`python -m tests.agreement --plans 200 --csv PATH` writes its per-plan table (validation/data/one_truth_agreement.csv
holds the committed one). The per-plan work runs in AGREEMENT_WORKERS processes (default: one per core, at most 2;
one under pytest -n)."""

from __future__ import annotations

import os

import pytest

from estimator.hardware import CATALOG
from estimator.model.plan import make_plan
from tests import agreement
from tests.libreoffice import soffice

N_PLANS = int(os.environ.get("AGREEMENT_PLANS", "20"))


def test_random_plans_are_varied():
    plans = agreement.random_plans(200)
    assert len({p["preset"] for p in plans}) == len(agreement.PRESETS)
    assert len({p["gpu"] for p in plans}) == len(CATALOG)
    statuses = {make_plan(agreement.inputs_of(p), solve=False).fit.status for p in plans[:40]}
    assert statuses == {"fits", "does not fit", "cannot run"}  # the grid reaches every verdict


def _row(status="fits", **kw) -> dict:
    row = {"status": status, "fits": status == "fits", "total_bytes": 10, "headroom_bytes": 5,
           "cli_status": status, "cli_total_bytes": 10, "cli_fits": status == "fits", "page_status": status,
           "page_total": "1 GiB", "expected_page_total": "1 GiB", "workbook_fits": "yes" if status == "fits" else "no",
           "workbook_total_bytes": 10, "workbook_headroom_bytes": 5, "advise_fits": status == "fits",
           "advise_totals": "10", "advice_effect_mismatches": ""}
    return {**row, **kw}


@pytest.mark.parametrize("change, surface", [
    ({}, None), ({"cli_total_bytes": 11}, "cli"), ({"page_status": "does not fit"}, "page"),
    ({"page_total": "2 GiB"}, "page"), ({"workbook_fits": "no"}, "workbook verdict"),
    ({"workbook_total_bytes": 9}, "workbook total"), ({"workbook_headroom_bytes": 6}, "workbook headroom"),
    ({"advise_fits": False}, "advise verdict"), ({"advise_totals": "9"}, "advise total"),
    ({"advice_effect_mismatches": "kv-int8"}, "advice effect")])
def test_disagreements_name_the_surface_that_differs(change, surface):
    assert agreement.disagreements(_row(**change)) == ([surface] if surface else [])


@pytest.mark.slow
@pytest.mark.skipif(soffice() is None, reason="LibreOffice (soffice) is not installed")
def test_page_cli_workbook_and_advice_agree_on_verdict_and_total(tmp_path):
    rows = agreement.run(N_PLANS, tmp_path, workers=agreement.default_workers())
    assert len(rows) == N_PLANS
    differing = [(r["index"], {k: r[k] for k in agreement.PLAN_KEYS}, r["disagreements"]) for r in rows
                 if not r["agree"]]
    assert not differing, differing
    assert {r["status"] for r in rows} == {"fits", "does not fit", "cannot run"}
    assert sum(r["advice_effects"] for r in rows) > 0  # the advice-effect check checked something


@pytest.mark.parametrize("k", range(0, 40, 4))
def test_the_workbook_grid_without_the_time_model_is_the_same_grid(k):
    """tests/agreement.py builds each workbook with `memory_plan` (budget(times=False)) as the grid's plan: the
    workbook reads only bytes and verdicts from it (grid.tabulate, cells.closed_forms), so both give one workbook."""
    from estimator.report.cells import closed_forms
    from estimator.report.grid import batch_grid, n_grid, tabulate

    inputs = agreement.inputs_of(agreement.random_plans(40)[k])
    full = lambda i: make_plan(i, solve=False)  # noqa: E731 (the workbook's default grid plan)
    ns, bs = n_grid(inputs), batch_grid(inputs)
    ns, bs = ns[:: max(1, len(ns) // 4)], bs[:: max(1, len(bs) // 3)]  # a spread of the grid, in test time
    assert tabulate(inputs, agreement.memory_plan, ns, bs) == tabulate(inputs, full, ns, bs)
    plan = make_plan(inputs, solve=False)
    assert closed_forms(inputs, plan, agreement.memory_plan) == closed_forms(inputs, plan, full)
