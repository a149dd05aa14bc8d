"""State of a conversation instance's turn graph, checkpointed per instance (thread = uuid5 of the save id).

Kept across turns: `turn`, `plot_state`, `core_memory` (+ `core_memory_versions`), `relationship`, and the
last turn's `debug`. Everything else is rebuilt each turn (`history_fetch` resets it) or lives in the
database; the dialogue path and the built messages are not checkpointed at all.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langgraph.channels import UntrackedValue


def merge_debug(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    """Nodes add their part of the turn's debug output; `{"reset": True, ...}` starts a new turn's."""
    if not new:
        return old or {}
    if new.get("reset"):
        return {k: v for k, v in new.items() if k != "reset"}
    merged = dict(old or {})
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


class TurnInput(TypedDict, total=False):
    """What a host app sends for one turn."""

    instance_id: int
    message: str
    user_name: str | None
    # lines the host wants in the tree before the user's (narration, other characters), with identities
    lines_before: list[dict[str, Any]]
    selected_choice: dict[str, Any] | None
    time_gap: str | None


class TurnState(TurnInput, total=False):
    # kept across turns
    turn: int
    plot_state: dict[str, Any]
    core_memory: dict[str, Any]
    core_memory_versions: list[dict[str, Any]]
    relationship: dict[str, Any]
    # world-book entry id → the turn it last fired (temporal triggers, seed 004)
    worldbook_fired: dict[str, int]
    # state changes since the last core-memory maintenance (seed 002: 状态变化事件)
    state_events: list[str]
    # this turn
    lock_token: str | None
    character: dict[str, Any]
    # rebuilt from the database every turn, so never checkpointed: a long play-through's path would
    # otherwise be copied into every checkpoint of every turn
    history: Annotated[list[dict[str, Any]], UntrackedValue(list)]
    messages: Annotated[list[dict[str, str]], UntrackedValue(list)]
    user_line_id: int | None
    query: str
    retrieved: list[dict[str, Any]]
    # the retrieved region's blocks (world knowledge, memories) and world-book text for other positions
    memory_blocks: list[dict[str, Any]]
    injected: dict[str, str]
    director_events: dict[str, list[dict[str, Any]]] | None
    reply_raw: str
    reply: str
    reply_lines: list[dict[str, Any]]
    model: str
    error: str | None
    # seed 003: the real-time gap since the previous turn (given by the host or computed) and the review
    gap: str
    review: dict[str, Any] | None
    debug: Annotated[dict[str, Any], merge_debug]


class TurnOutput(TypedDict, total=False):
    reply: str
    reply_lines: list[dict[str, Any]]
    plot_state: dict[str, Any]
    core_memory: dict[str, Any]
    relationship: dict[str, Any]
    retrieved: list[dict[str, Any]]
    # the retrieved region's blocks (world knowledge, memories) and world-book text for other positions
    memory_blocks: list[dict[str, Any]]
    injected: dict[str, str]
    director_events: dict[str, list[dict[str, Any]]] | None
    turn: int
    model: str
    error: str | None
    # seed 003: the real-time gap since the previous turn (given by the host or computed) and the review
    gap: str
    review: dict[str, Any] | None
    debug: dict[str, Any]
