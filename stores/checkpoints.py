"""Checkpointers: graph state per conversation instance (thread id = uuid5 of the save id).

Embedded default: a SQLite file `checkpoints.sqlite` in the data directory. When the database URL is
PostgreSQL, checkpoints go to the same PostgreSQL database. `open_checkpointer` is for in-process use
(CLI, tests, batch runs); `make_checkpointer` is the async factory `langgraph.json` names for the
served graph (the server needs the async savers).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from personalab.stores.config import data_dir, database_url
from personalab.stores.db import schema_lock, store_unavailable
from personalab.stores.threads import INSTANCE_NAMESPACE, thread_id_for  # noqa: F401  (re-exported: its old home)

# Fixed namespace: the same save id maps to the same thread on every machine.


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
        from personalab.stores.pg_checkpoints import ReconnectingPostgresSaver

        saver = ReconnectingPostgresSaver(conninfo)
        try:
            with schema_lock(url):  # concurrent first setups collide like concurrent CREATE TABLEs (stores.db)
                saver.setup()
            yield saver
        finally:
            saver.conn.close()
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(checkpoint_file(), check_same_thread=False)
    try:
        sqlite_saver = SqliteSaver(conn)
        try:
            sqlite_saver.setup()  # WAL mode
            conn.execute(SQLITE_SYNC)
        except sqlite3.DatabaseError as exc:
            # a full disk, a read-only or damaged file: one line naming it, not the driver's traceback
            raise store_unavailable(exc, f"sqlite:///{checkpoint_file()}") or exc from None
        yield sqlite_saver
    finally:
        conn.close()


@asynccontextmanager
async def make_checkpointer() -> AsyncIterator[BaseCheckpointSaver]:
    """The checkpointer factory of `langgraph.json` (`langgraph dev` and a deployed graph API)."""
    conninfo = _postgres_conninfo(database_url())
    if conninfo:
        from personalab.stores.pg_checkpoints import ReconnectingAsyncPostgresSaver

        pg_saver = await ReconnectingAsyncPostgresSaver.connect(conninfo)
        try:
            with schema_lock():  # one creator at a time, as in open_checkpointer
                await pg_saver.setup()
            yield pg_saver
        finally:
            await pg_saver.conn.close()
        return
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(checkpoint_file())) as saver:
        await saver.setup()  # WAL mode
        await saver.conn.execute(SQLITE_SYNC)
        yield saver


# --------------------------------------------------------------------------------------------------
# Pruning and sizes (issue 14). A turn starts from the story state stored with the last reply on the current
# branch (`story_state`), and rewinds, swipes and core-memory rollbacks write a new checkpoint from it: only a
# thread's latest checkpoint is ever read (`get_state`), never its history. So after each turn the thread keeps
# its latest checkpoint (with its pending writes) and the rest is deleted; branches need no older checkpoint.


def prune_after_turn(instance_id: int, url: str | None = None) -> None:
    """Prune the instance's thread on its background writer once the turn (in-process: with its last checkpoint
    write) has ended. A failed prune is logged; the next turn's, or `personalab doctor --repair`, does it."""
    from personalab.stores.background import run_in_background

    run_in_background(  # the next turn reads the latest checkpoint, which a prune keeps
        prune_thread,
        thread_id_for(instance_id),
        url,
        checkpoint_file(),
        instance_id=instance_id,
        after_turn_of=instance_id,
        unread_by_retrieval=True,
        unread_by_director=True,
    )


KEPT_FIELDS = (
    "turn",
    "plot_state",
    "core_memory",
    "core_memory_versions",
    "relationship",
    "relations",
    "worldbook_fired",
    "state_events",
    "recall_floor_turn",
    "shown_memory",
)
"""The story fields a stored turn keeps (nodes.state.STORY_FIELDS; stores cannot import the graph's state)."""


