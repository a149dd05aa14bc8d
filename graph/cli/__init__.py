"""The `personalab` command line (the console script's entry, `personalab.graph.cli:main`).

Each command module registers its sub-commands with `register(subparsers)`; a handler takes the parsed
arguments and returns an exit code. Only PersonaLab's own errors (`PersonaLabError`: bad arguments, bad input,
unknown ids, a database that cannot be opened or written) are one line on stderr with exit code 2, control
characters escaped (`output.safe`); any other exception is a bug and shows its traceback. A reader that goes
away (`personalab turn --json | head -1`) ends the command quietly with exit code 1.

A command's module is imported only when that command runs (`COMMANDS`): `personalab --help` and the listing
commands load neither the turn graph nor the vector store. A first word that is none of these commands is looked
up among the installed `personalab.commands` entry points (`personalab eval …` and `personalab bench …` come from
the evaluations package this way): the product never imports them, and installs and runs without them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from importlib import import_module

from personalab.graph.cli.output import safe
from personalab.nodes.rules.errors import InvalidInput, PersonaLabError

# command → (its module in graph/cli, its help line); a module registering several commands is named by each
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "the memory builder on the seed's scene, then a scripted 12-turn session"),
    "serve": ("serve", "the web app and the HTTP API on one local server (prints the URL)"),
    "serve-production": (
        "serve_production",
        "the graph API, HTTP API and web app on Aegra: several processes on PostgreSQL, Redis, a Chroma server",
    ),
    "turn": ("turn", "run one turn and stream the reply"),
    "core": ("story", "an instance's core memory: show, versions, diff, roll back"),
    "plot": ("story", "an instance's outline and current point, plot nodes"),
    "relation": ("relations", "the character's relations: with the user and the scene's NPCs"),
    "session": ("dialogue", "an instance's sessions (sittings): list them, start a new one"),
    "history": ("dialogue", "the current branch of an instance's dialogue, with line ids"),
    "regen": ("dialogue", "a new reply to the last user line (beside the old one)"),
    "swipe": ("dialogue", "make another reply (or edit) current: --index N of the last reply, or --line"),
    "edit": ("dialogue", "replace a user line of the branch with TEXT and get a new reply"),
    "rewind": ("dialogue", "move the instance back to a line of its current branch"),
    "chat": ("dialogue", "interactive chat with an instance (/help inside lists its commands)"),
    "card": ("cards", "SillyTavern character cards (V1/V2/V3 JSON, PNG) in and out"),
    "character": ("library", "characters: create, list, show, edit, delete (seed 002 角色)"),
    "background": ("library", "backgrounds: create, list, show, edit, delete (seed 002 背景)"),
    "instance": ("library", "conversation instances (seed 002 会话实例)"),
    "persona": ("personas", "user personas: create, list, show, edit, delete (issue 28)"),
    "knowledge": ("worldbook", "the knowledge library (global / character / instance facts)"),
    "worldbook": ("worldbook", "the world book (triggered lore entries)"),
    "global": (
        "worldbook",
        "the global knowledge and world book (entries and settings) as one file: backup and restore",
    ),
    "suggestions": ("suggestions", "world-book updates proposed by the post-turn review"),
    "trigger-config": ("trigger_config", "seed 004's memory trigger configuration, per scope"),
    "reply": ("replies", "what fed a reply"),
    "memory": ("memory", "the character's long-term memory of an instance"),
    "db": ("database", "the database's schema: upgrade (run the migrations), current (its revision)"),
    "doctor": (
        "doctor",
        "queued writes, orphan vectors, expired turn locks, checkpoint sizes; exit 1 while a problem remains",
    ),
}
PLUGIN_GROUP = "personalab.commands"
"""Entry-point group of commands other installed packages add (`personalab.evals`: eval, bench)."""


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


def _module(name: str) -> object:
    return import_module(f"personalab.graph.cli.{name}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `personalab` parser. With `command`, only that command's module is imported and registered, the other
    commands are listed by their help line; without, every module is registered."""
    parser, sub = sub_parsers("personalab", "Memory engine for long-running role-play characters")
    parser.epilog = (
        "Installed packages add commands of their own (entry points 'personalab.commands'): the "
        "evaluations add 'eval' and 'bench'."
    )
    wanted = COMMANDS[command][0] if command in COMMANDS else None
    for name, (module, help_) in COMMANDS.items():
        if name in sub.choices:
            continue  # registered with an earlier command of its module
        if command is None or module == wanted:
            _module(module).register(sub)  # type: ignore[attr-defined]
        else:
            sub.add_parser(name, help=help_)
    return parser


def _plugin(command: str) -> Callable[..., int] | None:
    """The `personalab.commands` entry point named `command` (None when no installed package adds it)."""
    from importlib.metadata import entry_points

    for point in entry_points(group=PLUGIN_GROUP, name=command):
        try:
            loaded: Callable[..., int] = point.load()
        except ImportError as exc:  # its package was removed but its metadata stayed: one line, not a traceback
            raise UsageError(f"personalab: {command}: {point.value} cannot be loaded ({exc})") from None
        return loaded
    return None


def run_command(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse `argv` and run its handler; PersonaLab's errors become one line on stderr and exit code 2."""
    try:
        args = parser.parse_args(argv)  # `--help` ends here, before the argument checks are loaded
        from personalab.graph.cli.args import check_text_arguments

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
        from personalab.graph.api.support import store_unavailable

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
    args = list(sys.argv[1:] if argv is None else argv)
    first = args[0] if args else None
    if first is not None and first not in COMMANDS and not first.startswith("-"):
        try:
            plugin = _plugin(first)
        except UsageError as exc:
            print(safe(str(exc)), file=sys.stderr)
            return 2
        if plugin is not None:
            return int(plugin(args, prog="personalab") or 0)
    parser = build_parser(first if first in COMMANDS else "")
    if not args:
        print(parser.format_help(), end="")  # `personalab` alone: the list of commands, not an error
        return 0
    return run_command(parser, args)


if __name__ == "__main__":
    sys.exit(main())
