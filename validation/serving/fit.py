"""Fit hf-cb's host time per step (estimator/serve/hf_host.py) from measured engine steps.

    python -m validation.serving.fit --cases validation/serving/cases/h200_fit.txt \
        --steps validation/data/h200_serve_fit_steps.csv --cases validation/serving/cases/h200_fit2.txt \
        --steps validation/data/h200_serve_fit2_steps.csv --cases validation/serving/cases/h200_heldout.txt \
        --steps validation/data/h200_serve_heldout_steps.csv --cases validation/serving/cases/h200_heldout2.txt \
        --steps validation/data/h200_serve_heldout2_steps.csv

(the command that gives estimator/serve/hf_host.py's constants: every run measured before HELD-OUT set 3).

Each measured step (validation/serving/engine.py: from one `schedule_batch` to the next) is priced by the
simulator's own StepPricer for its run's model, GPU and knobs: its GPU ms and the kernels its forward launches.
Where the steps CSV has the engine's phases (`prepare_ms`, `update_ms`, `forward_ms`, timed inside the engine),
prepare and update are fitted by least squares on their own columns (hf_host.py names the mechanism of each):

    prepare_ms = base + per_request * R + mask_full * R [a full layer type] + mask_sliding * R [a sliding type]
                 + read_full * (read-index elements of the full groups) + read_sliding * (of the sliding groups)
                 + write * Q * groups
    update_ms  = base + per_request * R

and the forward as `forward_ms = max(GPU ms, LAUNCH * kernels) + GRAPH_BUILD * new graphs` (least squares, each run
weighing the same whatever its step count: GRAPH_BUILD solved for each LAUNCH on a grid; `mark_new_graphs` counts
the cuDNN graphs a step built), over
the phased steps' forward and, for steps without phases, the step minus the fitted prepare and update. Read-index
elements come from the CSV where it has them (`read_full_tokens`, `read_sliding_tokens`, measured), else from
the step's cached tokens (`max_kv_read`) for the run's groups. The numbers are printed in the form hf_host.py
reads, with the fitted model's step-time error per run.

`--builds` fits nothing and prints, per run, the cuDNN graph build its steps imply against the committed constants
and the host's speed in those steps (`build_report`; docs/serving.md "What the graph build depends on").
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys

from validation.serving.cli import _case_args, read_case_lines

PREPARE_COLUMNS = ("PREPARE_BASE_MS", "PREPARE_PER_REQUEST_MS", "MASK_FULL_PER_REQUEST_MS",
                   "MASK_SLIDING_PER_REQUEST_MS", "READ_FULL_PER_TOKEN_MS", "READ_SLIDING_PER_TOKEN_MS",
                   "WRITE_PER_TOKEN_MS")
UPDATE_COLUMNS = ("UPDATE_BASE_MS", "UPDATE_PER_REQUEST_MS")


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
        phased = bool(r.get("update_ms")) and bool(r.get("forward_ms")) and bool(r.get("prepare_ms"))
        r["phased"] = phased
        if phased:
            for k in ("prepare_ms", "update_ms", "forward_ms"):
                r[k] = float(r[k])
            r["read_full_tokens"] = int(r["read_full_tokens"])
            r["read_sliding_tokens"] = int(r["read_sliding_tokens"])
    return rows


def price_step(pricer, step: dict) -> None:
    """Set step["gpu_ms"], step["kernels"] (the StepPricer's, hf-cb's packed masked call over the cached tokens
    read + the new ones, every scheduled request a logit row) and step["shape"] (hf_host.HostShape)."""
    from estimator.serve import hf_host

    q, kv, req = step["q_tokens"], step["max_kv_read"], step["requests"]
    window = pricer.window
    window_kv = min(kv, (window - 1) * req) if window else kv  # each request reads at most window - 1
    gpu, kernels, _ = pricer.step_parts(q, req, 0, [], kv + q, None, window_kv + q if window else None)
    step["gpu_ms"], step["kernels"] = gpu, kernels
    mem = pricer.memory
    shape = hf_host.host_shape(requests=req, q_tokens=q, cached_tokens=kv, window_cached_tokens=window_kv,
                               full_groups=mem.full_groups, sliding_groups=mem.sliding_groups, masked=pricer.masked)
    if step.get("phased"):  # the engine's own read-index lengths
        shape = hf_host.HostShape(requests=req, q_tokens=q, read_full_tokens=step["read_full_tokens"],
                                  read_sliding_tokens=step["read_sliding_tokens"], groups=shape.groups,
                                  full_mask=shape.full_mask, sliding_mask=shape.sliding_mask)
    step["shape"] = shape


def mark_new_graphs(rows: list[dict], pricers: dict, shared_process: bool) -> None:
    """Set step["new_graphs"]: the cuDNN graphs the step's attention built (step_cost.StepPricer.graph_keys not
    run before in the process), walking the steps in the order measured. One engine's graphs are keyed by its pool
    too (the bias strides), so runs in one process (`shared_process`) share them only at the same model, block
    count and max batch tokens; with --fresh-process every run starts empty."""
    seen: dict = {}
    last = None
    for r in rows:
        args, pricer = pricers[r["run"]]
        if r["run"] != last and not shared_process:
            seen = {}
        last = r["run"]
        mem = pricer.memory
        built = seen.setdefault((args.family, args.layers, mem.num_blocks, mem.max_batch_tokens), set())
        q, kv = r["q_tokens"], r["max_kv_read"]
        window_k = None
        if pricer.sliding_layers:
            if r.get("phased") and kv and mem.sliding_groups:  # the engine's own sliding read length
                window_k = r["read_sliding_tokens"] // mem.sliding_groups
            else:
                window_k = min(kv, (pricer.window - 1) * r["requests"]) + q
        keys = pricer.graph_keys(q, kv + q, window_k)
        r["new_graphs"] = sum(1 for k in keys if k not in built)
        built.update(keys)


def shared_process(steps_path: str) -> bool:
    """Whether the runs of a steps CSV shared one process: its .meta.json's command lacks --fresh-process."""
    import json
    import os

    meta = steps_path + ".meta.json"
    if not os.path.exists(meta):
        summary = steps_path.replace("_steps.csv", ".csv") + ".meta.json"
        meta = summary if os.path.exists(summary) else None
    if meta is None:
        return True
    with open(meta) as fh:
        return "--fresh-process" not in json.load(fh).get("command", "")


