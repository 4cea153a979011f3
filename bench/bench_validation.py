"""Validation speed: the per-case overhead of `python -m validation run` on a CPU (a tiny case, so the
protocol's bookkeeping dominates: warm-up, peak, profiler, FLOP counter, timed repeats, CSV write), and
`python -m validation report` on a large synthetic output. Prints one JSON object:

    python -m bench.bench_validation [--cases 20] [--report-rows 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time


def run_overhead_s(cases: int) -> dict:
    from validation.call.grid import case, number
    from validation.call.runner import RunOptions
    from validation.call.sweep import sweep
    rows = number([case("math", "float32", batch=1, q_heads=1, head_dim=16, q_len=32) for _ in range(cases)], "b")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "o.csv")
        sweep(list(rows[0]), rows[:1], out, RunOptions(repeats=1), progress_stream=open(os.devnull, "w"))  # warm
        t0 = time.perf_counter()
        sweep(list(rows[0]), rows, out, RunOptions(repeats=5), progress_stream=open(os.devnull, "w"))
        total = time.perf_counter() - t0
    return {"cases": cases, "total_s": round(total, 3), "per_case_ms": round(1e3 * total / cases, 1)}


def report_s(n_rows: int) -> dict:
    import pandas as pd

    from validation.call.report import build_report, prepare
    rng = random.Random(0)
    backends = ("auto", "math", "flash", "efficient", "cudnn", "eager")
    records = []
    for i in range(n_rows):
        b, n = rng.choice(backends), rng.choice((512, 1024, 2048, 4096, 8192))
        measured = rng.randint(1, 2**33)
        records.append({"id": f"r{i}", "backend": b, "dtype": rng.choice(("bfloat16", "float16", "float32")),
                        "batch": 1, "q_heads": 8, "kv_heads": 8, "head_dim": 64, "q_len": n, "kv_len": n,
                        "causal": 0, "mask": "none", "dropout": 0.0,
                        "mode": rng.choice(("forward", "forward_backward")), "status": "ok",
                        "measured_peak_extra_bytes": measured, "measured_time_ms": rng.random(),
                        "ran_backend": b, "n_kernels": rng.randint(1, 30), "torch_flops": 1,
                        "torch_version": "2.11.0", "device_name": "NVIDIA H200", "error": "",
                        "predicted_supported": True, "predicted_selected_backend": b,
                        "predicted_peak_extra_bytes": int(measured * rng.uniform(0.95, 1.05)),
                        "predicted_fits": True, "predicted_flops": 1, "predicted_time_ms": rng.random()})
    frame = pd.DataFrame(records)
    t0 = time.perf_counter()
    text = build_report(prepare(frame), title="bench")
    return {"rows": n_rows, "report_s": round(time.perf_counter() - t0, 3), "report_chars": len(text)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--report-rows", type=int, default=100_000)
    args = parser.parse_args()
    import torch
    result = {"torch": torch.__version__, "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
              "run": run_overhead_s(args.cases), "report": report_s(args.report_rows)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
