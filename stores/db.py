"""Engine and schema: one engine per database URL, SQLite by default, PostgreSQL by URL.

The schema is created by one process at a time, so several processes starting at once on a new database all
succeed (without it, concurrent `CREATE TABLE`s collide: PostgreSQL's `UniqueViolation` on `pg_type`, SQLite's
"table already exists"): on PostgreSQL under an advisory lock per schema (`schema_lock` gives the same lock to
other creators, such as the checkpointer's setup), on SQLite in one `BEGIN IMMEDIATE` transaction (SQLite's
write lock; DDL is transactional there). A database whose tables all exist is only read, so a read-only one
still opens. A database that cannot be opened or written raises `StoreUnavailable` (`store_unavailable`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from personalab.nodes.rules.errors import StoreUnavailable

# Importing the table modules registers every table on SQLModel.metadata before create_all.
from personalab.stores import (  # noqa: F401
    memapi_tables,
    memory_tables,
    outbox_tables,
    review_tables,
    tables,
    trigger_config_tables,
    turn_tables,
    worldbook_tables,
)
from personalab.stores.config import database_url
from personalab.stores.settings import settings
from sqlalchemy import event, inspect, make_url, text
from sqlalchemy.engine import Engine, ExceptionContext
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlmodel import Session, SQLModel, create_engine

# pg_try_advisory_lock(SCHEMA_LOCK_CLASS, hashtext(current_schema())): one schema creator per schema at a time
# The range of an INTEGER column (ids, turns, priorities) on every backend: PostgreSQL's is 4 bytes, so a larger
# number is refused before a query binds it (PostgreSQL raises "integer out of range" even when comparing).
INTEGER_MIN, INTEGER_MAX = -(2**31), 2**31 - 1

SCHEMA_LOCK_CLASS = 0x504C  # "PL"
SCHEMA_LOCK_POLL_S = 0.05
SCHEMA_LOCK_WAIT_S = 300  # creating every table takes well under a second; minutes mean a stuck peer (or, for the
# checkpointer's CREATE INDEX CONCURRENTLY, another session's long transaction on the same database)


def get_engine(url: str | None = None) -> Engine:
    """The engine for `url` (default: `PERSONALAB_DATABASE_URL` or the embedded SQLite file), schema created."""
    # resolved before the cache, so a changed environment (another data directory) gets its own engine
    resolved = url or database_url()
    with _making_lock:
        making = _making.setdefault(resolved, threading.Lock())
    # lru_cache does not hold other threads back while it makes a missing engine: threads starting at once on a
    # new database would each make an engine and create the tables beside each other
    with making:
        return _engine(resolved)


_opened: list[Engine] = []
_making: dict[str, threading.Lock] = {}
_making_lock = threading.Lock()


@lru_cache(maxsize=16)
def _engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        # how long a statement waits for another process's write lock before "database is locked"
        busy = settings().sqlite_busy_timeout
        frozen = read_only_sqlite(url)
        engine = create_engine(
            frozen or url,
            connect_args={"check_same_thread": False, "timeout": busy, **({"uri": True} if frozen else {})},
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            if frozen:
                return  # opened read-only: every pragma below writes the file or its WAL
            # Foreign keys catch a missing parent line at write time; WAL lets the CLI read while a
            # turn writes; in WAL mode synchronous=NORMAL cannot corrupt the file (a power cut may lose
            # the last commits) and spares an fsync on each of a turn's several commits.
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA mmap_size=268435456")
            cur.close()
    else:
        url = url.replace("postgresql://", "postgresql+psycopg://", 1)
        engine = create_engine(url, pool_pre_ping=True)

    @event.listens_for(engine, "handle_error")
    def _unavailable(context: ExceptionContext) -> BaseException | None:
        # a read-only file or folder, a missing server: one line for the user, not a driver's traceback
        if context.is_pre_ping:
            return None  # the pool reconnects; its own handling must see the driver's error
        # a connection the server ended (restarted, down) is still invalidated and replaced at the next checkout
        # (SQLAlchemy does so whatever this returns); the statement that met it fails as a store that went away
        return store_unavailable(context.original_exception, str(engine.url))

    try:
        create_tables(engine)
    except BaseException:
        # lru_cache keeps no engine whose creation raised: close its pooled connections now, or each failed
        # attempt (a background write to a database that went away) leaves them open until the server's limit
        engine.dispose()
        raise
    _opened.append(engine)
    return engine


def create_tables(engine: Engine) -> None:
    """Create the missing tables and add the missing nullable columns, one creator at a time (see the module
    doc); no-op when nothing is missing."""
    with engine.connect() as conn:
        if set(SQLModel.metadata.tables) <= set(inspect(conn).get_table_names()) and not _missing_columns(conn):
            return
    with _schema_lock(engine), engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            # pysqlite opens no transaction for DDL on its own: take SQLite's write lock for the whole creation
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        SQLModel.metadata.create_all(conn)  # checkfirst: sees what an earlier creator made
        add_missing_columns(conn)


def _missing_columns(conn: Any) -> list[tuple[str, Any]]:
    """(table, column) of the model's columns an existing table lacks (a database made by an older version)."""
    inspector = inspect(conn)
    existing = set(inspector.get_table_names())
    missing: list[tuple[str, Any]] = []
    for name, table in SQLModel.metadata.tables.items():
        if name in existing:
            have = {column["name"] for column in inspector.get_columns(name)}
            missing.extend((name, column) for column in table.columns if column.name not in have)
    return missing


