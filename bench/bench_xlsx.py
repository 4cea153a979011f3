"""Benchmark: the planning page's budget workbook (.xlsx), built as the Export tab's "Prepare" button builds it
(pages/plan.py `xlsx_bytes`: the sweep, the advice and some 600-1,100 budgets for the Tables sheet), from a cold
memo (a new plan), for the page's default model in inference and in training.

    taskset -c 0,1 python -m bench.bench_xlsx

Prints one JSON object: per mode the wall and CPU seconds, the budgets computed and the workbook's size, and how
many progress updates the page's bar got (the page shows a bar with "k of N budgets" while it builds).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def build(mode: str, seq_len: int = 16384) -> dict:
    from estimator.model.inputs import PlanInputs
    from estimator.model.presets import get_preset
    from ui import cached, export, sweeps

    inputs = PlanInputs(model=get_preset("llama-3-8b"), seq_len=seq_len, batch=1, dtype="bfloat16",
                        kv_dtype="bfloat16", mode=mode, backend="auto", gpu="h200", gpus=1)
    for memo in (cached.budget, cached.advice, cached.estimate):
        memo.cache_clear()
    updates = []
    t0, c0 = time.perf_counter(), time.process_time()
    sweep = cached.plan_sweep(inputs, tuple(sweeps.n_grid(inputs.seq_len)))
    plan_fn = export.counting_plan_fn(inputs, cached.budget, lambda fraction, text: updates.append(fraction))
    data = export.plan_xlsx(cached.plan(inputs), sweep, cached.advice(inputs), plan_fn=plan_fn)
    return {"wall_s": round(time.perf_counter() - t0, 3), "cpu_s": round(time.process_time() - c0, 3),
            "budgets": cached.budget.cache_info().misses, "bytes": len(data), "progress_updates": len(updates),
            "last_fraction": round(updates[-1], 3) if updates else None}


def run() -> dict:
    return {"cpus": len(os.sched_getaffinity(0)), **{mode: build(mode) for mode in ("inference", "training")}}


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
