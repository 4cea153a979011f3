"""Exports of a plan: an .xlsx budget with live formulas (XlsxWriter), the plan as CSV and as JSON.

The spreadsheet's Budget sheet computes the closed-form terms (weights, KV cache, textbook score matrix) with
formulas over named cells of the Inputs sheet, so editing n or batch in Excel or LibreOffice recomputes
them; each formula is written with its cached value so that viewers that do not recalculate still show
numbers. A formula is used only where it reproduces the estimator's figure exactly for these inputs
(`closed_forms` checks each against the plan); the backend-specific terms (activations, workspaces, the
attention peak) are values with a note, because no closed form covers them.

The profile-template fields (n, batch, dtype, backend, GPU) head every export.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from estimator.units import GIB

_FUNCS = {"MIN": min, "MAX": max, "INT": math.floor, "CEILING": lambda x, step: math.ceil(x / step) * step}


@dataclass(frozen=True, kw_only=True)
class Named:
    """One input cell: its defined name, label, value and unit."""

    name: str
    label: str
    value: object
    unit: str = ""
    formula: str = ""  # a derived input: an expression over earlier names


def profile_template(inputs) -> dict:
    """The profile-template fields: n, batch, dtype, backend, GPU (+ mode, kv dtype)."""
    return {"n": inputs.seq_len, "batch": inputs.batch, "dtype": inputs.dtype, "backend": inputs.backend,
            "gpu": inputs.gpu, "gpus": inputs.gpus, "mode": inputs.mode, "kv_dtype": inputs.kv_dtype}


def input_cells(inputs, plan: dict) -> list[Named]:
    """The Inputs sheet, in order. Derived per-GPU sizes are formulas over the raw inputs."""
    from estimator.call.config import DTYPE_BITS, KV_DTYPE_BITS

    m = inputs.model
    windows = list(inputs.windows)
    sizes = sorted({w for w in windows if w is not None})
    window = sizes[0] if sizes else 0
    window_layers = sum(1 for w in windows if w is not None) if len(sizes) <= 1 else 0
    return [
        Named(name="model_name", label="model", value=m.name),
        Named(name="layers", label="layers", value=m.layers),
        Named(name="hidden", label="hidden", value=m.hidden),
        Named(name="q_heads", label="query heads", value=m.q_heads),
        Named(name="kv_heads", label="kv heads", value=m.kv_heads),
        Named(name="head_dim", label="head_dim", value=m.head_dim),
        Named(name="ffn", label="ffn (intermediate)", value=m.ffn),
        Named(name="vocab", label="vocab", value=m.vocab),
        Named(name="params", label="parameters (exact, from the architecture)", value=m.params, unit="parameters"),
        Named(name="params_per_gpu", label="parameters per GPU (estimator: tp sharding)", value=plan["params_per_gpu"],
              unit="parameters"),
        Named(name="seq_len", label="n: sequence length", value=inputs.seq_len, unit="tokens"),
        Named(name="batch", label="batch", value=inputs.batch, unit="sequences"),
        Named(name="dtype", label="dtype", value=inputs.dtype),
        Named(name="dtype_bits", label="dtype element size", value=DTYPE_BITS[inputs.dtype], unit="bits"),
        Named(name="kv_dtype", label="KV-cache dtype", value=inputs.kv_dtype),
        Named(name="kv_bits", label="KV-cache element size", value=KV_DTYPE_BITS[inputs.kv_dtype], unit="bits"),
        Named(name="mode", label="mode", value=inputs.mode),
        Named(name="checkpointing", label="activation checkpointing", value=inputs.checkpointing),
        Named(name="backend", label="attention backend (asked)", value=inputs.backend),
        Named(name="attn_window", label="attention window (0 = none)", value=window, unit="tokens"),
        Named(name="window_layers", label="layers using that window", value=window_layers, unit="layers"),
        Named(name="full_window", label="every layer windowed (1) or not (0)",
              value=int(window > 0 and window_layers == m.layers)),
        Named(name="gpu", label="GPU", value=inputs.gpu),
        Named(name="gpus", label="GPUs", value=inputs.gpus),
        Named(name="tp", label="tensor parallel", value=inputs.tp),
        Named(name="cp", label="context parallel", value=inputs.cp),
        Named(name="capacity_bytes", label="GPU memory capacity", value=plan["capacity_bytes"], unit="bytes"),
        Named(name="torch_version", label="PyTorch version modelled", value=inputs.torch_version),
        Named(name="dp", label="data parallel = gpus / (tp·cp)", value=inputs.dp, formula="gpus/(tp*cp)"),
        Named(name="tokens_per_gpu", label="tokens per GPU = ⌈n / cp⌉", value=inputs.tokens_per_gpu,
              unit="tokens", formula="CEILING(seq_len/cp, 1)"),
        Named(name="batch_per_gpu", label="batch per GPU = ⌈batch / dp⌉", value=inputs.batch_per_gpu,
              formula="CEILING(batch/dp, 1)"),
        Named(name="q_heads_per_gpu", label="query heads per GPU", value=inputs.q_heads_per_gpu, formula="q_heads/tp"),
        Named(name="kv_heads_per_gpu", label="kv heads per GPU = max(1, ⌊kv_heads / tp⌋)",
              value=inputs.kv_heads_per_gpu, formula="MAX(1, INT(kv_heads/tp))"),
        Named(name="is_decoder", label="decoder (1: keeps K and V per token) or encoder (0)",
              value=int(m.kind == "decoder")),
        Named(name="kv_cached", label="KV cache kept (1: decoder inference; 0: training or encoder)",
              value=int(m.kind == "decoder" and inputs.mode == "inference")),
        Named(name="score_layers", label="layers whose score matrices count (training without checkpointing: all)",
              value=m.layers if inputs.mode == "training" and inputs.checkpointing == "none" else 1, unit="layers"),
    ]


def _eval(expr: str, env: dict) -> float:
    return eval(expr, {"__builtins__": {}}, {**_FUNCS, **env})  # noqa: S307 - our own fixed expressions


def _env(cells: Sequence[Named]) -> dict:
    env = {}
    for cell in cells:
        env[cell.name] = _eval(cell.formula, env) if cell.formula else cell.value
    return env


# Closed forms (units: bytes per GPU). Each names the plan key it must reproduce exactly to be written as a formula.
# KV cache: K and V, per layer, per token: 2·kv_heads·head_dim·bits/8 (the KV bytes term; PyTorch stores
# exactly this); windowed layers keep min(n, window) tokens. Weights: parameters × element size.
# Score matrix: the textbook b·h·L·S·element size of one layer (the n² activation term).
KV_TOKENS = "((layers-window_layers)*tokens_per_gpu+window_layers*CEILING(MIN(seq_len, attn_window)/cp, 1))"
CLOSED_FORMS = (
    ("weights (closed form)", "weights_bytes", "params_per_gpu*dtype_bits/8", "parameters × dtype bits / 8"),
    ("KV cache (closed form)", "kv_cache_bytes",
     f"kv_cached*2*kv_heads_per_gpu*head_dim*kv_bits/8*batch_per_gpu*{KV_TOKENS}",
     "2 (K,V) · kv_heads · head_dim · bits/8 · batch · tokens, summed over layers (windowed layers: min(n, window))"),
    ("KV cache per token (closed form)", "kv_cache_bytes_per_token",
     "is_decoder*2*layers*kv_heads_per_gpu*head_dim*kv_bits/8",
     "2 · layers · kv_heads · head_dim · bits/8"),
    ("score matrices (textbook closed form)", "textbook_scores_bytes",
     "score_layers*batch_per_gpu*q_heads_per_gpu*tokens_per_gpu"
     "*MIN(tokens_per_gpu, seq_len-full_window*MAX(0, seq_len-attn_window))*dtype_bits/8",
     "b · h · L · S · dtype bits / 8 (S = min(n, window)), one layer, or every layer when training keeps them all"),
)


RESULT_KEYS = ("selected_backend", "max_seq_len", "max_batch", "prefill_flops", "prefill_time_ms",
               "decode_flops_per_token", "decode_time_ms_per_token", "step_time_ms", "attention_share", "ffn_share",
               "embedding_share")


def closed_forms(inputs, plan: dict) -> list[dict]:
    """Each closed form with its Python value and whether it equals the estimator's figure (then it is live)."""
    env = _env(input_cells(inputs, plan))
    out = []
    for label, key, expr, equation in CLOSED_FORMS:
        value = _eval(expr, env)
        expected = plan.get(key)
        matches = expected is not None and float(value).is_integer() and int(value) == int(expected)
        out.append({"label": label, "key": key, "expr": expr, "equation": equation, "value": int(round(value)),
                    "plan_value": expected, "live": matches})
    return out