def add_missing_columns(conn: Any) -> list[str]:
    """Add the model's nullable columns an existing table lacks (`ALTER TABLE … ADD COLUMN`), inside the
    creator's transaction; idempotent. Columns added by a later version are nullable for this reason: a
    NOT NULL one cannot be added to a table with rows, and is left for a migration (named in the error)."""
    added = []
    for table, column in _missing_columns(conn):
        if not column.nullable:
            raise StoreUnavailable(f"table {table} lacks the NOT NULL column {column.name}: migrate the database")
        kind = column.type.compile(dialect=conn.dialect)
        preparer = conn.dialect.identifier_preparer
        conn.exec_driver_sql(f"ALTER TABLE {preparer.quote(table)} ADD COLUMN {preparer.quote(column.name)} {kind}")
        added.append(f"{table}.{column.name}")
    return added


@contextmanager
def schema_lock(url: str | None = None) -> Iterator[None]:
    """Hold the schema creators' lock of `url`'s database while the block runs (PostgreSQL; elsewhere a no-op):
    for setups that create tables on their own connection, such as LangGraph's checkpointer."""
    with _schema_lock(get_engine(url)):
        yield


@contextmanager
def _schema_lock(engine: Engine) -> Iterator[None]:
    """PostgreSQL: a session-level advisory lock per schema, taken by polling `pg_try_advisory_lock` on an
    autocommit connection. Polling, not a blocking `pg_advisory_[xact_]lock`: a waiter blocked in a statement
    holds a snapshot, and the checkpointer's `CREATE INDEX CONCURRENTLY` waits for every older snapshot, so the
    lock holder would wait for its waiters (and for its own idle transaction) for ever."""
    if engine.dialect.name != "postgresql":
        yield
        return
    # current_schema() is NULL when the search path names no existing schema (one dropped under a running
    # process): pg_try_advisory_lock would then answer NULL, never true, and the loop wait out its deadline
    key = "(:cls, hashtext(coalesce(current_schema(), '')))"
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        deadline = time.monotonic() + SCHEMA_LOCK_WAIT_S
        while not conn.execute(text(f"SELECT pg_try_advisory_lock{key}"), {"cls": SCHEMA_LOCK_CLASS}).scalar():
            if time.monotonic() > deadline:
                raise StoreUnavailable(
                    f"the database {_name(str(engine.url))}is busy: another process has been creating its tables "
                    f"for over {SCHEMA_LOCK_WAIT_S} s"
                )
            time.sleep(SCHEMA_LOCK_POLL_S)
        try:
            yield
        finally:
            # a dropped connection releases the lock too; unlock so the pooled connection goes back clean
            conn.execute(text(f"SELECT pg_advisory_unlock{key}"), {"cls": SCHEMA_LOCK_CLASS})


def _sqlite_file(url: str | None) -> Path | None:
    try:
        parsed = make_url(url or "")
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    if parsed.database.startswith("file:"):  # the read-only URI of a read-only folder's file (read_only_uri)
        return Path(unquote(parsed.database.removeprefix("file:")))
    return Path(parsed.database)


def read_only_folder(path: Path) -> bool:
    """`path`'s folder cannot be written: a read-only file system (statvfs's ST_RDONLY, which binds root too) or,
    for anyone else, no write permission."""
    folder = path.parent
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return True
    except OSError:
        return False
    return os.geteuid() != 0 and not os.access(folder, os.W_OK)


