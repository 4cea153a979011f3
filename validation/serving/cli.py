"""`python -m validation serve`: flags, the case file, the files written.

    python -m validation serve --family llama-3.1-8b --layers 4 --rate 4 --requests 64 --prompt-tokens 512 \
        --output-tokens 64 --out requests.csv [--summary summary.csv] [--steps steps.csv]
    python -m validation serve --cases cases.txt --out requests.csv --summary summary.csv --steps steps.csv

A case file holds one run per line: the flags of one invocation (model, workload, engine knobs, --run-id), '#'
comments allowed; every run appends its rows to the same three files, and the model is rebuilt only when its
flags change. Bounds: at most MAX_REQUESTS requests and MAX_TOTAL_TOKENS prompt+output tokens a run, each run
stops at --timeout-s (unfinished requests are recorded as such), and the whole command at --budget-s.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import sys
import time

from validation.errors import is_oom, typed_line
from validation.serving import records
from validation.serving.workload import workload_from_args

SUMMARY_COLUMNS = [
    "run", "status", "reason", "family", "layers", "device_name", "requests", "finished", "prompt_tokens_total",
    "output_tokens_total", "block_size", "num_blocks", "pred_num_blocks", "max_batch_tokens", "pred_max_batch_tokens",
    "max_requests_per_batch", "max_memory_percent", "use_cuda_graph", "use_async_batching", "attn_implementation",
    "weights_bytes", "device_total_bytes", "device_free_bytes", "reserved_before_bytes", "after_cache_bytes",
    "peak_allocated_bytes", "pred_peak_allocated_bytes", "peak_reserved_bytes",
    "steps", "makespan_s", "pred_makespan_s", "output_tokens_per_s", "pred_output_tokens_per_s",
    "total_tokens_per_s", "pred_total_tokens_per_s",
    "ttft_p50_ms", "pred_ttft_p50_ms", "ttft_p90_ms", "pred_ttft_p90_ms", "ttft_p99_ms", "pred_ttft_p99_ms",
    "tpot_p50_ms", "pred_tpot_p50_ms", "tpot_p90_ms", "pred_tpot_p90_ms", "tpot_p99_ms", "pred_tpot_p99_ms",
    "wall_s", "args",
]


JIT_CACHE_MODES = ("machine", "fresh", "warm")  # --jit-cache


def add_arguments(p: argparse.ArgumentParser) -> None:
    m = p.add_argument_group("model (validation.hf_configs; random weights, bf16)")
    m.add_argument("--family", default="llama-3.1-8b", help="a family of validation.hf_configs (default llama-3.1-8b)")
    m.add_argument("--layers", type=int, help="cut the model to this many layers (default: as published)")
    m.add_argument("--overrides", help="JSON object of config fields to override")
    m.add_argument("--tiny", action="store_true", help="the family's tiny shrink (CPU tests)")
    w = p.add_argument_group("workload: a CSV (arrival_s,prompt_tokens,output_tokens) or a synthetic one")
    w.add_argument("--workload", help="CSV of requests")
    w.add_argument("--rate", help="synthetic: Poisson arrivals per second, or inf (every request at t = 0)")
    w.add_argument("--requests", type=int, default=32, help="synthetic: number of requests (default 32)")
    w.add_argument("--prompt-tokens", default="512", help="synthetic: N, uniform:LO:HI or lognormal:MEDIAN:SIGMA "
                   "(default 512)")
    w.add_argument("--output-tokens", default="64", help="synthetic: as --prompt-tokens, every generated token "
                   "counted (default 64)")
    w.add_argument("--seed", type=int, default=0, help="synthetic draws and prompt ids (default 0)")
    e = p.add_argument_group("engine: transformers ContinuousBatchingConfig (default: the engine's own rule)")
    e.add_argument("--block-size", type=int, default=256, help="tokens a cache block (default 256, the engine's)")
    e.add_argument("--num-blocks", type=int, help="fixed block count")
    e.add_argument("--max-batch-tokens", type=int, help="fixed tokens a step")
    e.add_argument("--memory-fraction", type=float, help="max_memory_percent: share of free memory for the cache")
    e.add_argument("--max-seqs", type=int, help="max_requests_per_batch")
    r = p.add_argument_group("run")
    r.add_argument("--cases", help="a file of runs, one line of these flags each (see above)")
    r.add_argument("--run-id", help="the run's name in the output rows (default: the flags)")
    r.add_argument("--out", required=True, help="per-request CSV (appended to when it exists)")
    r.add_argument("--summary", help="per-run CSV (appended to); default: printed as JSON only")
    r.add_argument("--steps", help="per-engine-step CSV (appended to)")
    r.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda when torch sees a GPU, else cpu")
    r.add_argument("--gpu", help="catalog GPU the prediction is for (default: detected; h200 on a CPU)")
    r.add_argument("--no-predict", action="store_true", help="measure only (no simulation beside it)")
    r.add_argument("--timeout-s", type=float, default=300.0, help="a run stops after this (default 300)")
    r.add_argument("--fresh-process", action="store_true",
                   help="--cases: run each case in its own process (nothing of one run stays resident in the next)")
    r.add_argument("--jit-cache", choices=JIT_CACHE_MODES, default="machine",
                   help="--fresh-process: the CUDA driver's JIT cache (CUDA_CACHE_PATH) each case's process sees: "
                        "machine (default: whatever this machine has cached), fresh (a new empty cache per case: a "
                        "freshly started machine, which compiles each of cuDNN's kernel classes once, 0.5-0.8 s "
                        "each), warm (each case run twice in fresh processes on one new cache; the first, a fresh "
                        "machine, is written beside each output as NAME_cold.csv, the second, a server restarted "
                        "on a machine that has served this traffic, to the outputs)")
    r.add_argument("--budget-s", type=float, default=0.0, help="start no case after this many seconds; 0 = none")
    r.add_argument("--cpu-memory-mib", type=int, default=1024,
                   help="on a CPU, the memory the engine is told the device has (default 1024)")


class _CaseParser(argparse.ArgumentParser):
    def error(self, message: str):  # a bad case line is one ValueError line, not usage text and an exit
        raise ValueError(message)


def _case_args(line: str, base: argparse.Namespace) -> argparse.Namespace:
    p = _CaseParser(prog="case", add_help=False)
    add_arguments(p)
    try:
        args = p.parse_args(shlex.split(line) + ["--out", base.out])
    except ValueError as exc:
        raise ValueError(f"--cases: bad line {line!r}: {exc}") from None
    for name in ("summary", "steps", "device", "gpu", "no_predict", "cpu_memory_mib"):
        if getattr(args, name) in (None, False):
            setattr(args, name, getattr(base, name))
    if args.cases:
        raise ValueError(f"--cases: a case line cannot name another case file: {line!r}")
    return args


def read_case_lines(path: str) -> list[str]:
    with open(path) as fh:
        lines = [ln.strip() for ln in fh]
    out = [ln for ln in lines if ln and not ln.startswith("#")]
    if not out:
        raise ValueError(f"--cases {path}: no runs in the file")
    return out


def _append(path: str, columns: list[str], rows: list[dict]) -> None:
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerows(rows)


def _knobs(args):
    from validation.serving.engine import EngineKnobs
    return EngineKnobs(block_size=args.block_size, num_blocks=args.num_blocks,
                       max_batch_tokens=args.max_batch_tokens, max_memory_percent=args.memory_fraction,
                       max_requests_per_batch=args.max_seqs)


def _run_id(args) -> str:
    """--run-id, or the run's model, workload and knobs in a few words."""
    if args.run_id:
        return args.run_id
    model = f"{args.family}" + (f"-L{args.layers}" if args.layers else "") + ("-tiny" if args.tiny else "")
    load = (f"csv:{os.path.basename(args.workload)}" if args.workload else
            f"rate={args.rate} n={args.requests} prompt={args.prompt_tokens} out={args.output_tokens} s={args.seed}")
    knobs = [f"{k}={v}" for k, v in (("bs", args.block_size), ("nb", args.num_blocks), ("mbt", args.max_batch_tokens),
                                     ("mem", args.memory_fraction), ("seqs", args.max_seqs)) if v is not None]
    return " ".join([model, load] + knobs)


