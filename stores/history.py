"""The dialogue tree: reading the path from the root to a leaf (seed 000, get_chat_history).

The seed loads every line of a save and walks parents in Python. Here one recursive query
(`WITH RECURSIVE`) walks from the leaf to the root and reads only the lines on that path.

Errors (all subclasses of `HistoryError`, itself a `ValueError`):
- `InstanceNotFound`   — no save with that id (also a `LookupError`).
- `LineNotInSaveError`  — `save.last_message_id` (or the given leaf) is not a line of this save.
- `MissingParentError`  — a line's `parent_line_id` names no line (possible on SQLite without FKs).
- `ForeignParentError`  — a line's parent belongs to another save.
- `HistoryCycleError`   — the parents loop; detected in at most (lines in save + 1) steps.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from personalab.nodes.rules.errors import InstanceNotFound, InvalidInput, NotFound
from personalab.stores.lru import LRU
from personalab.stores.tables import Line, Save
from sqlalchemy import Integer, bindparam, case, cast, event, func, literal, select
from sqlmodel import Session, col


class HistoryError(InvalidInput):
    """The dialogue tree of a save is inconsistent."""


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
    leaf = _leaf_of(session, save_id)
    return get_path_to_line(session, save_id, leaf) if leaf else []


def _leaf_of(session: Session, save_id: int) -> int | None:
    """`save.last_message_id` (None before the first line); `InstanceNotFound` for an unknown save."""
    save = session.get(Save, save_id)
    if save is None:
        raise InstanceNotFound(f"instance {save_id} does not exist")
    return save.last_message_id or None


def get_path_to_line(session: Session, save_id: int, leaf_line_id: int) -> list[Line]:
    """Lines from the root to `leaf_line_id` (any line of the save, e.g. a sibling branch), in order."""
    rows = session.exec(_path_query(save_id, leaf_line_id, Line)).all()
    return _check_path(save_id, leaf_line_id, [(line_id, line) for line_id, _depth, line in rows], _attr)


def get_path_ids(session: Session, save_id: int) -> list[int]:
    """The ids of the path of `get_chat_history`, root first, with the same checks. The walk carries only the
    save id; `get_lines` reads the lines a turn needs in full.

    Lines are never moved or deleted once written (a regenerate or a swipe adds a sibling), so the path to a
    line never changes: the process keeps the last path of each save (`PATH_CACHE_SIZE` saves), and the next
    call walks only `EXTEND_STEPS` steps up from the leaf and joins the kept path where the walk meets it. A
    turn on a long play-through reads a few dozen ids instead of the whole path. A path is kept only when the
    transaction that read it commits, so it holds stored lines only. The rows read get the same checks;
    anything unusual (no joint within the steps, a foreign or looping parent) falls back to the full walk,
    which reports the exact problem. A change to the parents of old lines made outside PersonaLab is seen
    after `forget_paths` (or a restart)."""
    leaf = _leaf_of(session, save_id)
    if not leaf:
        return []
    key = (str(session.get_bind().engine.url), save_id)
    cached = _PATHS.get(key)
    path = _extended(session, save_id, leaf, cached) if cached is not None else None
    if path is None:
        rows = _walk(session, _ID_WALK, {"save_id": save_id, "leaf_line_id": leaf})
        path = _clean_ids(save_id, rows)
        if path is None:  # the slow check names the problem
            checked: list[tuple[Any, dict[str, Any] | None]] = [
                (row[2], {"id": row[2], "save_id": row[3]}) for row in rows
            ]
            if rows and rows[0][1] is not None:
                checked.insert(0, (rows[0][1], None))  # the walk found no line with the root-most line's parent id
            path = [line["id"] for line in _check_path(save_id, leaf, checked, dict.get)]
    if cached is None or path != cached.ids:
        _keep_when_committed(session, key, path)
    return list(path)


def _keep_when_committed(session: Session, key: tuple[str, int], path: list[int]) -> None:
    """Keep `path` once the session's transaction commits: a path read in a transaction that rolls back may
    hold lines that were never stored (whose ids SQLite may give to other lines)."""
    rolled_back = False

    def on_rollback(_session: Any) -> None:
        nonlocal rolled_back
        rolled_back = True

    def on_commit(_session: Any) -> None:
        if not rolled_back:
            _PATHS.put(key, _CachedPath(path))

    event.listen(session, "after_rollback", on_rollback, once=True)
    event.listen(session, "after_commit", on_commit, once=True)


PATH_CACHE_SIZE = 256  # saves whose last path the process keeps
EXTEND_STEPS = 64  # lines walked up from a new leaf to meet the kept path (a turn appends a handful)


class _CachedPath:
    __slots__ = ("ids", "positions")

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.positions = {line_id: index for index, line_id in enumerate(ids)}


_PATHS: LRU[tuple[str, int], _CachedPath] = LRU(PATH_CACHE_SIZE)


def forget_paths() -> None:
    """Drop the kept paths (when the engines are disposed: a database recreated under the same URL has other
    lines)."""
    _PATHS.clear()


def _walk(session: Session, statement: Any, params: dict[str, Any]) -> list[Any]:
    return list(session.connection().execute(statement, params).cursor.fetchall())  # root first


def _clean_ids(save_id: int, rows: Sequence[Any]) -> list[int] | None:
    """The ids of walk rows (depth, parent_line_id, id, save_id) that run from a root line to the leaf, all of
    the save, none twice; None when any of that fails."""
    if not rows or rows[0][1] is not None or any(row[3] != save_id for row in rows):
        return None
    ids = [row[2] for row in rows]
    return ids if len(set(ids)) == len(ids) else None


def _extended(session: Session, save_id: int, leaf: int, cached: _CachedPath) -> list[int] | None:
    """The path to `leaf` from a short walk joined to the kept path, or None when they do not join cleanly."""
    rows = _walk(session, _ID_STEPS, {"save_id": save_id, "leaf_line_id": leaf, "max_steps": EXTEND_STEPS})
    if not rows or rows[-1][2] != leaf or any(row[3] != save_id for row in rows):
        return None
    top_parent = rows[0][1]
    if top_parent is None:  # the walk reached the root: a short path
        return _clean_ids(save_id, rows)
    joint = cached.positions.get(top_parent)
    if joint is None:
        return None
    segment = [row[2] for row in rows]
    if len(set(segment)) != len(segment):
        return None  # the parents loop
    return cached.ids[: joint + 1] + segment


def line_parents(session: Session, save_id: int, line_ids: Sequence[int]) -> dict[int, int | None]:
    """line → parent line for every line of instance `save_id` on the paths from `line_ids` to the root, in one
    recursive query (the event-log summaries group their memories by these paths). UNION, not UNION ALL: the
    paths share their upper parts, read once, and parents that loop end the walk. Lines of other instances or
    that do not exist are left out."""
    if not line_ids:
        return {}
    table = Line.__table__  # type: ignore[attr-defined]
    start = select(table.c.id, table.c.parent_line_id).where(table.c.id.in_(list(line_ids)), table.c.save_id == save_id)
    walk = start.cte("line_parents", recursive=True)
    step = (
        select(table.c.id, table.c.parent_line_id)
        .join(walk, table.c.id == walk.c.parent_line_id)
        .where(table.c.save_id == save_id)
    )
    walk = walk.union(step)
    rows: list[Any] = list(session.connection().execute(select(walk.c.id, walk.c.parent_line_id)).all())
    return {int(line_id): None if parent is None else int(parent) for line_id, parent in rows}


def line_forks(session: Session, save_id: int, line_ids: Sequence[int]) -> set[int]:
    """Which of the lines `line_ids` of instance `save_id` have more than one child line: where the dialogue tree
    branches (a regenerated reply, an edited line, a turn played again after a rewind)."""
    if not line_ids:
        return set()
    table = Line.__table__  # type: ignore[attr-defined]
    stmt = (
        select(table.c.parent_line_id)
        .where(table.c.save_id == save_id, table.c.parent_line_id.in_(list(line_ids)))
        .group_by(table.c.parent_line_id)
        .having(func.count() > 1)
    )
    rows: list[Any] = list(session.connection().execute(stmt).all())
    return {int(line_id) for (line_id,) in rows}


def lines_on_current_branches(session: Session, wanted: Mapping[int, Collection[int]]) -> dict[int, set[int]]:
    """Which of the lines `wanted[instance]` are on that instance's current branch (the path from the root to its
    leaf, `get_path_ids`), for several instances in one recursive query: the director's reference layer keeps
    another play-through's events only where that play-through now is (seed 000's tree). The walk goes up from
    each leaf and stops below the instance's lowest wanted line: a line is stored after its parent, so its id
    is larger and nothing further up can be wanted. UNION, not UNION ALL: parents that loop end the walk.
    Unknown instances have no lines on a branch."""
    bounds = {save_id: min(lines) for save_id, lines in wanted.items() if lines}
    if not bounds:
        return {}
    table = Line.__table__  # type: ignore[attr-defined]
    save = Save.__table__  # type: ignore[attr-defined]
    bound = cast(case(bounds, value=save.c.id), Integer)
    start: Any = select(
        save.c.id.label("save_id"), save.c.last_message_id.label("line_id"), bound.label("bound")
    ).where(save.c.id.in_(list(bounds)), save.c.last_message_id >= bound)
    walk = start.cte("current_branches", recursive=True)
    step = (
        select(walk.c.save_id, table.c.parent_line_id, walk.c.bound)
        .join(table, table.c.id == walk.c.line_id)
        .where(table.c.save_id == walk.c.save_id, table.c.parent_line_id >= walk.c.bound)
    )
    walk = walk.union(step)
    every = sorted({line for lines in wanted.values() for line in lines})
    found: dict[int, set[int]] = {}
    for start_at in range(0, len(every), _IN_CHUNK):
        chunk = every[start_at : start_at + _IN_CHUNK]
        rows: list[Any] = list(
            session.connection().execute(select(walk.c.save_id, walk.c.line_id).where(walk.c.line_id.in_(chunk)))
        )
        for save_id, line_id in rows:
            if line_id in wanted.get(save_id, ()):
                found.setdefault(int(save_id), set()).add(int(line_id))
    return found


def get_lines(session: Session, line_ids: Sequence[int], names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Lines by id as plain dicts (every column, or `names`, which must start with `id`), in the order of
    `line_ids`; `LookupError` names a missing id."""
    if not line_ids:
        return []
    names = list(names or _COLUMN_NAMES)
    if names[0] != "id":
        raise InvalidInput(f"get_lines: the first column must be id, got {names[0]!r}")
    found: dict[int, dict[str, Any]] = {}
    columns = [Line.__table__.c[name] for name in names]  # type: ignore[attr-defined]
    for start in range(0, len(line_ids), _IN_CHUNK):
        chunk = list(line_ids[start : start + _IN_CHUNK])
        result = session.connection().execute(select(*columns).where(Line.id.in_(chunk)))  # type: ignore[union-attr]
        found.update((row[0], dict(zip(names, row, strict=True))) for row in result.cursor.fetchall())
    missing = [line_id for line_id in line_ids if line_id not in found]
    if missing:
        raise NotFound(f"line {missing[0]} does not exist")
    return [found[line_id] for line_id in line_ids]


