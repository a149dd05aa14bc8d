"""Where an instance's story stands, read and corrected by hand (issue 23): the story state of its current branch
(turn, plot state, core memory and its versions, ...; `stores.turns.StoryState`), shared by `api.core_memory` and
`api.plot`.

A correction (a core-memory rollback, the current outline point set by hand) is stored as a new story state at
the branch's leaf, under the instance's turn lock (`InstanceBusy` while a turn runs), and copied into the
instance's checkpoint, as a rewind does (graph/api/dialogue.py): the next turn, in this process or another,
starts from it (`nodes.history_fetch.kept_state` reads the branch's newest stored state), and what LangGraph
Studio and `core show` show between turns agrees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.library import owned_save
from personalab.nodes.rules.errors import InvalidInput
from personalab.stores.db import session_scope
from personalab.stores.history import get_path_ids
from personalab.stores.saves import get_save
from personalab.stores.settings import settings
from personalab.stores.tables import Save
from personalab.stores.turns import acquire_turn_lock, branch_story_state, release_turn_lock, save_story_state
from sqlmodel import Session


def check_id(value: Any, what: str) -> int:
    """A whole-number id (`InvalidInput` naming `what` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**31 - 1:
        raise InvalidInput(f"{what} must be a whole number from 0 to {2**31 - 1}, got {value!r}")
    return value


def instance_of(session: Session, caller: Caller, instance_id: Any) -> Save:
    """The instance, if the caller may use it (`InstanceNotFound` naming the id otherwise)."""
    check_id(instance_id, "instance_id")
    return (
        owned_save(session, instance_id, caller.owner) if caller.owner is not None else get_save(session, instance_id)
    )


def branch_state(session: Session, instance_id: int) -> tuple[dict[str, Any], int | None]:
    """(the story state of the instance's current branch, its row id); ({}, None) before its first stored turn."""
    row = branch_story_state(session, instance_id, get_path_ids(session, instance_id))
    return (dict(row.state), row.id) if row is not None else ({}, None)


@contextmanager
def turn_lock(instance_id: int, database_url: str | None) -> Iterator[None]:
    """The instance's turn lock around a correction: none while a turn runs (`InstanceBusy`)."""
    token = acquire_turn_lock(instance_id, settings().turn_lease, database_url)
    try:
        yield
    finally:
        release_turn_lock(instance_id, token, database_url)


def correct_story(
    caller: Caller, instance_id: int, change: Callable[[Session, Save, dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """Apply `change` (session, instance, the branch's story state → the fields to change, or `InvalidInput` and
    nothing changes) as a new story state at the branch's leaf, then to the checkpoint; the new state."""
    with turn_lock(instance_id, caller.database_url):
        with session_scope(caller.database_url) as session:
            save = instance_of(session, caller, instance_id)
            path = get_path_ids(session, instance_id)
            state, _old_id = branch_state(session, instance_id)
            fields = change(session, save, state)  # a bad value is named before anything else
            if not path:
                # the story state is kept with a line of the dialogue tree: before the first one there is none
                raise InvalidInput(f"instance {instance_id} has no lines yet: run a turn first, then correct it")
            state = {**state, **fields, "turn": state.get("turn", 0)}
            state_id = save_story_state(session, instance_id, state["turn"], state, path[-1])
        _sync_checkpoint(instance_id, state, state_id, caller.database_url)
    return state


def _sync_checkpoint(instance_id: int, story: dict[str, Any], state_id: int, database_url: str | None) -> None:
    """The instance's checkpoint gets the corrected story state (as `dialogue._sync_checkpoint` after a rewind);
    no checkpoint yet (no turn ran through the graph): nothing to bring up to date."""
    # the graph (LangGraph, Chroma, the models' code) is loaded by a correction, not by `core show` (issue 29)
    from personalab.graph.runner import turn_config, turn_graph
    from personalab.nodes.context import Context
    from personalab.nodes.state import STORY_FIELDS

    config = turn_config(instance_id)
    with turn_graph(Context(database_url=database_url)) as (graph, _ctx):
        if not graph.get_state(config).values:
            return
        change = {name: story[name] for name in STORY_FIELDS if name in story}
        graph.update_state(config, {**change, "story_state_id": state_id}, as_node="end_turn")
