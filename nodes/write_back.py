"""Write-back (seed 002 对话功能; 事件写入异步执行): the reply's lines go under the user's line and
`save.last_message_id` advances in the same transaction that records the turn and stores the story state it
leaves (turn counter, plot, relationship, core memory: `story_state`). The instance stays locked until the turn
ends (`end_turn`), so the next turn starts from everything this one changed. The turn's event is queued for the
archival store off the reply's critical path, and the turn's lines (host lines, the user's, the reply's) are
added to the instance's dialogue record (`nodes.rules.record`: what was said, never faded), each with its line id.
What fed the reply (`nodes.rules.provenance`) is stored with its lines, in the same transaction.
Those writes are outbox rows inserted in the reply's transaction (`stores.outbox`, issue 14): stored with the reply,
applied after it, never lost to a crash or a store that is down."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from personalab.nodes.context import Context, context_of
from personalab.nodes.rules.consolidation import extract_facts
from personalab.nodes.rules.curation import SCENE_LINES, scene_witnesses
from personalab.nodes.rules.director import turn_event_text
from personalab.nodes.rules.errors import InstanceBusy, TurnLockLost
from personalab.nodes.rules.injection import count_tokens
from personalab.nodes.rules.prompt_assembly import REGIONS
from personalab.nodes.rules.prompt_catalog import catalog_for
from personalab.nodes.rules.provenance import reply_provenance
from personalab.nodes.rules.record import CONTEXT_LINES, record_items
from personalab.nodes.rules.types import Character, ReplySegment
from personalab.nodes.state import TurnState, TurnUpdate, stored_turn, story_fields
from personalab.nodes.story_search import prefetch_next_turn
from personalab.stores.db import session_scope
from personalab.stores.events import event_write
from personalab.stores.failpoints import failpoint
from personalab.stores.history import get_path_ids
from personalab.stores.outbox import apply_soon, queue_writes, review_write, write_row
from personalab.stores.provenance import record_provenance
from personalab.stores.saves import append_lines, get_save
from personalab.stores.turn_tables import TurnRecord
from personalab.stores.turns import (
    branch_story_state,
    holds_turn_lock,
    record_turn,
    release_turn_lock,
    remember_run_reply,
    run_reply,
    save_story_state,
)


def reply_line_rows(segments: list[ReplySegment], character: Character) -> list[dict[str, Any]]:
    """Parsed reply segments as `line` rows spoken by the instance's character."""
    rows = []
    for segment in segments:
        row = {k: v for k, v in segment.items() if v not in (None, "")}
        rows.append(
            {**row, "attribute": "assistant", "role_id": character.get("role_id"), "display_name": character["name"]}
        )
    return rows