# every column but the line's time (issue 26), which the turn's lines do not carry: `line_times` reads it
_COLUMN_NAMES = [column.name for column in Line.__table__.columns if column.name != "created_at"]  # type: ignore[attr-defined]


def line_times(session: Session, save_id: int, line_ids: Sequence[int]) -> dict[int, datetime | None]:
    """When each of an instance's lines was stored (UTC; None for a line stored before times were recorded)."""
    found: dict[int, datetime | None] = {}
    for start in range(0, len(line_ids), _IN_CHUNK):
        chunk = list(line_ids[start : start + _IN_CHUNK])
        stmt = select(col(Line.id), col(Line.created_at)).where(col(Line.save_id) == save_id, col(Line.id).in_(chunk))
        rows = session.connection().execute(stmt).all()
        found.update({int(line_id): created for line_id, created in rows if line_id is not None})
    return found


_IN_CHUNK = 900  # under SQLite's default limit of host parameters per statement


def _path_query(save_id: int, leaf_line_id: int, *selected: Any) -> Any:
    """The recursive walk from the leaf to the root, joined to `selected` (the Line entity or its columns)."""
    # The depth bound makes a cycle end the recursion: a real path has at most as many steps as the
    # save has lines, so one step more proves a loop. Uncorrelated, the count is computed once.
    lines_in_save = select(func.count()).select_from(Line).where(col(Line.save_id) == save_id).scalar_subquery()
    start: Any = select(col(Line.id).label("line_id"), literal(0).label("depth")).where(col(Line.id) == leaf_line_id)
    walk = start.cte("path", recursive=True)
    step = (
        select(col(Line.parent_line_id), (walk.c.depth + 1).label("depth"))
        .join(walk, col(Line.id) == walk.c.line_id)
        .where(col(Line.parent_line_id).is_not(None), walk.c.depth < lines_in_save)
    )
    path = walk.union_all(step)
    return (
        select(path.c.line_id, path.c.depth, *selected)
        .select_from(path)
        .outerjoin(Line, col(Line.id) == path.c.line_id)
        .order_by(path.c.depth.desc())
    )