def _prepare_row(s) -> list[float]:
    return [1.0, s.requests, s.requests * s.full_mask, s.requests * s.sliding_mask, s.read_full_tokens,
            s.read_sliding_tokens, s.q_tokens * s.groups]


def _lstsq(X, y):
    import numpy as np

    sol, *_ = np.linalg.lstsq(np.asarray(X, dtype=float), np.asarray(y, dtype=float), rcond=None)
    return [float(v) for v in sol]


def fit_host(rows: list[dict]) -> dict:
    """The hf_host constants from priced steps (`price_step` applied): see the module docstring."""
    phased = [r for r in rows if r.get("phased")]
    if not phased:
        raise ValueError("--steps: no step has the engine's phases (prepare_ms, forward_ms, update_ms)")
    prep = _lstsq([_prepare_row(r["shape"]) for r in phased], [r["prepare_ms"] for r in phased])
    upd = _lstsq([[1.0, r["shape"].requests] for r in phased], [r["update_ms"] for r in phased])
    out = dict(zip(PREPARE_COLUMNS, prep, strict=True)) | dict(zip(UPDATE_COLUMNS, upd, strict=True))
    per_run: dict = {}
    for r in rows:
        per_run[r["run"]] = per_run.get(r["run"], 0) + 1
    import numpy as np

    w = np.array([(1.0 / per_run[r["run"]]) ** 0.5 for r in rows])  # each run weighs the same
    forward = np.array([r["forward_ms"] if r.get("phased") else
                        (r["duration_ms"] - sum(c * x for c, x in zip(prep, _prepare_row(r["shape"]), strict=True))
                         - upd[0] - upd[1] * r["shape"].requests) for r in rows])
    gpu = np.array([r["gpu_ms"] for r in rows])
    kernels = np.array([r["kernels"] for r in rows], dtype=float)
    new = np.array([r.get("new_graphs", 0) for r in rows], dtype=float)

    def solve(launch):  # the build cost by least squares for a given launch cost (>= 0), and the squared error
        rest = forward - np.maximum(gpu, launch * kernels)
        den = float(np.sum((w * new) ** 2))
        build = max(0.0, float(np.sum(w * new * w * rest)) / den) if den else 0.0
        return build, float(np.sum((w * (rest - build * new)) ** 2))

    grid = np.arange(1e-3, 0.1, 1e-4)
    best = min(grid, key=lambda x: solve(x)[1])
    fine = np.arange(max(1e-4, best - 2e-4), best + 2e-4, 1e-6)
    launch = float(min(fine, key=lambda x: solve(x)[1]))
    out["LAUNCH_MS"], out["GRAPH_BUILD_MS"] = launch, solve(launch)[0]
    return out