def _model_key(args):
    return (args.family, args.layers, args.overrides, args.tiny)


def run_one(args, slot: dict, line: str | None) -> dict:
    """One run: build (or reuse) the model, serve the workload, predict, append the rows; returns its summary."""
    import torch

    from validation.model.hf_configs import family_config
    from validation.serving.engine import build_model, run_engine

    knobs = _knobs(args)
    requests = workload_from_args(args)
    cfg = family_config(args.family, args.layers, args.overrides, args.tiny)
    limit = int(cfg.get("max_position_embeddings") or 0)
    longest = max(r.prompt_tokens + r.output_tokens for r in requests)
    if limit and longest > limit:
        raise ValueError(f"workload: a request of {longest} tokens exceeds the model's max_position_embeddings "
                         f"{limit}")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: cuda requested but torch sees no GPU (this machine runs on cpu)")
    if slot.get("key") != _model_key(args):
        slot.clear()
        if device == "cuda":
            torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated() if device == "cuda" else None
        slot["model"] = build_model(cfg, device)
        slot["weights_bytes"] = (torch.cuda.memory_allocated() - before) if device == "cuda" else None
        slot["key"] = _model_key(args)
    run = run_engine(slot["model"], requests, knobs, device=device, timeout_s=args.timeout_s, seed=args.seed,
                     cpu_memory_bytes=args.cpu_memory_mib << 20)
    run_id = _run_id(args)
    predicted = None
    if not args.no_predict:
        from validation.serving.predict import predict_run
        predicted = predict_run(args, cfg, requests, _gpu(args, device))
    summary = summarise(run_id, args, run, slot.get("weights_bytes"), requests, predicted)
    end = max((r.finish_s for r in run.requests if r.finish_s is not None), default=None)
    _append(args.out, records.REQUEST_COLUMNS,
            records.request_rows(run_id, run.requests, predicted["requests"] if predicted else None))
    if args.steps:
        _append(args.steps, records.STEP_COLUMNS, records.step_rows(run_id, run.steps, end))
    if args.summary:
        _append(args.summary, SUMMARY_COLUMNS, [summary])
    return summary


