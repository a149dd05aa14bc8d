"""Alembic's environment for PersonaLab: runs the revisions on the connection `personalab.stores.migrate` gives
(config.attributes["connection"]); the target is SQLModel's metadata with every PersonaLab table registered."""

from __future__ import annotations

from alembic import context
from personalab.stores import db  # noqa: F401 - registers every table on SQLModel.metadata
from sqlmodel import SQLModel


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run PersonaLab's migrations through `personalab db upgrade` (stores/migrate.py)")
    # render_as_batch: SQLite alters a table by rebuilding it, which Alembic's batch mode does
    context.configure(connection=connection, target_metadata=SQLModel.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


run_migrations_online()
