"""Characters, backgrounds, conversation instances (saves) and appending lines to a save's tree."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from personalab.nodes.rules.errors import InstanceNotFound, InvalidInput, NotFound
from personalab.stores.tables import Background, Line, OutlinePoint, Role, Save, utcnow
from sqlmodel import Session, col, select

LINE_FIELDS = (
    "original_emotion",
    "predicted_emotion",
    "content",
    "tts_content",
    "action_content",
    "audio_file",
    "attribute",
    "role_id",
    "script_role_id",
    "display_name",
)
ATTRIBUTES = ("user", "assistant", "system")


def create_role(session: Session, name: str, *, description: str = "", persona: str = "") -> Role:
    if not name.strip():
        raise InvalidInput("role name is empty")
    role = Role(name=name, description=description, persona=persona)
    session.add(role)
    session.flush()
    return role


def create_background(session: Session, name: str, world_setting: str, outline: Sequence[str]) -> Background:
    """A background with its outline points, numbered from 1 in the given order (seed 002 背景)."""
    if not name.strip():
        raise InvalidInput("background name is empty")
    for position, text in enumerate(outline, start=1):
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


def validate_line(line: Mapping[str, Any], where: str) -> None:
    """Raise `ValueError` naming `where` for an unknown field, attribute or a missing content."""
    unknown = set(line) - set(LINE_FIELDS)
    if unknown:
        raise InvalidInput(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    if line.get("attribute") not in ATTRIBUTES:
        raise InvalidInput(f"{where}: attribute {line.get('attribute')!r} is not one of {', '.join(ATTRIBUTES)}")
    content = line.get("content")
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput(f"{where}: no content")


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
