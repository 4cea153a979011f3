"""Exports of a plan: the budget workbook (.xlsx, built by estimator/report/xlsx.py, which the CLI's
`plan --xlsx` uses too), the plan as CSV and as JSON.

The CSV and JSON carry every input of the plan (`plan_inputs_fields`), so a file reproduces it: the profile-template
fields (n, batch, dtype, backend, GPU) first, then tp, cp, checkpointing, ZeRO, precision, optimizer and the rest.
CSV cells are neutralised against formula injection (OWASP "CSV injection"): a text cell that starts with
= + - @, a tab or a carriage return gets a leading apostrophe, unless it is a number.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from estimator.model.inputs import PLAN_INPUT_DEFAULTS
from estimator.report.xlsx import plan_xlsx as _plan_xlsx

if TYPE_CHECKING:
    from estimator.model.budget import Plan

# every PlanInputs field besides the model: n, then those with a default (estimator/model/inputs.py, their one home)
PLAN_FIELDS = ("seq_len", *PLAN_INPUT_DEFAULTS)


def profile_template(inputs) -> dict:
    """The profile-template fields: n, batch, dtype, backend, GPU (+ mode, kv dtype)."""
    return {"n": inputs.seq_len, "batch": inputs.batch, "dtype": inputs.dtype, "backend": inputs.backend,
            "gpu": inputs.gpu, "gpus": inputs.gpus, "mode": inputs.mode, "kv_dtype": inputs.kv_dtype}


def plan_inputs_fields(inputs) -> dict:
    """Every PlanInputs field that a plan needs besides the model (None where unset)."""
    return {k: getattr(inputs, k) for k in PLAN_FIELDS if hasattr(inputs, k)}


def model_fields(model) -> dict:
    """The architecture as the app's custom-model fields (a preset name is also given)."""
    return {"name": model.name, "layers": model.layers, "hidden": model.hidden, "heads": model.q_heads,
            "kv_heads": model.kv_heads, "head_dim": model.head_dim, "ffn": model.ffn, "vocab": model.vocab,
            "gated_ffn": model.gated_ffn, "tied_embeddings": model.tied_embeddings, "kind": model.kind}


def safe_file_stem(name: str) -> str:
    """A model name as part of a download's file name: letters, digits, dot, dash and underscore."""
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)[:60].lstrip(".-") or "model"


def plan_xlsx(plan: Plan, sweep=None, advice: Sequence = (), plan_fn=None) -> bytes:
    """The budget workbook (estimator/report/xlsx.py); `sweep` a DataFrame or rows with n, backend, total_bytes."""
    rows = sweep.to_dict("records") if hasattr(sweep, "to_dict") else sweep
    return _plan_xlsx(plan, rows, advice, plan_fn=plan_fn)


def counting_plan_fn(inputs, plan_fn, progress, every: int = 20):
    """`plan_fn` that tells `progress(fraction, text)` every `every` budgets how far the workbook's grid is: the
    grid of n and batch (estimator/report/grid.py), two probes of the closed forms, the budgets themselves."""
    from estimator.report.grid import batch_grid, n_grid

    expected = len(n_grid(inputs)) * len(batch_grid(inputs)) + 2
    done = 0

    def counted(plan_inputs):
        nonlocal done
        done += 1
        if done % every == 0 or done == expected:
            progress(min(done / expected, 1.0), f"Tabulating the budgets over n and batch: {min(done, expected):,} "
                                                f"of {expected:,}")
        return plan_fn(plan_inputs)

    return counted


def plan_json(plan: Plan, advice: Sequence = ()) -> str:
    """The whole plan as one JSON object: profile-template fields, inputs, model, the plan's keys and advice."""
    inputs = plan.inputs
    out = {"profile_template": profile_template(inputs), "plan_inputs": plan_inputs_fields(inputs),
           "model": inputs.model.name, "model_fields": model_fields(inputs.model), **plan.to_dict(),
           "advice": [a.to_dict() if hasattr(a, "to_dict") else dict(a) for a in advice]}
    return json.dumps(out, indent=2, default=str)


def safe_cell(value):
    """A CSV cell that a spreadsheet cannot run: text starting with = + - @ tab or CR gets a leading apostrophe."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = str(value)
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        try:
            float(text)
        except ValueError:
            return "'" + text
    return text


def plan_csv(plan: Plan) -> str:
    """The plan as CSV (section, key, value): profile template, every input, the model, results, components."""
    inputs, exported = plan.inputs, plan.to_dict()
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def row(*cells) -> None:
        writer.writerow([safe_cell(c) for c in cells])

    row("section", "key", "value")
    for key, value in profile_template(inputs).items():
        row("profile_template", key, value)
    for key, value in plan_inputs_fields(inputs).items():
        row("input", key, "" if value is None else value)
    for key, value in model_fields(inputs.model).items():
        row("model", key, value)
    for key, value in exported.items():
        if isinstance(value, dict | list | tuple):
            continue
        row("plan", key, value)
    for comp in plan.components:
        row("component", comp.label, comp.bytes)
    return buffer.getvalue()