def keep_story_states(saver: BaseCheckpointSaver, thread_id: str, url: str | None) -> int:
    """Store the story state of each checkpoint of `thread_id` whose turn's reply has none (issue 27: a thread
    from before story states were stored, where its checkpoints are the only record of each turn's state), at
    that reply, before pruning deletes the checkpoint: a rewind to a line of those turns then finds its state.
    Returns how many were stored."""
    from personalab.stores.db import session_scope
    from personalab.stores.turn_tables import StoryState, TurnRecord
    from personalab.stores.turns import save_story_state
    from sqlmodel import col, select

    stored = 0
    with session_scope(url) as session:
        for item in saver.list({"configurable": {"thread_id": thread_id}}):
            values = item.checkpoint.get("channel_values") or {}
            instance_id, user_line_id, turn = values.get("instance_id"), values.get("user_line_id"), values.get("turn")
            if not isinstance(instance_id, int) or not isinstance(user_line_id, int) or not turn:
                continue
            reply = session.exec(
                select(TurnRecord.reply_line_id).where(
                    col(TurnRecord.save_id) == instance_id,
                    col(TurnRecord.user_line_id) == user_line_id,
                    col(TurnRecord.turn) == turn,
                    col(TurnRecord.status) == "ok",
                    col(TurnRecord.reply_line_id).is_not(None),
                )
            ).first()
            if reply is None:
                continue
            known = session.exec(
                select(StoryState.id).where(
                    col(StoryState.save_id) == instance_id, col(StoryState.reply_line_id) == reply
                )
            ).first()
            if known is None:
                kept = {name: values[name] for name in KEPT_FIELDS if name in values}
                save_story_state(session, instance_id, int(turn), kept, reply)
                stored += 1
    return stored


def served_checkpoints_url() -> str | None:
    """Where the serving engine keeps the served graph's checkpoints when it is not PersonaLab's checkpointer
    (issue 27): Aegra (`personalab serve-production` sets AEGRA_CONFIG) ignores the checkpointer factory of
    langgraph.json and keeps them in its own PostgreSQL database, its DATABASE_URL. None: PersonaLab's own."""
    if not os.environ.get("AEGRA_CONFIG"):
        return None
    engine = os.environ.get("DATABASE_URL", "")
    if not engine.startswith("postgresql"):
        return None
    scheme, _, rest = engine.partition("://")
    return f"postgresql://{rest}" if "+" in scheme else engine  # Aegra's own driver (asyncpg) is not ours


def turns_without_story_state(instance_id: int, url: str | None) -> bool:
    """Whether a stored turn of the instance has no story state of its own (a turn played by a version that kept
    it only in checkpoints): only then can a checkpoint be the only record of a turn's state. One query, where
    reading every checkpoint of the thread (`keep_story_states`) cost more than the rest of a prune."""
    from personalab.stores.db import session_scope
    from personalab.stores.turn_tables import StoryState, TurnRecord
    from sqlmodel import col, select

    with session_scope(url) as session:
        kept = select(StoryState.reply_line_id).where(
            col(StoryState.save_id) == instance_id, col(StoryState.reply_line_id).is_not(None)
        )
        missing = session.exec(
            select(TurnRecord.id)
            .where(
                col(TurnRecord.save_id) == instance_id,
                col(TurnRecord.status) == "ok",
                col(TurnRecord.reply_line_id).is_not(None),
                col(TurnRecord.reply_line_id).not_in(kept),
            )
            .limit(1)
        ).first()
    return missing is not None


_prune_savers: OrderedDict[str, Any] = OrderedDict()
_prune_savers_lock = threading.Lock()
PRUNE_CONNECTIONS = 4
"""Databases a process keeps a pruning connection to (a server has one; the tests' many schemas would each keep one)."""


def _prune_saver(conninfo: str) -> Any:
    """The process's PostgreSQL saver for pruning on `conninfo`: one connection kept (and made again when the server
    ended it), not a new one after every turn (issue 27: connecting was most of a served worker's prune). Its lock
    serialises the prunes of the process's instances on that connection. The least recently used of more than
    `PRUNE_CONNECTIONS` is closed."""
    from personalab.stores.pg_checkpoints import ReconnectingPostgresSaver

    with _prune_savers_lock:
        saver = _prune_savers.get(conninfo)
        if saver is not None:
            _prune_savers.move_to_end(conninfo)
            return saver
        saver = _prune_savers[conninfo] = ReconnectingPostgresSaver(conninfo)
        evicted = [_prune_savers.popitem(last=False)[1] for _ in range(len(_prune_savers) - PRUNE_CONNECTIONS)]
    _close(evicted)
    return saver


def close_prune_savers() -> None:
    """Close the pruning connections (`stores.db.dispose_engines`: tests, and before a process forks)."""
    with _prune_savers_lock:
        savers = list(_prune_savers.values())
        _prune_savers.clear()
    _close(savers)


def _close(savers: list[Any]) -> None:
    for saver in savers:
        with saver.lock:  # after a prune still running on it
            saver.conn.close()


