"""What a served run of the turn graph may carry (issue 14): the turn's input fields, the per-run context knobs a
client may set and the server-only fields it may not, and the limits a turn's input is checked against. The HTTP
run guard (graph/http/run_context.py) checks every run against these before LangGraph's server starts it; they are
the turn graph's own contract (nodes/context.py, nodes/state.py), named here so the front ends need no node
module."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from personalab.nodes.context import RUN_KNOBS, SERVER_FIELDS, Context, validate_run_context
from personalab.nodes.state import TurnInput

INPUT_FIELDS: tuple[str, ...] = tuple(TurnInput.__annotations__)
"""The fields of a turn's input (`instance_id`, `message`, `lines_before`, `reply_to`, `branch_from`, …)."""
CONTEXT_FIELDS: frozenset[str] = frozenset(SERVER_FIELDS) | frozenset(RUN_KNOBS)
"""Every field of the turn graph's context: the server's and the per-run knobs."""
SERVER_ONLY: Mapping[str, str] = SERVER_FIELDS
"""Context fields only the server's configuration sets, with their setting's name."""


def turn_limits() -> Context:
    """The server's configured context: its `max_message_chars`, `max_host_lines`, `max_user_name_chars`."""
    return Context()


def check_run_context(value: Any, where: str) -> None:
    """`InvalidInput` naming `where` for a run context that sets a server-only field or a knob out of range."""
    validate_run_context(value, where=where)
