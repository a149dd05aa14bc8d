"""The director's fallback (seed 002 需求1 兜底机制: RAG拉回主线), as pure functions.

- `is_stalled`: the seed's test `current_turn - last_progress_update_turn >= 3`, as written. With
  `current_turn` = the turn being answered and `last_progress_turn` = the last turn whose reply carried a usable
  marker (0 before any), a check before generating turn t fires when replies last+1 .. t-1 had none.
- `fallback_query`: `故事大纲第{i}点：{content}` of the current outline point.
- the two layers: at most 15 events of the current instance (current facts, high weight) and at most 5 of
  other instances (experience only, low weight), titled as in the seed; the system instruction
  (prompts.ROLE_PLAY_SYSTEM) tells the model the second layer is reference, not fact.
  An empty layer is left out (no title over nothing); both empty → no block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from personalab.nodes.rules import prompts, prompts_en
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.plot import check_plot_state
from personalab.nodes.rules.prompt_assembly import RetrievedBlock
from personalab.nodes.rules.request_catalog import requests_for

STALL_THRESHOLD = 3
CURRENT_EVENTS_LIMIT = 15
OTHER_EVENTS_LIMIT = 5
CURRENT_TITLE = prompts.DIRECTOR_CURRENT_TITLE
REFERENCE_TITLE = prompts.DIRECTOR_REFERENCE_TITLE


def is_stalled(current_turn: int, last_progress_turn: int, threshold: int = STALL_THRESHOLD) -> bool:
    """True when the model has gone `threshold` turns without a progress marker (seed: >= 3)."""
    for name, value in (("current_turn", current_turn), ("last_progress_turn", last_progress_turn)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInput(f"is_stalled: {name} must be a non-negative integer, got {value!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
        raise InvalidInput(f"is_stalled: threshold must be a positive integer, got {threshold!r}")
    return current_turn - last_progress_turn >= threshold


def fallback_query(plot_state: Mapping[str, Any], language: str | None = None) -> str:
    """The retrieval query of the current outline point (seed: 故事大纲第{current_plot_index}点：{outline_content}),
    in the instance's `language` (issue 28; None: Chinese)."""
    outline = check_plot_state(plot_state)
    index = plot_state["current_plot_index"]
    return requests_for(language).fallback_query.format(index=index, content=outline[index - 1]["content"])


def _event_text(event: Any) -> str:
    if isinstance(event, str):
        text = event
    elif isinstance(event, Mapping) and isinstance(event.get("text", event.get("content")), str):
        text = event.get("text", event.get("content"))
    else:
        raise InvalidInput(f"director event: expected a string or a dict with 'text', got {event!r:.80}")
    return " ".join(text.split())


def director_blocks(current_events: Sequence[Any], other_events: Sequence[Any]) -> list[RetrievedBlock]:
    """The two layers as blocks of the retrieved region (events sorted best first; cut to 15 and 5)."""
    current = [t for t in map(_event_text, current_events) if t][:CURRENT_EVENTS_LIMIT]
    others = [t for t in map(_event_text, other_events) if t][:OTHER_EVENTS_LIMIT]
    blocks = []
    if current:
        blocks.append(RetrievedBlock(CURRENT_TITLE, current))
    if others:
        blocks.append(RetrievedBlock(REFERENCE_TITLE, others))
    return blocks


def format_director_blocks(current_events: Sequence[Any], other_events: Sequence[Any]) -> str:
    """The seed's `prompt_inject` text: the titled, numbered layers, '' when both are empty."""
    return "\n\n".join(
        block.title + "\n" + "\n".join(f"{n}. {text}" for n, text in enumerate(block.items, start=1))
        for block in director_blocks(current_events, other_events)
    )


EVENT_EXCERPT = 80


def _excerpt(text: str, limit: int = EVENT_EXCERPT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def turn_event_text(
    turn: int, user_name: str, message: str, character_name: str, reply: str, language: str | None = None
) -> str:
    """The turn's event for archival memory, in short: who said what (seed 002 Archival Memory), in the
    instance's `language` (issue 28)."""
    if requests_for(language).language == "en":
        return prompts_en.TURN_EVENT.format(
            turn=turn, user=user_name, message=_excerpt(message), character=character_name, reply=_excerpt(reply)
        )
    return f"第{turn}轮：{user_name}说「{_excerpt(message)}」；{character_name}回应「{_excerpt(reply)}」"
