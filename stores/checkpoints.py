"""Checkpointers: graph state per conversation instance (thread id = uuid5 of the save id).

Embedded default: a SQLite file `checkpoints.sqlite` in the data directory. When the database URL is
PostgreSQL, checkpoints go to the same PostgreSQL database. `open_checkpointer` is for in-process use
(CLI, tests, batch runs); `make_checkpointer` is the async factory `langgraph.json` names for the
served graph (the server needs the async savers).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from langgraph.checkpoint.base import BaseCheckpointSaver
from personalab.stores.config import data_dir, database_url
from personalab.stores.db import schema_lock

# Fixed namespace: the same save id maps to the same thread on every machine.
INSTANCE_NAMESPACE = uuid.UUID("6f0c1d3e-4f7a-5b2c-9d8e-1a2b3c4d5e6f")


def thread_id_for(instance_id: int | str) -> str:
    """The LangGraph thread id of a conversation instance: uuid5 of its save id."""
    return str(uuid.uuid5(INSTANCE_NAMESPACE, f"save:{instance_id}"))


def _postgres_conninfo(url: str) -> str | None:
    if not url.startswith("postgresql"):
        return None
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


# As for the main database (stores.db): in WAL mode, NORMAL syncs the file at WAL checkpoints, not on every
# commit, and cannot corrupt it; a power cut may lose the last turns' checkpoints. FULL's sync on each turn's
# commit was the slowest step at the end of a turn (tens of ms on a virtual disk).
SQLITE_SYNC = "PRAGMA synchronous=NORMAL"


def checkpoint_file() -> Path:
    return data_dir() / "checkpoints.sqlite"


@contextmanager
def open_checkpointer(url: str | None = None) -> Iterator[BaseCheckpointSaver]:
    """A synchronous checkpointer on the configured database (SQLite file or PostgreSQL)."""
    conninfo = _postgres_conninfo(url or database_url())
    if conninfo:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(conninfo) as saver:
            with schema_lock(url):  # concurrent first setups collide like concurrent CREATE TABLEs (stores.db)
                saver.setup()
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(checkpoint_file(), check_same_thread=False)
    try:
        sqlite_saver = SqliteSaver(conn)
        sqlite_saver.setup()  # WAL mode
        conn.execute(SQLITE_SYNC)
        yield sqlite_saver
    finally:
        conn.close()


@asynccontextmanager
async def make_checkpointer() -> AsyncIterator[BaseCheckpointSaver]:
    """The checkpointer factory of `langgraph.json` (`langgraph dev` and a deployed graph API)."""
    conninfo = _postgres_conninfo(database_url())
    if conninfo:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(conninfo) as saver:
            with schema_lock():  # one creator at a time, as in open_checkpointer
                await saver.setup()
            yield saver
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(checkpoint_file())) as saver:
        await saver.setup()  # WAL mode
        await saver.conn.execute(SQLITE_SYNC)
        yield saver
