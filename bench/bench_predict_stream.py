"""Benchmark: `predict`'s streaming memory and the allocator-replay memo.

python -m bench.bench_predict_stream [--rows 1000000] [--near 100000]

1. Peak RSS of `python -m estimator predict` (a child process, ru_maxrss) on N rows and on N/10 rows: streaming
   in chunks keeps it flat in the number of rows (the whole-file reader held 910 MB at 1,000,000 rows).
2. 100,000 near-capacity rows with 500 distinct shapes through predict_frame, with the replay memo and with it
   emptied before every chunk of one row (no reuse): seconds each.
"""

from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from estimator.call import attention
from estimator.call.table import calls_from_frame, predict_frame
from estimator.hardware import get_gpu
from validation.call.grid import case, random_sample, write_csv


def predict_rss(src: Path, out: Path) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one predict run in a child process."""
    code = ("import resource, sys; from estimator.cli.predict import main; rc = main(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)")
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, str(src), "-o", str(out), "--gpu", "h200"],
                          capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, int(done.stdout.split()[-1]) / 1024


def near_capacity_rows(n: int, distinct: int, seed: int = 5) -> pd.DataFrame:
    """Shapes whose inputs + peak are 75-100 % of an H200 (the replay decides them), `distinct` of them."""
    rng = random.Random(seed)
    shapes: dict[tuple, dict] = {}
    while len(shapes) < distinct:
        row = case("math", "bfloat16", batch=1, q_heads=rng.choice([4, 8, 16]), head_dim=128,
                   q_len=rng.randint(20_000, 80_000), mode=rng.choice(["forward", "forward_backward"]))
        one = predict_frame(pd.DataFrame([row]).astype(str), "h200")
        need = int(one["peak_extra_bytes"][0])
        if 0.75 * 140e9 < need < 150e9:
            shapes[tuple(row.values())] = row
    rows = list(shapes.values())
    return pd.DataFrame([rng.choice(rows) for _ in range(n)]).astype(str)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--near", type=int, default=100_000)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp())
    base = random_sample(10_000, seed=3, max_elements=2**62)
    for rows in (args.rows // 10, args.rows):
        src = tmp / f"in{rows}.csv"
        write_csv([base[i % len(base)] for i in range(rows)], src)
        seconds, rss = predict_rss(src, tmp / "out.csv")
        print(f"predict {rows:>9,} rows: {seconds:6.1f} s, peak RSS {rss:7.1f} MB")
    frame = near_capacity_rows(args.near, 500)
    attention._REPLAY_MEMO.clear()
    t0 = time.perf_counter()
    memo = predict_frame(frame, "h200")
    memo_s = time.perf_counter() - t0
    c, backend, _ = calls_from_frame(frame.iloc[: max(1, args.near // 100)])
    gpu = get_gpu("h200")
    t0 = time.perf_counter()
    for i in range(len(backend)):
        attention._REPLAY_MEMO.clear()  # every row replayed, as before the memo
        attention.replay_fits_rows(c.take(np.array([i])), "math", gpu)
    no_memo_s = (time.perf_counter() - t0) * len(frame) / len(backend)
    sample = backend
    near = int((memo["fits"] == "true").sum())
    print(f"replay: {args.near:,} near-capacity rows (500 distinct, {near:,} fit): {memo_s:.1f} s with the memo; "
          f"~{no_memo_s:.0f} s without (from {len(sample):,} rows replayed one by one)")
    print(f"this process: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
