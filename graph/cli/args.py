"""Argument types of the CLI, and the API a command acts through (`lab`): numbers checked for the database's range before it sees them (issue 16).

An id or a stored whole number (turn, priority, version, count) larger than an INTEGER column holds (PostgreSQL's
4 bytes, `INTEGER_MAX`) used to reach the database and come back as a driver's traceback
(`integer out of range` on PostgreSQL, `OverflowError` on SQLite above 2**63); now it is one usage line, exit 2.
A JSON argument is read by the API's `parse_json` (bounded nesting, no NUL character). Text that was not
UTF-8 on the command line (Python keeps its bytes as lone surrogates) is refused by `check_text_arguments`,
except in file names, which may be any bytes.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from personalab.graph.api.facade import PersonaLab
from personalab.graph.api.schemas.common import INTEGER_MAX, INTEGER_MIN
from personalab.graph.api.support import parse_json
from personalab.nodes.rules.errors import InvalidInput

PATH_ARGUMENTS = {"file"}  # a file name is bytes to the system: not UTF-8 is fine there


def lab(args: argparse.Namespace | None = None) -> PersonaLab:
    """The API one command acts through: the local operator (or, for a listing, `--owner USER`: what the served
    API shows that user) on the configured database."""
    return PersonaLab(owner=getattr(args, "owner", None))


def bounded_int(low: int, high: int, what: str) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high`. Not a number: argparse's own "invalid int value"
    (the function is named `int` for it); out of range: the range, naming `what`."""

    def parse(text: str) -> int:
        value = int(text)  # ValueError → "argument --x: invalid int value: 'abc'"
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} {text} is out of range ({low} to {high})")
        return value

    parse.__name__ = "int"
    return parse


# a stored row's id (instance, character, memory, suggestion): every id the database can hold, and 0
ID = bounded_int(0, INTEGER_MAX, "id")
# a whole number stored in an INTEGER column (priority, turn window): negative ones too, where the rules allow
INTEGER = bounded_int(INTEGER_MIN, INTEGER_MAX, "number")
# a count or a turn: 0 and up
COUNT = bounded_int(0, INTEGER_MAX, "number")


def whole(text: str) -> int:
    """A whole number from 0 to `INTEGER_MAX`, in the memory commands' words."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    if value > INTEGER_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is over {INTEGER_MAX}")
    return value


def json_argument(raw: str | None, option: str) -> Any:
    """The JSON value of option `option`'s text (None when not given): `InvalidInput` naming the option for
    malformed JSON, too deep a nesting or a NUL character."""
    return None if raw is None else parse_json(raw, option)


def check_text_arguments(args: argparse.Namespace, prog: str) -> None:
    """`InvalidInput` naming the first text argument (but a file name) that was not UTF-8 on the command line."""
    from personalab.nodes.rules.validation import has_surrogate  # its module loads pydantic: only when checking

    for name, value in vars(args).items():
        if name in PATH_ARGUMENTS:
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and has_surrogate(item):
                raise InvalidInput(f"{prog}: argument {name}: not UTF-8 text")
