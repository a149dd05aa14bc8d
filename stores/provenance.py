"""What fed each reply (issue 23): one `reply_provenance` row per stored reply, written in the reply's transaction.

The row is keyed by the reply's last line and lists all its lines. A line of a reply is found by the first row of
its instance whose last line is at or after it (a reply's lines are written in one transaction under the instance's
turn lock, so no other reply of the instance has a line between them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from personalab.stores.memapi_tables import ReplyProvenance
from personalab.stores.memory_tables import MemoryEntry
from personalab.stores.tables import utcnow
from sqlalchemy import update
from sqlmodel import Session, col, select


def record_provenance(
    session: Session, instance_id: int, turn: int, line_ids: Sequence[int], data: Mapping[str, Any]
) -> None:
    """Store what fed the reply made of `line_ids` (one insert, in the caller's transaction: the reply's)."""
    if not line_ids:
        return
    session.add(
        ReplyProvenance(
            instance_id=instance_id,
            turn=turn,
            reply_line_id=int(line_ids[-1]),
            line_ids=[int(i) for i in line_ids],
            data=dict(data),
        )
    )
    mark_used(session, instance_id, turn, used_memory_ids(data))


def used_memory_ids(data: Mapping[str, Any]) -> list[int]:
    """The memories a provenance record says reached the prompt."""
    found = []
    for item in data.get("memories") or []:
        memory_id = item.get("id")
        if item.get("in_prompt") and isinstance(memory_id, int) and not isinstance(memory_id, bool):
            found.append(memory_id)
    return sorted(set(found))


def mark_used(session: Session, instance_id: int, turn: int, memory_ids: Sequence[int]) -> None:
    """Issue 25 "last used": the memories a reply's prompt held get its turn and time (the reply's transaction)."""
    if not memory_ids:
        return
    session.exec(
        update(MemoryEntry)
        .where(col(MemoryEntry.instance_id) == instance_id, col(MemoryEntry.id).in_(list(memory_ids)))
        .values(last_used_turn=turn, last_used_at=utcnow())
    )


def provenance_of_line(session: Session, instance_id: int, line_id: int) -> ReplyProvenance | None:
    """The provenance of the reply the line `line_id` of the instance belongs to (None: not a stored reply's line)."""
    row = session.exec(
        select(ReplyProvenance)
        .where(ReplyProvenance.instance_id == instance_id, col(ReplyProvenance.reply_line_id) >= line_id)
        .order_by(col(ReplyProvenance.reply_line_id))
        .limit(1)
    ).first()
    return row if row is not None and line_id in row.line_ids else None


def provenance_rows(session: Session, instance_id: int, line_ids: Sequence[int] | None = None) -> list[ReplyProvenance]:
    """The instance's provenance rows in reply order; with `line_ids`, those of replies ending on these lines."""
    stmt = select(ReplyProvenance).where(ReplyProvenance.instance_id == instance_id)
    if line_ids is not None:
        stmt = stmt.where(col(ReplyProvenance.reply_line_id).in_(list(line_ids)))
    return list(session.exec(stmt.order_by(col(ReplyProvenance.reply_line_id))).all())