def _carried_walk(names: Sequence[str], max_steps: Any = None) -> Any:
    """The walk from the leaf to the root with `names` columns carried in the recursion: rows of
    (depth, parent_line_id, *names), root first. Bounded like `_path_query`, or by `max_steps` when given;
    parameters `save_id` and `leaf_line_id`."""
    save_id: Any = bindparam("save_id")
    leaf_line_id: Any = bindparam("leaf_line_id")
    if max_steps is None:
        max_steps = select(func.count()).select_from(Line).where(col(Line.save_id) == save_id).scalar_subquery()
    table = Line.__table__  # type: ignore[attr-defined]
    carried = [table.c[name] for name in names]
    start = select(literal(0).label("depth"), table.c.parent_line_id, *carried).where(table.c.id == leaf_line_id)
    walk = start.cte("path", recursive=True)
    step = (
        select((walk.c.depth + 1).label("depth"), table.c.parent_line_id, *carried)
        .join(walk, table.c.id == walk.c.parent_line_id)
        .where(walk.c.depth < max_steps)
    )
    path = walk.union_all(step)
    return select(path).order_by(path.c.depth.desc())


# built once: the statements are the same every turn
_ID_WALK = _carried_walk(["id", "save_id"])
_ID_STEPS = _carried_walk(["id", "save_id"], max_steps=bindparam("max_steps"))


