"""`personalab eval …` and `personalab bench …`: the evaluations' commands, found by the product's CLI as entry
points of the group `personalab.commands` (pyproject.toml) and loaded only when one of them runs. The product never
imports the evaluations (import-linter: graph ✗→ evals); `personalab-evals …` and `python -m personalab.evals …` run
the same commands directly."""

from __future__ import annotations

import sys
from collections.abc import Sequence

EVAL_COMMANDS = ("eval", "bench")


def main(argv: Sequence[str] | None = None, prog: str = "personalab") -> int:
    """Run `argv` whose first word is `eval` or `bench` as the evaluations' command line; any other (the previous
    release's console script passed every command here) goes to the product's CLI."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in EVAL_COMMANDS:
        from personalab.evals.__main__ import main as evals_main

        return evals_main(args, prog=prog)
    from personalab.graph.cli import main as product_main

    return product_main(args)


if __name__ == "__main__":
    sys.exit(main())
