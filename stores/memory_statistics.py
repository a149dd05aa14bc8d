"""Counts of an instance's memories for its statistics (seed 004 提供记忆统计信息; issue 23), in a few GROUP BY
queries: by layer, type, character, branch (on the current path, without a line, on other branches) and by the turn
the memories were made (growth)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from personalab.stores.memory_tables import MemoryEntry
from sqlalchemy import func
from sqlmodel import Session, col, select


def memory_counts(session: Session, instance_id: int) -> dict[str, dict[str, int]]:
    """{"layer": {layer: n}, "type": {type: n}, "character": {id: n}, "pinned": {...}, "edited": {...}} of all the
    instance's memories (the dialogue record included, as layer and type ``record``)."""
    out: dict[str, dict[str, int]] = {}
    for name, column in (
        ("layer", MemoryEntry.layer),
        ("type", MemoryEntry.type),
        ("character", MemoryEntry.character_id),
        ("pinned", MemoryEntry.pinned),
        ("edited", MemoryEntry.user_edited),
    ):
        rows = session.exec(
            select(column, func.count()).where(MemoryEntry.instance_id == instance_id).group_by(col(column))
        ).all()
        out[name] = {str(key).lower(): int(n) for key, n in rows}
    return out


def branch_counts(session: Session, instance_id: int, path: Sequence[int]) -> dict[str, int]:
    """How many of the instance's memories were made on the current branch's lines, without a line (curated by hand
    or imported: on every branch), and on lines of other branches."""
    rows = session.exec(
        select(MemoryEntry.line_id, func.count())
        .where(MemoryEntry.instance_id == instance_id)
        .group_by(col(MemoryEntry.line_id))
    ).all()
    here = set(path)
    counts = {"current_branch": 0, "no_line": 0, "other_branches": 0}
    for line_id, n in rows:
        key = "no_line" if line_id is None else "current_branch" if line_id in here else "other_branches"
        counts[key] += int(n)
    return counts


def growth_by_turn(session: Session, instance_id: int) -> list[dict[str, Any]]:
    """Per turn the instance has memories of: how many were made then (curated and record apart) and the running
    total, oldest turn first."""
    is_record = col(MemoryEntry.type) == "record"
    rows = session.exec(
        select(MemoryEntry.turn, is_record, func.count())
        .where(MemoryEntry.instance_id == instance_id)
        .group_by(col(MemoryEntry.turn), is_record)
        .order_by(col(MemoryEntry.turn))
    ).all()
    by_turn: dict[int, dict[str, int]] = {}
    for turn, record, n in rows:
        by_turn.setdefault(int(turn), {"memories": 0, "record": 0})["record" if record else "memories"] += int(n)
    total, out = 0, []
    for turn in sorted(by_turn):
        made = by_turn[turn]
        total += made["memories"] + made["record"]
        out.append({"turn": turn, **made, "total": total})
    return out