def _attr(line: Line, name: str) -> Any:
    return getattr(line, name)


def _check_path(save_id: int, leaf_line_id: int, rows: list[tuple[int, Any]], field: Any) -> list[Any]:
    """Validate a root → leaf path of Line objects or dicts (read with `field(record, name)`)."""
    if not rows or rows[-1][1] is None:
        raise LineNotInSaveError(f"line {leaf_line_id} does not exist (leaf of save {save_id})")
    leaf_save = field(rows[-1][1], "save_id")
    if leaf_save != save_id:
        raise LineNotInSaveError(f"line {leaf_line_id} belongs to save {leaf_save}, not save {save_id}")
    seen: set[int] = set()
    history: list[Any] = []
    # rows run root → leaf; report the problem nearest the leaf, where the walk met it.
    for index in range(len(rows) - 1, -1, -1):
        line_id, line = rows[index]
        child = field(rows[index + 1][1], "id") if index + 1 < len(rows) else "?"
        if line is None:
            raise MissingParentError(f"line {child} has parent {line_id}, which does not exist")
        if line_id in seen:
            raise HistoryCycleError(f"save {save_id}: parent_line_id loops back to line {line_id}")
        if field(line, "save_id") != save_id:
            raise ForeignParentError(
                f"line {child} of save {save_id} has parent {line_id} in save {field(line, 'save_id')}"
            )
        seen.add(line_id)
        history.append(line)
    history.reverse()
    return history
