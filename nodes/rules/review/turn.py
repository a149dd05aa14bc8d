"""A stored turn's review, from data alone (seed 003 与 CharacterRuntime 集成: a review after every turn).

The reply is stored before the review runs; a process killed in between (issue 14: kill -9 after the reply) would
lose the review's memories. So the reply's transaction also queues the review as a durable write (`StoredTurn`, the
review's whole input), which the review node settles when it stores its effects; if the process died first, the
outbox applies it later with the rules (no model call at recovery). Both paths run `review_outcome` on the same
input, so a recovered review stores what the node would have in rule mode. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from personalab.nodes.rules.director import turn_event_text
from personalab.nodes.rules.review.effects import plan_review_effects, turn_memories
from personalab.nodes.rules.review.pipeline import ReviewPipeline
from personalab.nodes.rules.review.types import ReviewInput, ReviewOutput
from pydantic import BaseModel, ConfigDict


class StoredTurn(BaseModel):
    """What the review of one stored turn needs (the payload of its queued `review` write)."""

    model_config = ConfigDict(extra="forbid")

    instance_id: int
    character_id: int
    character_name: str
    user_name: str
    message: str
    reply: str
    selected_choice: dict[str, Any] | None = None  # seed 003 selected_choice: {"level", the host's other keys}
    gap: str = "none"
    turn: int
    current_plot_index: int
    relationship: dict[str, Any] | None = None
    # the reply's last line: the review's memories, plot node and suggestion belong to its branch
    line_id: int | None = None
    # the instance's language (issue 28): the memories' and suggestions' texts in it; None (a review queued
    # before issue 28) is Chinese
    language: str | None = None


def review_key(instance_id: int, line_id: int | None) -> str:
    """The idempotency key of a turn's queued review: one per reply line."""
    return f"review:i{instance_id}-l{line_id}"


def review_outcome(
    pipeline: ReviewPipeline, turn: StoredTurn, participants: Mapping[str, Mapping[str, str]] | None = None
) -> tuple[ReviewOutput, dict[str, Any], list[dict[str, Any]]]:
    """(the review's output, its planned effects, the turn's memories with their line) of `turn`. `participants`:
    the turn's other speakers (`review.relations.turn_participants`), shown to an LLM review so that it can judge
    the character's relation to each (issue 26)."""
    context: dict[str, Any] = {"turn": turn.turn, "current_plot_index": turn.current_plot_index}
    if participants:
        context["participants"] = {identity: dict(seen) for identity, seen in participants.items()}
    output = pipeline.run(
        ReviewInput(
            conversation_id=turn.instance_id,
            character_id=turn.character_id,
            user_id=turn.user_name,
            user_message=turn.message,
            assistant_message=turn.reply,
            selected_choice=turn.selected_choice,
            turn_context=context,
            real_time_context={"gap": turn.gap},
        )
    )
    plan = plan_review_effects(
        output,
        relationship=turn.relationship,
        user_message=turn.message,
        assistant_reply=turn.reply,
        choice=turn.selected_choice,
        turn=turn.turn,
        character_name=turn.character_name,
        user_name=turn.user_name,
        language=turn.language,
    )
    event = turn_event_text(turn.turn, turn.user_name, turn.message, turn.character_name, turn.reply, turn.language)
    # each memory carries the line it came from (the reply's last), so a branch left behind keeps its own
    memories = [
        {"line_id": turn.line_id, **item} for item in turn_memories(output, plan, event, turn.turn, turn.message)
    ]
    return output, dict(plan), memories