def model_ms(fit: dict, r: dict) -> float:
    s = r["shape"]
    prep = sum(fit[c] * x for c, x in zip(PREPARE_COLUMNS, _prepare_row(s), strict=True))
    return (prep + fit["UPDATE_BASE_MS"] + fit["UPDATE_PER_REQUEST_MS"] * s.requests
            + max(r["gpu_ms"], fit["LAUNCH_MS"] * r["kernels"]) + fit["GRAPH_BUILD_MS"] * r.get("new_graphs", 0))


COMPILE_MS = 300.0  # a step this far above its priced forward is a JIT compile (h200_serve_first_build_cache.csv)
FAST_GAUGE, SLOW_GAUGE = 1.15, 1.3  # the host gauge's two states (docs/serving.md, "What the graph build depends on")


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def build_report(rows: list[dict]) -> list[dict]:
    """Per run (priced and marked steps, in order), what its steps imply against the committed hf_host constants:
    the cuDNN graph build, (forward - max(GPU ms, LAUNCH x kernels)) / new graphs over the steps that build one
    (the forward the engine's own where phased, else the step less the priced prepare and update; steps more than
    COMPILE_MS above are JIT compiles, left out), its median, 10th and 90th percentile; the host gauge, the measured
    prepare phase over the priced one (pure Python: the host's speed in that step, where the priced prepare is at
    least 1 ms), its median and the build's median over the steps at gauge < FAST_GAUGE and > SLOW_GAUGE; and the
    same forward residual over the steps that repeat a shape (no build). The last entry is every run together."""
    from estimator.serve import hf_host

    per: dict = {}
    for r in rows:
        s = r["shape"]
        priced = hf_host.prepare_ms(s)
        if r.get("phased"):
            forward = r["forward_ms"]
        else:
            forward = r["duration_ms"] - priced - hf_host.update_ms(s)
        rest = forward - max(r["gpu_ms"], hf_host.HF_CB_LAUNCH_MS * r["kernels"])
        d = per.setdefault(r["run"], {"builds": [], "gauged": [], "repeated": []})
        new = r.get("new_graphs", 0)
        if not new:
            d["repeated"].append(rest)
            continue
        if rest / new > COMPILE_MS:
            continue
        d["builds"].append(rest / new)
        if r.get("phased") and priced >= 1.0:
            d["gauged"].append((r["prepare_ms"] / priced, rest / new))
    every = {"builds": [], "gauged": [], "repeated": []}
    for d in per.values():
        for k in every:
            every[k] += d[k]
    out = []
    for run, d in [*per.items(), ("all", every)]:
        b = sorted(d["builds"])
        out.append({"run": run, "steps": len(b), "build_ms": _median(b),
                    "build_p10_ms": b[len(b) // 10] if b else None,
                    "build_p90_ms": b[(9 * len(b)) // 10] if b else None,
                    "gauge": _median([g for g, _ in d["gauged"]]),
                    "fast_build_ms": _median([x for g, x in d["gauged"] if g < FAST_GAUGE]),
                    "slow_build_ms": _median([x for g, x in d["gauged"] if g > SLOW_GAUGE]),
                    "fast_steps": sum(1 for g, _ in d["gauged"] if g < FAST_GAUGE),
                    "slow_steps": sum(1 for g, _ in d["gauged"] if g > SLOW_GAUGE),
                    "repeated_steps": len(d["repeated"]), "repeated_rest_ms": _median(d["repeated"])})
    return out


def _ms(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def print_build_report(report: list[dict]) -> None:
    print("run | steps with a build | implied build ms: median (p10-p90) | host gauge | build ms at gauge "
          f"< {FAST_GAUGE:g} (steps) / > {SLOW_GAUGE:g} (steps) | repeated-shape steps, forward residual ms")
    for e in report:
        gauge = "-" if e["gauge"] is None else f"{e['gauge']:.2f}"
        print(f"{e['run']} | {e['steps']} | {_ms(e['build_ms'])} ({_ms(e['build_p10_ms'])}-{_ms(e['build_p90_ms'])}) "
              f"| {gauge} | {_ms(e['fast_build_ms'])} ({e['fast_steps']}) / {_ms(e['slow_build_ms'])} "
              f"({e['slow_steps']}) | {e['repeated_steps']}, {_ms(e['repeated_rest_ms'])}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m validation.serving.fit", description=__doc__.splitlines()[0])
    p.add_argument("--cases", action="append", required=True, help="a case file the steps were measured from "
                   "(repeat, one per --steps)")
    p.add_argument("--steps", action="append", required=True,
                   help="per-step CSV of `python -m validation serve --steps` (repeat)")
    p.add_argument("--max-residual-ms", type=float, default=None,
                   help="refit leaving out the steps more than this many ms above the first fit (a JIT compile's "
                        "0.5-1 s step, validation/data/h200_serve_first_build_cache.csv); the committed constants "
                        "are the fit without it")
    p.add_argument("--builds", action="store_true",
                   help="fit nothing: print per run the graph build and host speed its steps imply against the "
                        "committed constants (build_report)")
    args = p.parse_args(argv)
    try:
        if len(args.cases) != len(args.steps):
            raise ValueError("--cases/--steps: give one case file for each steps CSV")
        rows = []
        for cases, steps in zip(args.cases, args.steps, strict=True):
            pricers = pricers_by_run(cases)
            mine = read_steps(steps)
            missing = sorted({r["run"] for r in mine} - set(pricers))
            if missing:
                raise ValueError(f"--steps: runs {', '.join(missing)} are not in {cases}")
            for r in mine:
                price_step(pricers[r["run"]][1], r)
            mark_new_graphs(mine, pricers, shared_process(steps))
            rows += mine
        if args.builds:
            print_build_report(build_report(rows))
            return 0
        fit = fit_host(rows)
        if args.max_residual_ms is not None:
            kept = [r for r in rows if r["duration_ms"] - model_ms(fit, r) <= args.max_residual_ms]
            print(f"left out {len(rows) - len(kept)} steps more than {args.max_residual_ms:g} ms above the fit")
            rows, fit = kept, fit_host(kept)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"fitted on {len(rows)} steps of {len({r['run'] for r in rows})} runs "
          f"({sum(1 for r in rows if r['phased'])} with the engine's phases):")
    for k, v in fit.items():
        print(f"HF_CB_{k} = {v:.4g}")
    errors: dict = {}
    for r in rows:
        errors.setdefault(r["run"], []).append((model_ms(fit, r) - r["duration_ms"]) / r["duration_ms"])
    every = [e for es in errors.values() for e in es]
    print(f"step time, fitted model vs measured: median |error| {statistics.median(abs(e) for e in every):.1%}")
    for run, es in errors.items():
        print(f"  {run:28s} steps {len(es):4d}  median error {statistics.median(es):+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