def read_only_sqlite(url: str) -> str | None:
    """For a SQLite file in a read-only folder (issue 27), the URI that opens it for reading only; None otherwise.
    A WAL-mode file needs its `-wal` / `-shm` files beside it, which a read-only folder cannot get: without a
    `-wal` file there is nothing uncommitted to read, so the file is opened `immutable` (no locks, no WAL). With
    one left beside it SQLite reads it as it is (None: the plain open works)."""
    path = _sqlite_file(url)
    if path is None or not path.is_file() or not read_only_folder(path):
        return None
    if Path(f"{path}-wal").exists():
        return None
    return f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&immutable=1&uri=true"


# What SQLite says when its file or folder cannot be opened or written (sqlite3_errstr's texts).
SQLITE_UNAVAILABLE = {
    "attempt to write a readonly database": "cannot be written",
    "unable to open database file": "cannot be opened",
    "file is not a database": "is not a database",
    "database disk image is malformed": "is damaged",
    "database or disk is full": "cannot be written: the disk is full",
    "disk i/o error": "cannot be written: disk I/O error (a full disk or a failing device)",
    "database is locked": "is locked by another process (waited PERSONALAB_SQLITE_BUSY_TIMEOUT for its write lock)",
}
# PostgreSQL's SQLSTATE classes and codes for "not this input's fault": no connection (08, and 57P01-57P03: the
# server ended the connection or accepts none now), refused login (28),
# no such database (3D000), a read-only server or transaction (25006), no right to write (42501), insufficient
# resources (53: a full disk, 53100; out of memory; too many connections).
PG_UNAVAILABLE = {
    "08": "cannot be reached",
    "57P01": "cannot be reached",  # the server ended the connection: shut down, restarted, or by an operator
    "57P02": "cannot be reached",  # crash shutdown
    "57P03": "cannot be reached",  # starting up or shutting down: no connection now
    "28": "refused the login",
    "3D000": "does not exist",
    "25006": "cannot be written",
    "42501": "cannot be written",
    "53100": "cannot be written: the server's disk is full",
    "53": "is out of resources (disk, memory or connections)",
}


def store_unavailable(exc: BaseException, url: str | None = None) -> StoreUnavailable | None:
    """A `StoreUnavailable` naming the database when `exc` (or what it wraps) says the database cannot be
    opened or written; None for any other error (those are bugs or the caller's to handle)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, StoreUnavailable):
            return current
        what = _unavailable_reason(current)
        if what is not None:
            path = _sqlite_file(url)
            if isinstance(current, sqlite3.DatabaseError) and path is not None and read_only_folder(path):
                # SQLite says only "unable to open database file": the folder's state is the why (issue 27)
                what = f"cannot be written: its folder {path.parent} is read-only"
                return StoreUnavailable(f"the database {path} {what} ({_first_line(current)})")
            return StoreUnavailable(f"the database {_name(url)}{what} ({_first_line(current)})")
        current = current.orig if isinstance(current, DBAPIError) else (current.__cause__ or current.__context__)
    return None


def _unavailable_reason(exc: BaseException) -> str | None:
    if isinstance(exc, sqlite3.DatabaseError):
        message = str(exc).lower()
        return next((what for text_, what in SQLITE_UNAVAILABLE.items() if text_ in message), None)
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is a dependency
        return None
    if isinstance(exc, psycopg.Error):
        state = exc.sqlstate or ""
        if not state and isinstance(exc, psycopg.OperationalError):
            return "cannot be reached"  # the connection attempt itself failed: no SQLSTATE
        return PG_UNAVAILABLE.get(state) or PG_UNAVAILABLE.get(state[:2])
    return None


def _name(url: str | None) -> str:
    if not url:
        return ""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return ""
    if parsed.get_backend_name() == "sqlite":
        path = _sqlite_file(url)
        return f"{path or ':memory:'} "
    return f"{parsed.render_as_string(hide_password=True)} "


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def dispose_engines() -> None:
    """Close every pooled connection and forget the engines (tests, and before a process forks)."""
    from personalab.stores.checkpoints import close_prune_savers
    from personalab.stores.history import forget_paths

    close_prune_savers()
    for engine in _opened:
        engine.dispose()
    _opened.clear()
    _engine.cache_clear()
    forget_paths()


@contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A session that commits on success and rolls back on any error, so nothing is half-written."""
    with Session(get_engine(url), expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
