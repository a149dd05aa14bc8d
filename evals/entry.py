"""The `personalab` console script: `personalab eval …` and `personalab bench …` go to the evaluations
(`personalab.evals.__main__`, imported only then), every other command to the product's CLI
(`personalab.graph.cli.main`). The product never imports the evaluations (import-linter: graph ✗→ evals)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

EVAL_COMMANDS = ("eval", "bench")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in EVAL_COMMANDS:
        from personalab.evals.__main__ import main as evals_main

        return evals_main(args, prog="personalab")
    from personalab.graph.cli import main as product_main

    return product_main(args)


if __name__ == "__main__":
    sys.exit(main())
