"""History fetch: the lines from the root of the instance's dialogue tree to its current leaf."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context
from graph.state import TurnState
from stores.db import session_scope
from stores.history import get_chat_history
from stores.saves import get_save
from stores.tables import Line


def line_to_dict(line: Line) -> dict[str, Any]:
    return line.model_dump(exclude={"audio_file", "predicted_emotion"})


def history_fetch(state: TurnState, runtime: Runtime[Context]) -> dict[str, Any]:
    with session_scope(runtime.context.database_url if runtime.context else None) as session:
        get_save(session, state["instance_id"])
        history = get_chat_history(session, state["instance_id"])
        return {"history": [line_to_dict(line) for line in history]}