def _component_form(name: str, value: int, forms: list[dict]) -> dict | None:
    """The live closed form for a budget component, if one reproduces it (matched by name and value)."""
    lowered = name.lower()
    for form in forms:
        if not form["live"] or form["value"] != value:
            continue
        if ("weight" in lowered and form["key"] == "weights_bytes") or (
                "kv" in lowered and form["key"] == "kv_cache_bytes"):
            return form
    return None


def plan_xlsx(inputs, plan: dict, sweep: pd.DataFrame | None = None, advice: Sequence = ()) -> bytes:
    """The budget spreadsheet: Inputs, Budget (live formulas + cached values), Sweep and Advice sheets."""
    import xlsxwriter

    buffer = io.BytesIO()
    wb = xlsxwriter.Workbook(buffer, {"in_memory": True})
    bold = wb.add_format({"bold": True})
    bytes_fmt = wb.add_format({"num_format": "#,##0"})
    gib_fmt = wb.add_format({"num_format": "#,##0.000"})
    pct_fmt = wb.add_format({"num_format": "0.0%"})
    input_fmt = wb.add_format({"bg_color": "#FFF2CC", "num_format": "#,##0"})
    note_fmt = wb.add_format({"italic": True, "font_color": "#666666"})

    # Inputs: names in column A, values in column B (editable ones shaded), units in C.
    cells = input_cells(inputs, plan)
    env = _env(cells)
    ws = wb.add_worksheet("Inputs")
    ws.write_row(0, 0, ["input", "value", "unit", "name in formulas"], bold)
    for i, cell in enumerate(cells, start=1):
        ws.write(i, 0, cell.label)
        if cell.formula:
            ws.write_formula(i, 1, "=" + cell.formula, bytes_fmt, env[cell.name])
        else:
            ws.write(i, 1, cell.value, input_fmt)
        ws.write(i, 2, cell.unit)
        ws.write(i, 3, cell.name)
        wb.define_name(cell.name, f"=Inputs!$B${i + 1}")
    ws.write(len(cells) + 2, 0, "Shaded cells are inputs: edit n (seq_len) or batch and the Budget sheet recomputes "
             "its closed-form rows.", note_fmt)
    ws.set_column(0, 0, 46)
    ws.set_column(1, 1, 18)
    ws.set_column(3, 3, 18)

    # Budget: one row per component; closed forms live, the rest values with a note; total, headroom, verdict.
    forms = closed_forms(inputs, plan)
    bs = wb.add_worksheet("Budget")
    bs.write_row(0, 0, ["component", "bytes per GPU", "GiB", "share", "how"], bold)
    components = list(plan["components"])
    first, last = 2, 1 + len(components)  # 1-based rows of the components
    total = sum(int(c["bytes"]) for c in components)
    for i, comp in enumerate(components, start=1):
        value = int(comp["bytes"])
        form = _component_form(comp["component"], value, forms)
        bs.write(i, 0, comp["component"])
        if form:
            bs.write_formula(i, 1, "=" + form["expr"], bytes_fmt, value)
            bs.write(i, 4, f"formula: {form['equation']}")
        else:
            bs.write_number(i, 1, value, bytes_fmt)
            bs.write(i, 4, f"estimator value for n = {inputs.seq_len:,} (backend-specific; recompute in the app)",
                     note_fmt)
        bs.write_formula(i, 2, f"=B{i + 1}/2^30", gib_fmt, value / GIB)
        bs.write_formula(i, 3, f"=IF($B${last + 1}=0,0,B{i + 1}/$B${last + 1})", pct_fmt, value / total if total else 0)
    t = last  # 0-based row of the total
    bs.write(t, 0, "total", bold)
    bs.write_formula(t, 1, f"=SUM(B{first}:B{last})", bytes_fmt, total)
    bs.write_formula(t, 2, f"=B{t + 1}/2^30", gib_fmt, total / GIB)
    bs.write_formula(t, 3, f"=IF(B{t + 1}=0,0,1)", pct_fmt, 1 if total else 0)
    bs.write(t + 1, 0, "capacity")
    bs.write_formula(t + 1, 1, "=capacity_bytes", bytes_fmt, plan["capacity_bytes"])
    bs.write_formula(t + 1, 2, f"=B{t + 2}/2^30", gib_fmt, plan["capacity_bytes"] / GIB)
    bs.write(t + 2, 0, "headroom (capacity − total)")
    headroom = plan["capacity_bytes"] - total
    bs.write_formula(t + 2, 1, f"=B{t + 2}-B{t + 1}", bytes_fmt, headroom)
    bs.write_formula(t + 2, 2, f"=B{t + 3}/2^30", gib_fmt, headroom / GIB)
    bs.write(t + 3, 0, "fits")
    bs.write_formula(t + 3, 1, f'=IF(B{t + 1}<=B{t + 2},"yes","no")', None, "yes" if total <= plan["capacity_bytes"]
                     else "no")
    row = t + 5
    bs.write(row, 0, "closed-form terms (live)", bold)
    bs.write_row(row, 1, ["bytes per GPU", "GiB", "estimator", "equation"], bold)
    for j, form in enumerate(forms, start=row + 1):
        if form["live"]:
            bs.write_formula(j, 1, "=" + form["expr"], bytes_fmt, form["value"])
            bs.write_formula(j, 2, f"=B{j + 1}/2^30", gib_fmt, form["value"] / GIB)
        else:
            bs.write_number(j, 1, int(form["plan_value"] or 0), bytes_fmt)
            bs.write(j, 2, "")
        bs.write(j, 0, form["label"])
        bs.write(j, 3, "same" if form["live"] else "differs: value from the estimator")
        bs.write(j, 4, form["equation"])
    row = row + len(forms) + 2
    bs.write(row, 0, f"estimator results at n = {inputs.seq_len:,} (values)", bold)
    for j, key in enumerate(RESULT_KEYS, start=row + 1):
        bs.write(j, 0, key)
        value = plan.get(key)
        if value is not None:
            bs.write(j, 1, value, bytes_fmt if isinstance(value, int) and not isinstance(value, bool) else None)
    bs.set_column(0, 0, 40)
    bs.set_column(1, 1, 20)
    bs.set_column(4, 4, 70)

    _sweep_sheet(wb, sweep, bold, bytes_fmt, forms, env)
    _advice_sheet(wb, advice, bold, bytes_fmt)
    wb.close()
    return buffer.getvalue()


