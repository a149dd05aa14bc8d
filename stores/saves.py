"""Characters, backgrounds, conversation instances (saves) and appending lines to a save's tree.

What is stored is checked first, so a bad value is one `InvalidInput` naming the line and the field rather than a
database error: a line's text fields are text without a NUL character (PostgreSQL's text cannot hold one, and
SQLite should not differ) or a lone surrogate (no database stores one), its `role_id` a whole number naming a stored character (seed 000: the host's own
characters are roles too), and the same for the names and texts of roles, backgrounds and instances.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from personalab.nodes.rules.errors import InstanceNotFound, InvalidInput, NotFound

# seed 000's line format and its checks are rules (nodes/rules/turn_input.py), re-exported here
from personalab.nodes.rules.turn_input import (  # noqa: E402
    ATTRIBUTES as ATTRIBUTES,
)
from personalab.nodes.rules.turn_input import (
    LINE_FIELDS as LINE_FIELDS,
)
from personalab.nodes.rules.turn_input import (
    LINE_TEXT_FIELDS as LINE_TEXT_FIELDS,
)
from personalab.nodes.rules.turn_input import (
    check_text as check_text,
)
from personalab.nodes.rules.turn_input import (
    validate_line as validate_line,
)
from personalab.stores.db import INTEGER_MAX, INTEGER_MIN
from personalab.stores.tables import Background, Line, OutlinePoint, Role, Save, utcnow
from sqlalchemy import or_
from sqlmodel import Session, col, select


def create_role(session: Session, name: str, *, description: str = "", persona: str = "") -> Role:
    for value, what in ((name, "role name"), (description, "role description"), (persona, "role persona")):
        check_text(value, what)
    if not name.strip():
        raise InvalidInput("role name is empty")
    role = Role(name=name, description=description, persona=persona)
    session.add(role)
    session.flush()
    return role


def create_background(session: Session, name: str, world_setting: str, outline: Sequence[str]) -> Background:
    """A background with its outline points, numbered from 1 in the given order (seed 002 背景)."""
    check_text(name, "background name")
    check_text(world_setting, "background world setting")
    if not name.strip():
        raise InvalidInput("background name is empty")
    for position, text in enumerate(outline, start=1):
        if isinstance(text, str):
            check_text(text, f"outline point {position}")
        if not str(text).strip():
            raise InvalidInput(f"outline point {position} is empty")
    background = Background(name=name, world_setting=world_setting)
    session.add(background)
    session.flush()
    assert background.id is not None  # given by the flush
    for position, text in enumerate(outline, start=1):
        session.add(OutlinePoint(background_id=background.id, position=position, content=str(text)))
    session.flush()
    return background


def outline_of(session: Session, background_id: int) -> list[OutlinePoint]:
    stmt = select(OutlinePoint).where(OutlinePoint.background_id == background_id)
    return list(session.exec(stmt.order_by(col(OutlinePoint.position))).all())


def create_save(session: Session, role_id: int | None, background_id: int | None, title: str = "") -> Save:
    """A new conversation instance of `role_id` in `background_id`, with an empty dialogue tree."""
    check_text(title, "instance title")
    if role_id is not None and session.get(Role, role_id) is None:
        raise NotFound(f"role {role_id} does not exist")
    if background_id is not None and session.get(Background, background_id) is None:
        raise NotFound(f"background {background_id} does not exist")
    save = Save(role_id=role_id, background_id=background_id, title=title)
    session.add(save)
    session.flush()
    return save


def get_save(session: Session, save_id: int) -> Save:
    save = session.get(Save, save_id)
    if save is None:
        raise InstanceNotFound(f"instance {save_id} does not exist")
    return save


def check_roles(
    session: Session, lines: Sequence[Mapping[str, Any]], known: int | None = None, owner: str | None = None
) -> None:
    """`InvalidInput` naming the first line whose `role_id` is no stored character (`known`: an id already
    known to exist, such as the instance's own character, not looked up again). With `owner` (the instance's
    user, issue 14) only characters that user sees count: their own and shared ones; another user's private
    character is answered as one that does not exist, so a host line can neither use nor probe it."""
    wanted = {line["role_id"] for line in lines if line.get("role_id") is not None} - {known}
    # an id out of the column's range names no character, and PostgreSQL would refuse to even compare it
    ask = [role_id for role_id in wanted if INTEGER_MIN <= role_id <= INTEGER_MAX]
    query = select(Role.id).where(col(Role.id).in_(ask))
    if owner is not None:
        query = query.where(or_(col(Role.owner) == owner, col(Role.shared) == True))  # noqa: E712 - SQL
    found = set(session.exec(query).all()) if ask else set()
    for index, line in enumerate(lines, start=1):
        role_id = line.get("role_id")
        if role_id is not None and role_id != known and role_id not in found:
            raise InvalidInput(f"line {index} of {len(lines)}: role_id {role_id} is not a stored character")


def append_lines(
    session: Session, save_id: int, lines: Iterable[Mapping[str, Any]], *, parent_line_id: int | None = None
) -> list[Line]:
    """Append `lines` as a chain under `parent_line_id` (default: the save's current leaf) and move
    `save.last_message_id` to the last one. Everything is validated before anything is written; the
    caller's transaction makes the append all-or-nothing."""
    save = get_save(session, save_id)
    items = list(lines)
    for index, item in enumerate(items):
        validate_line(item, f"line {index + 1} of {len(items)}")
    check_roles(session, items, known=save.role_id, owner=save.owner)
    parent = save.last_message_id if parent_line_id is None else parent_line_id
    if parent is not None:
        parent_line = session.get(Line, parent)
        if parent_line is None or parent_line.save_id != save_id:
            raise InvalidInput(f"parent line {parent} is not a line of instance {save_id}")
    written: list[Line] = []
    for item in items:
        line = Line(save_id=save_id, parent_line_id=parent, **dict(item))
        session.add(line)
        session.flush()  # the id is the next line's parent
        parent = line.id
        written.append(line)
    if written:
        save.last_message_id = parent
        save.updated_at = utcnow()
        session.add(save)
        session.flush()
    return written
