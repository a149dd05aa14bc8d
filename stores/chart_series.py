"""The rows behind an instance's statistics charts (issue 25, seed 004 提供记忆统计信息 and 记忆可视化界面): the
current branch's turn records (tokens, per-region tokens and times, `turn_record.figures`) and story states
(relationship, plot), the memories made per turn by layer and type, and the newest memories for the timeline
across turns and branches. A few selects, no per-memory loop over the whole instance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from personalab.stores.memory_tables import MemoryEntry
from personalab.stores.turn_tables import StoryState, TurnRecord
from sqlalchemy import func
from sqlmodel import Session, col, select

TIMELINE_LIMIT = 2000  # the timeline draws the newest memories; more would be an unreadable blot anyway


def branch_turns(session: Session, instance_id: int, path: Sequence[int]) -> list[dict[str, Any]]:
    """The stored (ok) turns whose reply is on the branch `path`, by turn: turn, time, tokens and figures."""
    rows = session.exec(
        select(TurnRecord)
        .where(
            TurnRecord.save_id == instance_id,
            TurnRecord.status == "ok",
            col(TurnRecord.reply_line_id).in_(list(path)),
        )
        .order_by(col(TurnRecord.turn), col(TurnRecord.id))
    ).all()
    return [
        {
            "turn": row.turn,
            "created_at": row.created_at,
            "prompt_tokens": row.prompt_tokens,
            "reply_tokens": row.reply_tokens,
            "figures": dict(row.figures or {}),
        }
        for row in rows
    ]


def branch_story_rows(session: Session, instance_id: int, path: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Per turn on the branch `path`, the story state it left (the newest stored for that turn's reply)."""
    rows = session.exec(
        select(StoryState.turn, StoryState.state)
        .where(StoryState.save_id == instance_id, col(StoryState.reply_line_id).in_(list(path)))
        .order_by(col(StoryState.id))
    ).all()
    return {int(turn): dict(state or {}) for turn, state in rows}


def made_per_turn(session: Session, instance_id: int, path: Sequence[int]) -> list[tuple[int, str, str, int]]:
    """(turn, layer, type, n): how many of the instance's memories each turn made on the branch `path` (made on its
    lines, or without a line: curated by hand or imported, on every branch)."""
    on_branch = col(MemoryEntry.line_id).in_(list(path)) | col(MemoryEntry.line_id).is_(None)
    rows = session.exec(
        select(MemoryEntry.turn, MemoryEntry.layer, MemoryEntry.type, func.count())
        .where(MemoryEntry.instance_id == instance_id, on_branch)
        .group_by(col(MemoryEntry.turn), col(MemoryEntry.layer), col(MemoryEntry.type))
        .order_by(col(MemoryEntry.turn))
    ).all()
    return [(int(turn), str(layer), str(kind), int(n)) for turn, layer, kind, n in rows]


def timeline_rows(session: Session, instance_id: int, limit: int = TIMELINE_LIMIT) -> list[dict[str, Any]]:
    """The instance's newest `limit` memories (id, turn, layer, type, line), oldest first."""
    # five columns: sqlmodel's `select` overloads stop at four, SQLAlchemy's runs the statement all the same
    rows = session.exec(
        select(  # type: ignore[call-overload]
            MemoryEntry.id, MemoryEntry.turn, MemoryEntry.layer, MemoryEntry.type, MemoryEntry.line_id
        )
        .where(MemoryEntry.instance_id == instance_id)
        .order_by(col(MemoryEntry.id).desc())
        .limit(limit)
    ).all()
    return [
        {"id": int(i or 0), "turn": int(turn), "layer": str(layer), "type": str(kind), "line_id": line}
        for i, turn, layer, kind, line in reversed(rows)
    ]
