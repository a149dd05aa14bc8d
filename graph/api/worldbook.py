"""The world book (seed 004 世界书) through the API (issues 15, 23): entries added, listed, shown, edited one by one
(any of their own fields, `probability` too), enabled / disabled, reordered (order values), deleted; files
imported and exported (PersonaLab's, SillyTavern world info, a card's lorebook); the SillyTavern-style settings.

Scope: `character_id` (a character's book), `instance_id` (an instance's), neither (global: the operator's).
A signed-in user changes only their own instances' and characters' entries (a shared character's entries they may
read); another user's id is `NotFound` naming it (`knowledge.check_scope_owner`). Every operation is one
transaction: a bad value is `InvalidInput` naming the entry and the field, and nothing is written.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.knowledge import scope_of, update_worldbook_settings, worldbook_settings
from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.nodes.rules.validation import bad_character
from personalab.nodes.rules.worldbook import (
    KINDS,
    POSITIONS,
    SELECTIVE_LOGICS,
    SETTING_FIELDS,
    TRIGGER_TYPES,
    WorldbookEntry,
    WorldbookSettings,
    sillytavern_options,
)
from personalab.stores.db import session_scope
from personalab.stores.files import parse_json
from personalab.stores.worldbook import delete_worldbook_entry, list_worldbook
from personalab.stores.worldbook_entries import (
    EDITABLE,
    add_entry,
    entry_row,
    get_entry,
    reorder_entries,
    update_entry,
)
from personalab.stores.worldbook_files import (
    MAX_IMPORT_BYTES,
    export_sillytavern,
    export_worldbook,
    import_worldbook,
    read_json_file,
    write_json_file,
)

FORMATS = ("personalab", "sillytavern")
__all__ = [
    "EDITABLE",
    "MAX_IMPORT_BYTES",
    "bad_character",
    "parse_json",
    "FORMATS",
    "KINDS",
    "POSITIONS",
    "SELECTIVE_LOGICS",
    "SETTING_FIELDS",
    "TRIGGER_TYPES",
    "WorldbookApi",
    "entry_view",
]


def entry_view(entry: WorldbookEntry) -> dict[str, Any]:
    """An entry as JSON data: id, scope, its own fields (the export's), the probability and timed effects
    (sticky, cooldown, delay) its SillyTavern source sets (else the defaults)."""
    options = sillytavern_options(entry)
    return {
        "id": int(entry.id),
        "scope": entry.scope,
        **entry.fields_dict(),
        "probability": options.probability,
        "sticky": options.sticky,
        "cooldown": options.cooldown,
        "delay": options.delay,
        "source_format": entry.source_format,
    }


class WorldbookApi:
    """`api.worldbook`: add, list, get, edit, enable, disable, delete, reorder, import / export, settings."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    # ownership

    def _entry_check(self, entry_id: Any, change: bool) -> None:
        """`NotFound` naming the entry unless the caller may read (or `change`) it."""
        with session_scope(self.caller.database_url) as session:
            row = entry_row(session, entry_id)
            scope = (row.role_id, row.save_id)
        if self.caller.owner is None:
            return
        if scope == (None, None):
            raise NotFound(f"world-book entry {entry_id} does not exist")  # the global book is the operator's
        try:
            self.caller.check_scope(scope[0], scope[1], change=change)
        except NotFound:
            raise NotFound(f"world-book entry {entry_id} does not exist") from None

    # entries

    def add(
        self, content: str, *, character_id: int | None = None, instance_id: int | None = None, **fields: Any
    ) -> dict[str, Any]:
        """A new entry in the scope; `fields` are the entry's own fields (keywords, trigger_type, ...)."""
        self.caller.check_scope(character_id, instance_id, change=True)
        with session_scope(self.caller.database_url) as session:
            return entry_view(add_entry(session, content, scope_of(character_id, instance_id), fields))

    def list(
        self, *, character_id: int | None = None, instance_id: int | None = None, visible: bool = False
    ) -> list[dict[str, Any]]:
        """The scope's entries (with `visible`: all it sees, global + character + own), oldest first."""
        self.caller.check_scope(character_id, instance_id, change=False)
        with session_scope(self.caller.database_url) as session:
            entries = list_worldbook(session, scope_of(character_id, instance_id), visible=visible)
        return [entry_view(entry) for entry in entries]

    def get(self, entry_id: int) -> dict[str, Any]:
        self._entry_check(entry_id, False)
        with session_scope(self.caller.database_url) as session:
            return entry_view(get_entry(session, entry_id))

    def edit(self, entry_id: int, **changes: Any) -> dict[str, Any]:
        """Change the entry's fields (`EDITABLE`: keywords, secondary keywords, content, position, priority (its
        order), probability, enabled, ...); validated as the whole entry, nothing written on a bad value."""
        self._entry_check(entry_id, True)
        with session_scope(self.caller.database_url) as session:
            return entry_view(update_entry(session, entry_id, changes))

    def enable(self, entry_id: int) -> dict[str, Any]:
        return self.edit(entry_id, enabled=True)

    def disable(self, entry_id: int) -> dict[str, Any]:
        """A disabled entry is kept and never fires."""
        return self.edit(entry_id, enabled=False)

    def delete(self, entry_id: int) -> dict[str, Any]:
        self._entry_check(entry_id, True)
        with session_scope(self.caller.database_url) as session:
            entry_row(session, entry_id)
            delete_worldbook_entry(session, entry_id)
        return {"deleted": "world-book entry", "id": entry_id}

    def reorder(self, orders: Mapping[int, int]) -> builtins.list[dict[str, Any]]:
        """Give entries their order values (`priority`: higher first), all or nothing."""
        if not isinstance(orders, Mapping) or not orders:
            raise InvalidInput("orders: give at least one entry id and its order value")
        for entry_id in orders:
            self._entry_check(entry_id, True)
        with session_scope(self.caller.database_url) as session:
            return [entry_view(entry) for entry in reorder_entries(session, orders)]

    # files

    def import_data(
        self, data: Any, *, character_id: int | None = None, instance_id: int | None = None
    ) -> dict[str, Any]:
        """Import a world-book file's JSON data into the scope, all or nothing; the import report."""
        self.caller.check_scope(character_id, instance_id, change=True)
        scope = scope_of(character_id, instance_id)
        with session_scope(self.caller.database_url) as session:
            report = import_worldbook(session, data, scope)
        return {"scope": scope.label, **asdict(report), "summary": report.summary()}

    def import_file(
        self, path: str | os.PathLike[str], *, character_id: int | None = None, instance_id: int | None = None
    ) -> dict[str, Any]:
        """`import_data` of the JSON in `path` (a regular file, at most the import limit)."""
        self.caller.check_scope(character_id, instance_id, change=True)
        return self.import_data(read_json_file(path), character_id=character_id, instance_id=instance_id)

    def export(
        self,
        format: str = "personalab",
        *,
        character_id: int | None = None,
        instance_id: int | None = None,  # noqa: A002
    ) -> dict[str, Any]:
        """The scope's entries as a PersonaLab export or a SillyTavern world-info file."""
        if format not in FORMATS:
            raise InvalidInput(f"format {format!r} is not one of {', '.join(FORMATS)} (field 'format')")
        self.caller.check_scope(character_id, instance_id, change=False)
        scope = scope_of(character_id, instance_id)
        with session_scope(self.caller.database_url) as session:
            return export_sillytavern(session, scope) if format == "sillytavern" else export_worldbook(session, scope)

    def export_file(self, path: str | os.PathLike[str], data: dict[str, Any]) -> None:
        """Write an export to `path`: a new regular file or a plain file replaced, atomically."""
        write_json_file(path, data, overwrite=True)

    # settings

    @staticmethod
    def validate_settings(changes: Mapping[str, Any]) -> None:
        """Check settings as `set_settings` would (`InvalidInput` naming the field), storing nothing: the
        configuration page's check as the user types (issue 25)."""
        unknown = sorted(str(name) for name in changes if name not in SETTING_FIELDS)
        if unknown:
            raise InvalidInput(f"{unknown[0]}: unknown world-book setting (one of {', '.join(SETTING_FIELDS)})")
        WorldbookSettings(**{name: value for name, value in changes.items() if value is not None})

    def settings(self, *, character_id: int | None = None, instance_id: int | None = None) -> dict[str, Any]:
        """The scope's settings: set there and in effect."""
        return worldbook_settings(
            character_id=character_id,
            instance_id=instance_id,
            owner=self.caller.owner,
            database_url=self.caller.database_url,
        )

    def set_settings(
        self,
        changes: Mapping[str, Any],
        *,
        character_id: int | None = None,
        instance_id: int | None = None,
        clear: bool = False,
    ) -> dict[str, Any]:
        """Set (a value) or unset (None) settings of the scope, after `clear` unsets all."""
        return update_worldbook_settings(
            dict(changes),
            character_id=character_id,
            instance_id=instance_id,
            clear=clear,
            owner=self.caller.owner,
            database_url=self.caller.database_url,
        )
