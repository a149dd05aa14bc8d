"""Six processes start at once on a new database: every one succeeds (issue 16; stores.db's one creator).

Before: on a fresh PostgreSQL schema three of six crashed with `UniqueViolation` on `pg_type` (concurrent
`CREATE TABLE`s), on a fresh SQLite file with "table already exists", and LangGraph's checkpointer setup
collided the same way ("duplicate key" in its migrations table).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from personalab.stores.db import dispose_engines, get_engine
from sqlalchemy import inspect
from sqlmodel import SQLModel

PROCESSES = 6
PG_BASE = os.environ.get("PERSONALAB_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")  # as conftest

# Each child imports everything first, says it is ready, then waits for the go file, so that the first
# starts themselves (engine, tables, checkpointer setup) run at the same moment.
CHILD = """
import sys, time
from pathlib import Path
from personalab.stores.checkpoints import open_checkpointer
from personalab.stores.db import get_engine
url, ready, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
ready.touch()
while not go.exists():
    time.sleep(0.005)
get_engine(url)
with open_checkpointer(url):
    pass
print("started")
"""


def start_at_once(url: str, folder: Path) -> list[tuple[int, str, str]]:
    go = folder / "go"
    children = []
    for number in range(PROCESSES):
        ready = folder / f"ready{number}"
        args = [sys.executable, "-c", CHILD, url, str(ready), str(go)]
        children.append((ready, subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    deadline = time.monotonic() + 120
    while not all(ready.exists() for ready, _ in children):
        assert time.monotonic() < deadline, "the children did not get ready"
        assert all(child.poll() is None for _, child in children), "a child died before the start"
        time.sleep(0.01)
    go.touch()
    results = []
    for _, child in children:
        out, err = child.communicate(timeout=180)
        results.append((child.returncode, out, err))
    return results


@pytest.fixture
def fresh_postgres_database(postgres_url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database (not only a schema): the checkpointer's `CREATE INDEX CONCURRENTLY`
    waits for every older snapshot in its database, and other test runs share the `test` database."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    plain = PG_BASE.replace("+psycopg", "")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield f"{PG_BASE.rsplit('/', 1)[0]}/{name}"
    dispose_engines()
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_url(request: pytest.FixtureRequest) -> str:
    """A fresh SQLite file in an empty data directory, or a fresh PostgreSQL database."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "fresh_postgres_database")


def test_six_first_starts_at_once_all_succeed(fresh_url: str, tmp_path: Path) -> None:
    results = start_at_once(fresh_url, tmp_path)
    failures = [err.strip().splitlines()[-1:] for code, _, err in results if code != 0]
    assert failures == []
    assert all(out.strip() == "started" for _, out, _ in results)
    assert set(SQLModel.metadata.tables) <= set(inspect(get_engine(fresh_url)).get_table_names())


def test_one_start_creates_every_table(db_url: str) -> None:
    assert set(SQLModel.metadata.tables) <= set(inspect(get_engine(db_url)).get_table_names())


def test_threads_starting_at_once_on_a_new_store_share_one_engine_client_and_collection(data_dir: Path) -> None:
    """Threads of one process (the served graph's runs, a turn beside its background writers) that first ask for a
    new database or Chroma store at the same moment get one engine (its tables created once), one Chroma client
    and one collection wrapper: lru_cache alone let each of them make its own, and two collection creations of one
    name fail in Chroma ("already exists")."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from personalab.stores.vectors import chroma_client, get_collection

    url = f"sqlite:///{data_dir / 'new.db'}"
    path = str(data_dir / "new-chroma")
    start = threading.Barrier(PROCESSES)

    def first_use(_: int) -> tuple[object, object, object]:
        start.wait()
        return get_engine(url), chroma_client(path), get_collection("events_1_1", path)

    with ThreadPoolExecutor(PROCESSES) as pool:
        made = list(pool.map(first_use, range(PROCESSES)))
    for kind in range(3):
        assert len({id(item[kind]) for item in made}) == 1, kind
    assert set(SQLModel.metadata.tables) <= set(inspect(made[0][0]).get_table_names())
    assert made[0][2]._collection.count() == 0
