"""`python -m estimator {predict,plan,advise,serve} ...` (docs/contract.md §2-§4, §6); `--help` at every level."""

from __future__ import annotations

import importlib
import os
import sys

COMMANDS = {"predict": "estimator.cli.predict", "plan": "estimator.cli.plan", "advise": "estimator.cli.advise",
            "serve": "estimator.cli.serve"}
DESCRIPTIONS = {
    "predict": "one attention call (or a CSV of them): peak extra bytes, time and the backend PyTorch picks",
    "plan": "a whole model on a GPU: the per-GPU memory budget and its verdict, FLOPs, time, the largest n and "
            "batch that fit; --json, --xlsx",
    "advise": "what to change when a plan does not fit or runs slowly, each effect the estimator's re-plan; --json",
    "serve": "serving capacity of a request workload on an engine: KV pool, TTFT / TPOT / end-to-end percentiles, "
             "throughput, sizing against P99 targets",
}


def usage() -> str:
    lines = [f"usage: python -m estimator {{{','.join(COMMANDS)}}} ...", "",
             "Capacity planner for long-context attention.", "", "commands:"]
    lines += [f"  {name:<9}{DESCRIPTIONS[name]}" for name in COMMANDS]
    lines += ["", "python -m estimator COMMAND --help lists a command's flags."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if not argv or argv[0] not in COMMANDS:
        if argv:
            print(f"error: unknown command {argv[0]!r}; expected one of {', '.join(COMMANDS)}", file=sys.stderr)
        print(usage(), file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `... | head`: the reader left; exit quietly (Python docs, "Note on SIGPIPE")
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
