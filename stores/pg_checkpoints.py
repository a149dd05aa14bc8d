"""The PostgreSQL checkpointers (stores/checkpoints.py opens them): LangGraph's savers on one connection each that
is checked before use and made again when the server ended it (issue 14 fault tests: the database down mid-turn).
Imported only when the database is PostgreSQL. The savers override `_cursor`, the one way LangGraph's savers reach
their connection in langgraph-checkpoint-postgres 3.2 (the range pyproject.toml pins): check it on an upgrade."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection, AsyncCursor, Connection, Cursor
from psycopg.rows import DictRow, dict_row


class _PipelineEndFilter(logging.Filter):
    """psycopg logs "error ignored terminating <Pipeline>" when a pipeline ends on a connection the server closed;
    the statement's own error is raised to the caller (one line on the CLI), so the log line would be a second."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("error ignored terminating")


logging.getLogger("psycopg").addFilter(_PipelineEndFilter())


def _connect(conninfo: str) -> Connection[DictRow]:
    """A connection as LangGraph's `PostgresSaver.from_conn_string` makes it."""
    return Connection.connect(conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row)


def _usable(conn: Connection[Any] | AsyncConnection[Any]) -> bool:
    return not (conn.closed or conn.broken)


class ReconnectingPostgresSaver(PostgresSaver):
    """LangGraph's `PostgresSaver` on one connection that is checked before each use (an empty query, as the
    engine's `pool_pre_ping`) and made again when the server ended it (restarted, down a while): with
    `from_conn_string`'s connection, a process that outlives a database restart (batch runs, the Python API)
    failed every later turn on the dead connection (issue 14 fault tests: the database down mid-turn). While
    the database is down the connection attempt fails, which the turn reports as `StoreUnavailable`."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        super().__init__(_connect(conninfo))

    @contextmanager
    def _cursor(self, *, pipeline: bool = False) -> Iterator[Cursor[DictRow]]:
        with self.lock:
            assert isinstance(self.conn, Connection)  # made here, never a pool
            if not _alive(self.conn):
                dead, self.conn = self.conn, _connect(self._conninfo)
                dead.close()
        with super()._cursor(pipeline=pipeline) as cursor:
            yield cursor


def _alive(conn: Connection[Any]) -> bool:
    if not _usable(conn):
        return False
    try:
        conn.execute("")  # autocommit: never inside a transaction here
    except psycopg.Error:
        return False
    return True


class ReconnectingAsyncPostgresSaver(AsyncPostgresSaver):
    """`ReconnectingPostgresSaver` for the served graph: a `langgraph dev` or deployed server outlives database
    restarts, and its checkpointer's one connection must not die with the first."""

    def __init__(self, conninfo: str, conn: AsyncConnection[DictRow]) -> None:
        self._conninfo = conninfo
        super().__init__(conn)

    @classmethod
    async def connect(cls, conninfo: str) -> ReconnectingAsyncPostgresSaver:
        return cls(conninfo, await _aconnect(conninfo))

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        async with self.lock:
            assert isinstance(self.conn, AsyncConnection)
            if not await _aalive(self.conn):
                dead, self.conn = self.conn, await _aconnect(self._conninfo)
                await dead.close()
        async with super()._cursor(pipeline=pipeline) as cursor:
            yield cursor


async def _aconnect(conninfo: str) -> AsyncConnection[DictRow]:
    return await AsyncConnection.connect(conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row)


async def _aalive(conn: AsyncConnection[Any]) -> bool:
    if not _usable(conn):
        return False
    try:
        await conn.execute("")
    except psycopg.Error:
        return False
    return True
