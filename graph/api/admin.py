"""Administration through the API (issue 14, 23): the turn locks (listed, a stuck one released), `doctor` (queued
writes, orphan vectors, expired locks, checkpoint sizes; repaired on request) and the database's migrations
(its revision, the upgrade). All of it is the server operator's: a caller bound to a signed-in user gets
`NotAllowed` naming the operation, and nothing is read or changed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.story import check_id
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InvalidInput, NotAllowed
from personalab.stores import migrate
from personalab.stores.background import flush_event_writes
from personalab.stores.db import schema_lock, session_scope
from personalab.stores.doctor import diagnose
from personalab.stores.turns import list_turn_locks, unlock_instance
from personalab.stores.worldbook import GLOBAL
from personalab.stores.worldbook_files import (
    WORLDBOOK_FORMAT,
    ImportReport,
    export_knowledge,
    export_worldbook,
    import_knowledge,
    import_worldbook,
    read_json_file,
)
from personalab.stores.worldbook_settings import get_worldbook_settings, set_worldbook_settings

# The global knowledge and world book in one file (issue 27: `instance export` leaves them out)
GLOBAL_FORMAT = "personalab-global"
GLOBAL_VERSION = 1


class AdminApi:
    """`api.admin`: locks, release_lock, doctor, migration_state, upgrade, export_global, import_global,
    ensure_database, setup_lock."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def _operator(self, what: str) -> str | None:
        if self.caller.owner is not None:
            raise NotAllowed(f"{what}: administration is the server operator's, not a signed-in user's")
        # the configured URL as the turns name it (their background writers are keyed by it), not None
        return self.caller.database_url if self.caller.database_url is not None else Context().database_url

    def locks(self) -> list[dict[str, Any]]:
        """Every held turn lock: instance, holder (host:pid), since, until, expired."""
        url = self._operator("locks")
        with session_scope(url) as session:
            return list_turn_locks(session)

    def release_lock(self, instance_id: int) -> dict[str, Any]:
        """Free an instance's turn lock whoever holds it (a stuck one: its holder died); what it was, or
        `{"unlocked": false}`. A turn still running there loses its lock and stores no reply."""
        url = self._operator("release lock")
        check_id(instance_id, "instance_id")
        info = unlock_instance(instance_id, url)  # InstanceNotFound naming it
        return {"instance_id": instance_id, "unlocked": info is not None, "lock": info}

    def doctor(self, *, repair: bool = False) -> dict[str, Any]:
        """The stores' health: `healthy` and the findings (status ok / problem / info / repaired, check, message)."""
        url = self._operator("doctor")
        report = diagnose(url, repair=repair)
        flush_event_writes()
        return report.to_dict()

    def migration_state(self) -> dict[str, Any]:
        """The database's revision, the newest one, whether it is up to date and has tables."""
        return migrate.current(self._operator("migrations"))

    def upgrade(self) -> dict[str, Any]:
        """Run the migrations the database lacks: {before, after, stamped_baseline}."""
        return migrate.upgrade(self._operator("migrations"))

    def export_global(self) -> dict[str, Any]:
        """The global knowledge (with its keywords) and the global world book (entries and settings) as one
        lossless file (issue 27: an instance's export holds its own entries, never the global ones); the operator's."""
        url = self._operator("global export")
        with session_scope(url) as session:
            return {
                "format": GLOBAL_FORMAT,
                "version": GLOBAL_VERSION,
                "knowledge": export_knowledge(session, with_keywords=True),
                "worldbook": export_worldbook(session),
                "worldbook_settings": get_worldbook_settings(session).as_dict(),
            }

    def import_global(self, data: Any) -> dict[str, Any]:
        """Import an `export_global` file into the global scope, all or nothing: entries already there (same tag
        and content) are not added twice; settings the file sets replace the global ones."""
        url = self._operator("global import")
        if not isinstance(data, dict) or data.get("format") != GLOBAL_FORMAT:
            raise InvalidInput(f"the file is not a PersonaLab global export (field 'format' must be {GLOBAL_FORMAT!r})")
        if data.get("version") != GLOBAL_VERSION:
            raise InvalidInput(f"version {data.get('version')!r} is not {GLOBAL_VERSION} (field 'version')")
        settings = data.get("worldbook_settings") or {}
        if not isinstance(settings, dict):
            raise InvalidInput("worldbook_settings: expected an object of setting names and values")
        with session_scope(url) as session:  # one transaction: a bad part changes nothing
            knowledge = import_knowledge(session, data.get("knowledge") or [])
            book = data.get("worldbook")
            worldbook = import_worldbook(session, book) if book else ImportReport(WORLDBOOK_FORMAT, 0)
            set_worldbook_settings(session, GLOBAL, {k: v for k, v in settings.items() if v is not None})
        return {
            "knowledge": {"imported": knowledge.imported, "duplicates": knowledge.duplicates},
            "worldbook": {"imported": worldbook.imported, "duplicates": worldbook.duplicates},
            "summary": f"knowledge: {knowledge.summary()}; world book: {worldbook.summary()}",
        }

    def import_global_file(self, path: str | os.PathLike[str]) -> dict[str, Any]:
        """`import_global` of the JSON in `path` (a regular file, at most the import limit)."""
        self._operator("global import")
        return self.import_global(read_json_file(path))

    def ensure_database(self, url: str) -> bool:
        """Create the PostgreSQL database `url` names if it is missing (the serving engine's own, issue 27);
        True when it was created."""
        self._operator("create database")
        return migrate.ensure_postgres_database(url)

    @contextmanager
    def setup_lock(self) -> Iterator[None]:
        """Hold the database's schema lock (the one `upgrade` takes, a PostgreSQL advisory lock; elsewhere a no-op)
        while the block runs: for once-only start-up steps of several processes starting at once, such as the
        serving engine's own migrations (issue 27 "two processes starting migrations at once"). Not re-entrant:
        do not call `upgrade` inside the block (it takes the same lock on another connection and would wait out
        its deadline)."""
        url = self._operator("setup lock")
        with schema_lock(url):
            yield