def summarise(run_id: str, args, run, weights_bytes, requests: list, predicted: dict | None) -> dict:
    m = records.measured_summary(run.requests)
    s = {"run": run_id, "status": "timeout" if run.timed_out else "ok", "reason": "", "family": args.family,
         "layers": args.layers or "", "device_name": run.device_name, "requests": m["requests"],
         "finished": m["finished"], "prompt_tokens_total": sum(r.prompt_tokens for r in run.requests),
         "output_tokens_total": sum(r.output_tokens for r in run.requests), "weights_bytes": weights_bytes,
         "steps": len(run.steps), "wall_s": round(run.wall_s, 3), "args": getattr(args, "line", "")}
    s.update(run.cache)
    s.update({k: v for k, v in run.memory.items() if k != "before_cache_bytes"})
    for k, v in m.items():
        if k not in ("requests", "finished"):
            s[k] = v
    if predicted:
        for k, v in records.predicted_summary(requests, predicted["requests"]).items():
            s[f"pred_{k}"] = v
        mem = predicted["result"].memory
        s.update(pred_num_blocks=mem.num_blocks, pred_max_batch_tokens=mem.max_batch_tokens,
                 pred_peak_allocated_bytes=predicted["result"].peak_bytes - mem.context_bytes)  # as torch counts it
    return s


def _gpu(args, device: str) -> str:
    """The catalog GPU of the prediction: --gpu, or the detected one (h200 on a CPU)."""
    from estimator.hardware import get_gpu, gpu_from_device_name

    if args.gpu:
        return get_gpu(args.gpu).name
    if device == "cuda":
        import torch

        found = gpu_from_device_name(torch.cuda.get_device_name())
        if found is None:
            raise ValueError(f"gpu: cannot map {torch.cuda.get_device_name()!r} to the catalog; pass --gpu NAME")
        return found
    return "h200"


def failed_row(args, exc: BaseException) -> dict:
    return {"run": _run_id(args), "status": "oom" if is_oom(exc) else "error", "reason": typed_line(exc),
            "family": args.family, "layers": args.layers or "", "args": args.line}


def cold_path(path: str | None) -> str | None:
    """Where `--jit-cache warm` writes a case's first pass (the fresh-cache run): NAME_cold.EXT beside NAME.EXT."""
    if not path:
        return path
    root, ext = os.path.splitext(path)
    return f"{root}_cold{ext or '.csv'}"


