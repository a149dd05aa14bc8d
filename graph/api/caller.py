"""Who calls the API and on which database: bound once, passed to every operation (LAYOUT "one door").

`owner` is the user an operation acts for (None: the local operator, as the CLI without auth); `database_url`
is the database (None: the configured one, `PERSONALAB_DATABASE_URL` or SQLite in the data folder).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Caller:
    """The caller every operation of `personalab.graph.api` acts for."""

    owner: str | None = None
    database_url: str | None = None

    def check_scope(
        self, character_id: int | None = None, instance_id: int | None = None, *, change: bool = False
    ) -> None:
        """The scope (global, a character's, an instance's) is one this caller may read (or `change`): the rule is
        `knowledge.check_scope_owner`; every area with scoped data (world book, knowledge, trigger configuration,
        suggestions) asks here."""
        from personalab.graph.api.knowledge import check_scope_owner  # stores load on first check, not on import

        check_scope_owner(
            self.owner,
            character_id=character_id,
            instance_id=instance_id,
            change=change,
            database_url=self.database_url,
        )
