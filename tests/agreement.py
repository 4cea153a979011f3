"""The agreement run behind tests/test_one_truth.py: for seeded random plans, what each surface says about one plan
(the estimator's `fit_verdict`, the plan page under Streamlit's AppTest, `plan --json`, the budget workbook
recalculated by LibreOffice, `advise`), and whether every advice effect equals the estimator's re-plan of its change.

One row per plan (`ROW_FIELDS`); `disagreements(row)` names every surface that differs. The per-plan work (plan,
workbook, page, CLI, advice) runs in `workers` processes; the workbooks are recalculated at the end by one
LibreOffice run over all of them (tests/libreoffice.py).

The full-size run, which writes the committed table (by chunks of 20 plans, each with its own LibreOffice run, so
a cut-off run keeps what it did; `--resume` carries on):

    python -m tests.agreement --plans 200 --csv validation/data/one_truth_agreement.csv

(also writes `<csv>.meta.json` with the command, the commit and the wall time)."""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import io
import json
import math
import multiprocessing
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

SEED = 25
PRESETS = ("llama-3-8b", "llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "gemma-2-9b", "phi-3-mini", "llama-2-13b",
           "vit-l-16", "qwen1.5-moe-a2.7b", "llama-3.1-70b")
PLAN_KEYS = ("preset", "seq_len", "batch", "dtype", "kv_dtype", "mode", "gpu", "backend")
STATUS_OF_YES_NO = {"yes": "fits", "no": "does not fit", "cannot run": "cannot run"}
PAGE_TIMEOUT_S = 600
HEADROOM_ROW = "headroom (capacity − total − allocator reserve)"
ROW_FIELDS = ("index", "seed", *PLAN_KEYS,
              "status", "fits", "total_bytes", "headroom_bytes",  # the estimator's own plan (fit_verdict)
              "cli_status", "cli_total_bytes", "cli_fits",  # plan --json
              "page_status", "page_total", "expected_page_total",  # the plan page (AppTest), as shown
              "workbook_fits", "workbook_total_bytes", "workbook_headroom_bytes",  # recalculated by LibreOffice
              "advise_fits", "advise_totals",  # advise: its `fits` item; the bytes_before of its whole-plan items
              "advice_effects", "advice_effects_equal_replan", "advice_effect_mismatches",
              "agree", "disagreements")


def random_plans(count: int, seed: int = SEED) -> list[dict]:
    """Plan form fields, as the page's URL and the CLI's flags both take them."""
    from estimator.hardware import CATALOG
    from estimator.model.presets import get_preset

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


def inputs_of(fields: dict):
    from estimator.model.inputs import PlanInputs
    from estimator.model.presets import get_preset

    kw = dict(fields)
    return PlanInputs(model=get_preset(kw.pop("preset")), **kw)


def cli_json(fields: dict) -> dict:
    """`python -m estimator plan --json` with the plan's flags, run in this process (its own `main`)."""
    from estimator.cli.plan import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["--json", *(f"--{k.replace('_', '-')}={v}" for k, v in fields.items())])
    if rc != 0:
        raise RuntimeError(f"plan --json exited {rc} for {fields}")
    return json.loads(out.getvalue())


def page_verdict(fields: dict) -> tuple[str, str]:
    """(status, total metric) as the plan page shows them, the plan given in its URL."""
    from streamlit.testing.v1 import AppTest

    from tests.test_app_pages import ROOT, TIMEOUT, plain

    # a bound on one script run, not a timing check: generous, since the run shares a busy machine
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=max(TIMEOUT, PAGE_TIMEOUT_S))
    at.query_params.update({k: str(v) for k, v in fields.items()})
    main = sys.modules.get("__main__")
    try:
        at.run()
    finally:  # AppTest leaves the page as __main__ (see tests/conftest.py)
        if main is not None:
            sys.modules["__main__"] = main
    if at.exception:
        raise RuntimeError(f"the plan page raised for {fields}: {[e.value for e in at.exception]}")
    texts = [plain(x.value) for x in at.success] + [plain(x.value) for x in at.error]
    if any(t.startswith("Cannot run") for t in texts):
        return "cannot run", ""
    total = next(m.value for m in at.metric if m.label == "total per GPU")
    if any(t.startswith("Fits:") for t in texts):
        return "fits", total
    if any(t.startswith("Does not fit:") for t in texts):
        return "does not fit", total
    return "no verdict shown: " + " | ".join(texts), total


