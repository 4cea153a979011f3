"""The Validate page's "this model, this workload, on this GPU": the plan on screen as a `python -m validation model
--config` run (validation/model/own_model.py) in a child process, its progress, cancel, and the row beside the plan.

The child process is the guard's last line: it applies `validation run`'s guard itself and stops at its
--timeout-s (the page passes the job budget); the page checks first with ui/gpu.py's APP_GUARD on the plan's peak
and holds ui/gpu.py's one-job-per-server lock while the child runs. A cancel, a re-run of the page, the budget
running out or any error kills the child (whose exit frees the GPU). torch is never imported here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from estimator.units import GIB
from ui.gpu import _JOB_LOCK, Busy, Cancelled
from validation.call.guard import APP_GUARD, APP_GUARD_TEXT
from validation.errors import first_line

ROOT = Path(__file__).resolve().parents[1]
# the phases a run announces (validation/model/hf_runs.py PhaseBox names, in order), for the progress bar
PHASES = {"train": ("warm-up", "build", "optimizer_init", "step1", "forward", "backward", "optimizer", "timing",
                    "cleanup"),
          "prefill": ("warm-up", "build", "prefill", "decode", "decode_warm", "timing")}
DECODE_TOKENS = 8  # the page's decode steps after the prefill (the command's default is 16)


def config_for_plan(inputs, uploaded_config: dict | None) -> dict:
    """The config dict to build for the plan on screen: the uploaded config.json (as the plan page read it), a
    preset's published config, or the typed architecture as a Llama config; ValueError (one line) otherwise."""
    from estimator.model.presets import PRESETS
    from validation.model.own_model import flat_config
    from validation.model.spec_configs import config_for_spec

    spec = inputs.model
    if uploaded_config is not None and spec.source.startswith("Hugging Face config.json"):
        return flat_config(uploaded_config)
    preset = spec.name if PRESETS.get(spec.name) == spec else None
    return flat_config(config_for_spec(spec, preset))


def command(inputs, config_path: str, out_path: str, *, layers: int | None, timeout_s: float) -> list[str]:
    """The argv of `python -m validation model` for these plan inputs (only flags the command measures)."""
    argv = [sys.executable, "-m", "validation", "model", "--config", config_path, "--out", out_path,
            "--seq-len", str(inputs.seq_len), "--batch", str(inputs.batch), "--dtype", inputs.dtype,
            "--mode", inputs.mode, "--backend", inputs.backend, "--gpu", inputs.gpu,
            "--timeout-s", f"{timeout_s:g}"]
    if inputs.mode == "training":
        argv += ["--precision", inputs.recipe.name, "--optimizer", inputs.optimizer,
                 "--checkpointing", inputs.checkpointing]
    else:
        argv += ["--decode-tokens", str(DECODE_TOKENS)]
        if inputs.kv_dtype not in (None, inputs.dtype):
            argv += ["--kv-dtype", inputs.kv_dtype]
    if inputs.window is not None:
        argv += ["--window", str(inputs.window)]
    if (inputs.gpus or 1) != 1 or inputs.tp != 1 or inputs.cp != 1:
        argv += ["--gpus", str(inputs.gpus or inputs.tp * inputs.cp), "--tp", str(inputs.tp), "--cp", str(inputs.cp)]
    if layers is not None:
        argv += ["--layers", str(layers)]
    return argv


def preview(inputs, cfg: dict, layers: int, free_bytes: int | None) -> dict:
    """What the run will be, before it starts: the cut plan, the case, and why the page's guard refuses it ('' when
    it may run). ValueError (one line naming the flag) when this plan cannot be measured on one GPU."""
    from validation.model import own_model, own_plan

    args = own_model.parser().parse_args(command(inputs, "config.json", "out.csv", layers=None, timeout_s=0)[4:])
    built = own_model.cut(cfg, min(layers, cfg["num_hidden_layers"]))
    cut_inputs = own_model.plan_inputs(args, built, f"{inputs.model.name} ({built['num_hidden_layers']} layers)",
                                       inputs.gpu)
    case, _ = own_plan.case_of(cut_inputs, built, None if inputs.mode == "training" else DECODE_TOKENS,
                               DECODE_TOKENS, str(built["model_type"]))
    plan, plan_error = own_plan.make(cut_inputs)
    reason = ""
    if plan is None or plan_error:
        reason = f"the planner has no figure for this model ({plan_error})"
    elif free_bytes is not None and APP_GUARD.blocks(own_plan.planned_peak(plan), free_bytes):
        need = own_plan.planned_peak(plan)
        reason = (f"needs {need / GIB:,.2f} GiB planned; the guard allows "
                  f"{max(APP_GUARD.allowance(free_bytes), 0) / GIB:,.2f} GiB ({APP_GUARD_TEXT}): build fewer layers")
    return {"plan": plan, "case": case, "layers": built["num_hidden_layers"], "reason": reason,
            "peak_bytes": own_plan.planned_peak(plan) if plan is not None else 0,
            "predicted_s": own_plan.predicted_s(plan, case) if plan is not None else None}


