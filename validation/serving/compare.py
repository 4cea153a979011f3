"""Measured serving runs beside the simulation as it is now: re-simulates every run of a case file (no GPU) and
prints the errors of the figures the proof asks for.

    python -m validation.serving.compare --cases validation/serving/cases/h200_fit.txt \
        --summary validation/data/h200_serve_fit_summary.csv [--md OUT.md]

`--graph-build-ms MS` re-simulates with that cuDNN graph build instead of the committed one (a what-if: the build is
host time whose speed varies between sessions, docs/serving.md "What the graph build depends on").

Per run: num_blocks and max_batch_tokens (exact or not), peak allocated memory (within 3%?), output throughput
(within 15%?), P50 and P99 of TTFT and TPOT (within 20%?). Errors are (predicted - measured) / measured.
"""

from __future__ import annotations

import argparse
import csv
import sys

BANDS = {"peak": 0.03, "throughput": 0.15, "latency": 0.20}
LATENCIES = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms")


def _err(pred, meas):
    if pred in (None, "") or meas in (None, "", 0):
        return None
    return (float(pred) - float(meas)) / float(meas)


def compare_rows(case_file: str, summary_file: str) -> list[dict]:
    """One dict per measured run: measured, predicted and relative errors."""
    from estimator.serve.capacity import serve
    from validation.serving.records import predicted_summary
    from validation.serving.workload import workload_from_args

    with open(summary_file, newline="") as fh:
        measured = {r["run"]: r for r in csv.DictReader(fh) if r["status"] == "ok"}
    out = []
    for run, (args, inputs) in _inputs_by_run(case_file).items():
        m = measured.get(run)
        if m is None:
            continue
        result = serve(inputs)
        sim = result.simulation
        requests = workload_from_args(args)
        pred = predicted_summary(requests, [{"first_token_s": f, "finish_s": z}
                                            for f, z in zip(sim.first_token_s, sim.finish_s, strict=False)])
        row = {"run": run, "num_blocks": int(m["num_blocks"]), "pred_num_blocks": result.memory.num_blocks,
               "max_batch_tokens": int(m["max_batch_tokens"]), "pred_max_batch_tokens": result.memory.max_batch_tokens,
               "peak_allocated_bytes": int(m["peak_allocated_bytes"]),
               # the planned peak without the CUDA context, as torch.cuda.max_memory_allocated counts it
               "pred_peak_bytes": result.peak_bytes - result.memory.context_bytes,
               "output_tokens_per_s": float(m["output_tokens_per_s"]),
               "pred_output_tokens_per_s": pred["output_tokens_per_s"]}
        row["peak_error"] = _err(row["pred_peak_bytes"], row["peak_allocated_bytes"])
        row["throughput_error"] = _err(pred["output_tokens_per_s"], m["output_tokens_per_s"])
        for k in LATENCIES:
            row[k] = float(m[k]) if m[k] else None
            row[f"pred_{k}"] = pred[k]
            row[f"{k}_error"] = _err(pred[k], m[k])
        out.append(row)
    return out


def _inputs_by_run(case_file: str) -> dict:
    import json
    import os
    import tempfile

    from estimator.cli.serve import build_parser, inputs_from_serve_args
    from validation.model.hf_configs import family_config
    from validation.serving.cli import _case_args, _run_id, read_case_lines
    from validation.serving.predict import serve_flags

    base = argparse.Namespace(out="unused.csv", summary=None, steps=None, device=None, gpu="h200", no_predict=False,
                              cpu_memory_mib=1024)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n, line in enumerate(read_case_lines(case_file)):
            args = _case_args(line, base)
            path = os.path.join(tmp, f"config{n}.json")
            with open(path, "w") as fh:
                json.dump(family_config(args.family, args.layers, args.overrides, args.tiny), fh)
            flags = serve_flags(args, path, args.gpu or "h200")
            out[_run_id(args)] = (args, inputs_from_serve_args(build_parser().parse_args(flags)))
    return out


def _with_graph_build(ms: float, case_file: str, summary_file: str) -> list[dict]:
    """compare_rows with hf_host's graph build set to `ms` for the call (restored after)."""
    from estimator.serve import hf_host

    saved = hf_host.HF_CB_GRAPH_BUILD_MS
    hf_host.HF_CB_GRAPH_BUILD_MS = ms
    try:
        return compare_rows(case_file, summary_file)
    finally:
        hf_host.HF_CB_GRAPH_BUILD_MS = saved


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.1%}"


def table(rows: list[dict]) -> str:
    head = ("| run | blocks (meas/pred) | max batch tokens (meas/pred) | peak | out tok/s | TTFT P50 | TTFT P99 | "
            "TPOT P50 | TPOT P99 |\n|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        lines.append(f"| {r['run']} | {r['num_blocks']}/{r['pred_num_blocks']} | {r['max_batch_tokens']}/"
                     f"{r['pred_max_batch_tokens']} | {_pct(r['peak_error'])} | {_pct(r['throughput_error'])} | "
                     + " | ".join(_pct(r[f"{k}_error"]) for k in LATENCIES) + " |")
    n = len(rows)
    exact = sum(r["num_blocks"] == r["pred_num_blocks"] and r["max_batch_tokens"] == r["pred_max_batch_tokens"]
                for r in rows)
    peak = sum(r["peak_error"] is not None and abs(r["peak_error"]) <= BANDS["peak"] for r in rows)
    thr = sum(r["throughput_error"] is not None and abs(r["throughput_error"]) <= BANDS["throughput"] for r in rows)
    lat = {k: sum(r[f"{k}_error"] is not None and abs(r[f"{k}_error"]) <= BANDS["latency"] for r in rows)
           for k in LATENCIES}
    foot = (f"\n{n} runs: blocks and max batch tokens exact {exact}/{n}; peak within 3% {peak}/{n}; throughput "
            f"within 15% {thr}/{n}; within 20%: " + ", ".join(f"{k[:-3].replace('_', ' ')} {v}/{n}"
                                                              for k, v in lat.items()) + "\n")
    return head + "\n".join(lines) + "\n" + foot


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m validation.serving.compare", description=__doc__.splitlines()[0])
    p.add_argument("--cases", required=True, help="the case file the runs were measured from")
    p.add_argument("--summary", required=True, help="per-run CSV of `python -m validation serve --summary`")
    p.add_argument("--md", help="also write the table here")
    p.add_argument("--graph-build-ms", type=float, default=None,
                   help="what-if: re-simulate with this cuDNN graph build (hf_host.HF_CB_GRAPH_BUILD_MS) instead of "
                        "the committed one")
    args = p.parse_args(argv)
    try:
        if args.graph_build_ms is not None:
            if not args.graph_build_ms >= 0:
                raise ValueError(f"--graph-build-ms: expected ms >= 0, got {args.graph_build_ms:g}")
            rows = _with_graph_build(args.graph_build_ms, args.cases, args.summary)
        else:
            rows = compare_rows(args.cases, args.summary)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = table(rows)
    print(text)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