def advice_check(inputs) -> dict:
    """What advise says of the plan (its `fits` item, the totals its whole-plan items start from) and, for every
    advice with a whole-plan effect, whether the estimator's re-plan of its `change` gives the same total and time."""
    from estimator.advice.plan_rules import advise
    from estimator.model.inputs import PlanInputs
    from estimator.model.plan import make_plan

    items = advise(inputs)
    plan_fields = {f.name for f in dataclasses.fields(PlanInputs)}
    effects, equal, mismatches = 0, 0, []
    for item in items:
        if item.plan_bytes_after is None:
            continue
        effects += 1
        change = {k: v for k, v in dict(item.change).items() if k in plan_fields}
        replanned = make_plan(dataclasses.replace(inputs, **change), solve=False)
        time_ms = replanned.step_time_ms if inputs.mode == "training" else replanned.prefill_time_ms
        whole = item.bytes_metric != "total_bytes per GPU" or item.bytes_after is None \
            or item.bytes_after == item.plan_bytes_after
        if replanned.total_bytes == item.plan_bytes_after and whole and _close(time_ms, item.plan_time_ms_after):
            equal += 1
        else:
            mismatches.append(item.id)
    totals = sorted({a.bytes_before for a in items if a.bytes_metric == "total_bytes per GPU"})
    return {"advise_fits": any(a.id == "fits" for a in items), "advise_totals": " ".join(map(str, totals)),
            "advice_effects": effects, "advice_effects_equal_replan": equal,
            "advice_effect_mismatches": " ".join(mismatches)}


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def memory_plan(inputs):
    """A plan's memory budget and verdict without its time model (estimator/model/budget.py `budget(times=False)`):
    what the workbook's grid of n and batch reads."""
    from estimator.model.budget import budget

    return budget(inputs, times=False)


def check_plan(index: int, fields: dict, work_dir: str) -> dict:
    """Every surface but the recalculated workbook for one plan; the plan's workbook is written to
    `work_dir/plan<index>.xlsx` for the one LibreOffice run at the end."""
    from estimator.model.plan import make_plan
    from estimator.units import gib
    from ui import export

    inputs = inputs_of(fields)
    plan = make_plan(inputs, solve=False)
    # the grid's plans without the time model: the same workbook (the grid reads bytes and verdicts only; tests/
    # test_one_truth.py checks the two agree), in half the time
    Path(work_dir, f"plan{index:04d}.xlsx").write_bytes(export.plan_xlsx(plan, None, (), plan_fn=memory_plan))
    fit = plan.fit
    doc = cli_json(fields)
    page_status, page_total = page_verdict(fields)
    return {"index": index, "seed": SEED, **fields, "status": fit.status, "fits": plan.fits,
            "total_bytes": plan.total_bytes,
            "headroom_bytes": None if fit.status == "cannot run" else fit.headroom_bytes,
            "cli_status": doc["fit_status"], "cli_total_bytes": doc["total_bytes"], "cli_fits": doc["fits"],
            "page_status": page_status, "page_total": page_total,
            "expected_page_total": "" if fit.status == "cannot run" else gib(plan.total_bytes, mib_below_1gib=False),
            **advice_check(inputs)}


def read_workbook(book) -> dict:
    """The verdict, total and headroom of a recalculated workbook's Budget sheet."""
    budget = book["Budget"]
    rows = {budget.cell(r, 1).value: budget.cell(r, 2).value for r in range(1, budget.max_row + 1)}
    return {"workbook_fits": rows.get("fits"), "workbook_total_bytes": rows.get("total"),
            "workbook_headroom_bytes": rows.get(HEADROOM_ROW)}