def fit_layers(inputs, cfg: dict, free_bytes: int) -> int:
    """The most layers (at most the config's) whose plan passes the page's guard; 0 when none does."""
    lo, hi = 0, cfg["num_hidden_layers"]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        ok = not preview(inputs, cfg, mid, free_bytes)["reason"]
        lo, hi = (mid, hi) if ok else (lo, mid - 1)
    return lo


def progress_of(line: str, mode: str) -> tuple[float, str] | None:
    """(fraction done, phase) for a `phase: NAME (T s)` line of the command's stderr; None for other lines."""
    if not line.startswith("phase: "):
        return None
    name = line[len("phase: "):].split(" (", 1)[0].strip()
    phases = PHASES.get(mode, ())
    if name not in phases:
        return None
    return phases.index(name) / len(phases), name


def run_job(argv: list[str], mode: str, timeout_s: float,
            on_progress: Callable[[float, str], None] = lambda fraction, text: None,
            should_stop: Callable[[], bool] = lambda: False) -> tuple[pd.DataFrame, list[str]]:
    """Run the command in a child process holding the server's GPU lock (Busy when held); (its CSV row, its
    stderr lines). Cancelled when `should_stop()`; the child is killed on every way out but its own exit."""
    if not _JOB_LOCK.acquire(blocking=False):
        raise Busy("another validation job is running on this server; try again when it finishes")
    out = argv[argv.index("--out") + 1]
    lines: list[str] = []
    try:
        with tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
            try:
                started, seen = time.monotonic(), 0
                while proc.poll() is None:
                    if should_stop():
                        raise Cancelled("cancelled")
                    if timeout_s and time.monotonic() - started > timeout_s + 60:  # the child's own limit, + a minute
                        raise TimeoutError(f"the run took over {timeout_s:g} s (the job budget)")
                    err.seek(0)
                    text = err.read()
                    for line in text.splitlines()[seen:]:
                        step = progress_of(line, mode)
                        if step:
                            on_progress(*step)
                    seen = len(text.splitlines())
                    time.sleep(0.2)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            err.seek(0)
            lines = err.read().splitlines()
        if not os.path.exists(out):
            raise RuntimeError(first_line(lines[-1] if lines else f"exit status {proc.returncode}"))
        on_progress(1.0, "done")
        return pd.read_csv(out, dtype=str, keep_default_na=False), lines
    finally:
        _JOB_LOCK.release()


def explain(row: dict) -> list[str]:
    """The row's verdict and misses (validation.model.own_report.explain)."""
    from validation.model.own_report import explain as explain_row

    return explain_row(row)


def read_result(data: bytes) -> pd.DataFrame:
    """A `validation model` result CSV (uploaded); ValueError (one line) when it is not one."""
    import io

    try:
        frame = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"cannot read this CSV: {first_line(exc)}") from None
    missing = [c for c in ("status", "mode", "peak_bytes", "plan_peak_bytes") if c not in frame.columns]
    if missing:
        raise ValueError(f"not a validation model CSV: missing columns {', '.join(missing)}")
    if frame.empty:
        raise ValueError("no row under the header")
    return frame


def write_config(cfg: dict, folder: str) -> str:
    path = os.path.join(folder, "config.json")
    with open(path, "w") as fh:
        json.dump(cfg, fh, indent=2, sort_keys=True)
    return path


def parts_table(row: dict) -> pd.DataFrame:
    """The row's parts (validation.model.own_report.parts) with display units: GiB or ms."""
    from validation.model.own_report import parts

    table = pd.DataFrame(parts(row))
    if table.empty:
        return table
    scale = table["unit"].map({"bytes": GIB, "ms": 1.0, "count": 1.0})
    table["measured_shown"] = table["measured"] / scale
    table["planned_shown"] = table["planned"] / scale
    table["shown_unit"] = table["unit"].map({"bytes": "GiB", "ms": "ms", "count": "parameters"})
    return table


def parts_figure(table: pd.DataFrame) -> go.Figure:
    """Measured beside planned, one pair of bars per memory part (GiB) and per time (ms, second axis row)."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, subplot_titles=("memory (GiB)", "time (ms)"), vertical_spacing=0.25)
    for r, unit in ((1, "bytes"), (2, "ms")):
        part = table[table["unit"] == unit] if len(table) else table
        if not len(part):
            continue
        labels = [f"{p}: {c}" for p, c in zip(part["phase"], part["component"], strict=True)]
        for name, col, color in (("measured", "measured_shown", "#1f77b4"), ("planned", "planned_shown", "#ff7f0e")):
            fig.add_trace(go.Bar(x=labels, y=list(part[col]), name=name, marker={"color": color},
                                 showlegend=r == 1, legendgroup=name,
                                 hovertemplate=f"%{{x}}<br>{name} %{{y:,.3f}}<extra></extra>"), row=r, col=1)
    fig.update_layout(barmode="group", title="Measured beside planned", height=620,
                      margin={"l": 10, "r": 10, "t": 60, "b": 10})
    return fig
