"""`python -m estimator serve ...`: serving capacity of a request workload on an engine (docs/contract.md §6):
the engine's KV pool, the simulated step loop's TTFT / TPOT / end-to-end percentiles and throughput, and with
P99 targets whether they are met and the sizing. Bad input is one line on stderr and exit status 2.

Model flags as `plan` (`--preset`, `--config`, architecture flags, `--dtype`, `--backend` = hf-cb's attention:
auto/sdpa-family -> paged|sdpa, eager -> paged|eager, flash-attn -> paged|flash_attention), `--gpu NAME --tp N`.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys

from estimator.cli.plan import FLAG_OF as PLAN_FLAGS
from estimator.cli.plan import OneLineParser, add_plan_arguments, inputs_from_args
from estimator.cli.plan import _flagged as plan_flagged
from estimator.serve.capacity import ServeInputs, serve
from estimator.serve.engines import ENGINES, EngineConfig
from estimator.serve.result import Targets
from estimator.serve.workload import load_workload_csv, synthetic_workload

FLAG_OF = {**PLAN_FLAGS, "engine": "--engine", "memory_fraction": "--memory-fraction", "block_size": "--block-size",
           "max_batch_tokens": "--max-batch-tokens", "num_blocks": "--num-blocks", "max_seqs": "--max-seqs",
           "max_model_len": "--max-model-len", "scheduler": "--scheduler", "rate": "--rate",
           "requests": "--requests", "prompt_tokens": "--prompt-tokens", "output_tokens": "--output-tokens",
           "seed": "--seed", "ttft_p99_ms": "--ttft-p99-ms", "tpot_p99_ms": "--tpot-p99-ms",
           "price_per_gpu_hour": "--price-per-gpu-hour", "workload": "--workload", "arrival_s": "--workload"}


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m estimator serve", description=__doc__.splitlines()[0])
    add_plan_arguments(parser)
    eng = parser.add_argument_group("engine")
    eng.add_argument("--engine", default="hf-cb", help=f"one of: {', '.join(ENGINES)} (default hf-cb)")
    eng.add_argument("--memory-fraction", default=None, help="vLLM gpu_memory_utilization, SGLang "
                     "mem_fraction_static, TensorRT-LLM free_gpu_memory_fraction, hf-cb max_memory_percent")
    eng.add_argument("--block-size", default=None, help="tokens per KV block (page)")
    eng.add_argument("--max-batch-tokens", default=None, help="tokens one step may batch (hf-cb: solved from memory)")
    eng.add_argument("--num-blocks", default=None, help="fix the KV pool's block count")
    eng.add_argument("--max-seqs", default=None, help="requests one step may batch")
    eng.add_argument("--max-model-len", default=None, help="longest request (default: the workload's)")
    eng.add_argument("--cuda-graphs", action="store_true", default=None, help="run steps as CUDA graphs")
    eng.add_argument("--no-chunked-prefill", dest="chunked_prefill", action="store_false", default=None,
                     help="a prompt is prefilled in one step")
    eng.add_argument("--scheduler", default=None, help="hf-cb: fifo or prefill_first (default fifo)")
    wl = parser.add_argument_group("workload (a CSV, or a synthetic one)")
    wl.add_argument("--workload", metavar="CSV", help="columns arrival_s,prompt_tokens,output_tokens")
    wl.add_argument("--rate", default=None, help="synthetic: requests per second (Poisson), or inf (all at t = 0)")
    wl.add_argument("--requests", default="1000", help="synthetic: number of requests (default 1000)")
    wl.add_argument("--prompt-tokens", default=None,
                    help="synthetic: N, uniform:LO:HI or lognormal:MEDIAN:SIGMA")
    wl.add_argument("--output-tokens", default=None, help="synthetic: as --prompt-tokens")
    wl.add_argument("--seed", default="0", help="synthetic: random seed (default 0)")
    tg = parser.add_argument_group("targets and sizing")
    tg.add_argument("--ttft-p99-ms", default=None, help="P99 time-to-first-token target")
    tg.add_argument("--tpot-p99-ms", default=None, help="P99 time-per-output-token target")
    tg.add_argument("--price-per-gpu-hour", default=None, help="your price of one GPU-hour (for cost per token)")
    tg.add_argument("--size-fleet", action="store_true", help="with targets: size every catalog GPU (slower)")
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print one JSON object (contract §6)")
    out.add_argument("--requests-csv", metavar="PATH", help="also write one row per request (times in s and ms)")
    return parser


def _flagged(exc: ValueError) -> ValueError:
    return plan_flagged(exc, FLAG_OF)


def inputs_from_serve_args(args: argparse.Namespace) -> ServeInputs:
    """ServeInputs from parsed flags; ValueError naming the flag on bad input."""
    try:
        if args.workload:
            if args.rate is not None or args.prompt_tokens is not None or args.output_tokens is not None:
                raise ValueError("--workload: give a CSV or the synthetic flags (--rate ...), not both")
            workload = load_workload_csv(args.workload)
        else:
            missing = [f for f, v in (("--rate", args.rate), ("--prompt-tokens", args.prompt_tokens),
                                      ("--output-tokens", args.output_tokens)) if v is None]
            if missing:
                raise ValueError(f"--workload: give --workload CSV or a synthetic workload (missing "
                                 f"{', '.join(missing)})")
            workload = synthetic_workload(rate_per_s=args.rate, requests=args.requests,
                                          prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
                                          seed=args.seed)
        if args.seq_len is None:
            args.seq_len = str(workload.max_sequence_tokens if args.max_model_len is None else args.max_model_len)
        plan = inputs_from_args(args)
        engine = EngineConfig(engine=args.engine, memory_fraction=args.memory_fraction, block_size=args.block_size,
                              max_batch_tokens=args.max_batch_tokens, num_blocks=args.num_blocks,
                              max_seqs=args.max_seqs, max_model_len=args.max_model_len,
                              kv_dtype=args.kv_dtype, cuda_graphs=args.cuda_graphs, scheduler=args.scheduler,
                              chunked_prefill=args.chunked_prefill)
        targets = Targets(ttft_p99_ms=args.ttft_p99_ms, tpot_p99_ms=args.tpot_p99_ms)
        return ServeInputs(plan=plan, engine=engine, workload=workload, targets=targets,
                           price_per_gpu_hour=args.price_per_gpu_hour)
    except ValueError as exc:
        raise _flagged(exc) from None


def replica_sizing(inputs: ServeInputs) -> dict:
    """The highest rate one replica of the given GPU and tp sustains within the targets, the replicas the
    workload's rate needs and (with a price) the cost per million output tokens."""
    import math

    from estimator.serve.sizing import max_rate, workload_rate

    rate = workload_rate(inputs.workload)
    found = max_rate(inputs)
    out = {"max_rate_per_replica": found["rate_per_s"], "probes": found["probes"], "note": found["reason"],
           "rate_per_s": rate, "tp": inputs.plan.tp, "gpu": inputs.plan.gpu}
    if found["rate_per_s"] is None:
        out["verdict"] = "no configuration of this GPU and tp meets the targets"
        return out
    replicas = max(1, math.ceil(rate / found["rate_per_s"] - 1e-9))
    out.update(replicas=replicas, gpus=replicas * inputs.plan.tp,
               verdict=f"{replicas} replica(s) x tp {inputs.plan.tp} = {replicas * inputs.plan.tp} GPU(s)")
    if inputs.price_per_gpu_hour is not None:
        per_hour = rate * inputs.workload.total_output_tokens / len(inputs.workload) * 3600
        out["cost_per_million_output_tokens"] = round(inputs.price_per_gpu_hour * out["gpus"] / per_hour * 1e6, 4)
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        inputs = inputs_from_serve_args(args)
        result = serve(inputs)
        data = result.to_dict(include_requests=bool(args.requests_csv))
        if inputs.targets.given and inputs.workload.duration_s > 0:
            data["sizing"] = replica_sizing(inputs)
            if args.size_fleet:
                from estimator.serve.sizing import size_fleet

                data["sizing"]["fleet"] = size_fleet(inputs)
        if args.requests_csv:
            rows = data.pop("requests")
            with open(args.requests_csv, "w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
    except (ValueError, OSError) as exc:
        print(f"error: {_flagged(exc) if isinstance(exc, ValueError) else exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(format_table(data))
    return 0


def format_table(d: dict) -> str:
    gib = 2**30
    lines = [f"{d['engine']} on {d['gpu']} (tp {d['tp']}): {d['workload']['source']}",
             f"  KV pool {d['kv_cache_bytes'] / gib:.2f} GiB = {d['num_blocks']:,} blocks x {d['block_size']} tokens "
             f"({d['kv_cache_tokens']:,} tokens); max_batch_tokens {d['max_batch_tokens']:,}; max_seqs "
             f"{d['max_seqs']:,}",
             f"  peak {d['peak_bytes'] / gib:.2f} GiB of {d['capacity_bytes'] / gib:.2f} GiB per GPU"
             + ("" if d["fits"] else " (the run would run out of memory: the largest step does not fit)"),
             f"  throughput {d['throughput_output_tokens_per_s']:,.1f} output tokens/s "
             f"({d['throughput_tokens_per_s']:,.1f} tokens/s in all)"]
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        p = d[key]
        if p["p50"] is None:
            lines.append(f"  {key[:-3]:<5} -")
            continue
        lines.append(f"  {key[:-3]:<5} P50 {p['p50']:,.2f} ms  P90 {p['p90']:,.2f} ms  P99 {p['p99']:,.2f} ms")
    sim = d["simulation"]
    lines.append(f"  {sim['steps']:,} steps, {sim['preemptions']:,} preemptions, at most {sim['max_running']} running")
    band = d.get("time_error_band")
    if band:
        lo, hi = band["bands"]["tpot_ms.p50"]
        lines.append(f"  measured on the H200, this engine's TPOT ran {1 / (1 + hi):.2f}-{1 / (1 + lo):.2f}x the "
                     "simulated figure (TPOT P50 over the held-out H200 runs: docs/serving.md)")
    if "meets_targets" in d:
        lines.append(f"  targets {d['targets']}: {'met' if d['meets_targets'] else 'missed'}"
                     + (" in the simulation; the measured band above can move it" if band else ""))
    if "sizing" in d:
        lines.append(f"  sizing: {d['sizing'].get('verdict')}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
