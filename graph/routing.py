"""Conditional edges of the turn graph."""

from __future__ import annotations

from langgraph.graph import END
from langgraph.runtime import Runtime
from personalab.nodes.context import Context, context_of
from personalab.nodes.rules.core_memory import should_maintain
from personalab.nodes.rules.director import is_stalled
from personalab.nodes.state import TurnState


def after_history_fetch(state: TurnState) -> str:
    """A run replayed after its server was killed, whose turn is done, ends with the stored reply (issue 27)."""
    return END if (state.get("debug") or {}).get("replayed_run") else "memory_build"


def after_write_back(state: TurnState) -> str:
    """A run resumed past its reply's commit stored nothing again: its review was queued with the reply."""
    return "end_turn" if (state.get("debug") or {}).get("replayed_run") else "review"


def retrieval_paths(state: TurnState, runtime: Runtime[Context]) -> list[str]:
    """Memory retrieval every turn; the director's fallback beside it only when the story has stalled
    (seed 002 需求1 兜底机制)."""
    plot = state["plot_state"]
    if state["character"].get("open_story"):  # issue 28: an open outline (a card's scenario) is never forced
        return ["rag_retrieve"]
    stalled = is_stalled(state["turn"], plot.get("last_progress_turn", 0), context_of(runtime).stall_turns)
    return ["rag_retrieve", "director"] if stalled else ["rag_retrieve"]


def after_generate(state: TurnState) -> str:
    return "abort_turn" if state.get("error") else "progress_parse"


def after_progress_parse(state: TurnState) -> str:
    """A reply with nothing left to store (only markers or emotion tags) ends the turn as a failed one."""
    return "abort_turn" if state.get("error") else "write_back"


def after_review(state: TurnState, runtime: Runtime[Context]) -> str:
    """Core memory is maintained every N turns (seed 002 定期维护机制)."""
    return "maintenance" if should_maintain(state["turn"], context_of(runtime).maintenance_every) else "end_turn"
