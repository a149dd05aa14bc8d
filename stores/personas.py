"""User personas' rows (issue 28, SillyTavern's personas): read, written and checked for their owner in the
caller's transaction; the SQL of `personalab.graph.api.personas`.

A persona is its owner's only (no sharing): another user's id is `NotFound` naming it, exactly as an id that does
not exist. An instance names the persona it plays with (`save.persona_id`); deleting a persona clears it there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from personalab.nodes.rules.errors import NotFound
from personalab.stores.tables import Persona, Save, utcnow
from sqlmodel import Session, col, select


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def persona_row(session: Session, persona_id: int, owner: str | None) -> Persona:
    """The persona `persona_id` if it is `owner`'s (the operator: any); `NotFound` naming the id otherwise."""
    row = session.get(Persona, persona_id) if _is_id(persona_id) else None
    if row is None or (owner is not None and row.owner != owner):
        raise NotFound(f"persona {persona_id} does not exist")
    return row


def persona_rows(session: Session, owner: str | None) -> list[Persona]:
    query = select(Persona)
    if owner is not None:
        query = query.where(col(Persona.owner) == owner)
    return list(session.exec(query.order_by(col(Persona.id))).all())


def add_persona(session: Session, fields: Mapping[str, Any], owner: str | None) -> Persona:
    row = Persona(**fields, owner=owner)
    session.add(row)
    session.flush()
    return row


def change_persona(session: Session, row: Persona, changes: Mapping[str, Any]) -> None:
    for name, value in changes.items():
        setattr(row, name, value)
    row.updated_at = utcnow()
    session.add(row)
    session.flush()


def instances_with_persona(session: Session, persona_id: int) -> list[int]:
    ids = session.exec(select(Save.id).where(col(Save.persona_id) == persona_id).order_by(col(Save.id))).all()
    return [int(i) for i in ids if i is not None]


def delete_persona(session: Session, row: Persona) -> list[int]:
    """Delete `row`; the instances that played with it go back to no persona. Returns their ids."""
    users = instances_with_persona(session, int(row.id or 0))
    for instance_row in session.exec(select(Save).where(col(Save.persona_id) == row.id)).all():
        instance_row.persona_id = None
        session.add(instance_row)
    session.delete(row)
    session.flush()
    return users


def matching_persona(session: Session, fields: Mapping[str, Any], owner: str | None) -> Persona | None:
    """`owner`'s own persona with exactly these name, description and avatar (an instance imported back into
    the account it came from keeps its persona instead of a copy); never another user's."""
    query = select(Persona).where(
        col(Persona.name) == fields["name"], col(Persona.description) == fields["description"]
    )
    query = query.where(col(Persona.owner).is_(None) if owner is None else col(Persona.owner) == owner)
    for row in session.exec(query.order_by(col(Persona.id))).all():
        if row.avatar_image == fields.get("avatar_image") and row.avatar_mime == fields.get("avatar_mime"):
            return row
    return None


def set_instance_persona(session: Session, instance_row: Save, persona_id: int | None) -> None:
    instance_row.persona_id = persona_id
    session.add(instance_row)
    session.flush()


def persona_of_instance(session: Session, instance_id: int) -> Persona | None:
    """The persona instance `instance_id` plays with (None: none, or the instance does not exist)."""
    instance_row = session.get(Save, instance_id) if _is_id(instance_id) else None
    if instance_row is None or instance_row.persona_id is None:
        return None
    return session.get(Persona, instance_row.persona_id)
