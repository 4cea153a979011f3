"""The workload of a run, from the same flags and CSV as `python -m estimator serve` (estimator/serve/workload.py
is the one home of the format and the synthetic generator), within this command's bounds."""

from __future__ import annotations

from estimator.serve.workload import load_workload_csv, synthetic_workload

MAX_REQUESTS = 4096  # one measured run; its time is bounded by --timeout-s too
MAX_TOTAL_TOKENS = 50_000_000  # prompt + output tokens of one run


def workload_from_args(args) -> list:
    """The requests (estimator.serve.workload.Request, arrival order) of --workload or the synthetic flags."""
    if args.workload:
        if args.rate is not None:
            raise ValueError("--rate: give either --workload CSV or the synthetic flags, not both")
        workload = load_workload_csv(args.workload)
    else:
        if args.rate is None:
            raise ValueError("--rate: give --workload CSV or a synthetic --rate (inf: every request at t = 0)")
        workload = synthetic_workload(rate_per_s=args.rate, requests=args.requests, prompt_tokens=args.prompt_tokens,
                                      output_tokens=args.output_tokens, seed=args.seed)
    if len(workload) > MAX_REQUESTS:
        raise ValueError(f"workload: {len(workload):,} requests; a measured run takes at most {MAX_REQUESTS:,}")
    total = workload.total_prompt_tokens + workload.total_output_tokens
    if total > MAX_TOTAL_TOKENS:
        raise ValueError(f"workload: {total:,} prompt+output tokens; a measured run takes at most "
                         f"{MAX_TOTAL_TOKENS:,}")
    return list(workload.requests)
