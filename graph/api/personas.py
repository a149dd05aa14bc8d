"""User personas (issue 28, SillyTavern's personas): `PersonaLab(...).personas`. A persona is a name and a
description (and an optional avatar) the user plays as; each instance plays with one (changeable, `use`), whose
name `{{user}}` becomes everywhere (greeting, card fields, world book, prompt, recaps, edits) and whose description
reaches the prompt. Without one an instance behaves as before: the user name given per turn, or 用户.

Owned per user like characters (never shared): another user's persona is `NotFound` naming its id. The SQL is in
`stores/personas.py`; every operation is one transaction and raises PersonaLab's errors only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from personalab.graph.api.library import _Area, _instance, check_avatar, edited_values, stored_avatar
from personalab.graph.api.schemas.library import Instance, validate_model
from personalab.graph.api.schemas.personas import (
    PersonaChoice,
    PersonaDeleted,
    PersonaEdit,
    PersonaInput,
    PersonaOut,
)
from personalab.stores import library_rows as rows
from personalab.stores import personas as store
from personalab.stores.tables import Persona


def _out(session: Any, row: Persona) -> PersonaOut:
    assert row.id is not None
    return PersonaOut(
        id=row.id,
        name=row.name,
        description=row.description or "",
        avatar_mime=row.avatar_mime if row.avatar_image else None,
        avatar_bytes=len(row.avatar_image or b""),
        created_at=row.created_at,
        updated_at=row.updated_at,
        owner=row.owner,
        instances=store.instances_with_persona(session, row.id),
    )


class Personas(_Area):
    """User personas: create, list, get, edit, delete, avatar; `use` picks an instance's persona."""

    def create(self, data: PersonaInput | Mapping[str, Any]) -> PersonaOut:
        item = validate_model(PersonaInput, data, "persona")
        mime = check_avatar(item.avatar) if item.avatar is not None else None
        with self._session() as session:
            fields = {
                "name": item.name,
                "description": item.description,
                "avatar_image": item.avatar,
                "avatar_mime": mime,
            }
            return _out(session, store.add_persona(session, fields, self.owner))

    def list(self) -> list[PersonaOut]:
        """The caller's personas (the operator: every one)."""
        with self._session() as session:
            return [_out(session, row) for row in store.persona_rows(session, self.owner)]

    def get(self, persona_id: int) -> PersonaOut:
        with self._session() as session:
            return _out(session, store.persona_row(session, persona_id, self.owner))

    def avatar(self, persona_id: int) -> tuple[bytes, str]:
        """The persona's avatar image and its MIME type; `NotFound` when it has none."""
        with self._session() as session:
            return stored_avatar(store.persona_row(session, persona_id, self.owner), f"persona {persona_id}")

    def edit(self, persona_id: int, changes: PersonaEdit | Mapping[str, Any]) -> PersonaOut:
        """Change the given fields; instances playing with it use the new ones from their next turn."""
        edit = validate_model(PersonaEdit, changes, "persona")
        mime = check_avatar(edit.avatar) if edit.avatar is not None else None
        with self._session() as session:
            row = store.persona_row(session, persona_id, self.owner)
            store.change_persona(session, row, edited_values(edit, mime))
            return _out(session, row)

    def delete(self, persona_id: int) -> PersonaDeleted:
        """Delete a persona; the instances playing with it go on without one (the user name per turn)."""
        with self._session() as session:
            row = store.persona_row(session, persona_id, self.owner)
            return PersonaDeleted(id=persona_id, instances_cleared=store.delete_persona(session, row))

    def use(self, instance_id: int, persona_id: int | None) -> Instance:
        """Instance `instance_id` plays with persona `persona_id` from its next turn (None: with none). Both must
        be the caller's: `InstanceNotFound` / `NotFound` naming the id otherwise."""
        choice = validate_model(PersonaChoice, {"persona_id": persona_id}, "instance")
        with self._session() as session:
            instance_row = rows.instance_row(session, instance_id, self.owner)
            if choice.persona_id is not None:
                store.persona_row(session, choice.persona_id, self.owner)
            store.set_instance_persona(session, instance_row, choice.persona_id)
            return _instance(session, instance_row)

    def of_instance(self, instance_id: int) -> PersonaOut | None:
        """The persona instance `instance_id` plays with (None: none)."""
        with self._session() as session:
            rows.instance_row(session, instance_id, self.owner)
            row = store.persona_of_instance(session, instance_id)
            return _out(session, row) if row is not None else None