def _sweep_sheet(wb, sweep, bold, bytes_fmt, forms, env: dict) -> None:
    """The estimator's total per backend for each n (values), beside the KV-cache closed form in n (live)."""
    ss = wb.add_worksheet("Sweep")
    if sweep is None or sweep.empty:
        ss.write(0, 0, "no sweep")
        return
    wide = sweep.pivot_table(index="n", columns="backend", values="total_bytes", aggfunc="first", dropna=False)
    backends = list(dict.fromkeys(sweep["backend"]))
    ss.write_row(0, 0, ["n"] + [f"{b}: total bytes per GPU" for b in backends], bold)
    kv = next(f for f in forms if f["key"] == "kv_cache_bytes")
    kv_col = len(backends) + 1
    ss.write(0, kv_col, "KV cache bytes per GPU (formula in n)" if kv["live"] else "", bold)
    for r, n in enumerate(wide.index, start=1):
        ss.write_number(r, 0, int(n))
        for c, b in enumerate(backends, start=1):
            value = wide.loc[n, b] if b in wide.columns else None
            if value is None or pd.isna(value):
                ss.write(r, c, "cannot run")
            else:
                ss.write_number(r, c, int(value), bytes_fmt)
        if kv["live"]:
            expr = re.sub(r"\bseq_len\b", f"$A{r + 1}",
                          re.sub(r"\btokens_per_gpu\b", f"CEILING($A{r + 1}/cp, 1)", kv["expr"]))
            cached = _eval(kv["expr"], {**env, "seq_len": int(n), "tokens_per_gpu": math.ceil(int(n) / env["cp"])})
            ss.write_formula(r, kv_col, "=" + expr, bytes_fmt, int(round(cached)))
    ss.set_column(0, kv_col, 22)


