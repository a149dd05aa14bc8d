"""Graph node memory_build (seed 000 + seed 002 Recall Memory): the instance's path → the messages its character sees."""

from __future__ import annotations

from langgraph.runtime import Runtime
from personalab.nodes.context import Context, context_of, window_turns_at
from personalab.nodes.rules.curation import window_texts
from personalab.nodes.rules.memory_builder import build_memory
from personalab.nodes.state import TurnState, TurnUpdate


def memory_build(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    """Graph node: the instance's history → the messages its character sees (recall memory, seed 002), and the
    recall window's lines as the dialogue record writes them (`window_lines`: what retrieval and the director leave
    out as already shown, issue 26; made once here, read by both)."""
    character = state["character"]
    history = state.get("history", [])
    return {
        "messages": build_memory(
            history,
            role_id=character.get("role_id"),
            display_name=character["name"],
            language=character.get("language"),  # issue 28: unnamed speakers in the instance's language
        ),
        "window_lines": window_texts(
            history,
            character,
            state.get("user_name"),
            window_turns_at(context_of(runtime), int(state.get("turn") or 1), state.get("recall_floor_turn")),
        ),
    }
