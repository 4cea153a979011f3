"""How long a serving simulation takes: a 10,000-request Poisson trace on each engine (no assertions; speed lives
here, not in tests). Prints the wall time of `prepare` (the engine's memory rule and the step pricer), of the step
loop (`simulate`), the engine steps and the steps per second.

    python -m bench.bench_serve [--requests 10000]
"""

from __future__ import annotations

import argparse
import sys
import time

from estimator.model.inputs import PlanInputs
from estimator.model.presets import get_preset
from estimator.serve.capacity import ServeInputs, prepare
from estimator.serve.engines import EngineConfig
from estimator.serve.simulate import simulate
from estimator.serve.workload import synthetic_workload

CASES = [
    ("llama-3-8b", "h200", 1, "hf-cb", 4.0),
    ("llama-3-8b", "h200", 1, "vllm", 20.0),
    ("llama-3-8b", "h200", 1, "sglang", 20.0),
    ("llama-3-8b", "h200", 1, "trtllm", 20.0),
    ("llama-3-70b", "h200", 4, "vllm", 8.0),
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_serve")
    parser.add_argument("--requests", type=int, default=10_000)
    args = parser.parse_args(argv)
    print(f"{'model':<13}{'engine':<8}{'tp':>3}{'rate/s':>8}{'prepare s':>11}{'simulate s':>12}{'steps':>9}"
          f"{'steps/s':>10}")
    for model, gpu, tp, engine, rate in CASES:
        wl = synthetic_workload(rate_per_s=rate, requests=args.requests, prompt_tokens="lognormal:1024:0.8",
                                output_tokens="lognormal:256:0.6", seed=0)
        inputs = ServeInputs(plan=PlanInputs(model=get_preset(model), seq_len=4096, gpu=gpu, tp=tp, gpus=tp),
                             engine=EngineConfig(engine=engine, chunked_prefill=True if engine == "trtllm" else None),
                             workload=wl)
        start = time.perf_counter()
        config, memory, pricer = prepare(inputs)
        prepared = time.perf_counter()
        sim = simulate(wl, memory, pricer, config)
        done = time.perf_counter()
        loop = done - prepared
        print(f"{model:<13}{engine:<8}{tp:>3}{rate:>8g}{prepared - start:>11.2f}{loop:>12.2f}{sim.steps:>9,}"
              f"{sim.steps / loop:>10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
