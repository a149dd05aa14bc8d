"""Archival memory: the character's persona changes as searchable memories (seed 002 需求2 三层记忆架构, Archival
Memory = 历史人格变化事件, written only when the character's state changes, asynchronously).

What counts as a change, between the core memory before and after an accepted maintenance rewrite
(`persona_changes`):
- each new `recent_changes` entry (one the old core did not have), at the turn the entry names (never later
  than the rewrite's turn): the model's own account of the character's growth;
- a value or a goal that appears or disappears;
- a binary opposition (by its two poles, in either order) or a ternary tension (by its three poles) that appears
  or disappears.
Not counted: a shifted `balance` or `weights` (the scripted model drifts them by 0.05 at every rewrite; a real
change of heart is the model's `recent_changes` entry), new traits, identity or speech-style rewording — they
stay in the core memory's versions.

Each change becomes one memory (`persona_change_memory`): type ``persona_change`` (seed 004 kind ``trait``), in
the archive layer (seed 002: archival; it does not decay), its text in the instance's language, on the line of the
turn that made it (seed 000: a rewind leaves it on its branch), witnessed by the character alone. Its `notes`
hold the core-memory version that made it and a key of (turn, line, text): the store writes a key once
(`stores.persona_changes`), so a replayed or repeated maintenance adds nothing.

Rollback (issue 23's `core_memory rollback`): history is never deleted. A rollback to version M closes
(`valid_to_turn`, the validity interval of issue 26's consolidation) the changes archived by versions that are
not in M's lineage (`lineage`), and reopens those of M's lineage that an earlier rollback closed; a closed
change is presented only for a question about the past, marked as no longer so.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from personalab.nodes.rules.curation import character_identity
from personalab.nodes.rules.memory_layers import Layer, MemoryType
from personalab.nodes.rules.prompt_catalog import catalog_for

PERSONA_CHANGE_TYPE = MemoryType.PERSONA_CHANGE.value
PERSONA_CHANGE_TAG = "persona_change"
PERSONA_CHANGE_IMPORTANCE = 0.8  # over the archive's floor (0.6): it stays
_NOTES = "persona change v{version} key {key}"
_NOTES_RE = re.compile(r"^persona change v(\d+) key ([0-9a-f]+)$")
_ROLLBACK_RE = re.compile(r"^rollback to version (\d+)$")


@dataclass(frozen=True)
class PersonaChange:
    """One change of the persona: the turn it happened and what changed (in the instance's language)."""

    turn: int
    text: str


def _strings(core: Mapping[str, Any], key: str) -> list[str]:
    value = core.get(key)
    return [" ".join(item.split()) for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _entries(core: Mapping[str, Any]) -> list[tuple[int, str]]:
    out = []
    for item in core.get("recent_changes") or []:
        if isinstance(item, Mapping) and isinstance(item.get("change"), str) and isinstance(item.get("turn"), int):
            out.append((int(item["turn"]), " ".join(item["change"].split())))
    return out


def _oppositions(core: Mapping[str, Any]) -> dict[frozenset[str], tuple[str, str]]:
    out: dict[frozenset[str], tuple[str, str]] = {}
    for item in core.get("binary_oppositions") or []:
        if isinstance(item, Mapping) and isinstance(item.get("a"), str) and isinstance(item.get("b"), str):
            a, b = item["a"].strip(), item["b"].strip()
            out.setdefault(frozenset((a, b)), (a, b))
    return out


def _tensions(core: Mapping[str, Any]) -> dict[frozenset[str], tuple[str, ...]]:
    out: dict[frozenset[str], tuple[str, ...]] = {}
    for item in core.get("ternary_tensions") or []:
        poles = item.get("poles") if isinstance(item, Mapping) else None
        if isinstance(poles, list) and all(isinstance(p, str) for p in poles):
            names = tuple(p.strip() for p in poles)
            out.setdefault(frozenset(names), names)
    return out


def persona_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], turn: int, language: str | None = None
) -> list[PersonaChange]:
    """The changes from core memory `old` to `new` made by the rewrite at `turn` (module docstring), in order:
    the new `recent_changes` entries, then values, goals, oppositions and tensions gained or lost."""
    words = catalog_for(language).persona_change
    changes: list[PersonaChange] = []
    before = set(_entries(old))
    for entry_turn, text in _entries(new):
        if (entry_turn, text) not in before and text:
            changes.append(PersonaChange(min(max(entry_turn, 0), turn), text))
    for key, added, removed in (("values", "value_added", "value_removed"), ("goals", "goal_added", "goal_removed")):
        was, now = _strings(old, key), _strings(new, key)
        changes += [PersonaChange(turn, words[added].format(item=item)) for item in now if item and item not in was]
        changes += [PersonaChange(turn, words[removed].format(item=item)) for item in was if item and item not in now]
    was_o, now_o = _oppositions(old), _oppositions(new)
    for poles, (a, b) in now_o.items():
        if poles not in was_o:
            changes.append(PersonaChange(turn, words["opposition_added"].format(a=a, b=b)))
    for poles, (a, b) in was_o.items():
        if poles not in now_o:
            changes.append(PersonaChange(turn, words["opposition_removed"].format(a=a, b=b)))
    was_t, now_t = _tensions(old), _tensions(new)
    joined = words["separator"].join
    for poles, names in now_t.items():
        if poles not in was_t:
            changes.append(PersonaChange(turn, words["tension_added"].format(poles=joined(names))))
    for poles, names in was_t.items():
        if poles not in now_t:
            changes.append(PersonaChange(turn, words["tension_removed"].format(poles=joined(names))))
    return changes


