"""Moving along the dialogue tree (seed 000: lines form a tree through `parent_line_id`; a regenerate or a swipe
adds a sibling): the lines of an instance, their children and siblings, and moving the instance's leaf
(`save.last_message_id`). Lines are never moved or deleted: every branch stays where it was and can be made
current again. Each function works inside the caller's transaction."""

from __future__ import annotations

from typing import Any

from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.stores.db import INTEGER_MAX, INTEGER_MIN
from personalab.stores.saves import append_lines, get_save
from personalab.stores.tables import Line, Save, utcnow
from sqlmodel import Session, col, select


def line_of(session: Session, save_id: int, line_id: int) -> Line:
    """Line `line_id` of instance `save_id`: `NotFound` when there is no such line, `InvalidInput` when it belongs
    to another instance (both name the line)."""
    get_save(session, save_id)
    line = session.get(Line, line_id) if INTEGER_MIN <= line_id <= INTEGER_MAX else None
    if line is None:
        raise NotFound(f"line {line_id} does not exist")
    if line.save_id != save_id:
        raise InvalidInput(f"line {line_id} is not a line of instance {save_id}")
    return line


def children_of(session: Session, save_id: int, parent_line_id: int | None) -> list[Line]:
    """The lines under `parent_line_id` (None: the roots), oldest first."""
    parent = (
        col(Line.parent_line_id).is_(None) if parent_line_id is None else col(Line.parent_line_id) == parent_line_id
    )
    stmt = select(Line).where(col(Line.save_id) == save_id, parent).order_by(col(Line.id))
    return list(session.exec(stmt).all())


def latest_leaf_under(session: Session, save_id: int, line_id: int) -> int:
    """The leaf reached from `line_id` by following the newest child each step: where a branch made current
    again (a swipe) continues."""
    current = line_id
    for _ in range(1_000_000):  # bounded: a tree of an instance has fewer lines; a loop is not followed forever
        stmt = select(Line.id).where(col(Line.save_id) == save_id, col(Line.parent_line_id) == current)
        newest = session.exec(stmt.order_by(col(Line.id).desc()).limit(1)).first()
        if newest is None:
            return current
        current = newest
    raise InvalidInput(f"the lines under line {line_id} of instance {save_id} loop")


def remember_viewed_leaf(session: Session, save: Save, path: list[int], parent_line_id: int | None) -> None:
    """Before a swipe leaves the line of the current branch `path` (root → leaf) under `parent_line_id`: remember
    the leaf it had, so that a swipe back lands there (issue 28: on the reply last viewed, not the newest)."""
    index = 0 if parent_line_id is None else (path.index(parent_line_id) + 1 if parent_line_id in path else None)
    if index is None or index >= len(path):
        return
    viewed = dict(save.viewed_leaves or {})
    viewed[str(path[index])] = path[-1]
    save.viewed_leaves = viewed  # a new dict: the JSON column sees the change
    session.add(save)
    session.flush()


def viewed_leaf_under(session: Session, save: Save, line_id: int) -> int | None:
    """The leaf last viewed under `line_id` (remembered when a swipe left it), if it is still a line under it."""
    from personalab.stores.history import get_path_to_line

    assert save.id is not None
    leaf = (save.viewed_leaves or {}).get(str(line_id))
    if not isinstance(leaf, int):
        return None
    try:
        path = get_path_to_line(session, save.id, leaf)
    except (NotFound, InvalidInput):
        return None
    return leaf if any(line.id == line_id for line in path) else None


def move_leaf(session: Session, save: Save, line_id: int | None) -> None:
    """Make `line_id` (None: before the first line) the instance's current leaf."""
    save.last_message_id = line_id
    save.updated_at = utcnow()
    session.add(save)
    session.flush()


def place_turn_lines(
    session: Session, save: Save, lines: list[dict[str, Any]], reply_to: int | None, branch_from: int | None
) -> tuple[list[Line], int | None]:
    """Put a turn's host and user lines into the tree (under the instance's turn lock) and return them with the
    leaf the turn found (`anchor`). `reply_to` (regenerate): no new line; the leaf moves to that stored user
    line, which the new reply answers again beside its other replies. `branch_from` (edit): the lines go under
    that line (0: as a new first line) instead of the current leaf, so they are siblings of what was there."""
    assert save.id is not None
    anchor = save.last_message_id
    if reply_to is not None:
        line = line_of(session, save.id, reply_to)
        if line.attribute != "user":
            raise InvalidInput(f"line {reply_to} is not a user line: only a user line can be answered again")
        move_leaf(session, save, reply_to)
        return [line], anchor
    if branch_from is not None:
        if branch_from:
            line_of(session, save.id, branch_from)
        move_leaf(session, save, branch_from or None)
    return append_lines(session, save.id, lines), anchor


def sibling_ids(session: Session, instance_id: int, parents: set[int | None]) -> dict[int | None, list[int]]:
    """The children of each parent in `parents` (None: the roots), oldest first, in one query."""
    from sqlalchemy import or_

    found: dict[int | None, list[int]] = {parent: [] for parent in parents}
    ids = [parent for parent in parents if parent is not None]
    stmt = select(Line.id, Line.parent_line_id).where(col(Line.save_id) == instance_id)
    conditions = []
    if ids:
        conditions.append(col(Line.parent_line_id).in_(ids))
    if None in parents:
        conditions.append(col(Line.parent_line_id).is_(None))
    if not conditions:
        return found
    for line_id, parent in session.exec(stmt.where(or_(*conditions)).order_by(col(Line.id))).all():
        if line_id is not None:
            found.setdefault(parent, []).append(line_id)
    return found


def line_count(session: Session, instance_id: int) -> int:
    """How many lines the instance's tree holds, every branch counted."""
    from sqlalchemy import func

    get_save(session, instance_id)
    return int(session.exec(select(func.count()).select_from(Line).where(col(Line.save_id) == instance_id)).one())


def branch_paths(session: Session, instance_id: int) -> list[list[int]]:
    """Every branch of the instance's tree as its path of line ids from the root to a leaf (a line without
    children), oldest leaf first; the director's plot nodes per branch (issue 25). One query for the tree."""
    get_save(session, instance_id)
    stmt = select(Line.id, Line.parent_line_id).where(col(Line.save_id) == instance_id).order_by(col(Line.id))
    parent: dict[int, int | None] = {}
    for line_id, parent_id in session.exec(stmt).all():
        if line_id is not None:
            parent[line_id] = parent_id
    has_child = {p for p in parent.values() if p is not None}
    paths = []
    for leaf in (line_id for line_id in parent if line_id not in has_child):
        path: list[int] = []
        at: int | None = leaf
        while at is not None and at in parent and len(path) <= len(parent):  # bounded: a bad cycle cannot hang it
            path.append(at)
            at = parent[at]
        paths.append(path[::-1])
    return paths
