"""The `personalab` command line.

Each command module registers its sub-commands with `register(subparsers)`; a handler takes the parsed
arguments and returns an exit code. Only PersonaLab's own errors (`PersonaLabError`: bad arguments, bad input,
unknown ids, a database that cannot be opened or written) are one line on stderr with exit code 2, control
characters escaped (`output.safe`); any other exception is a bug and shows its traceback. A reader that goes
away (`personalab turn --json | head -1`) ends the command quietly with exit code 1.
Benchmarks and evaluations are a separate command (`python -m personalab.evals`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from personalab.graph.cli import (
    cards,
    database,
    demo,
    dialogue,
    doctor,
    library,
    memory,
    serve,
    suggestions,
    turn,
    worldbook,
)
from personalab.graph.cli.args import check_text_arguments
from personalab.graph.cli.output import safe
from personalab.nodes.rules.errors import InvalidInput, PersonaLabError
from personalab.stores.db import store_unavailable

COMMAND_MODULES = (demo, turn, dialogue, cards, library, worldbook, suggestions, memory, database, doctor, serve)


class UsageError(InvalidInput):
    """Bad words on the command line: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def sub_parsers(prog: str, description: str) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """A parser whose errors raise `UsageError`, and its required sub-commands."""
    parser = _Parser(prog=prog, description=description)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    return parser, sub


def build_parser() -> argparse.ArgumentParser:
    parser, sub = sub_parsers("personalab", "Memory engine for long-running role-play characters")
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse `argv` and run its handler; PersonaLab's errors become one line on stderr and exit code 2."""
    try:
        args = parser.parse_args(argv)
        check_text_arguments(args, parser.prog)
        code = int(args.handler(args) or 0)
        sys.stdout.flush()  # a closed pipe is reported here, not as "Exception ignored" when Python exits
        return code
    except PersonaLabError as exc:
        return _one_line(parser, exc)
    except BrokenPipeError:
        # the reader went away (`personalab turn --json | head`): nothing more to say, and nothing to flush
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:
        # the database's own "cannot open / cannot write" from outside our engine (the checkpointer's
        # connection): one line too; any other exception is a bug and keeps its traceback
        unavailable = store_unavailable(exc)
        if unavailable is None:
            raise
        return _one_line(parser, unavailable)


def _one_line(parser: argparse.ArgumentParser, exc: PersonaLabError) -> int:
    # escaped before the first line is taken: a carriage return or a C1 "next line" in a name is no line end
    text = safe(str(exc)).split("\n")[0] if str(exc) else type(exc).__name__
    prefix = "" if isinstance(exc, UsageError) else f"{parser.prog}: error: "
    print(safe(prefix) + text, file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):
        print(parser.format_help(), end="")  # `personalab` alone: the list of commands, not an error
        return 0
    return run_command(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
