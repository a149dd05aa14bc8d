"""The dialogue record (issue 11: nothing said is ever unreachable), as pure rules.

Seed 001's layers, decay and fading apply to the curated memories (what the character keeps in mind). The
record is what happened: every line of an instance's dialogue — the user's, the host's (narration, other
characters) and the character's reply — kept as one memory of type ``record`` (layer ``record``) that the
layer flow never loads, moves or deletes (`nodes.rules.memory_layers`). It lives in the same store and index
as the curated memories, so the daily retrieval searches both through one hybrid retrieval and scoring; a
retrieved record item says ``type: record`` and its ``line_id``, so a caller can tell it from a curated
memory (e.g. to leave out lines still inside the recent-dialogue window).

Each entry's content is ``speaker：text`` (``speaker: text`` in an English instance, issue 28); the `CONTEXT_LINES` lines said just before it (this turn's or the
previous turn's last lines) are its `context`, stored and embedded in front of it and weighed half in keyword
search, as for LoCoMo's dialogue memories (`nodes.rules.dialogue_memory`, where two lines were measured best). Its importance is the fact estimate of the line
(`nodes.rules.importance`, at least `MIN_RECORD_IMPORTANCE`), so a line that tells a fact ranks above small talk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from personalab.nodes.rules.dialogue_memory import CONTEXT_LINES
from personalab.nodes.rules.importance import estimate_importance
from personalab.nodes.rules.memory_layers import RECORD_LAYER, MemoryType
from personalab.nodes.rules.prompt_catalog import ZH, catalog_for

NARRATOR = ZH.narrator_name
USER = ZH.default_user_name
CONTEXT_CHARS = 300  # the previous lines as context: enough to say what a short answer answers
MIN_RECORD_IMPORTANCE = 0.2  # small talk: below a fact, not nothing (what was said may still be asked about)


def speaker_of(
    line: Mapping[str, Any],
    *,
    character_role_id: int | None,
    character_name: str,
    user_name: str | None,
    language: str | None = None,
) -> str:
    """Who said a dialogue line (a `line` row as a dict): the user (by the turn's user name), the instance's
    character, another character or narration (their display name, else 旁白 / Narrator in the instance's
    `language`)."""
    attribute = line.get("attribute")
    name = (line.get("display_name") or "").strip()
    catalog = catalog_for(language)
    if attribute == "user":
        return name or (user_name or "").strip() or catalog.default_user_name
    if attribute == "assistant" and character_role_id is not None and line.get("role_id") == character_role_id:
        return character_name
    if attribute == "assistant" and character_role_id is None and not name and not line.get("script_role_id"):
        return character_name
    return name or str(line.get("script_role_id") or "") or catalog.narrator_name


def record_text(speaker: str, text: str, language: str | None = None) -> str:
    """A record entry's content: ``speaker：text`` (full-width colon, as the turn events write it), ``speaker:
    text`` in an English instance."""
    return f"{speaker}{catalog_for(language).speaker_colon}{text.strip()}"


def record_items(
    lines: Sequence[Mapping[str, Any]],
    turn: int,
    *,
    character_role_id: int | None,
    character_name: str,
    user_name: str | None = None,
    previous_lines: Sequence[Mapping[str, Any]] = (),
    language: str | None = None,
) -> list[dict[str, Any]]:
    """Memory items (for `stores.memory.MemoryStore.add_memories`) recording `lines` — this turn's lines in
    order, each a `line` row as a dict with its ``id`` — at `turn`. `previous_lines`: the lines before the first
    one, oldest first (the last `CONTEXT_LINES` of them are its context). Lines without text are left out.
    `language`: the instance's (issue 28), for the speakers' fallback names and the colon."""
    items: list[dict[str, Any]] = []
    before: list[str] = []
    for previous in previous_lines:
        if str(previous.get("content") or "").strip():
            who = speaker_of(
                previous,
                character_role_id=character_role_id,
                character_name=character_name,
                user_name=user_name,
                language=language,
            )
            before.append(record_text(who, str(previous["content"]), language))
    for line in lines:
        text = str(line.get("content") or "").strip()
        if not text:
            continue
        speaker = speaker_of(
            line,
            character_role_id=character_role_id,
            character_name=character_name,
            user_name=user_name,
            language=language,
        )
        content = record_text(speaker, text, language)
        items.append(
            {
                "content": content,
                "context": "\n".join(before[-CONTEXT_LINES:])[-CONTEXT_CHARS:],
                "type": MemoryType.RECORD.value,
                "layer": RECORD_LAYER,
                "importance": max(MIN_RECORD_IMPORTANCE, estimate_importance(text).importance),
                "turn": turn,
                "line_id": line.get("id"),
                "related_character": speaker,
            }
        )
        before.append(content)
    return items
