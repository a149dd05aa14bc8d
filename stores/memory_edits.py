"""Versions of user-edited memories and the console's reads of the memory table (issue 23, seed 001 用户可编辑性).

`keep_version` runs in the edit's own transaction (`MemoryStore.edit_memory(before_change=...)`): the fields as they
were go into `memory_edit` before the new ones are written, so an edit and its version are stored together or not
at all. `page_memories` is the listing of the memory console: by layer, type, character, on the current branch (a
memory made from a line off the path from the root to the instance's leaf is left out, as the turn's retrieval and
the layer flow leave it out) or on all branches, paged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.memory_layers import MemoryType
from personalab.stores.memapi_tables import MemoryEdit
from personalab.stores.memory_tables import MemoryEntry
from sqlalchemy import delete, func, or_
from sqlmodel import Session, col, select


def keep_version(session: Session, entry: MemoryEntry) -> int:
    """Store `entry`'s current fields as its next version (1, 2, …) in the caller's transaction; the version number."""
    last = session.exec(select(func.max(MemoryEdit.version)).where(MemoryEdit.memory_id == entry.id)).one()
    version = int(last or 0) + 1
    session.add(
        MemoryEdit(
            memory_id=int(entry.id or 0),
            instance_id=entry.instance_id,
            version=version,
            content=entry.content,
            type=entry.type,
            layer=entry.layer,
            importance=entry.importance,
            tags=list(entry.tags or []),
            notes=entry.notes or "",
        )
    )
    return version


def versions_of(session: Session, instance_id: int, memory_id: int) -> list[MemoryEdit]:
    """The earlier versions of a memory of the instance, oldest first."""
    stmt = (
        select(MemoryEdit)
        .where(MemoryEdit.instance_id == instance_id, MemoryEdit.memory_id == memory_id)
        .order_by(col(MemoryEdit.version))
    )
    return list(session.exec(stmt).all())


def drop_versions(session: Session, instance_id: int, memory_ids: Sequence[int]) -> None:
    """Delete the versions of deleted memories, in the deletion's transaction."""
    if memory_ids:
        session.exec(
            delete(MemoryEdit).where(
                col(MemoryEdit.instance_id) == instance_id, col(MemoryEdit.memory_id).in_(list(memory_ids))
            )
        )


def branch_clause(path: Sequence[int] | None) -> list[Any]:
    """Where-clauses keeping the memories of the branch `path` (line ids root → leaf) and those without a line;
    none for all branches (`path` None)."""
    if path is None:
        return []
    return [or_(col(MemoryEntry.line_id).is_(None), col(MemoryEntry.line_id).in_(list(path)))]


def page_memories(
    session: Session,
    instance_id: int,
    *,
    path: Sequence[int] | None,
    layer: str | None = None,
    types: Sequence[str] | None = None,
    character_id: int | None = None,
    include_record: bool = False,
    offset: int = 0,
    limit: int = 50,
) -> tuple[int, list[MemoryEntry]]:
    """(how many match, the page `offset`..`offset+limit` of them in id order). `types`: any of these types."""
    if offset < 0 or limit < 0:
        raise InvalidInput(f"offset {offset} / limit {limit}: must be whole numbers ≥ 0")
    where: list[Any] = [MemoryEntry.instance_id == instance_id, *branch_clause(path)]
    if character_id is not None:
        where.append(MemoryEntry.character_id == character_id)
    if layer is not None:
        where.append(MemoryEntry.layer == layer)
    if types is not None:
        where.append(col(MemoryEntry.type).in_(list(types)))
    if not include_record and layer != MemoryType.RECORD.value and MemoryType.RECORD.value not in (types or ()):
        where.append(MemoryEntry.type != MemoryType.RECORD.value)
    total = int(session.exec(select(func.count()).select_from(MemoryEntry).where(*where)).one())
    rows = session.exec(select(MemoryEntry).where(*where).order_by(col(MemoryEntry.id)).offset(offset).limit(limit))
    return total, list(rows.all())


def memory_in(session: Session, instance_id: int, memory_id: int) -> MemoryEntry | None:
    """The memory `memory_id` if it is the instance's."""
    entry = session.get(MemoryEntry, memory_id)
    return entry if entry is not None and entry.instance_id == instance_id else None
