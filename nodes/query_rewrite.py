"""Graph node query_rewrite (seed 002 需求3 检索触发机制): the model turns the input + recent messages into one query."""

from __future__ import annotations

import logging

from langgraph.runtime import Runtime
from personalab.nodes.context import Context, context_of
from personalab.nodes.llm import get_chat_model
from personalab.nodes.rules.prompt_assembly import split_latest_user
from personalab.nodes.rules.rewrite import HISTORY_MAX, HISTORY_MIN, needs_rewrite, parse_rewrite, rewrite_messages
from personalab.nodes.state import TurnState, TurnUpdate


def query_rewrite(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    """Graph node (seed 002 需求3): the model rewrites the input + the last messages into one standalone query.
    A model failure falls back to the raw input: retrieval quality drops, the turn goes on."""
    ctx = context_of(runtime)
    message = state["message"]
    recent, _latest = split_latest_user(state.get("messages", []))
    if not needs_rewrite(recent):
        return {
            "query": message,
            "debug": {"query_rewrite": {"status": "no dialogue before the input", "query": message}},
        }
    request = rewrite_messages(message, recent, max(HISTORY_MIN, min(HISTORY_MAX, ctx.rewrite_history_messages)))
    try:
        answer = get_chat_model("query_rewrite").invoke(request).content
    except Exception as exc:  # noqa: BLE001 - the raw input is a usable query
        logging.getLogger(__name__).warning("query rewrite failed, using the raw input: %s", exc)
        return {"query": message, "debug": {"query_rewrite": {"status": f"model error: {exc}", "query": message}}}
    query = parse_rewrite(str(answer), message)
    return {"query": query, "debug": {"query_rewrite": {"status": "ok", "query": query}}}