def _process_env(cache_dir: str | None) -> dict:
    env = dict(os.environ)
    if cache_dir is not None:  # the driver's JIT cache of compiled kernels (CUDA's documented CUDA_CACHE_PATH)
        env["CUDA_CACHE_PATH"] = cache_dir
        env.pop("CUDA_CACHE_DISABLE", None)
    return env


def _run_case_process(args, line: str, job, out: str, summary: str | None, steps: str | None,
                      cache_dir: str | None) -> None:
    import subprocess

    shared = ["--out", out] + (["--summary", summary] if summary else []) + (
        ["--steps", steps] if steps else []) + (["--device", args.device] if args.device else []) + (
        ["--gpu", args.gpu] if args.gpu else []) + (["--no-predict"] if args.no_predict else [])
    cmd = [sys.executable, "-m", "validation", "serve", *shlex.split(line), *shared]
    try:
        done = subprocess.run(cmd, timeout=job.timeout_s + 300, env=_process_env(cache_dir))
        failed = done.returncode != 0
        reason = f"exit status {done.returncode}"
    except subprocess.TimeoutExpired:
        failed, reason = True, f"the process outlived --timeout-s {job.timeout_s} + 300 s"
    if failed and summary:
        job.line = line
        _append(summary, SUMMARY_COLUMNS, [{**failed_row(job, RuntimeError(reason))}])


def _fresh_processes(args, jobs, started: float) -> int:
    """Each case line as its own `python -m validation serve` process, appending to the same files; with
    `--jit-cache fresh` or `warm`, on a new CUDA JIT cache directory per case (removed afterwards)."""
    import shutil
    import tempfile

    mode = getattr(args, "jit_cache", "machine")
    for n, (line, job) in enumerate(jobs):
        if args.budget_s and time.perf_counter() - started > args.budget_s:
            print(f"budget: {args.budget_s} s spent, {len(jobs) - n} run(s) not started", file=sys.stderr)
            break
        cache_dir = tempfile.mkdtemp(prefix="jit-cache-") if mode != "machine" else None
        try:
            if mode == "warm":  # the first pass fills the new cache: a freshly started machine's run, kept apart
                _run_case_process(args, line, job, cold_path(args.out), cold_path(args.summary),
                                  cold_path(args.steps), cache_dir)
            _run_case_process(args, line, job, args.out, args.summary, args.steps, cache_dir)
        finally:
            if cache_dir is not None:
                shutil.rmtree(cache_dir, ignore_errors=True)
    return 0


def main_serve(args) -> int:
    started = time.perf_counter()
    slot: dict = {}
    if args.cases:
        jobs = [(line, _case_args(line, args)) for line in read_case_lines(args.cases)]
    else:
        jobs = [(None, args)]
    for line, job in jobs:  # every run's flags are checked before the first one starts
        try:
            _knobs(job)
            workload_from_args(job)
        except ValueError as exc:
            raise ValueError(f"{exc} (case: {line})" if line else str(exc)) from None
    if getattr(args, "jit_cache", "machine") != "machine" and not (args.cases and args.fresh_process):
        raise ValueError(f"--jit-cache {args.jit_cache}: needs --cases with --fresh-process (the cache is set per "
                         "process)")
    if args.cases and args.fresh_process:
        return _fresh_processes(args, jobs, started)
    done = 0
    for line, job in jobs:
        if args.budget_s and time.perf_counter() - started > args.budget_s:
            print(f"budget: {args.budget_s} s spent, {len(jobs) - done} run(s) not started", file=sys.stderr)
            break
        job.line = line if line is not None else " ".join(getattr(args, "argv", []))
        try:
            summary = run_one(job, slot, line)
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 - one failed run is a row, the next runs go on
            summary = failed_row(job, exc)
            slot.clear()
            if args.summary:
                _append(args.summary, SUMMARY_COLUMNS, [summary])
        print(json.dumps(summary, default=str), flush=True)
        done += 1
    print(f"wrote {args.out}" + (f", {args.summary}" if args.summary else "") +
          (f", {args.steps}" if args.steps else "") + f" ({done} run(s))", file=sys.stderr)
    return 0
