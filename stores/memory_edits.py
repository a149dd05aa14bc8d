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

from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.nodes.rules.memory_layers import MemoryType
from personalab.stores.memapi_tables import MemoryEdit
from personalab.stores.memory_tables import MemoryEntry
from sqlalchemy import delete, func, or_
from sqlmodel import Session, col, select


class MemoryNotFoundError(NotFound):
    """No memory with that id in that instance (here, not in the memory store's module: showing a memory never loads
    the store's numpy, issue 29)."""


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
    turn_from: int | None = None,
    turn_to: int | None = None,
    location: str | None = None,
    text: str | None = None,
    pinned: bool | None = None,
    newest_first: bool = False,
    count_limit: int | None = None,
) -> tuple[int, list[MemoryEntry]]:
    """(how many match, the page `offset`..`offset+limit` of them in id order, or newest first). `types`: any of
    these types; `turn_from`..`turn_to`: the turns made (both ends kept); `location`: the scene, exactly;
    `text`: a part of the content (case-insensitive, `%` and `_` taken literally); `pinned`: only (un)pinned.
    `count_limit`: count at most this many plus one (a filter no index serves need not scan every row to say
    "more than N")."""
    if offset < 0 or limit < 0:
        raise InvalidInput(f"offset {offset} / limit {limit}: must be whole numbers ≥ 0")
    where: list[Any] = [MemoryEntry.instance_id == instance_id, *branch_clause(path)]
    if turn_from is not None:
        where.append(col(MemoryEntry.turn) >= turn_from)
    if turn_to is not None:
        where.append(col(MemoryEntry.turn) <= turn_to)
    if location is not None:
        where.append(MemoryEntry.location == location)
    if pinned is not None:
        where.append(MemoryEntry.pinned == pinned)
    if text:
        escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.append(col(MemoryEntry.content).ilike(f"%{escaped}%", escape="\\"))
    if character_id is not None:
        where.append(MemoryEntry.character_id == character_id)
    if layer is not None:
        where.append(MemoryEntry.layer == layer)
    if types is not None:
        where.append(col(MemoryEntry.type).in_(list(types)))
    if not include_record and layer != MemoryType.RECORD.value and MemoryType.RECORD.value not in (types or ()):
        where.append(MemoryEntry.type != MemoryType.RECORD.value)
    if count_limit is None:
        total = int(session.exec(select(func.count()).select_from(MemoryEntry).where(*where)).one())
    else:
        capped = select(MemoryEntry.id).where(*where).limit(count_limit + 1).subquery()
        total = int(session.exec(select(func.count()).select_from(capped)).one())
    order = col(MemoryEntry.id).desc() if newest_first else col(MemoryEntry.id)
    rows = session.exec(select(MemoryEntry).where(*where).order_by(order).offset(offset).limit(limit))
    return total, list(rows.all())


def scenes_of(session: Session, instance_id: int, limit: int = 200) -> list[str]:
    """The scenes (locations) the instance's memories name, for the inspector's filter (at most `limit`)."""
    rows = session.exec(
        select(MemoryEntry.location)
        .where(MemoryEntry.instance_id == instance_id, MemoryEntry.location != "")
        .distinct()
        .order_by(col(MemoryEntry.location))
        .limit(limit)
    )
    return [str(row) for row in rows.all()]


def foreign_ids(session: Session, instance_id: int, memory_ids: Sequence[int]) -> list[int]:
    """The ids among `memory_ids` that are not memories of the instance (another instance's, or none at all)."""
    ids = sorted(set(memory_ids))
    if not ids:
        return []
    mine = set(
        session.exec(
            select(MemoryEntry.id).where(MemoryEntry.instance_id == instance_id, col(MemoryEntry.id).in_(ids))
        ).all()
    )
    return [i for i in ids if i not in mine]


def pinned_among(session: Session, instance_id: int, memory_ids: Sequence[int]) -> list[int]:
    """The pinned memories among `memory_ids` of the instance."""
    if not memory_ids:
        return []
    rows = session.exec(
        select(MemoryEntry.id).where(
            MemoryEntry.instance_id == instance_id,
            col(MemoryEntry.id).in_(list(memory_ids)),
            MemoryEntry.pinned == True,  # noqa: E712 - SQL, not Python truth
        )
    )
    return sorted(int(i) for i in rows.all() if i is not None)


def memory_in(session: Session, instance_id: int, memory_id: int) -> MemoryEntry | None:
    """The memory `memory_id` if it is the instance's."""
    entry = session.get(MemoryEntry, memory_id)
    return entry if entry is not None and entry.instance_id == instance_id else None
