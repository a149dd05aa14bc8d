"""Shared fixtures: a fresh data directory and a database per test, on SQLite and on PostgreSQL.

PostgreSQL is the local server at 127.0.0.1:5432 (trust auth, database `test`); each test gets its own
schema so parallel runs never see each other's rows. Without a reachable server the PostgreSQL cases
skip, except on CI (`CI=true`), where they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PG_BASE = os.environ.get("PERSONALAB_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _pg_reachable() -> str | None:
    import psycopg

    try:
        with psycopg.connect(PG_BASE.replace("+psycopg", ""), connect_timeout=3):
            return None
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        return str(exc).splitlines()[0]


@pytest.fixture(autouse=True)
def _offline_by_default(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tests use the scripted model unless they start the OpenAI stub; queued event writes finish in their test."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PERSONALAB_LLM", "PERSONALAB_MODEL", "PERSONALAB_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    yield
    from personalab.stores.background import flush_event_writes

    flush_event_writes()


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty `PERSONALAB_DATA_DIR`; the database URL falls back to its embedded SQLite file."""
    monkeypatch.setenv("PERSONALAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("PERSONALAB_DATABASE_URL", raising=False)
    (tmp_path / "data").mkdir()
    yield tmp_path / "data"
    _dispose("")


@pytest.fixture
def sqlite_url(data_dir: Path) -> Iterator[str]:
    url = f"sqlite:///{data_dir / 'test.db'}"
    yield url
    _dispose(url)


@contextmanager
def postgres_test_schema() -> Iterator[str]:
    """A new PostgreSQL schema for a test (or a module), dropped afterwards; PostgreSQL unreachable fails on CI and
    skips elsewhere."""
    problem = _pg_reachable()
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL at {PG_BASE} is unreachable on CI: {problem}")
        pytest.skip(f"PostgreSQL unreachable: {problem}")
    from personalab.evals.data_dir import postgres_schema

    with postgres_schema(PG_BASE, prefix="t_") as url:
        yield url
        _dispose(url)  # before the schema is dropped


@pytest.fixture
def postgres_url() -> Iterator[str]:
    with postgres_test_schema() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str:
    """Run the test once on SQLite and once on PostgreSQL."""
    return request.getfixturevalue(f"{request.param}_url")


def _dispose(_url: str) -> None:
    """Close the test's connections before its PostgreSQL schema is dropped or its SQLite file removed."""
    from personalab.stores.db import dispose_engines
    from personalab.stores.outbox import cancel_retries

    cancel_retries()  # a queued write's retry must not reach the next test's database
    dispose_engines()


# --- markers: the quick tests and the rest (registered in pyproject.toml; docs/testing.md) -------------------------
# `./run test-quick` = `./run test -m "not (postgres or served or faults or browser or slow)"`. Applied here, from
# the fixtures a test uses and from the lists below, so no test file needs to name them.

# files whose every test starts `langgraph dev` (or another server process)
SERVED_FILES = {"test_served.py", "test_auth_http.py", "test_dialogue_served.py", "test_outbox_served.py", "test_bench_load.py"}
# fixtures that start one
SERVED_FIXTURES = {"server", "served"}
# files of the fault campaign: kill -9, the database taken away, a full disk
FAULT_FILES = {"test_bench_faults.py", "test_database_down.py", "test_disk_full.py"}
# files and tests that take more than about 5 s on the 2-core development machine (measured with
# `./run test --durations=0`; a whole file when most of its tests are slow)
SLOW_FILES: set[str] = set()
SLOW_TESTS: set[str] = set()


def _has_param(item: pytest.Item, value: str) -> bool:
    """The test runs with a parameter of this value (`db_url`'s "postgres", `eval run`'s way "served")."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(isinstance(param, str) and param == value for param in callspec.params.values())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test `postgres`, `served`, `faults`, `browser` or `slow` from what it uses (see the lists above)."""
    for item in items:
        file = item.path.name
        name = getattr(item, "originalname", item.name)
        fixtures = set(getattr(item, "fixturenames", ()))
        if "postgres_url" in fixtures or _has_param(item, "postgres") or file == "test_bench_load.py":
            item.add_marker(pytest.mark.postgres)
        if file in SERVED_FILES or fixtures & SERVED_FIXTURES or "langgraph_dev" in name or _has_param(item, "served"):
            item.add_marker(pytest.mark.served)
        if file in FAULT_FILES or "killed" in name:
            item.add_marker(pytest.mark.faults)
        if file.startswith("test_browser") or fixtures & {"page", "browser"}:
            item.add_marker(pytest.mark.browser)
        if file in SLOW_FILES or f"{file}::{name}" in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
