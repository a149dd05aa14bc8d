"""Engine and schema: one engine per database URL, SQLite by default, PostgreSQL by URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

# Importing the table modules registers every table on SQLModel.metadata before create_all.
from personalab.stores import memory_tables, review_tables, tables, turn_tables, worldbook_tables  # noqa: F401
from personalab.stores.config import database_url
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel, create_engine


def get_engine(url: str | None = None) -> Engine:
    """The engine for `url` (default: `PERSONALAB_DATABASE_URL` or the embedded SQLite file), schema created."""
    # resolved before the cache, so a changed environment (another data directory) gets its own engine
    return _engine(url or database_url())


_opened: list[Engine] = []


@lru_cache(maxsize=16)
def _engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
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
    SQLModel.metadata.create_all(engine)
    _opened.append(engine)
    return engine


def dispose_engines() -> None:
    """Close every pooled connection and forget the engines (tests, and before a process forks)."""
    from personalab.stores.history import forget_paths

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
