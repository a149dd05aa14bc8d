"""Issue 25 "try it": what a turn's retrieval would find and inject for a message now, without playing the turn.

It reads what the turn's first node reads (the current branch, its recall window, the story state the turn would
start from, the character) and runs the turn's own gathering (`nodes.rag_retrieve.gather`: memories, world book,
knowledge, the retrieved region's budget) over it, then shapes the result as a reply's provenance record
(`nodes.rules.provenance.reply_provenance`), so the page shows it exactly as "why this reply" shows a stored reply.
Nothing is written: no line, no lock, no mention mark, no story state. Like the turn, it first waits for the
instance's queued writes (read your writes), so a memory of the last reply is already searchable. The query is the message itself: the turn's
query rewrite is a model call and is not run here (the record says so).
"""

from __future__ import annotations

import time
from typing import Any, cast

from personalab.nodes.context import Context
from personalab.nodes.history_fetch import character_of, read_recall_window, seconds_since, window_turns
from personalab.nodes.rag_retrieve import gather, prepare_worldbook
from personalab.nodes.rules.prompt_catalog import catalog_for
from personalab.nodes.rules.provenance import reply_provenance
from personalab.nodes.rules.worldbook import elapsed_seconds
from personalab.nodes.state import TurnState
from personalab.stores.background import memories_read, wait_for_writes
from personalab.stores.db import session_scope
from personalab.stores.history import get_path_ids
from personalab.stores.memory import MemoryStore
from personalab.stores.saves import get_save
from personalab.stores.tables import Background, Line, Role
from personalab.stores.turns import branch_story_state, last_turn_time
from personalab.stores.vectors import chroma_path

NO_REWRITE = "not run"  # the status "try it" records for the query rewrite (a model call it does not make)


def turn_state_for(instance_id: int, message: str, database_url: str | None, ctx: Context) -> dict[str, Any]:
    """The state the turn's retrieval would see for `message` on the current branch (read only)."""
    with session_scope(database_url) as session:
        save = get_save(session, instance_id)
        role = session.get(Role, save.role_id) if save.role_id else None
        name = role.name if role else catalog_for(save.language).default_character_name  # issue 28
        path = get_path_ids(session, instance_id)
        row = branch_story_state(session, instance_id, path)
        kept: dict[str, Any] = dict(row.state) if row is not None else {}
        _window, history = read_recall_window(session, path, window_turns(ctx), save.role_id, name)
        background = session.get(Background, save.background_id) if save.background_id else None
        previous = last_turn_time(session, instance_id)
    # the user's line as the turn would store it (never stored here): the last line of the history
    line = Line(save_id=instance_id, attribute="user", content=message).model_dump(exclude={"created_at"})
    line["parent_id"] = path[-1] if path else None
    character = character_of(role, name, save.background_id, background.world_setting if background else "")
    return {
        "instance_id": instance_id,
        "turn": int(kept.get("turn", 0)) + 1,
        "character": character,
        "history": [*history, line],
        "message": message,
        "query": message,
        "user_name": None,
        "gap_seconds": elapsed_seconds(seconds_since(previous), None),
        "path_lines": len(path) + 1,
        "worldbook_fired": dict(kept.get("worldbook_fired") or {}),
        "recall_floor_turn": int(kept.get("recall_floor_turn") or 0),  # the window the turn's prompt would keep
    }


def preview_retrieval(instance_id: int, message: str, database_url: str | None) -> dict[str, Any]:
    """The provenance-shaped record of what the turn's retrieval would put into the prompt for `message`, with
    `ms`: how long the gathering took."""
    ctx = Context(database_url=database_url) if database_url else Context()
    # read your writes, as the turn's retrieval does: the instance's memories queued after its last reply are in
    wait_for_writes(instance_id)
    MemoryStore(db_url=database_url, chroma_path=chroma_path()).embed_pending()  # its vectors too, as the turn
    state = turn_state_for(instance_id, message, database_url, ctx)
    started = time.perf_counter()
    with memories_read(instance_id):  # one state of the memories, as the turn reads them
        book, _ms = prepare_worldbook(instance_id, ctx)  # as the turn does: the process's prepared book when current
        found = gather(cast(TurnState, state), ctx, book)
    ms = (time.perf_counter() - started) * 1000
    memories = found["memories"]
    plan = found["injection"].plan
    record = reply_provenance(
        {
            **state,
            "retrieved": memories["items"],
            "debug": {
                "retrieval": {
                    "scene": memories["scene"],
                    "dropped": memories["dropped"],
                    "in_recent_dialogue": memories["in_recent_dialogue"],
                    "injection": plan.debug(),
                    "worldbook_fired": found["worldbook_fired"],
                    "knowledge": found["knowledge"],
                },
                "query_rewrite": {"status": NO_REWRITE},
            },
        }
    )
    record["weights"] = memories.get("weights") or {}
    record["injected"] = {position: text for position, text in plan.texts.items() if text}
    record["ms"] = round(ms, 2)
    return record
