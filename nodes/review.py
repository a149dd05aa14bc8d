"""The review node (seed 003 与 CharacterRuntime 集成: after every turn), once the reply is stored: review the turn
with `rules.review.pipeline` (rule or LLM mode, `Context.review_mode`), then apply what `rules.review.effects`
plans — the relationship in the graph state (and, issue 26, the character's relation with each other participant
who spoke in the turn: `rules.review.relations`, judged by the model too in LLM mode), the turn's memories, a plot
node, a pending world-book suggestion; the memories, the plot node and the suggestion carry the turn's reply line
(its branch). A failing review is logged and reported in `debug.review`; the turn, already stored, is never lost.
The turn ends after this node in the `end_turn` node, not here."""

from __future__ import annotations

import logging
from typing import Any, cast

from langgraph.runtime import Runtime
from personalab.nodes.context import Context, context_of
from personalab.nodes.llm import get_chat_model
from personalab.nodes.rules.review.effects import relationship_event
from personalab.nodes.rules.review.pipeline import EventBus, get_review_pipeline
from personalab.nodes.rules.review.relations import apply_relations, host_lines_of_turn, turn_participants
from personalab.nodes.rules.review.turn import review_outcome
from personalab.nodes.rules.types import Relation
from personalab.nodes.state import TurnState, TurnUpdate, stored_turn
from personalab.stores.db import session_scope, store_unavailable
from personalab.stores.outbox import apply_soon, review_failed, store_turn_review

log = logging.getLogger(__name__)
TURN_EVENT_BUS = EventBus()  # host code in the same process subscribes here to every turn's review events


def review(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    return review_turn(state, context_of(runtime))


def review_turn(state: TurnState, ctx: Context) -> TurnUpdate:
    turn = state["turn"]
    leaf = ((state.get("debug") or {}).get("reply_line_ids") or [state.get("user_line_id")])[-1]
    try:
        pipeline = get_review_pipeline(
            TURN_EVENT_BUS,
            mode=ctx.review_mode,
            llm=get_chat_model("review", until=state.get("deadline_at")) if ctx.review_mode == "llm" else None,
            language=state["character"].get("language"),  # issue 28
        )
        reviewed = stored_turn(state, leaf)
        try:
            participants = turn_participants_of(state)
        except Exception as exc:  # noqa: BLE001 - an odd host line must not cost the turn its review
            log.error("participants not found on instance %s turn %s: %s", state.get("instance_id"), turn, exc)
            participants = {}
        output, plan, memories = review_outcome(pipeline, reviewed, participants)
        with session_scope(ctx.database_url) as session:
            # the plot node, the suggestion and the memories (an outbox row, applied on the instance's writer off
            # the reply's path, seed 002 事件写入异步执行) in one transaction that also settles the turn's queued
            # review (issue 14): after a crash before this commit, the outbox reviews the turn instead
            saved = store_turn_review(session, reviewed, plan, memories, settle=True)
            plot_node_id = saved["plot_node"].id if saved["plot_node"] else None
            suggestion_id = saved["worldbook_suggestion"].id if saved["worldbook_suggestion"] else None
        apply_soon(ctx.database_url, state["instance_id"])
    except Exception as exc:  # noqa: BLE001 - the turn is stored; a review problem must not lose it
        # the turn's queued review (stored with the reply) is the outbox's now: the rules review the turn
        if leaf is not None:
            review_failed(ctx.database_url, state["instance_id"], leaf)
        # a database that is down fails the turn at its end anyway: that error is the one line, not this
        level = logging.DEBUG if store_unavailable(exc, ctx.database_url) is not None else logging.ERROR
        log.log(level, "review failed on instance %s turn %s: %s", state.get("instance_id"), turn, exc)
        return {"debug": {"review": {"error": f"{type(exc).__name__}: {exc}"}}}
    change = relationship_event(turn, output.relationship_delta, state["character"].get("language"))
    relation_changes: dict[str, Any]
    try:
        updated, relation_changes = apply_relations(
            state.get("relations"), participants, state["turn"], pipeline.config, output.participant_deltas
        )
        relations = cast(dict[str, Relation], updated)  # the records `apply_relations` builds are `Relation`s
    except Exception as exc:  # noqa: BLE001 - the turn and its review are stored: the relations stay as they were
        log.error("relations not updated on instance %s turn %s: %s", state.get("instance_id"), turn, exc)
        relations, relation_changes = dict(state.get("relations") or {}), {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "relationship": plan["relationship"],
        "relations": relations,
        "state_events": [*state.get("state_events", []), *([change] if change else [])],
        "review": output.to_dict(),
        "debug": {
            "review": {
                "skipped": output.skipped,
                "memory_writes": [{"type": m["type"], "importance": m["importance"]} for m in memories],
                "plot_node_id": plot_node_id,
                "worldbook_suggestion_id": suggestion_id,
                "reasons": output.reasons,
                "relations": relation_changes,
            }
        },
    }


def turn_participants_of(state: TurnState) -> dict[str, dict[str, str]]:
    """Issue 26: the scene's other participants speaking in the turn's host lines (`rules.review.relations`), each
    with what it said or did — the review (rules, or the model in LLM mode) moves the character's relation to
    each."""
    character = state["character"]
    lines = host_lines_of_turn(
        state.get("history") or [],
        len(state.get("lines_before") or []),
        state.get("reply_to") is not None,
        character.get("role_id"),
    )
    return turn_participants(lines, character.get("role_id"), character["name"])
