"""The budget workbook (.xlsx) of a plan: every budget row a live formula of the Inputs sheet.

Shared by the web app (ui/export.py) and `python -m estimator plan --xlsx PATH`. XlsxWriter is imported only
when a workbook is written, so importing this module costs nothing.

How each budget row stays live when n (`seq_len`) or `batch` is edited in Excel or LibreOffice:
- closed forms where one reproduces the estimator exactly for these inputs (weights, KV cache);
- every other row (activations, gradients, optimizer state and step temporaries, autocast copies, workspaces,
  context) is the estimator's own value tabulated over a grid of n and batch on the *Tables* sheet (each grid
  point is a full `make_plan`, so mode, checkpointing, precision, optimizer and backend are all in it), read back
  by INDEX/MATCH and interpolated: power law in n between neighbouring grid points (quarter octaves near the
  plan's n), linear in batch (every batch 1-8 per data-parallel replica is a grid point). The plan's own n and
  batch are grid points, so the unedited workbook reproduces the estimator exactly;
- the allocator reserve (the step's largest block, which the verdict keeps free: estimator/model/budget.py
  `fit_verdict`) is its own row, tabulated like the others, and the `fits` formula counts it, as every other
  surface does;
- between grid points the interpolation is not exact: the sheet states its bound, the spread of total + reserve
  over the neighbouring grid points (grid.interpolation_bound: the estimator's value lies within it while memory
  grows with n and batch), and a verdict within that bound of the capacity says so instead of guessing. Outside
  the tabulated range of n and batch it asks for a re-plan.
Defined names: every input (`seq_len`, `batch`, ...), one per budget row (`row_weights`, `row_kv_cache`, ...),
`total_bytes`, `allocator_reserve_bytes`, `capacity`, `headroom_bytes`, `interpolation_bound_bytes` and `fits`
("yes", "no", "cannot run" where the backend asked for cannot run the call at that n and batch, or a sentence
asking for a re-plan near the limit or outside the table).

The input cells and closed forms are in `estimator.report.cells`, the grid and its interpolation in
`estimator.report.grid`; this module writes the sheets. Text cells are written with `write_string` (a model
name such as `=1+2` stays text, never a formula).
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from estimator.call import registry
from estimator.files import write_atomic
from estimator.report.cells import RESULT_KEYS, Named, _component_form, _env, _eval, closed_forms, input_cells, slug
from estimator.report.grid import _complete, batch_grid, effective_batch, n_grid
from estimator.units import GIB

if TYPE_CHECKING:
    from estimator.model.budget import Plan


def plan_xlsx(plan: Plan, sweep_rows: Iterable[dict] | None = None, advice: Sequence = (),
              plan_fn: Callable | None = None) -> bytes:
    """The budget workbook of `plan` (for its own `plan.inputs`): Inputs, Budget (every row live), Tables, Sweep
    and Advice sheets, as bytes. `plan_fn(inputs)` computes a plan without solvers (default
    `make_plan(inputs, solve=False)`)."""
    import xlsxwriter

    from estimator.model.plan import make_plan

    plan_fn = plan_fn or (lambda inp: make_plan(inp, solve=False))
    inputs = plan.inputs
    buffer = io.BytesIO()
    wb = xlsxwriter.Workbook(buffer, {"in_memory": True, "strings_to_formulas": False, "strings_to_urls": False})
    fmt = {"bold": wb.add_format({"bold": True}), "bytes": wb.add_format({"num_format": "#,##0"}),
           "gib": wb.add_format({"num_format": "#,##0.000"}), "pct": wb.add_format({"num_format": "0.0%"}),
           "input": wb.add_format({"bg_color": "#FFF2CC", "num_format": "#,##0"}),
           "input_text": wb.add_format({"bg_color": "#FFF2CC"}),
           "note": wb.add_format({"italic": True, "font_color": "#666666"})}

    cells = input_cells(inputs, plan)
    env = _env(cells)
    _inputs_sheet(wb, cells, env, fmt)
    forms = closed_forms(inputs, plan, plan_fn)
    ns, bs, table = _complete(inputs, plan_fn, n_grid(inputs), batch_grid(inputs))
    components = plan.components
    budget = wb.add_worksheet("Budget")
    tables = wb.add_worksheet("Tables")
    slugs = _unique([slug(c.label) for c in components] + [RESERVE_SLUG])
    columns = [(c.label, c.bytes) for c in components] + [(RESERVE_LABEL, plan.allocator_reserve_bytes)]
    tabled = _tables_sheet(wb, tables, inputs, columns, slugs, ns, bs, table, fmt)
    _budget_sheet(wb, budget, inputs, plan, components, slugs, forms, tabled, fmt)
    _sweep_sheet(wb, sweep_rows, fmt, forms, env)
    _advice_sheet(wb, advice, fmt)
    wb.close()
    return buffer.getvalue()


_CORNERS = ", ".join(f"INDEX(t_need, {i}, {j})" for i in ("t_ilo", "t_ihi") for j in ("t_jlo", "t_jhi"))
RESERVE_LABEL = "allocator reserve (largest block kept free)"
RESERVE_SLUG = "allocator_reserve"


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return out


def _write(ws, row: int, col: int, value, cell_format=None) -> None:
    """Numbers as numbers, everything else as text (never a formula, never a URL)."""
    if isinstance(value, bool):
        ws.write_boolean(row, col, value, cell_format)
    elif isinstance(value, int | float) and math.isfinite(value):
        ws.write_number(row, col, value, cell_format)
    elif value is None:
        ws.write_blank(row, col, None, cell_format)
    else:
        ws.write_string(row, col, str(value), cell_format)


def _inputs_sheet(wb, cells: list[Named], env: dict, fmt: dict) -> None:
    ws = wb.add_worksheet("Inputs")
    for c, head in enumerate(["input", "value", "unit", "name in formulas"]):
        ws.write_string(0, c, head, fmt["bold"])
    for i, cell in enumerate(cells, start=1):
        ws.write_string(i, 0, cell.label)
        if cell.formula:
            ws.write_formula(i, 1, "=" + cell.formula, fmt["bytes"], env[cell.name])
        elif isinstance(cell.value, int | float) and not isinstance(cell.value, bool):
            ws.write_number(i, 1, cell.value, fmt["input"] if cell.editable else fmt["bytes"])
        else:
            ws.write_string(i, 1, str(cell.value), fmt["input_text"] if cell.editable else None)
        ws.write_string(i, 2, cell.unit)
        ws.write_string(i, 3, cell.name)
        wb.define_name(cell.name, f"=Inputs!$B${i + 1}")
    ws.write_string(len(cells) + 2, 0, "Edit n (seq_len) or batch (shaded) and every row of the Budget sheet "
                    "recomputes; other inputs are fixed (change them in the app or the CLI).", fmt["note"])
    ws.set_column(0, 0, 50)
    ws.set_column(1, 1, 18)
    ws.set_column(3, 3, 18)


def _tables_sheet(wb, ws, inputs, columns, slugs, ns, bs, table, fmt) -> dict[str, str]:
    """The estimator's bytes per component (and the allocator reserve) over the (n, batch) grid, the interpolation
    cells and the interpolation's bound; returns, per column slug, the defined name of its interpolated value at
    (seq_len, batch)."""
    K, J = len(ns), len(bs)
    ws.write_string(0, 0, f"The estimator's bytes per GPU over n (rows) and batch (columns); {inputs.model.name}, "
                    f"{inputs.mode}, backend {inputs.backend}. Read by the Budget sheet's formulas.", fmt["note"])
    # lookup cells
    ws.write_string(2, 0, "lookup", fmt["bold"])
    helpers = [
        ("t_i", "row of the n grid at or below seq_len", f"=MAX(1, MIN(IFERROR(MATCH(seq_len, t_n, 1), 1), {K - 1}))"),
        ("t_beff", "batch the plan sees: ⌈batch / dp⌉ · dp", "=CEILING(batch/dp, 1)*dp"),
        ("t_j", "column of the batch grid at or below it",
         f"=MAX(1, MIN(IFERROR(MATCH(t_beff, t_b, 1), 1), {J - 1}))"),
        ("t_n0", "n below", "=INDEX(t_n, t_i)"), ("t_n1", "n above", "=INDEX(t_n, t_i+1)"),
        ("t_b0", "batch below", "=INDEX(t_b, t_j)"), ("t_b1", "batch above", "=INDEX(t_b, t_j+1)"),
        ("t_x", "position of seq_len between them (log scale)", "=LN(seq_len/t_n0)/LN(t_n1/t_n0)"),
        ("t_y", "position of the batch between them", "=(t_beff-t_b0)/(t_b1-t_b0)"),
        ("t_ok", "the backend can run at every grid point the value is read from (1) or not (0): the "
                 "neighbouring n and batch, or the grid point itself when seq_len and batch are one",
         "=INDEX(t_supported, t_ilo, t_jlo)*INDEX(t_supported, t_ilo, t_jhi)"
         "*INDEX(t_supported, t_ihi, t_jlo)*INDEX(t_supported, t_ihi, t_jhi)"),
        ("t_inside", f"n in [{ns[0]:,}, {ns[-1]:,}] and batch in [{bs[0]:,}, {bs[-1]:,}] (1), the tabulated "
                     "range, or not (0)",
         f"=IF(AND(seq_len>={ns[0]}, seq_len<={ns[-1]}, t_beff>={bs[0]}, t_beff<={bs[-1]}), 1, 0)"),
        ("t_ilo", "n rows the bound spans: first", "=IF(seq_len=t_n1, t_i+1, t_i)"),
        ("t_ihi", "n rows the bound spans: last", "=IF(seq_len=t_n0, t_i, t_i+1)"),
        ("t_jlo", "batch columns the bound spans: first", "=IF(t_beff=t_b1, t_j+1, t_j)"),
        ("t_jhi", "batch columns the bound spans: last", "=IF(t_beff=t_b0, t_j, t_j+1)"),
        ("t_bound", "interpolation bound of total + reserve here: their spread over the neighbouring grid points "
                    "(0 on a grid point; bytes)", f"=MAX({_CORNERS})-MIN({_CORNERS})"),
    ]
    beff = effective_batch(inputs.batch, inputs.dp)
    i0 = ns.index(inputs.seq_len) + 1 if inputs.seq_len in ns else 1
    j0 = bs.index(beff) + 1 if beff in bs else 1
    cache = {"t_i": min(i0, K - 1), "t_j": min(j0, J - 1), "t_beff": beff}
    cache.update(t_n0=ns[cache["t_i"] - 1], t_n1=ns[cache["t_i"]], t_b0=bs[cache["t_j"] - 1], t_b1=bs[cache["t_j"]])
    cache["t_x"] = math.log(inputs.seq_len / cache["t_n0"]) / math.log(cache["t_n1"] / cache["t_n0"])
    cache["t_y"] = (beff - cache["t_b0"]) / (cache["t_b1"] - cache["t_b0"])
    cache["t_ok"] = cache["t_inside"] = 1
    n_at, b_at = inputs.seq_len, beff
    cache.update(t_ilo=cache["t_i"] + (n_at == cache["t_n1"]), t_ihi=cache["t_i"] + (n_at != cache["t_n0"]),
                 t_jlo=cache["t_j"] + (b_at == cache["t_b1"]), t_jhi=cache["t_j"] + (b_at != cache["t_b0"]))
    cache["t_bound"] = 0  # the plan's own n and batch are grid points
    row = 3
    for name, label, formula in helpers:
        ws.write_string(row, 0, label)
        ws.write_formula(row, 1, formula, None, cache[name])
        ws.write_string(row, 2, name)
        wb.define_name(name, f"=Tables!$B${row + 1}")
        row += 1
    # interpolated value of each component at (seq_len, batch)
    row += 1
    ws.write_string(row, 0, "each component at (seq_len, batch)", fmt["bold"])
    row += 1
    row += 1
    ws.write_string(row, 0, "Between grid points the rows are interpolated; the estimator's total + reserve lies "
                    "between the smallest and largest of the neighbouring grid points' (t_need) while memory grows "
                    "with n and batch, as it does (padding can make it dip slightly), so t_bound bounds the "
                    "interpolation's error and the verdict says 're-plan' within it of the capacity.", fmt["note"])
    row += 1
    blocks_top = row + len(columns) + 3
    names = {}
    for (label, value), sl in zip(columns, slugs, strict=True):
        grid = f"t_{sl}"

        def at(col: str, grid: str = grid) -> str:
            v0, v1 = f"INDEX({grid}, t_i, {col})", f"INDEX({grid}, t_i+1, {col})"
            return f"IF(AND({v0}>0, {v1}>0), {v0}*EXP(t_x*LN({v1}/{v0})), {v0}+({v1}-{v0})*(seq_len-t_n0)/(t_n1-t_n0))"

        formula = f"=ROUND({at('t_j')}+t_y*({at('t_j+1')}-{at('t_j')}), 0)"
        ws.write_string(row, 0, label)
        ws.write_formula(row, 1, formula, fmt["bytes"], value)
        names[sl] = f"at_{sl}"
        wb.define_name(names[sl], f"=Tables!$B${row + 1}")
        ws.write_string(row, 2, names[sl])
        row += 1
    # grids: n down column A, batch across; one block per component, then the supported block
    top = blocks_top
    col_letter = _col
    ws.write_string(top, 0, "n \\ batch", fmt["bold"])
    for j, b in enumerate(bs):
        ws.write_number(top, 1 + j, b, fmt["bold"])
    wb.define_name("t_b", f"=Tables!${col_letter(1)}${top + 1}:${col_letter(J)}${top + 1}")
    first = top + 1
    for k, n in enumerate(ns):
        ws.write_number(first + k, 0, n)
    wb.define_name("t_n", f"=Tables!$A${first + 1}:$A${first + K}")
    for c, sl in enumerate(slugs):
        left = 1 + (J + 1) * c
        ws.write_string(top - 1, left, columns[c][0], fmt["bold"])
        for k, n in enumerate(ns):
            for j, b in enumerate(bs):
                ws.write_number(first + k, left + j, table["values"][(n, b)][c], fmt["bytes"])
        wb.define_name(f"t_{sl}", f"=Tables!${col_letter(left)}${first + 1}:${col_letter(left + J - 1)}${first + K}")
    left = 1 + (J + 1) * len(slugs)
    ws.write_string(top - 1, left, "the backend asked for can run (1) or not (0)", fmt["bold"])
    for k, n in enumerate(ns):
        for j, b in enumerate(bs):
            ws.write_number(first + k, left + j, table["ok"][(n, b)])
    wb.define_name("t_supported", f"=Tables!${col_letter(left)}${first + 1}:${col_letter(left + J - 1)}${first + K}")
    left += J + 1
    ws.write_string(top - 1, left, "total + allocator reserve (what the verdict compares)", fmt["bold"])
    for k, n in enumerate(ns):
        for j, b in enumerate(bs):
            ws.write_number(first + k, left + j, sum(table["values"][(n, b)]), fmt["bytes"])
    wb.define_name("t_need", f"=Tables!${col_letter(left)}${first + 1}:${col_letter(left + J - 1)}${first + K}")
    ws.set_column(0, 0, 44)
    return names


def _col(index: int) -> str:
    """0-based column index -> letters (0 -> A)."""
    letters = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        letters = chr(65 + rem) + letters
    return letters


def _budget_sheet(wb, bs, inputs, plan, components, slugs, forms, tabled, fmt) -> None:
    for c, head in enumerate(["component", "bytes per GPU", "GiB", "share", "how", "name"]):
        bs.write_string(0, c, head, fmt["bold"])
    first, last = 2, 1 + len(components)  # 1-based rows of the components
    total = sum(c.bytes for c in components)
    for i, (comp, sl) in enumerate(zip(components, slugs[:len(components)], strict=True), start=1):
        value = comp.bytes
        form = _component_form(comp.key, value, forms)
        bs.write_string(i, 0, comp.label)
        if form:
            bs.write_formula(i, 1, "=" + form["expr"], fmt["bytes"], value)
            bs.write_string(i, 4, f"closed form: {form['equation']}")
        else:
            bs.write_formula(i, 1, f"={tabled[sl]}", fmt["bytes"], value)
            bs.write_string(i, 4, "the estimator's value over n and batch (Tables sheet), interpolated", fmt["note"])
        bs.write_formula(i, 2, f"=B{i + 1}/2^30", fmt["gib"], value / GIB)
        bs.write_formula(i, 3, f"=IF($B${last + 1}=0,0,B{i + 1}/$B${last + 1})", fmt["pct"],
                         value / total if total else 0)
        bs.write_string(i, 5, f"row_{sl}")
        wb.define_name(f"row_{sl}", f"=Budget!$B${i + 1}")
    t = last  # 0-based row of the total
    bs.write_string(t, 0, "total", fmt["bold"])
    bs.write_formula(t, 1, f"=SUM(B{first}:B{last})", fmt["bytes"], total)
    bs.write_formula(t, 2, f"=B{t + 1}/2^30", fmt["gib"], total / GIB)
    bs.write_formula(t, 3, f"=IF(B{t + 1}=0,0,1)", fmt["pct"], 1 if total else 0)
    bs.write_string(t, 5, "total_bytes")
    wb.define_name("total_bytes", f"=Budget!$B${t + 1}")
    fit = plan.fit  # the one verdict (estimator/model/budget.py): total + allocator reserve against the capacity
    reserve = fit.allocator_reserve_bytes
    rows = (  # (label, formula, cached value, defined name); 0-based sheet rows t+1 ..
        (RESERVE_LABEL, f"={tabled[RESERVE_SLUG]}", reserve, "allocator_reserve_bytes"),
        ("capacity", "=capacity_bytes", plan.capacity_bytes, "capacity"),
        ("headroom (capacity − total − allocator reserve)", f"=B{t + 3}-B{t + 1}-B{t + 2}", fit.headroom_bytes,
         "headroom_bytes"),
        ("interpolation bound here (0 on a grid point; Tables sheet)", "=t_bound", 0, "interpolation_bound_bytes"),
    )
    for k, (label, formula, value, name) in enumerate(rows, start=t + 1):
        bs.write_string(k, 0, label)
        bs.write_formula(k, 1, formula, fmt["bytes"], value)
        bs.write_formula(k, 2, f"=B{k + 1}/2^30", fmt["gib"], value / GIB)
        bs.write_string(k, 5, name)
        wb.define_name(name, f"=Budget!$B${k + 1}")
    bs.write_string(t + 1, 4, "kept free: near the limit the caching allocator runs out in fragments", fmt["note"])
    f_row = t + 1 + len(rows)
    bs.write_string(f_row, 0, "fits")
    verdict = {"fits": "yes", "does not fit": "no", "cannot run": "cannot run"}[fit.status]
    need, bound = "(total_bytes+allocator_reserve_bytes)", "interpolation_bound_bytes"
    bs.write_formula(f_row, 1, '=IF(t_inside=0,"outside the tabulated n and batch: re-plan",IF(t_ok=0,"cannot run",'
                     f'IF({need}+{bound}<=capacity,"yes",IF({need}-{bound}>capacity,"no",'
                     '"within the interpolation bound of the limit: re-plan"))))', None, verdict)
    bs.write_string(f_row, 4, "yes when total + allocator reserve <= capacity (the estimator's verdict)", fmt["note"])
    bs.write_string(f_row, 5, "fits")
    wb.define_name("fits", f"=Budget!$B${f_row + 1}")
    row = f_row + 2
    bs.write_string(row, 0, "closed-form terms (live)", fmt["bold"])
    for c, head in enumerate(["bytes per GPU", "GiB", "estimator", "equation"], start=1):
        bs.write_string(row, c, head, fmt["bold"])
    for j, form in enumerate(forms, start=row + 1):
        bs.write_string(j, 0, form["label"])
        if form["live"]:
            bs.write_formula(j, 1, "=" + form["expr"], fmt["bytes"], form["value"])
            bs.write_formula(j, 2, f"=B{j + 1}/2^30", fmt["gib"], form["value"] / GIB)
        else:
            bs.write_number(j, 1, int(form["plan_value"] or 0), fmt["bytes"])
        bs.write_string(j, 3, "same" if form["live"] else "differs: value from the estimator at the plan's n")
        bs.write_string(j, 4, form["equation"])
    row = row + len(forms) + 2
    bs.write_string(row, 0, f"estimator results at n = {inputs.seq_len:,}, batch {inputs.batch:,} (values)",
                    fmt["bold"])
    for j, key in enumerate(RESULT_KEYS, start=row + 1):
        bs.write_string(j, 0, key)
        value = getattr(plan, key)
        if value is not None:
            _write(bs, j, 1, value, fmt["bytes"] if isinstance(value, int) and not isinstance(value, bool) else None)
    bs.set_column(0, 0, 44)
    bs.set_column(1, 1, 20)
    bs.set_column(4, 4, 60)
    bs.set_column(5, 5, 26)


def sweep_rows(inputs, ns: Iterable[int], backends: Sequence[str] = registry.names(traced=True),
               plan_fn: Callable | None = None) -> list[dict]:
    """Per n and forced backend (default: those whose memory is checked against allocator traces): the plan's
    total bytes per GPU (None where that backend cannot run)."""
    from estimator.model.plan import make_plan

    plan_fn = plan_fn or (lambda inp: make_plan(inp, solve=False))
    rows = []
    for n in ns:
        for backend in backends:
            try:
                plan = plan_fn(dataclasses.replace(inputs, seq_len=int(n), backend=backend))
            except ValueError:
                plan = None
            total = int(plan.total_bytes) if plan is not None and plan.supported else None
            rows.append({"n": int(n), "backend": backend, "total_bytes": total})
    return rows


def _sweep_sheet(wb, rows, fmt, forms, env: dict) -> None:
    """The estimator's total per backend for each n (values), beside the KV-cache closed form in n (live)."""
    ss = wb.add_worksheet("Sweep")
    rows = list(rows or ())
    if not rows:
        ss.write_string(0, 0, "no sweep")
        return
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    ns = sorted({int(r["n"]) for r in rows})
    value = {(int(r["n"]), r["backend"]): r.get("total_bytes") for r in rows}
    ss.write_string(0, 0, "n", fmt["bold"])
    for c, b in enumerate(backends, start=1):
        ss.write_string(0, c, f"{b}: total bytes per GPU", fmt["bold"])
    kv = next(f for f in forms if f["key"] == "kv_cache_bytes")
    kv_col = len(backends) + 1
    if kv["live"]:
        ss.write_string(0, kv_col, "KV cache bytes per GPU (formula in n)", fmt["bold"])
    for r, n in enumerate(ns, start=1):
        ss.write_number(r, 0, n)
        for c, b in enumerate(backends, start=1):
            v = value.get((n, b))
            if v is None or (isinstance(v, float) and math.isnan(v)):
                ss.write_string(r, c, "cannot run")
            else:
                ss.write_number(r, c, int(v), fmt["bytes"])
        if kv["live"]:
            expr = re.sub(r"\bseq_len\b", f"$A{r + 1}",
                          re.sub(r"\btokens_per_gpu\b", f"CEILING($A{r + 1}/cp, 1)", kv["expr"]))
            cached = _eval(kv["expr"], {**env, "seq_len": n, "tokens_per_gpu": math.ceil(n / env["cp"])})
            ss.write_formula(r, kv_col, "=" + expr, fmt["bytes"], int(round(cached)))
    ss.set_column(0, kv_col, 22)


