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
