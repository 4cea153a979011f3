"""`python -m estimator {predict,plan,advise,serve} ...` (docs/contract.md §2-§4, §6)."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {"predict": "estimator.cli.predict", "plan": "estimator.cli.plan", "advise": "estimator.cli.advise",
            "serve": "estimator.cli.serve"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m estimator {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
