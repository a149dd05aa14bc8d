"""The review node (seed 003 与 CharacterRuntime 集成: after every turn), once the reply is stored: review the turn
with `rules.review.pipeline` (rule or LLM mode, `Context.review_mode`), then apply what `rules.review.effects`
plans — the relationship in the graph state, the turn's memories, a plot node, a pending world-book
suggestion. A failing review is logged and reported in `debug.review`; the turn, already stored, is never
lost. The turn ends after this node in the `end_turn` node, not here."""

from __future__ import annotations

import logging
from typing import Any

from langgraph.runtime import Runtime
from personalab.nodes.context import Context, context_of
from personalab.nodes.llm import get_chat_model
from personalab.nodes.rules.director import turn_event_text
from personalab.nodes.rules.review.effects import plan_review_effects, relationship_event, turn_memories
from personalab.nodes.rules.review.pipeline import EventBus, get_review_pipeline
from personalab.nodes.rules.review.types import ReviewInput
from personalab.nodes.state import TurnState, TurnUpdate
from personalab.stores.background import run_in_background
from personalab.stores.db import session_scope
from personalab.stores.memory import MemoryStore
from personalab.stores.review import save_review_effects
from personalab.stores.vectors import chroma_path

log = logging.getLogger(__name__)
TURN_EVENT_BUS = EventBus()  # host code in the same process subscribes here to every turn's review events


def remember(store: MemoryStore, instance_id: int, memories: list[dict[str, Any]]) -> None:
    """Write the turn's memories (the write updates the process's kept keyword index), then make sure the index
    is current now, between turns (built here if this process had none), not on the next reply's path."""
    store.add_memories(instance_id, memories)
    store.index(instance_id)


def review(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    return review_turn(state, context_of(runtime))


def review_turn(state: TurnState, ctx: Context) -> TurnUpdate:
    character = state["character"]
    user_name = state.get("user_name") or "用户"
    turn = state["turn"]
    try:
        pipeline = get_review_pipeline(
            TURN_EVENT_BUS,
            mode=ctx.review_mode,
            llm=get_chat_model("review", until=state.get("deadline_at")) if ctx.review_mode == "llm" else None,
        )
        output = pipeline.run(
            ReviewInput(
                conversation_id=state["instance_id"],
                character_id=character.get("role_id") or 0,
                user_id=user_name,
                user_message=state["message"],
                assistant_message=state["reply"],
                selected_choice=state.get("selected_choice"),
                turn_context={"turn": turn, "current_plot_index": state["plot_state"]["current_plot_index"]},
                real_time_context={"gap": state.get("gap") or "none"},
            )
        )
        plan = plan_review_effects(
            output,
            relationship=state.get("relationship"),
            user_message=state["message"],
            assistant_reply=state["reply"],
            choice=state.get("selected_choice"),
            turn=turn,
            character_name=character["name"],
            user_name=user_name,
        )
        event = turn_event_text(turn, user_name, state["message"], character["name"], state["reply"])
        # each memory carries the line it came from (the reply's last), so a branch left behind keeps its own
        leaf = ((state.get("debug") or {}).get("reply_line_ids") or [state.get("user_line_id")])[-1]
        memories = [{"line_id": leaf, **item} for item in turn_memories(output, plan, event, turn, state["message"])]
        # off the reply's path (seed 002: 事件写入异步执行); the store is resolved now, where the turn runs
        store = MemoryStore(db_url=ctx.database_url, chroma_path=chroma_path())
        run_in_background(remember, store, state["instance_id"], memories, after_turn_of=state["instance_id"])
        with session_scope(ctx.database_url) as session:
            saved = save_review_effects(session, state["instance_id"], plan)
            plot_node_id = saved["plot_node"].id if saved["plot_node"] else None
            suggestion_id = saved["worldbook_suggestion"].id if saved["worldbook_suggestion"] else None
    except Exception as exc:  # noqa: BLE001 - the turn is stored; a review problem must not lose it
        log.error("review failed on instance %s turn %s: %s", state.get("instance_id"), turn, exc)
        return {"debug": {"review": {"error": f"{type(exc).__name__}: {exc}"}}}
    change = relationship_event(turn, output.relationship_delta)
    return {
        "relationship": plan["relationship"],
        "state_events": [*state.get("state_events", []), *([change] if change else [])],
        "review": output.to_dict(),
        "debug": {
            "review": {
                "skipped": output.skipped,
                "memory_writes": [{"type": m["type"], "importance": m["importance"]} for m in memories],
                "plot_node_id": plot_node_id,
                "worldbook_suggestion_id": suggestion_id,
                "reasons": output.reasons,
            }
        },
    }