def write_back(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    ctx = context_of(runtime)
    instance_id, token = state["instance_id"], state.get("lock_token") or ""
    character = state["character"]
    with session_scope(ctx.database_url) as session:
        run_key = state.get("run_key")
        stored = run_reply(session, instance_id, run_key)
        if stored is not None:
            # a run resumed (its server killed after the reply's commit): the reply is stored, never a second one
            path = get_path_ids(session, instance_id)
            row = branch_story_state(session, instance_id, path[: path.index(stored) + 1] if stored in path else [])
            return {
                "story_state_id": row.id if row is not None else None,
                "debug": {"replayed_run": {"reply_line_id": stored}},
            }
        # never two replies to one parent: the lock must still be ours and the leaf still our user line
        if not holds_turn_lock(session, instance_id, token):
            raise TurnLockLost(
                f"instance {instance_id}: this turn lost its lock (freed by an operator or taken over after its lease);"
                " the reply was not stored"
            )
        if get_save(session, instance_id).last_message_id != state["user_line_id"]:
            raise InstanceBusy(f"instance {instance_id}: the dialogue moved on while this turn ran")
        written = append_lines(
            session, instance_id, reply_line_rows(state["reply_lines"], character), parent_line_id=state["user_line_id"]
        )
        record_turn(
            session,
            TurnRecord(
                save_id=instance_id,
                turn=state["turn"],
                user_line_id=state["user_line_id"],
                reply_line_id=written[-1].id,
                model=state.get("model", ""),
                # issue 26: the turn's cost in tokens (the prompt as assembled, the reply as counted there)
                prompt_tokens=((state.get("debug") or {}).get("prompt") or {}).get("total_tokens"),
                reply_tokens=count_tokens(state.get("reply") or ""),
                # issue 25: the prompt's tokens per region, for the statistics charts (times follow at end_turn)
                figures={"regions": region_tokens((state.get("debug") or {}).get("prompt") or {})},
            ),
        )
        story_state_id = save_story_state(session, instance_id, state["turn"], story_fields(state), written[-1].id)
        # what fed this reply (issue 23): one row with the reply, so it survives restarts and follows its branch
        line_ids = [int(line.id or 0) for line in written]
        record_provenance(session, instance_id, state["turn"], line_ids, reply_provenance(state))
        remember_run_reply(session, instance_id, state.get("run_key"), written[-1].id)
        branch = get_path_ids(session, instance_id)  # root to this reply: the next turn's search is on it
        reply_lines = [
            {"id": line.id, "attribute": line.attribute, "content": line.content, "role_id": line.role_id}
            for line in written
        ]
        # the writes that follow the reply (event, dialogue record, mention marks), durable with it (issue 14)
        queued = turn_writes(state, written[-1].id, reply_lines, consolidate=ctx.consolidation)
        queue_writes(session, queued)
        # and the turn's review, held for the review node, which settles it: if this process dies before the
        # review's commit, the outbox reviews the turn (seed 003's rules) and its memories are not lost
        queue_writes(session, [review_write(stored_turn(state, written[-1].id))])
    failpoint("after_reply")  # fault tests: the reply and its queued writes are stored, nothing applied yet
    apply_soon(ctx.database_url, instance_id)
    prefetched = prefetch_next_turn(
        state, ctx.stall_turns, branch, ctx.database_url
    )  # queued behind the event, so it sees it
    return {
        "story_state_id": story_state_id,
        "debug": {
            "reply_line_ids": [line.id for line in written],
            "director_prefetch": prefetched,
            "mention_check": next((len(w["payload"]["retrieved"]) for w in queued if w["kind"] == "mention"), 0),
            "queued_writes": [w["key"] for w in queued],
        },
    }


def region_tokens(prompt: dict[str, Any]) -> dict[str, int]:
    """The prompt's tokens per region (seed 001's head, middle, retrieved, tail) from the assembly's debug."""
    return {
        name: int(part["tokens"])
        for name in REGIONS
        if isinstance(part := prompt.get(name), dict) and isinstance(part.get("tokens"), int)
    }


def turn_writes(
    state: TurnState, reply_line_id: int | None, reply_lines: list[dict[str, Any]], *, consolidate: bool = False
) -> list[dict[str, Any]]:
    """The outbox rows of a stored reply: its event for the director (id `i<instance>-l<reply line>`), its lines
    for the dialogue record, and the mention check of the memories it was given."""
    instance_id, character = state["instance_id"], state["character"]
    user_name = state.get("user_name") or catalog_for(character.get("language")).default_user_name
    place = f"i{instance_id}-l{reply_line_id}"
    event = event_write(
        turn_event_text(
            state["turn"], user_name, state["message"], character["name"], state["reply"], character.get("language")
        ),
        instance_id=instance_id,
        character_id=character.get("role_id"),
        background_id=character.get("background_id"),
        turn=state["turn"],
        line_id=reply_line_id,  # the event follows its reply's branch
    )
    rows = [write_row("event", instance_id, f"event:{event['id']}", event)]
    items = record_turn_lines(state, reply_lines)
    if items:
        rows.append(write_row("record", instance_id, f"record:{place}", {"items": items}))
    # issue 26: the facts the user told, consolidated with the stored ones off the reply's path (rules)
    if consolidate and extract_facts(state["message"]):
        rows.append(
            write_row(
                "consolidate",
                instance_id,
                f"consolidate:{place}",
                {
                    "message": state["message"],
                    "user_name": user_name,
                    "turn": state["turn"],
                    "line_id": state.get("user_line_id"),
                    "witnesses": next((item.get("witnesses") for item in items), None),
                },
            )
        )
    check = mention_check(state)
    if check is not None:
        rows.append(write_row("mention", instance_id, f"mention:{place}", check))
    return rows


TEMPLATE_WORDS = ("回应",)  # words of the turn memory's own template (`turn_event_text`), in every turn's memory


def mention_check(state: TurnState) -> dict[str, Any] | None:
    """Seed 001 MarkMemoryAsMentioned, once the reply is known: what the outbox needs to give the retrieved
    memories the reply used (`rules.injection.used_memory_ids`) one more mention. Both the check (jieba keywords
    of each memory, ~8 ms for 20) and the mark run off the reply's path on the instance's writer (the next turn's
    retrieval reads them). Memories that were retrieved and not used stay as they were. None when nothing was
    retrieved."""
    retrieved = [
        {"kind": "memory", "id": item["id"], "content": item.get("content") or ""}
        for item in state.get("retrieved") or []
        if item.get("kind") == "memory"
    ]
    if not retrieved:
        return None
    return {
        "retrieved": retrieved,
        "reply": state.get("reply") or "",
        "message": state.get("message") or "",
        "ignore": [
            state["character"]["name"],
            state.get("user_name") or catalog_for(state["character"].get("language")).default_user_name,
            *TEMPLATE_WORDS,
        ],
        "turn": state["turn"],
    }


def record_turn_lines(state: TurnState, reply_lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """This turn's lines for the dialogue record (applied off the reply's path, on the instance's writer, so the
    next turn of the instance reads them): the host's and the user's lines (the end of the path read this turn)
    and the reply's, each with the lines before it as context. A line already recorded (the user's line a
    regenerated reply answers again) is not recorded twice (`stores.outbox`)."""
    history = state.get("history") or []
    count = len(state.get("lines_before") or []) + 1  # the host lines and the user's line, written this turn
    asked = [line for line in history[-count:] if line.get("id") is not None]
    start = max(0, len(history) - count - CONTEXT_LINES)
    # issue 28: never the opening before the first user line (the card's greeting): every prompt carries it in
    # its opening already, and as a record's context it came back from retrieval as a memory
    opening = next((n for n, line in enumerate(history) if line.get("attribute") == "user"), len(history))
    before = history[max(start, opening) : max(0, len(history) - count)]
    character = state["character"]
    items = record_items(
        [*asked, *reply_lines],
        state["turn"],
        character_role_id=character.get("role_id"),
        character_name=character["name"],
        user_name=state.get("user_name"),
        previous_lines=before,
        language=character.get("language"),
    )
    # issue 26, seed 000: who was present — the character, the user, and whoever spoke in the scene lately
    present = scene_witnesses([*history[-(count + SCENE_LINES) :], *asked], character.get("role_id"))
    return [{**item, "witnesses": present} for item in items]


def abort_turn(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    """After a model failure: keep the user's line, store no reply, record the error, free the instance."""
    ctx = context_of(runtime)
    instance_id, token = state["instance_id"], state.get("lock_token") or ""
    with session_scope(ctx.database_url) as session:
        record_turn(
            session,
            TurnRecord(
                save_id=instance_id,
                turn=state["turn"],
                user_line_id=state.get("user_line_id"),
                status="error",
                error=state.get("error"),
                model=state.get("model", ""),
            ),
        )
    release_turn_lock(instance_id, token, ctx.database_url)
    # a turn without a reply does not count: the maintenance schedule and the stall counter stay put
    return {"lock_token": None, "turn": state["turn"] - 1}