def _advice_sheet(wb, advice, bold, bytes_fmt) -> None:
    ws = wb.add_worksheet("Advice")
    header = ["id", "title", "why", "expected_effect", "bytes_metric", "bytes_before", "bytes_after", "time_metric",
              "time_ms_before", "time_ms_after"]
    ws.write_row(0, 0, header, bold)
    for r, item in enumerate(advice, start=1):
        d = item.to_dict() if hasattr(item, "to_dict") else dict(item)
        for c, key in enumerate(header):
            value = d.get(key)
            if value is None:
                continue
            ws.write(r, c, value, bytes_fmt if key.startswith("bytes_b") or key == "bytes_after" else None)
    ws.set_column(0, 0, 26)
    ws.set_column(1, 3, 60)


def plan_json(inputs, plan: dict, advice: Sequence = ()) -> str:
    """The whole plan as one JSON object: profile-template fields, the plan's keys, components and advice."""
    out = {"profile_template": profile_template(inputs), "model": inputs.model.name, **plan,
           "advice": [a.to_dict() if hasattr(a, "to_dict") else dict(a) for a in advice]}
    return json.dumps(out, indent=2, default=str)


def plan_csv(inputs, plan: dict) -> str:
    """The plan as CSV (section, key, value): profile-template fields, scalar results, then components."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["section", "key", "value"])
    for key, value in profile_template(inputs).items():
        writer.writerow(["profile_template", key, value])
    writer.writerow(["input", "model", inputs.model.name])
    for key, value in plan.items():
        if isinstance(value, dict | list | tuple):
            continue
        writer.writerow(["plan", key, value])
    for comp in plan["components"]:
        writer.writerow(["component", comp["component"], comp["bytes"]])
    return buffer.getvalue()
