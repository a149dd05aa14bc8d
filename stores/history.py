"""The dialogue tree: reading the path from the root to a leaf (seed 000, get_chat_history).

The seed loads every line of a save and walks parents in Python. Here one recursive query
(`WITH RECURSIVE`) walks from the leaf to the root and reads only the lines on that path.

Errors (all subclasses of `HistoryError`, itself a `ValueError`):
- `SaveNotFoundError`   — no save with that id (also a `LookupError`).
- `LineNotInSaveError`  — `save.last_message_id` (or the given leaf) is not a line of this save.
- `MissingParentError`  — a line's `parent_line_id` names no line (possible on SQLite without FKs).
- `ForeignParentError`  — a line's parent belongs to another save.
- `HistoryCycleError`   — the parents loop; detected in at most (lines in save + 1) steps.
"""

from __future__ import annotations

from sqlalchemy import func, literal, select
from sqlmodel import Session

from stores.tables import Line, Save


class HistoryError(ValueError):
    """The dialogue tree of a save is inconsistent."""


class SaveNotFoundError(HistoryError, LookupError):
    pass


class LineNotInSaveError(HistoryError):
    pass


class MissingParentError(HistoryError):
    pass


class ForeignParentError(HistoryError):
    pass


class HistoryCycleError(HistoryError):
    pass


def get_chat_history(session: Session, save_id: int) -> list[Line]:
    """Lines from the root to `save.last_message_id`, in order; `[]` for a save with no lines yet."""
    save = session.get(Save, save_id)
    if save is None:
        raise SaveNotFoundError(f"save {save_id} does not exist")
    if not save.last_message_id:
        return []
    return get_path_to_line(session, save_id, save.last_message_id)


def get_path_to_line(session: Session, save_id: int, leaf_line_id: int) -> list[Line]:
    """Lines from the root to `leaf_line_id` (any line of the save, e.g. a sibling branch), in order."""
    # The depth bound makes a cycle end the recursion: a real path has at most as many steps as the
    # save has lines, so one step more proves a loop. Uncorrelated, the count is computed once.
    lines_in_save = select(func.count()).select_from(Line).where(Line.save_id == save_id).scalar_subquery()
    path = select(Line.id.label("line_id"), literal(0).label("depth")).where(Line.id == leaf_line_id)
    path = path.cte("path", recursive=True)
    step = (
        select(Line.parent_line_id, (path.c.depth + 1).label("depth"))
        .join(path, Line.id == path.c.line_id)
        .where(Line.parent_line_id.is_not(None), path.c.depth < lines_in_save)
    )
    path = path.union_all(step)
    rows = session.exec(  # type: ignore[call-overload]
        select(path.c.line_id, path.c.depth, Line)
        .select_from(path)
        .outerjoin(Line, Line.id == path.c.line_id)
        .order_by(path.c.depth.desc())
    ).all()
    return _check_path(save_id, leaf_line_id, [(line_id, line) for line_id, _depth, line in rows])


def _check_path(save_id: int, leaf_line_id: int, rows: list[tuple[int, Line | None]]) -> list[Line]:
    if not rows or rows[-1][1] is None:
        raise LineNotInSaveError(f"line {leaf_line_id} does not exist (leaf of save {save_id})")
    leaf = rows[-1][1]
    if leaf.save_id != save_id:
        raise LineNotInSaveError(f"line {leaf_line_id} belongs to save {leaf.save_id}, not save {save_id}")
    seen: set[int] = set()
    history: list[Line] = []
    # rows run root → leaf; report the problem nearest the leaf, where the walk met it.
    for index in range(len(rows) - 1, -1, -1):
        line_id, line = rows[index]
        child = rows[index + 1][1] if index + 1 < len(rows) else None
        if line is None:
            raise MissingParentError(f"line {child.id if child else '?'} has parent {line_id}, which does not exist")
        if line.id in seen:
            raise HistoryCycleError(f"save {save_id}: parent_line_id loops back to line {line.id}")
        if line.save_id != save_id:
            raise ForeignParentError(
                f"line {child.id if child else '?'} of save {save_id} has parent {line.id} in save {line.save_id}"
            )
        seen.add(line.id)  # type: ignore[arg-type]
        history.append(line)
    history.reverse()
    return history
