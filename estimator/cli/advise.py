"""`python -m estimator advise ...`: what to do about a plan, most important first, each with the numbers that
triggered it and its effect re-estimated (docs/contract.md §4). Takes the flags of `plan`; `--json` prints
`{"advice": [{"id", "title", "why", "expected_effect", ...}, ...]}`; `--tree` prints the decision tree.
Bad input is one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys

from estimator.call.config import MASKS, check_positive_int
from estimator.cli.plan import OneLineParser, add_plan_arguments, image_request, inputs_from_args
from estimator.files import strict_json


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m estimator advise", description=__doc__.splitlines()[0])
    add_plan_arguments(parser)
    call = parser.add_argument_group("attention call details the plan does not price (kernel advice only)")
    call.add_argument("--mask", default="none", help=f"a dense (batch, 1, q_len, kv_len) mask: {', '.join(MASKS)}")
    call.add_argument("--cached-len", default="0",
                      help="tokens already in the KV cache (chunked prefill: q_len = seq_len - cached)")
    parser.add_argument("--json", action="store_true", help='print {"advice": [...]} (contract §4)')
    parser.add_argument("--tree", action="store_true", help="print the decision tree and exit")
    return parser


def _call_options(args: argparse.Namespace) -> dict:
    mask = str(args.mask).strip().lower()
    if mask not in MASKS:
        raise ValueError(f"--mask: unknown value {args.mask!r}; expected one of {', '.join(MASKS)}")
    cached = 0 if str(args.cached_len).strip() in ("", "0") else check_positive_int("--cached-len", args.cached_len,
                                                                                     1 << 24)
    return {"mask": mask, "cached_len": cached}


def format_advice(items) -> str:
    """Numbered advice: title, why, expected effect."""
    lines = []
    for i, advice in enumerate(items, 1):
        lines += [f"{i}. [{advice.id}] {advice.title}", f"   why:    {advice.why}",
                  f"   effect: {advice.expected_effect}", ""]
    return "\n".join(lines).rstrip()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.tree:
        from estimator.advice.tree import render_tree

        print(render_tree())
        return 0
    try:
        from estimator.advice.plan_rules import advise
        from estimator.cli.hybrid_args import hybrid_request

        hybrid = hybrid_request(args)
        request = None if hybrid is not None else image_request(args)
        if hybrid is not None:  # mamba2 / falcon_h1 / bamba on the torch fallback: re-plans of the same model
            from estimator.advice.hybrid_rules import hybrid_advice

            mode = "training" if hybrid["mode"] == "training" else "prefill"
            items = hybrid_advice(hybrid["spec"], mode=mode, optimizer=hybrid["optimizer"], **hybrid["kw"])
        elif request is not None:  # Swin or a vision-language model: where the memory goes, tower by tower
            from estimator.advice.vision_rules import vision_advice
            from estimator.model.vision_plan import vision_plan

            items = vision_advice(vision_plan(request, solve=False))
        else:
            inputs = inputs_from_args(args)
            items = advise(inputs, **_call_options(args))
    except ValueError as exc:
        text = str(exc)
        if text.startswith("cached_len:"):
            text = "--cached-len:" + text.removeprefix("cached_len:")
        print(f"error: {text}", file=sys.stderr)
        return 2
    try:
        text = (strict_json({"advice": [a.to_dict() for a in items]}, "advise", indent=2) if args.json
                else format_advice(items))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