def prune_thread(
    thread_id: str, url: str | None = None, sqlite_file: Path | None = None, instance_id: int | None = None
) -> int:
    """Delete every checkpoint of `thread_id` but the latest of each namespace, with their pending writes (and,
    on PostgreSQL, the blobs only they referenced). Returns how many checkpoints were deleted (-1: unknown, on
    PostgreSQL). Safe while a run appends to the thread: the kept checkpoint is a whole state. A checkpoint that
    is the only record of a turn's story state is stored as that turn's state first (`keep_story_states`; given
    the thread's `instance_id`, only when one of its turns has no story state). Served by Aegra, the checkpoints
    are in Aegra's database (`served_checkpoints_url`); the story states still go to PersonaLab's (`url`)."""
    must_keep = instance_id is None or turns_without_story_state(instance_id, url)
    conninfo = _postgres_conninfo(served_checkpoints_url() or url or database_url())
    if conninfo:
        saver = _prune_saver(conninfo)
        if must_keep:
            keep_story_states(saver, thread_id, url)
        saver.prune([thread_id], strategy="keep_latest")
        return -1
    sqlite_file = sqlite_file or checkpoint_file()
    if not sqlite_file.exists():
        return 0
    conn = sqlite3.connect(sqlite_file, timeout=30, isolation_level=None)
    try:
        if not _sqlite_has_checkpoints(conn):
            return 0
        if (
            must_keep
            and conn.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?", (thread_id,)).fetchone()[0] > 1
        ):
            from langgraph.checkpoint.sqlite import SqliteSaver

            keep_story_states(SqliteSaver(conn), thread_id, url)
        conn.execute("BEGIN IMMEDIATE")
        deleted = conn.execute(
            "DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_id NOT IN"
            " (SELECT MAX(checkpoint_id) FROM checkpoints WHERE thread_id = ? GROUP BY checkpoint_ns)",
            (thread_id, thread_id),
        ).rowcount
        conn.execute(
            "DELETE FROM writes WHERE thread_id = ? AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE"
            " c.thread_id = writes.thread_id AND c.checkpoint_ns = writes.checkpoint_ns"
            " AND c.checkpoint_id = writes.checkpoint_id)",
            (thread_id,),
        )
        conn.execute("COMMIT")
        return int(deleted)
    finally:
        conn.close()


def _sqlite_has_checkpoints(conn: sqlite3.Connection) -> bool:
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints'").fetchone()
    return found is not None


def checkpoint_sizes(url: str | None = None) -> dict[str, dict[str, int]]:
    """Per thread: how many checkpoints it has and the bytes they take with their pending writes (and, on
    PostgreSQL, their channel blobs): {thread id: {"checkpoints", "bytes"}}."""
    sizes: dict[str, dict[str, int]] = {}

    def add(rows: list[tuple[str, int, int]]) -> None:
        for thread, count, size in rows:
            entry = sizes.setdefault(str(thread), {"checkpoints": 0, "bytes": 0})
            entry["checkpoints"] += int(count)
            entry["bytes"] += int(size or 0)

    conninfo = _postgres_conninfo(url or database_url())
    if conninfo:
        import psycopg

        with psycopg.connect(conninfo) as pg:
            if pg.execute("SELECT to_regclass('checkpoints')").fetchone() == (None,):
                return {}
            add(
                pg.execute(
                    "SELECT thread_id, COUNT(*), SUM(pg_column_size(checkpoint) + pg_column_size(metadata))"
                    " FROM checkpoints GROUP BY thread_id"
                ).fetchall()
            )
            add(
                pg.execute(
                    "SELECT thread_id, 0, SUM(COALESCE(LENGTH(blob), 0)) FROM checkpoint_blobs GROUP BY thread_id"
                ).fetchall()
            )
            add(
                pg.execute(
                    "SELECT thread_id, 0, SUM(LENGTH(blob)) FROM checkpoint_writes GROUP BY thread_id"
                ).fetchall()
            )
        return sizes
    if not checkpoint_file().exists():
        return {}
    conn = sqlite3.connect(checkpoint_file(), timeout=30)
    try:
        if not _sqlite_has_checkpoints(conn):
            return {}
        add(
            conn.execute(
                "SELECT thread_id, COUNT(*), SUM(LENGTH(checkpoint) + LENGTH(metadata)) FROM checkpoints"
                " GROUP BY thread_id"
            ).fetchall()
        )
        add(conn.execute("SELECT thread_id, 0, SUM(LENGTH(value)) FROM writes GROUP BY thread_id").fetchall())
    finally:
        conn.close()
    return sizes
