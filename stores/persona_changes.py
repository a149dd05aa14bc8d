"""The archived persona changes of an instance (seed 002 需求2 Archival Memory, 历史人格变化事件; the rules in
`nodes.rules.persona_changes`): written once per key off the reply's path, closed and reopened by a core-memory
rollback in the rollback's own transaction."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from personalab.nodes.rules.persona_changes import PERSONA_CHANGE_TYPE, archived_key, archived_version
from personalab.stores.background import writes_visible
from personalab.stores.db import session_scope
from personalab.stores.memory import MemoryStore
from personalab.stores.memory_tables import MemoryEntry
from personalab.stores.tables import utcnow
from sqlmodel import Session, col, select


def archived_keys(session: Session, instance_id: int) -> set[str]:
    """The keys of the persona changes the instance has archived (on every branch: a key names its line)."""
    notes = session.exec(
        select(MemoryEntry.notes).where(MemoryEntry.instance_id == instance_id, MemoryEntry.type == PERSONA_CHANGE_TYPE)
    ).all()
    return {key for key in (archived_key(note or "") for note in notes) if key is not None}


def archive_persona_changes(
    store: MemoryStore, instance_id: int, items: Sequence[Mapping[str, Any]], character_id: int | None = None
) -> list[int]:
    """Store the persona-change memories `items` (`nodes.rules.persona_changes.persona_change_memory`) whose key
    the instance has not archived yet, in one transaction; the ids of those stored. Run on the instance's
    background writer (one at a time per instance), so two maintenances never write the same key. As the outbox's
    drain does (issue 29), the rows and their keywords first: the instance's next retrieval reads them at once
    (`writes_visible`; it scores their vectors itself), then their vectors."""
    with session_scope(store._url()) as session:
        done = archived_keys(session, instance_id)
    fresh: list[Mapping[str, Any]] = []
    for item in items:
        key = archived_key(str(item.get("notes") or ""))
        if key is not None and key not in done:
            done.add(key)  # the same change twice in one batch is one memory
            fresh.append(item)
    if not fresh:
        return []
    # lazily: showing or rolling back a core memory imports this module and must not load the embeddings (issue 29)
    from personalab.stores.embeddings import embed_stored_texts

    entries = store.add_memories(instance_id, fresh, character_id=character_id, vectors_later=True)
    writes_visible()
    store.put_vectors(instance_id, entries, embed_stored_texts([entry.content for entry in entries]))
    return [int(entry.id or 0) for entry in entries]


def apply_rollback(
    session: Session,
    instance_id: int,
    carried: Collection[int],
    oldest: int,
    turn: int,
    path: Collection[int],
) -> dict[str, list[int]]:
    """After a core-memory rollback at `turn`: on the current branch (`path`: its line ids; memories without a
    line count too), close the persona changes archived by kept versions (≥ `oldest`) the restored core does not
    carry, and reopen the carried ones a rollback closed. Nothing is deleted. {"closed": ids, "reopened": ids}."""
    rows = session.exec(
        select(MemoryEntry).where(
            MemoryEntry.instance_id == instance_id,
            MemoryEntry.type == PERSONA_CHANGE_TYPE,
            col(MemoryEntry.line_id).is_(None) | col(MemoryEntry.line_id).in_(list(path)),
        )
    ).all()
    closed: list[int] = []
    reopened: list[int] = []
    for entry in rows:
        version = archived_version(entry.notes or "")
        if version is None or version < oldest:
            continue
        if version in carried and entry.valid_to_turn is not None:
            entry.valid_to_turn = None
            reopened.append(int(entry.id or 0))
        elif version not in carried and entry.valid_to_turn is None:
            entry.valid_to_turn = turn
            closed.append(int(entry.id or 0))
        else:
            continue
        entry.updated_at = utcnow()
        session.add(entry)
    session.flush()
    return {"closed": sorted(closed), "reopened": sorted(reopened)}
