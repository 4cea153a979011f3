"""The spreadsheet, CSV and JSON exports, opened as a user's tools would open them (openpyxl): formulas present,
cached values equal to the estimator's, and the formulas themselves recompute the estimator's figures when n or
batch is edited."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re

import openpyxl
import pytest

from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.specs import get_preset
from ui import export, sweeps

CASES = {
    "llama-3-8b serve 8k": dict(model="llama-3-8b", seq_len=8192, gpu="h200"),
    "mistral windowed 32k int4 kv": dict(model="mistral-7b", seq_len=32768, kv_dtype="int4", batch=3),
    "llama-2-70b tp8 cp2": dict(model="llama-2-70b", seq_len=30001, tp=8, cp=2, gpus=32, batch=16),
    "gemma-2 alternating windows": dict(model="gemma-2-9b", seq_len=20000),
    "training eager": dict(model="llama-3-8b", seq_len=4096, mode="training", backend="eager"),
    "mistral window with cp": dict(model="mistral-7b", seq_len=3001, cp=4, gpus=4),
    "vit encoder": dict(model="vit-l-16", seq_len=257, batch=32),
}


def make_inputs(model, **kw) -> PlanInputs:
    return PlanInputs(model=get_preset(model), **{"gpu": "h100-sxm", **kw})


def workbook(inputs):
    plan = make_plan(inputs).to_dict()
    sweep = sweeps.plan_sweep(inputs, [1024, inputs.seq_len, 65536])
    data = export.plan_xlsx(inputs, plan, sweep, ())
    return plan, openpyxl.load_workbook(io.BytesIO(data)), openpyxl.load_workbook(io.BytesIO(data), data_only=True)


FUNCS = {"MIN": min, "MAX": max, "INT": math.floor, "CEILING": lambda x, s: math.ceil(x / s) * s}


def names_env(wb) -> dict:
    """Evaluate the Inputs sheet like a spreadsheet would: values, then the derived formulas in order."""
    ws = wb["Inputs"]
    env = {}
    for row in range(2, ws.max_row + 1):
        name, value = ws.cell(row, 4).value, ws.cell(row, 2).value
        if not name:
            continue
        env[name] = evaluate(value, env) if isinstance(value, str) and value.startswith("=") else value
    return env


def evaluate(formula: str, env: dict) -> float:
    """Our own evaluator for the formula subset the export writes (names, + - * / ^, MIN/MAX/INT/CEILING)."""
    expr = formula.lstrip("=").replace("^", "**")
    assert re.fullmatch(r"[\w\s+\-*/().,]+", expr), formula
    return eval(expr, {"__builtins__": {}}, {**FUNCS, **env})


def defined_names(wb) -> set:
    return set(wb.defined_names.keys())


@pytest.mark.parametrize("case", CASES)
def test_budget_sheet_values_and_formulas_match_the_estimator(case):
    inputs = make_inputs(**CASES[case])
    plan, wb_f, wb_v = workbook(inputs)
    assert wb_f.sheetnames == ["Inputs", "Budget", "Sweep", "Advice"]
    assert {"seq_len", "batch", "kv_bits", "capacity_bytes"} <= defined_names(wb_f)
    bf, bv = wb_f["Budget"], wb_v["Budget"]
    labels = {bv.cell(r, 1).value: r for r in range(1, bv.max_row + 1)}
    for comp in plan["components"]:
        assert bv.cell(labels[comp["component"]], 2).value == comp["bytes"], comp
    total = labels["total"]
    assert bf.cell(total, 2).value.startswith("=SUM(") and bv.cell(total, 2).value == plan["total_bytes"]
    assert bv.cell(labels["capacity"], 2).value == plan["capacity_bytes"]
    assert bv.cell(labels["fits"], 2).value == ("yes" if plan["total_bytes"] <= plan["capacity_bytes"] else "no")
    assert bv.cell(labels["selected_backend"], 2).value == plan["selected_backend"]
    assert bv.cell(labels["max_seq_len"], 2).value == plan["max_seq_len"]
    env = names_env(wb_f)
    live = 0
    for r in range(1, bf.max_row + 1):
        formula = bf.cell(r, 2).value
        if isinstance(formula, str) and formula.startswith("=") and not re.search(r"\b[A-Z]+\d+\b", formula) \
                and formula != "=capacity_bytes":
            live += 1
            assert evaluate(formula, env) == bv.cell(r, 2).value, (bf.cell(r, 1).value, formula)
    assert live >= 4  # weights, KV cache, KV bytes per token and the score matrices are all closed forms


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c].get("mode") != "training"])
def test_editing_n_and_batch_recomputes_the_kv_cache_like_the_estimator(case):
    inputs = make_inputs(**CASES[case])
    plan, wb_f, wb_v = workbook(inputs)
    bf = wb_f["Budget"]
    kv_row = next(r for r in range(1, bf.max_row + 1) if bf.cell(r, 1).value == "kv cache")
    formula = bf.cell(kv_row, 2).value
    assert isinstance(formula, str) and formula.startswith("="), "the KV cache should be a live formula"
    for n, batch in ((inputs.seq_len * 2 + 1, inputs.batch), (4096, inputs.batch * 3)):
        env = names_env(wb_f)
        env.update(seq_len=n, batch=batch)
        for name in ("dp", "tokens_per_gpu", "batch_per_gpu"):  # the derived inputs recompute too
            env[name] = evaluate(wb_f["Inputs"].cell(_row(wb_f, name), 2).value, env)
        expected = make_plan(dataclasses.replace(inputs, seq_len=n, batch=batch), solve=False).kv_cache_bytes
        assert evaluate(formula, env) == expected


def _row(wb, name) -> int:
    ws = wb["Inputs"]
    return next(r for r in range(1, ws.max_row + 1) if ws.cell(r, 4).value == name)


def test_sweep_sheet_has_backend_totals_and_live_kv_formula():
    inputs = make_inputs(**CASES["llama-3-8b serve 8k"])
    _, wb_f, wb_v = workbook(inputs)
    sf, sv = wb_f["Sweep"], wb_v["Sweep"]
    header = [c.value for c in sf[1]]
    assert header[0] == "n" and any("flash" in str(h) for h in header)
    kv_col = header.index("KV cache bytes per GPU (formula in n)") + 1
    for r in range(2, sf.max_row + 1):
        n = sv.cell(r, 1).value
        formula = sf.cell(r, kv_col).value
        expected = make_plan(dataclasses.replace(inputs, seq_len=n), solve=False).kv_cache_bytes
        assert sv.cell(r, kv_col).value == expected
        assert evaluate(formula.replace(f"$A{r}", str(n)), names_env(wb_f)) == expected


def test_csv_and_json_carry_the_profile_template_and_plan():
    inputs = make_inputs(**CASES["llama-3-8b serve 8k"])
    plan = make_plan(inputs).to_dict()
    rows = list(csv.reader(io.StringIO(export.plan_csv(inputs, plan))))
    template = {k: v for s, k, v in rows[1:] if s == "profile_template"}
    assert template == {"n": "8192", "batch": "1", "dtype": "bfloat16", "backend": "auto", "gpu": "h200",
                        "gpus": "1", "mode": "inference", "kv_dtype": "bfloat16"}
    assert ["plan", "total_bytes", str(plan["total_bytes"])] in rows
    doc = json.loads(export.plan_json(inputs, plan))
    assert doc["profile_template"]["n"] == 8192 and doc["total_bytes"] == plan["total_bytes"]
    assert doc["components"] == plan["components"]
