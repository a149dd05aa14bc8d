"""Playing turns in-process against the stub server, shared by the prompt-cache tests (issue 30)."""

from __future__ import annotations

from typing import Any

from openai_stub import OpenAIStub
from personalab.graph.runner import run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.stores.background import flush_event_writes

# the reply's task line opens its system message (the rewrite and maintenance requests carry their own)
REPLY_MARKER = "〔PersonaLab任务：reply〕"


def play_turns(ctx: Context, instance: int, messages: list[str], **extra: Any) -> list[dict[str, Any]]:
    """One graph, the messages as turns one after another; each turn's background writes are flushed before the
    next, as a user who waits for the reply sees them."""
    states = []
    with turn_graph(ctx) as (graph, context):
        for message in messages:
            states.append(run_turn(graph, context, instance, message, **extra))
            flush_event_writes()
    return states


def reply_requests(stub: OpenAIStub) -> list[dict[str, Any]]:
    """The requests the stub received for replies (not rewrites, not core-memory maintenance)."""
    return [r for r in stub.requests if REPLY_MARKER in r["messages"][0]["content"]]
