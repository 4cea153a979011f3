"""Benchmark: `predict` on 100,000 rows against pandas reading and writing the same CSV (target:
predict must take at most twice as long as that read + write).

python -m bench.bench_predict [--rows N] [--repeats R]
Prints the median seconds of each part and the ratio; exits 1 if the ratio exceeds 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from estimator.cli.predict import main as predict_main
from validation.call.grid import random_sample, write_csv


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(rows: int, repeats: int) -> dict:
    tmp = Path(tempfile.mkdtemp())
    src, out, copy = tmp / "in.csv", tmp / "out.csv", tmp / "copy.csv"
    write_csv(random_sample(rows, seed=3, max_elements=2**62), src)
    pandas_s, predict_s = [], []
    for _ in range(repeats):
        pandas_s.append(timed(lambda: pd.read_csv(src, dtype=str, keep_default_na=False).to_csv(copy, index=False)))
        predict_s.append(timed(lambda: predict_main([str(src), "-o", str(out), "--gpu", "h200"])))
    result = {"rows": rows, "pandas_read_write_s": statistics.median(pandas_s),
              "predict_s": statistics.median(predict_s)}
    result["ratio"] = result["predict_s"] / result["pandas_read_write_s"]
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    r = run(args.rows, args.repeats)
    print(f"rows {r['rows']:,}: pandas read+write {r['pandas_read_write_s']:.3f} s, "
          f"predict {r['predict_s']:.3f} s, ratio {r['ratio']:.2f} (target ≤ 2)")
    sys.exit(0 if r["ratio"] <= 2 else 1)
