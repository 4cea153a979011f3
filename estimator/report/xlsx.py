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
  batch are grid points, so the unedited workbook reproduces the estimator exactly.
Defined names: every input (`seq_len`, `batch`, ...), one per budget row (`row_weights`, `row_kv_cache`, ...),
`total_bytes`, `capacity`, `headroom_bytes` and `fits` ("yes", "no", or "cannot run" where the backend asked for
cannot run the call at that n and batch).

Text cells are written with `write_string` (a model name such as `=1+2` stays text, never a formula).
"""

from __future__ import annotations

import dataclasses
import io
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

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
    editable: bool = False  # shaded: the workbook recomputes when it changes


def input_cells(inputs, plan: dict) -> list[Named]:
    """The Inputs sheet, in order. Derived per-GPU sizes are formulas over the raw inputs."""
    from estimator.call.config import DTYPE_BITS, KV_DTYPE_BITS

    m = inputs.model
    windows = list(inputs.windows)
    sizes = sorted({w for w in windows if w is not None})
    window = sizes[0] if sizes else 0
    window_layers = sum(1 for w in windows if w is not None) if len(sizes) <= 1 else 0
    micro_cap = inputs.micro_batch if inputs.mode == "training" and inputs.micro_batch else 1 << 20
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
        Named(name="seq_len", label="n: sequence length", value=inputs.seq_len, unit="tokens", editable=True),
        Named(name="batch", label="batch (sequences in the job)", value=inputs.batch, unit="sequences",
              editable=True),
        Named(name="dtype", label="dtype (compute)", value=inputs.dtype),
        Named(name="dtype_bits", label="dtype element size", value=DTYPE_BITS[inputs.dtype], unit="bits"),
        Named(name="kv_dtype", label="KV-cache dtype", value=inputs.kv_dtype),
        Named(name="kv_bits", label="KV-cache element size", value=KV_DTYPE_BITS[inputs.kv_dtype], unit="bits"),
        Named(name="mode", label="mode", value=inputs.mode),
        Named(name="precision", label="training precision", value=inputs.precision or "-"),
        Named(name="optimizer", label="optimizer (training)", value=inputs.optimizer),
        Named(name="checkpointing", label="activation checkpointing", value=inputs.checkpointing),
        Named(name="zero", label="ZeRO stage", value=inputs.zero),
        Named(name="micro_cap", label="micro-batch (training; 1048576 = none)", value=micro_cap,
              unit="sequences"),
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
        Named(name="batch_per_gpu", label="batch per GPU = min(⌈batch / dp⌉, micro-batch)",
              value=inputs.batch_per_gpu, formula="MIN(CEILING(batch/dp, 1), micro_cap)"),
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


# Closed forms (bytes per GPU). Each names the plan key it must reproduce exactly to be written as a formula.
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


def _env_at(cells: Sequence[Named], n: int, b: int) -> dict:
    return _env([dataclasses.replace(c, value=n) if c.name == "seq_len" else
                 dataclasses.replace(c, value=b) if c.name == "batch" else c for c in cells])


def closed_forms(inputs, plan: dict, plan_fn: Callable | None = None) -> list[dict]:
    """Each closed form with its Python value and whether it equals the estimator's figure (then it is live).
    With `plan_fn`, a form is live only if it also reproduces the estimator at other n and batch (an edit of the
    workbook must not leave the estimator behind: e.g. a windowed model's cache that a backend keeps whole)."""
    cells = input_cells(inputs, plan)
    env = _env(cells)
    probes = []
    if plan_fn is not None:
        for n, b in ((2 * inputs.seq_len + 1, inputs.batch), (max(inputs.cp, inputs.seq_len // 2), 3 * inputs.batch)):
            try:
                other = plan_fn(dataclasses.replace(inputs, seq_len=n, batch=b))
            except ValueError:
                continue
            probes.append((_env_at(cells, n, b), dataclasses.asdict(other) if dataclasses.is_dataclass(other)
                           else dict(other)))
    out = []
    for label, key, expr, equation in CLOSED_FORMS:
        value = _eval(expr, env)
        expected = plan.get(key)
        matches = expected is not None and float(value).is_integer() and int(value) == int(expected)
        for probe_env, probe_plan in probes:
            matches = matches and probe_plan.get(key) is not None and _eval(expr, probe_env) == probe_plan[key]
        out.append({"label": label, "key": key, "expr": expr, "equation": equation, "value": int(round(value)),
                    "plan_value": expected, "live": matches})
    return out


def _component_form(name: str, value: int, forms: list[dict]) -> dict | None:
    """The live closed form for a budget component, if one reproduces it (matched by name and value)."""
    lowered = name.lower()
    for form in forms:
        if not form["live"] or form["value"] != value:
            continue
        if (lowered == "weights" and form["key"] == "weights_bytes") or (
                lowered == "kv cache" and form["key"] == "kv_cache_bytes"):
            return form
    return None


def slug(text: str) -> str:
    """A component name as a defined-name fragment: 'activations (peak layer)' -> 'activations_peak_layer'."""
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9]+", "_", text.lower())).strip("_")[:40] or "row"


# --- the grid the estimator is tabulated on -------------------------------------------------------------------

def n_grid(inputs) -> list[int]:
    """n values: quarter octaves (eighth octaves for training, whose peak moves between the backward and the
    optimizer step) from n/16 to 16·n, whole octaves outside, from max(cp, 16) to 2^24, plus n itself."""
    from estimator.call.config import MAX_SEQ_LEN

    low = max(inputs.cp, 16)
    steps = 8 if inputs.mode == "training" else 4
    ns = {inputs.seq_len}
    for k in range(steps * 4, steps * 24 + 1):  # 2^4 .. 2^24
        n = round(2 ** (k / steps))
        near = inputs.seq_len / 16 <= n <= inputs.seq_len * 16
        if near or k % steps == 0:
            ns.add(n)
    return sorted(n for n in ns if low <= n <= MAX_SEQ_LEN)


def batch_grid(inputs) -> list[int]:
    """Batch values: 1..8 per data-parallel replica, then ×1.5/×2 steps to at least 4× the batch; plus the batch."""
    dp = inputs.dp
    per_replica = list(range(1, 9))
    k = 8
    while k < max(64, 4 * -(-inputs.batch // dp)):
        k = k * 3 // 2 if k * 3 // 2 > k and (k & (k - 1)) == 0 else k * 4 // 3
        per_replica.append(k)
    values = {effective_batch(inputs.batch, dp), *(dp * b for b in per_replica)}
    return sorted(b for b in values if 1 <= b <= 1 << 20)


def effective_batch(batch: int, dp: int) -> int:
    """The plan depends on the batch only through ⌈batch / dp⌉ (per-replica share): that share times dp."""
    return -(-batch // dp) * dp


def tabulate(inputs, plan_fn: Callable, ns: Sequence[int], bs: Sequence[int]) -> dict:
    """Per grid point (n, batch): each budget component's bytes (by position) and whether the plan can run."""
    width = None
    values: dict[tuple[int, int], tuple[int, ...]] = {}
    ok: dict[tuple[int, int], int] = {}
    for n in ns:
        for b in bs:
            try:
                plan = plan_fn(dataclasses.replace(inputs, seq_len=n, batch=b))
            except ValueError:
                continue
            row = tuple(int(v) for _, v in plan.components)
            width = width or len(row)
            if len(row) != width:
                continue
            values[(n, b)], ok[(n, b)] = row, int(bool(plan.supported))
    return {"values": values, "ok": ok, "dp": inputs.dp}


def interpolate(table: dict, ns: Sequence[int], bs: Sequence[int], component: int, n: int, b: int) -> float:
    """What the workbook's formulas compute for one component at (n, b): power law in n, linear in batch
    (linear in n where a neighbour is 0). Mirrors the Tables sheet so tests can check it without a spreadsheet."""
    i = max(0, min(_match(ns, n), len(ns) - 2))
    b = effective_batch(b, table["dp"])
    j = max(0, min(_match(bs, b), len(bs) - 2))

    def at(jj: int) -> float:
        v0 = table["values"][(ns[i], bs[jj])][component]
        v1 = table["values"][(ns[i + 1], bs[jj])][component]
        if v0 > 0 and v1 > 0:
            return v0 * math.exp(math.log(n / ns[i]) / math.log(ns[i + 1] / ns[i]) * math.log(v1 / v0))
        return v0 + (v1 - v0) * (n - ns[i]) / (ns[i + 1] - ns[i])

    a, c = at(j), at(j + 1)
    return round(a + (b - bs[j]) / (bs[j + 1] - bs[j]) * (c - a))


def _match(grid: Sequence[int], x: int) -> int:
    """0-based MATCH(x, grid, 1): the last index with grid[i] <= x (0 below the grid)."""
    lo = 0
    for i, g in enumerate(grid):
        if g <= x:
            lo = i
    return lo


def _complete(inputs, plan_fn, ns, bs) -> tuple[list[int], list[int], dict]:
    """The table restricted to the n and batch values every component could be computed at."""
    table = tabulate(inputs, plan_fn, ns, bs)
    ns = [n for n in ns if all((n, b) in table["values"] for b in bs)]
    return ns, list(bs), table


# --- the workbook ---------------------------------------------------------------------------------------------

def plan_xlsx(inputs, plan: dict, sweep_rows: Iterable[dict] | None = None, advice: Sequence = (),
              plan_fn: Callable | None = None) -> bytes:
    """The budget workbook: Inputs, Budget (every row live), Tables, Sweep and Advice sheets, as bytes.
    `plan_fn(inputs)` computes a plan without solvers (default `make_plan(inputs, solve=False)`)."""
    import xlsxwriter

    from estimator.model.plan import make_plan

    plan_fn = plan_fn or (lambda inp: make_plan(inp, solve=False))
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
    components = list(plan["components"])
    budget = wb.add_worksheet("Budget")
    tables = wb.add_worksheet("Tables")
    slugs = _unique([slug(c["component"]) for c in components])
    tabled = _tables_sheet(wb, tables, inputs, components, slugs, ns, bs, table, fmt)
    _budget_sheet(wb, budget, inputs, plan, components, slugs, forms, tabled, fmt)
    _sweep_sheet(wb, sweep_rows, fmt, forms, env)
    _advice_sheet(wb, advice, fmt)
    wb.close()
    return buffer.getvalue()


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


def _tables_sheet(wb, ws, inputs, components, slugs, ns, bs, table, fmt) -> dict[str, str]:
    """The estimator's bytes per component over the (n, batch) grid, and the interpolation cells; returns, per
    component slug, the defined name of its interpolated value at (seq_len, batch)."""
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
        ("t_ok", "the backend can run at both neighbouring n (1) or not (0)",
         "=INDEX(t_supported, t_i, t_j)*INDEX(t_supported, t_i+1, t_j)"),
    ]
    beff = effective_batch(inputs.batch, inputs.dp)
    i0 = ns.index(inputs.seq_len) + 1 if inputs.seq_len in ns else 1
    j0 = bs.index(beff) + 1 if beff in bs else 1
    cache = {"t_i": min(i0, K - 1), "t_j": min(j0, J - 1), "t_beff": beff}
    cache.update(t_n0=ns[cache["t_i"] - 1], t_n1=ns[cache["t_i"]], t_b0=bs[cache["t_j"] - 1], t_b1=bs[cache["t_j"]])
    cache["t_x"] = math.log(inputs.seq_len / cache["t_n0"]) / math.log(cache["t_n1"] / cache["t_n0"])
    cache["t_y"] = (beff - cache["t_b0"]) / (cache["t_b1"] - cache["t_b0"])
    cache["t_ok"] = 1
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
    blocks_top = row + len(components) + 3
    names = {}
    for comp, sl in zip(components, slugs, strict=True):
        grid = f"t_{sl}"

        def at(col: str, grid: str = grid) -> str:
            v0, v1 = f"INDEX({grid}, t_i, {col})", f"INDEX({grid}, t_i+1, {col})"
            return f"IF(AND({v0}>0, {v1}>0), {v0}*EXP(t_x*LN({v1}/{v0})), {v0}+({v1}-{v0})*(seq_len-t_n0)/(t_n1-t_n0))"

        formula = f"=ROUND({at('t_j')}+t_y*({at('t_j+1')}-{at('t_j')}), 0)"
        ws.write_string(row, 0, comp["component"])
        ws.write_formula(row, 1, formula, fmt["bytes"], int(comp["bytes"]))
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
        ws.write_string(top - 1, left, components[c]["component"], fmt["bold"])
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
    total = sum(int(c["bytes"]) for c in components)
    for i, (comp, sl) in enumerate(zip(components, slugs, strict=True), start=1):
        value = int(comp["bytes"])
        form = _component_form(comp["component"], value, forms)
        bs.write_string(i, 0, comp["component"])
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
    bs.write_string(t + 1, 0, "capacity")
    bs.write_formula(t + 1, 1, "=capacity_bytes", fmt["bytes"], plan["capacity_bytes"])
    bs.write_formula(t + 1, 2, f"=B{t + 2}/2^30", fmt["gib"], plan["capacity_bytes"] / GIB)
    bs.write_string(t + 1, 5, "capacity")
    wb.define_name("capacity", f"=Budget!$B${t + 2}")
    bs.write_string(t + 2, 0, "headroom (capacity − total)")
    headroom = plan["capacity_bytes"] - total
    bs.write_formula(t + 2, 1, f"=B{t + 2}-B{t + 1}", fmt["bytes"], headroom)
    bs.write_formula(t + 2, 2, f"=B{t + 3}/2^30", fmt["gib"], headroom / GIB)
    bs.write_string(t + 2, 5, "headroom_bytes")
    wb.define_name("headroom_bytes", f"=Budget!$B${t + 3}")
    bs.write_string(t + 3, 0, "fits")
    verdict = "cannot run" if not plan.get("supported", True) else ("yes" if total <= plan["capacity_bytes"] else "no")
    bs.write_formula(t + 3, 1, f'=IF(t_ok=0,"cannot run",IF(B{t + 1}<=B{t + 2},"yes","no"))', None, verdict)
    bs.write_string(t + 3, 5, "fits")
    wb.define_name("fits", f"=Budget!$B${t + 4}")
    row = t + 5
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
        value = plan.get(key)
        if value is not None:
            _write(bs, j, 1, value, fmt["bytes"] if isinstance(value, int) and not isinstance(value, bool) else None)
    bs.set_column(0, 0, 44)
    bs.set_column(1, 1, 20)
    bs.set_column(4, 4, 60)
    bs.set_column(5, 5, 26)


def sweep_rows(inputs, ns: Iterable[int], backends: Sequence[str] = ("math", "flash", "efficient", "cudnn", "eager"),
               plan_fn: Callable | None = None) -> list[dict]:
    """Per n and forced backend: the plan's total bytes per GPU (None where that backend cannot run)."""
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


def write_plan_xlsx(path: str, inputs, plan: dict, advice: Sequence = ()) -> None:
    """The CLI's `--xlsx PATH`: the same workbook as the app's download."""
    from estimator.call.config import MAX_SEQ_LEN

    top = min(MAX_SEQ_LEN, max(4 * inputs.seq_len, 1 << 17))
    ns = sorted({1 << k for k in range(8, top.bit_length())} | {inputs.seq_len})
    data = plan_xlsx(inputs, plan, sweep_rows(inputs, ns), advice)
    with open(path, "wb") as out:
        out.write(data)
