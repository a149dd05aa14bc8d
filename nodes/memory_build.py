"""Graph node memory_build (seed 000 + seed 002 Recall Memory): the instance's path → the messages its character sees."""

from __future__ import annotations

from langgraph.runtime import Runtime
from personalab.nodes.context import Context
from personalab.nodes.rules.memory_builder import build_memory
from personalab.nodes.state import TurnState, TurnUpdate


def memory_build(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    """Graph node: the instance's history → the messages its character sees (recall memory, seed 002)."""
    character = state["character"]
    return {
        "messages": build_memory(
            state.get("history", []),
            role_id=character.get("role_id"),
            display_name=character["name"],
            language=character.get("language"),  # issue 28: unnamed speakers in the instance's language
        )
    }
