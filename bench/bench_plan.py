"""How long a plan and its solvers take (no assertions; speed lives here, not in tests).

    python -m bench.bench_plan
"""

from __future__ import annotations

import sys
import time

from estimator.model.budget import budget
from estimator.model.inputs import PlanInputs
from estimator.model.plan import make_plan
from estimator.model.presets import get_preset
from estimator.model.solve import smallest_gpu

CASES = [
    dict(model="llama-3-8b", seq_len=8192, batch=4, gpu="h100-sxm"),
    dict(model="gemma-2-9b", seq_len=32768, batch=1, gpu="h200"),
    dict(model="llama-2-70b", seq_len=4096, batch=8, gpu="h200", gpus=8, tp=8, mode="training",
         checkpointing="selective"),
    dict(model="vit-l-16", seq_len=4097, batch=16, gpu="a100-80gb", backend="math"),
]


def timed(fn, repeats=5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> int:
    print(f"{'case':<40}{'budget ms':>12}{'make_plan ms':>14}{'smallest_gpu ms':>17}")
    for case in CASES:
        inputs = PlanInputs(**{**case, "model": get_preset(case["model"])})
        label = f"{case['model']} n={case['seq_len']} b={case['batch']} {case.get('mode', 'inference')}"
        print(f"{label:<40}{timed(lambda i=inputs: budget(i)):>12.2f}{timed(lambda i=inputs: make_plan(i), 3):>14.1f}"
              f"{timed(lambda i=inputs: smallest_gpu(i), 1):>17.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
