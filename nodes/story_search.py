"""The director's story search (seed 002 需求1), shared by the director node and write_back's between-turns prefetch."""

from __future__ import annotations

from collections.abc import Iterable

from personalab.nodes.rules.director import (
    CURRENT_EVENTS_LIMIT,
    OTHER_EVENTS_LIMIT,
    STALL_THRESHOLD,
    fallback_query,
    is_stalled,
)
from personalab.nodes.rules.types import PlotState
from personalab.nodes.state import TurnState
from personalab.stores.events import StorySearch, prefetch_story


def story_search(
    state: TurnState, plot_state: PlotState, branch: Iterable[int] | None = None, database_url: str | None = None
) -> StorySearch:
    """The director's story search for the instance at `plot_state`, its own layer on `branch` (the line ids
    from the root to the leaf: what an abandoned branch wrote is not this branch's past); the other
    play-throughs' events are taken on their own current branches, read from the database at `database_url`."""
    character = state["character"]
    return StorySearch(
        query=fallback_query(plot_state, character.get("language")),
        character_id=character.get("role_id"),
        background_id=character.get("background_id"),
        instance_id=state["instance_id"],
        current_k=CURRENT_EVENTS_LIMIT,
        others_k=OTHER_EVENTS_LIMIT,
        branch=None if branch is None else frozenset(branch),
        database_url=database_url,
    )


def prefetch_next_turn(
    state: TurnState,
    stall_turns: int = STALL_THRESHOLD,
    branch: Iterable[int] | None = None,
    database_url: str | None = None,
) -> bool:
    """At the end of a turn whose reply is stored: when the next turn will fall back (`is_stalled` for it
    with this turn's plot state), queue its story search now, between turns — the query is the outline point,
    not anything the user will type; `branch` ends at the stored reply. Returns whether it was queued."""
    plot, turn = state["plot_state"], state["turn"]
    if state["character"].get("open_story"):  # issue 28: an open outline is never pulled back to
        return False
    if not is_stalled(turn + 1, plot.get("last_progress_turn", 0), stall_turns):
        return False
    prefetch_story(story_search(state, plot, branch, database_url), turn + 1)
    return True
