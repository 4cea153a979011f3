"""Fit hf-cb's per-step overhead (what an engine step costs beyond the kernels the time model prices) from measured
engine steps, and compare measured runs with the simulation.

    python -m validation.serving.fit --cases validation/serving/cases/h200_fit.txt \
        --steps validation/data/h200_serve_fit_steps.csv

Each measured step (validation/serving/engine.py: from one `schedule_batch` to the next, so host scheduling, input
preparation, the forward and the token update all fall in it) is priced by the simulator's own StepPricer for its
run's model, GPU and knobs with the overhead set to zero; the residual is fitted by least squares in ms (each
step weighs its own time, so a run's total time, hence its throughput, is kept), non-negative, as

    overhead_ms = base + per_kernel * kernels + per_request * requests
                  + per_kv_token * (cached tokens read + new tokens)

where kernels is what the StepPricer counts the step's forward launches for the run's architecture (the same
count that prices the eager host floor, kernels x step_time.DECODE_KERNEL_HOST_MS). transformers 5.17 runs each
step from Python in sync mode (continuous_api.py: prepare_next_batch, then the forward, then a blocking copy of
the tokens, then update_batch): per launched kernel the paged forward's module Python, per scheduled request the
scheduler, the IO
preparation (input_outputs.py prepare_batch_tensors) and the update each loop in Python; per token read, the read
and write index lists are built as Python lists (cache_manager.py get_read_indices: one `range` per block) and
copied to the GPU. The fitted numbers are printed in the form estimator/serve/step_cost.py reads.
"""

from __future__ import annotations

import argparse
import csv
import sys

from validation.serving.cli import _case_args, read_case_lines

FIT_COLUMNS = ("base", "per_kernel", "per_request", "per_kv_token")


def pricers_by_run(case_file: str, base_out: str = "unused.csv") -> dict:
    """{run id: (args, pricer)} for every case of the file (the simulator's StepPricer with zero overhead)."""
    import json
    import os
    import tempfile

    from estimator.cli.serve import build_parser, inputs_from_serve_args
    from estimator.serve.capacity import prepare
    from validation.model.hf_configs import family_config
    from validation.serving.cli import _run_id
    from validation.serving.predict import serve_flags

    base = argparse.Namespace(out=base_out, summary=None, steps=None, device=None, gpu="h200", no_predict=False,
                              cpu_memory_mib=1024)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n, line in enumerate(read_case_lines(case_file)):
            args = _case_args(line, base)
            cfg = family_config(args.family, args.layers, args.overrides, args.tiny)
            path = os.path.join(tmp, f"config{n}.json")
            with open(path, "w") as fh:
                json.dump(cfg, fh)
            inputs = inputs_from_serve_args(build_parser().parse_args(serve_flags(args, path, args.gpu or "h200")))
            _, _, pricer = prepare(inputs)
            out[_run_id(args)] = (args, pricer)
    return out


def read_steps(path: str) -> list[dict]:
    with open(path, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["duration_s"]]
    for r in rows:
        for k in ("requests", "decode_requests", "q_tokens", "max_kv_read", "free_blocks", "waiting"):
            r[k] = int(r[k])
        r["duration_ms"] = float(r["duration_s"]) * 1e3
    return rows


def priced_ms(pricer, step: dict) -> float:
    """The pricer's time for a measured step, overhead excluded: hf-cb's packed masked call over K = the cached
    tokens read + the step's new tokens; every scheduled request taken as a logit row. Sets step["kernels"] to the
    kernels the step's forward launches (the pricer's count for this architecture)."""
    q = step["q_tokens"]
    step["kernels"] = pricer.step_parts(q, step["requests"], 0, [], step["max_kv_read"] + q)[1]
    return pricer.step_ms(q, step["requests"], 0, [], step["max_kv_read"] + q, requests=0, overhead=False)


def fit_overhead(rows: list[dict], priced: list[float]) -> dict:
    """Non-negative least squares (ms) of measured - priced on (1, kernels, requests, K); see the module
    docstring. Each row needs "kernels" (set by `priced_ms`)."""
    import numpy as np

    X = np.array([[1.0, r["kernels"], r["requests"], r["max_kv_read"] + r["q_tokens"]] for r in rows])
    y = np.array([r["duration_ms"] for r in rows]) - np.array(priced)
    w = np.ones(len(rows))
    active = list(range(X.shape[1]))
    coef = np.zeros(X.shape[1])
    while active:  # drop a negative coefficient and refit (a small active-set NNLS)
        sol, *_ = np.linalg.lstsq(X[:, active] * w[:, None], y * w, rcond=None)
        if (sol >= 0).all():
            coef[:] = 0
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    return dict(zip(FIT_COLUMNS, (float(c) for c in coef), strict=False))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m validation.serving.fit", description=__doc__.splitlines()[0])
    p.add_argument("--cases", required=True, help="the case file the steps were measured from")
    p.add_argument("--steps", required=True, help="per-step CSV of `python -m validation serve --steps`")
    args = p.parse_args(argv)
    try:
        pricers = pricers_by_run(args.cases)
        rows = read_steps(args.steps)
        missing = sorted({r["run"] for r in rows} - set(pricers))
        if missing:
            raise ValueError(f"--steps: runs {', '.join(missing)} are not in {args.cases}")
        priced = [priced_ms(pricers[r["run"]][1], r) for r in rows]
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    fit = fit_overhead(rows, priced)
    print(f"fitted on {len(rows)} steps of {len({r['run'] for r in rows})} runs ({args.steps}):")
    print(f"HF_CB_STEP_BASE_MS = {fit['base']:.4g}")
    print(f"HF_CB_STEP_PER_KERNEL_MS = {fit['per_kernel']:.4g}")
    print(f"HF_CB_STEP_PER_REQUEST_MS = {fit['per_request']:.4g}")
    print(f"HF_CB_STEP_PER_KV_TOKEN_MS = {fit['per_kv_token']:.4g}")
    errors = {}
    for r, g in zip(rows, priced, strict=False):
        model = g + (fit["base"] + fit["per_kernel"] * r["kernels"] + fit["per_request"] * r["requests"]
                     + fit["per_kv_token"] * (r["max_kv_read"] + r["q_tokens"]))
        errors.setdefault(r["run"], []).append((model - r["duration_ms"]) / r["duration_ms"])
    import statistics

    every = [e for es in errors.values() for e in es]
    print(f"step time, fitted model vs measured: median |error| {statistics.median(abs(e) for e in every):.1%}")
    for run, es in errors.items():
        print(f"  {run:28s} steps {len(es):4d}  median error {statistics.median(es):+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