def _advice_sheet(wb, advice, fmt) -> None:
    ws = wb.add_worksheet("Advice")
    header = ["id", "title", "why", "expected_effect", "bytes_metric", "bytes_before", "bytes_after", "time_metric",
              "time_ms_before", "time_ms_after"]
    for c, head in enumerate(header):
        ws.write_string(0, c, head, fmt["bold"])
    for r, item in enumerate(advice, start=1):
        d = item.to_dict() if hasattr(item, "to_dict") else dict(item)
        for c, key in enumerate(header):
            value = d.get(key)
            if value is not None:
                _write(ws, r, c, value, fmt["bytes"] if key in ("bytes_before", "bytes_after") else None)
    ws.set_column(0, 0, 26)
    ws.set_column(1, 3, 60)


def write_plan_xlsx(path: str, plan: Plan, advice: Sequence = ()) -> None:
    """The CLI's `--xlsx PATH`: the same workbook as the app's download."""
    from estimator.call.config import MAX_SEQ_LEN

    inputs = plan.inputs
    top = min(MAX_SEQ_LEN, max(4 * inputs.seq_len, 1 << 17))
    ns = sorted({1 << k for k in range(8, top.bit_length())} | {inputs.seq_len})
    data = plan_xlsx(plan, sweep_rows(inputs, ns), advice)
    write_atomic(path, data, "--xlsx")  # a temporary file renamed when whole: a failed write leaves no stub

