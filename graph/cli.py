"""The `personalab` command line.

Every command module registers its sub-commands through a `register(subparsers)` function listed in
`COMMAND_MODULES`; a command's handler takes the parsed arguments and returns an exit code. Bad
arguments or bad input print one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMAND_MODULES = [
    "graph.cli_demo",
    "graph.cli_turn",
    "evals.cli_bench",
    "graph.cli_worldbook",
    "graph.cli_suggestions",
    "graph.cli_memory",
    "evals.cli_eval",
]


class UsageError(Exception):
    """Bad input from the command line: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="personalab", description="Memory engine for long-running role-play characters")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.handler(args) or 0)
    except UsageError as exc:
        print(str(exc).splitlines()[0], file=sys.stderr)
        return 2
    except (ValueError, LookupError) as exc:
        # Bad input discovered while running (unknown id, malformed file): one line, exit 2.
        print(f"personalab: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