def disagreements(row: dict) -> list[str]:
    """The surfaces that say something else than the estimator's plan (empty: all agree)."""
    status, total, runs = row["status"], row["total_bytes"], row["status"] != "cannot run"
    out = []
    if (row["cli_status"], row["cli_total_bytes"], row["cli_fits"]) != (status, total, row["fits"]):
        out.append("cli")
    if row["page_status"] != status or (runs and row["page_total"] != row["expected_page_total"]):
        out.append("page")
    if STATUS_OF_YES_NO.get(row["workbook_fits"]) != status:
        out.append("workbook verdict")
    if runs and row["workbook_total_bytes"] != total:  # the plan's own n and batch are grid points: exact
        out.append("workbook total")
    if runs and not (isinstance(row["workbook_headroom_bytes"], int | float)
                     and math.isclose(row["workbook_headroom_bytes"], row["headroom_bytes"])):
        out.append("workbook headroom")
    if row["advise_fits"] != row["fits"]:
        out.append("advise verdict")
    if row["advise_totals"] not in ("", str(total)):
        out.append("advise total")
    if row["advice_effect_mismatches"]:
        out.append("advice effect")
    return out


def run(count: int, work_dir: Path, *, workers: int = 1, seed: int = SEED, indices=None, pool=None) -> list[dict]:
    """The rows of the seeded plans `indices` (default: all `count`), every surface filled in and `agree` decided;
    the per-plan work in `pool` (else a pool of `workers` processes, or this process for one worker)."""
    from tests import libreoffice

    work_dir = Path(work_dir)
    plans = random_plans(count, seed)
    indices = list(range(count)) if indices is None else list(indices)
    args = [(k, plans[k], str(work_dir)) for k in indices]
    # the function by its module's name, not __main__'s (under `python -m tests.agreement` this module is __main__)
    from tests.agreement import check_plan as work

    if pool is not None:
        rows = list(pool.map(work, *zip(*args, strict=True)))
    elif workers > 1 and len(args) > 1:
        with worker_pool(min(workers, len(args))) as own:
            rows = list(own.map(work, *zip(*args, strict=True)))
    else:
        rows = [check_plan(*a) for a in args]
    books = libreoffice.recalculate([work_dir / f"plan{r['index']:04d}.xlsx" for r in rows], work_dir)
    for row, book in zip(rows, books, strict=True):
        row.update(read_workbook(book))
        row["seed"] = seed
        found = disagreements(row)
        row["agree"], row["disagreements"] = not found, " ".join(found)
    return rows


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """Spawned workers: a fresh interpreter each (no inherited Streamlit threads)."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


def default_workers() -> int:
    """AGREEMENT_WORKERS, else one per CPU core (at most 2: the development machine's count); 1 inside a
    pytest-xdist worker, whose siblings hold the other cores already."""
    if "AGREEMENT_WORKERS" in os.environ:
        return int(os.environ["AGREEMENT_WORKERS"])
    return 1 if os.environ.get("PYTEST_XDIST_WORKER") else min(2, os.cpu_count() or 1)


def write_csv(rows: list[dict], path: Path, *, append: bool = False) -> None:
    new = not append or not Path(path).exists()
    with open(path, "w" if new else "a", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=ROW_FIELDS, extrasaction="ignore", lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerows(rows)


def done_indices(path: Path) -> set[int]:
    """The plan indices a table written by an earlier (cut-off) run already holds."""
    if not Path(path).exists():
        return set()
    with open(path, newline="", encoding="utf-8") as fh:
        return {int(r["index"]) for r in csv.DictReader(fh)}


def summary_md(table: list[dict], meta: dict, csv_path: Path) -> str:
    """A short report of a written table (its rows as read back from the CSV: every value a string)."""
    from collections import Counter

    statuses = Counter(r["status"] for r in table)
    differing = [r for r in table if r["agree"] != "True"]
    effects = sum(int(r["advice_effects"]) for r in table)
    equal = sum(int(r["advice_effects_equal_replan"]) for r in table)
    lines = [f"# One truth on every surface: {len(table)} seeded plans", "",
             f"`{meta['command']}` (seed {meta['seed']}, {meta['workers']} worker processes; commit "
             f"{meta['commit'][:10]}, {meta['date_utc']}, {meta['machine']}; {meta['wall_s']:,.0f} s wall).", "",
             f"Per plan, `{Path(csv_path).name}` holds the inputs and what each surface says: the estimator's "
             "verdict and total, `plan --json`, the plan page (Streamlit AppTest), the budget workbook recalculated "
             "by LibreOffice, `advise`, and whether each advice effect equals the re-plan of its change.", "",
             f"- plans: {len(table)} of the {meta['plans']} asked for; verdicts: "
             + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())),
             f"- every surface agrees on {len(table) - len(differing)} of {len(table)} plans",
             f"- advice effects re-planned: {effects}, equal to the re-plan: {equal}"]
    for r in differing:
        lines.append(f"  - plan {r['index']} ({', '.join(f'{k}={r[k]}' for k in PLAN_KEYS)}): {r['disagreements']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.agreement", description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=20, help="how many seeded random plans (default 20)")
    parser.add_argument("--seed", type=int, default=SEED, help=f"the plans' random seed (default {SEED})")
    parser.add_argument("--workers", type=int, default=default_workers(), help="processes for the per-plan work")
    parser.add_argument("--chunk", type=int, default=20, help="plans per LibreOffice run; the table grows by chunks")
    parser.add_argument("--resume", action="store_true", help="keep the rows already in --csv, run the others")
    parser.add_argument("--limit-s", type=float, default=None,
                        help="start no new chunk after this many seconds (the table keeps the chunks done)")
    parser.add_argument("--csv", type=Path, required=True, help="where the per-plan table goes")
    args = parser.parse_args(argv)
    if args.plans < 1 or args.chunk < 1 or args.workers < 1:
        parser.error("--plans, --chunk and --workers: must be positive")
    started = time.time()
    done = done_indices(args.csv) if args.resume else set()
    todo = [k for k in range(args.plans) if k not in done]
    if not args.resume:
        write_csv([], args.csv)
    meta_path = Path(f"{args.csv}.meta.json")
    meta = json.loads(meta_path.read_text()) if args.resume and meta_path.exists() else {"wall_s": 0.0}
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(worker_pool(args.workers)) if args.workers > 1 else None
        for start in range(0, len(todo), args.chunk):
            if args.limit_s is not None and time.time() - started > args.limit_s:
                print(f"--limit-s {args.limit_s:g} reached: stopping with {len(done) + start} plans", flush=True)
                break
            with tempfile.TemporaryDirectory() as tmp:
                rows = run(args.plans, Path(tmp), workers=args.workers, seed=args.seed,
                           indices=todo[start:start + args.chunk], pool=pool)
            write_csv(rows, args.csv, append=True)
            print(f"{len(done) + start + len(rows)} of {args.plans} plans done ({time.time() - started:.0f} s)",
                  flush=True)
    with open(args.csv, newline="", encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    agree = sum(r["agree"] == "True" for r in table)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    command = "python -m tests.agreement " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "runs": [*meta.get("runs", []), {"command": command, "rows_before": len(done)}],
            "commit": commit, "plans": args.plans, "rows": len(table), "seed": args.seed, "workers": args.workers,
            "wall_s": round(meta.get("wall_s", 0.0) + time.time() - started, 1), "agree": agree,
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores (shared), Python "
                       f"{platform.python_version()}"}
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    Path(args.csv).with_suffix(".md").write_text(summary_md(table, meta, args.csv))
    print(f"{agree} of {len(table)} plans agree on every surface ({meta['wall_s']:.0f} s)")
    return 0 if agree == len(table) == args.plans else 1


if __name__ == "__main__":
    sys.exit(main())
