"""One truth on every surface, for seeded random plans: the plan page (AppTest), `plan --json`, the budget workbook
recalculated by LibreOffice, and `advise` agree on the verdict and the total.

Slow (each plan renders the page and tabulates a workbook): `pytest -m slow tests/test_one_truth.py`. The number
of plans in the suite is 20 (each takes seconds: the page, a CLI process, a workbook); AGREEMENT_PLANS=200 runs
the full-size check (hours on a 2-core machine)."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys

import openpyxl
import pytest

from estimator.hardware import CATALOG
from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.presets import get_preset
from estimator.units import gib

N_PLANS = int(os.environ.get("AGREEMENT_PLANS", "20"))
SEED = 25
PRESETS = ("llama-3-8b", "llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "gemma-2-9b", "phi-3-mini", "llama-2-13b",
           "vit-l-16", "qwen1.5-moe-a2.7b", "llama-3.1-70b")
STATUS_OF_YES_NO = {"yes": "fits", "no": "does not fit", "cannot run": "cannot run"}


def random_plans(count: int, seed: int = SEED) -> list[dict]:
    """Plan form fields, as the page's URL and the CLI's flags both take them."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        preset = rng.choice(PRESETS)
        dtype = rng.choice(("bfloat16", "bfloat16", "float16", "float32"))
        mode = rng.choice(("inference", "inference", "training"))
        n = 197 if get_preset(preset).kind == "encoder" else int(2 ** rng.uniform(8, 17))
        out.append({"preset": preset, "seq_len": n, "batch": rng.randint(1, 8), "dtype": dtype, "kv_dtype": dtype,
                    "mode": mode, "gpu": rng.choice(list(CATALOG)),
                    "backend": rng.choice(("auto", "auto", "auto", "math", "flash", "efficient"))})
    return out


def inputs_of(fields: dict) -> PlanInputs:
    kw = dict(fields)
    return PlanInputs(model=get_preset(kw.pop("preset")), **kw)


def cli_json(fields: dict) -> dict:
    out = subprocess.run([sys.executable, "-m", "estimator", "plan",
                          "--json", *(f"--{k.replace('_', '-')}={v}" for k, v in fields.items())],
                         capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout)


def page_verdict(fields: dict) -> tuple[str, str]:
    """(status, total metric) as the plan page shows them."""
    from streamlit.testing.v1 import AppTest

    from tests.test_app_pages import ROOT, TIMEOUT, plain

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.query_params.update({k: str(v) for k, v in fields.items()})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    texts = [plain(x.value) for x in at.success] + [plain(x.value) for x in at.error]
    if any(t.startswith("Cannot run") for t in texts):
        return "cannot run", ""
    total = next(m.value for m in at.metric if m.label == "total per GPU")
    if any(t.startswith("Fits:") for t in texts):
        return "fits", total
    assert any(t.startswith("Does not fit:") for t in texts), texts
    return "does not fit", total


def advise_verdict(inputs: PlanInputs) -> tuple[str | None, set[int]]:
    """(fits / not, the totals the advice starts from): the `fits` item, and every whole-plan item's bytes_before."""
    from estimator.advice.plan_rules import advise

    items = advise(inputs)
    totals = {a.bytes_before for a in items if a.bytes_metric == "total_bytes per GPU"}
    return ("fits" if any(a.id == "fits" for a in items) else "not"), totals


def recalculate(paths: list, tmp_path) -> list:
    """Every workbook recalculated by one headless LibreOffice run (recalc on load), read back as values."""
    profile = tmp_path / "profile"
    (profile / "user").mkdir(parents=True)
    (profile / "user" / "registrymodifications.xcu").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
        'xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
        '<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="OOXMLRecalcMode" oor:op="fuse">'
        '<value>0</value></prop></item></oor:items>')
    out_dir = tmp_path / "out"
    subprocess.run([shutil.which("soffice"), f"-env:UserInstallation=file://{profile}", "--headless", "--calc",
                    "--convert-to", "xlsx", "--outdir", str(out_dir), *map(str, paths)],
                   check=True, capture_output=True, timeout=60 + 30 * len(paths))
    return [openpyxl.load_workbook(out_dir / p.name, data_only=True) for p in paths]


def test_random_plans_are_varied():
    plans = random_plans(200)
    assert len({p["preset"] for p in plans}) == len(PRESETS) and len({p["gpu"] for p in plans}) == len(CATALOG)
    statuses = {make_plan(inputs_of(p), solve=False).fit.status for p in plans[:40]}
    assert statuses == {"fits", "does not fit", "cannot run"}  # the grid reaches every verdict


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("soffice") is None, reason="LibreOffice (soffice) is not installed")
def test_page_cli_workbook_and_advice_agree_on_verdict_and_total(tmp_path):
    from ui import export

    cases, paths = [], []
    for k, fields in enumerate(random_plans(N_PLANS)):
        inputs = inputs_of(fields)
        plan = make_plan(inputs, solve=False)
        path = tmp_path / f"plan{k}.xlsx"
        path.write_bytes(export.plan_xlsx(plan, None, ()))
        cases.append((fields, inputs, plan))
        paths.append(path)
    books = recalculate(paths, tmp_path)
    for (fields, inputs, plan), book in zip(cases, books, strict=True):
        status, total = plan.fit.status, plan.total_bytes
        doc = cli_json(fields)
        assert (doc["fit_status"], doc["total_bytes"], doc["fits"]) == (status, total, plan.fits), fields
        page_status, page_total = page_verdict(fields)
        assert page_status == status, fields
        if status != "cannot run":
            assert page_total == gib(total, mib_below_1gib=False), fields
        budget = book["Budget"]
        rows = {budget.cell(r, 1).value: budget.cell(r, 2).value for r in range(1, budget.max_row + 1)}
        assert STATUS_OF_YES_NO[rows["fits"]] == status, (fields, rows["fits"])
        if status != "cannot run":
            assert rows["total"] == total, fields  # the plan's own n and batch are grid points: exact
            assert math.isclose(rows["headroom (capacity − total − allocator reserve)"], plan.fit.headroom_bytes)
        advised, totals = advise_verdict(inputs)
        assert advised == ("fits" if plan.fits else "not"), fields
        assert totals <= {total}, fields