def change_key(change: PersonaChange, line_id: int | None) -> str:
    """The key a change is archived once under: its turn, its line and its text."""
    raw = f"{change.turn}|{'' if line_id is None else line_id}|{change.text}"
    return hashlib.sha1(raw.encode("utf-8")).hexdigest()[:16]


def persona_change_memory(
    change: PersonaChange,
    *,
    version: int,
    line_id: int | None,
    role_id: int | None,
    language: str | None = None,
) -> dict[str, Any]:
    """The change as a new memory item (for `stores.memory.MemoryStore.add_memories`), see the module docstring."""
    words = catalog_for(language).persona_change
    return {
        "content": words["line"].format(turn=change.turn, text=change.text),
        "type": PERSONA_CHANGE_TYPE,
        "layer": Layer.ARCHIVE.value,
        "importance": PERSONA_CHANGE_IMPORTANCE,
        "tags": [PERSONA_CHANGE_TAG],
        "turn": change.turn,
        "line_id": line_id,
        "witnesses": [character_identity(role_id)],
        "valid_from_turn": change.turn,
        "notes": _NOTES.format(version=version, key=change_key(change, line_id)),
    }


def archived_version(notes: str) -> int | None:
    """The core-memory version that archived a persona change, from its `notes` (None: not written here)."""
    match = _NOTES_RE.match(notes.strip())
    return int(match.group(1)) if match else None


def archived_key(notes: str) -> str | None:
    """The key a persona change was archived under, from its `notes`."""
    match = _NOTES_RE.match(notes.strip())
    return match.group(2) if match else None


def lineage(versions: Sequence[Mapping[str, Any]], target: int) -> tuple[set[int], int]:
    """(the kept versions whose changes the core memory of version `target` carries, the oldest kept version).

    A maintenance version carries its own changes and those of the version before it; a rollback version those of
    the version it restored. The walk stops at a version that is no longer kept: what is older than the oldest
    kept version is left as it is by a rollback."""
    by_number = {int(item["version"]): item for item in versions}
    oldest = min(by_number) if by_number else 0
    carried: set[int] = set()
    number: int | None = target
    while number is not None and number in by_number and number not in carried:
        carried.add(number)
        restored = _ROLLBACK_RE.match(str(by_number[number].get("reason") or ""))
        number = int(restored.group(1)) if restored else number - 1
    return carried, oldest
