"""`personalab serve-production` (issue 27, docs/deployment.md "Production serving on Aegra"): what it refuses before
starting anything, in one line with exit code 2, and the engine database it creates once. The served contract itself
is tests/test_serving_contract.py."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

PERSONALAB = str(Path(sys.executable).with_name("personalab"))
PG_BASE = os.environ.get("PERSONALAB_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _run(tmp_path: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PERSONALAB_")}
    env.update(PERSONALAB_DATA_DIR=str(tmp_path / "data"), **settings)
    return subprocess.run([PERSONALAB, "serve-production", *args], env=env, capture_output=True, text=True, timeout=120)


def test_several_workers_with_embedded_chroma_are_refused_in_one_line(tmp_path: Path) -> None:
    done = _run(tmp_path, "--workers", "3", PERSONALAB_DATABASE_URL=PG_BASE)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "personalab: error: --workers 3 needs a Chroma server: set PERSONALAB_CHROMA_HOST "
        "(embedded Chroma in one data folder is not safe for several processes)"
    ]
    assert not (tmp_path / "data" / "chroma").exists()


def test_sqlite_is_refused_in_one_line(tmp_path: Path) -> None:
    done = _run(tmp_path, "--workers", "1")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "personalab: error: serve-production needs PostgreSQL: set PERSONALAB_DATABASE_URL to a postgresql:// URL"
    ]


def test_bad_worker_count_is_refused(tmp_path: Path) -> None:
    done = _run(tmp_path, "--workers", "0", PERSONALAB_DATABASE_URL=PG_BASE)
    assert done.returncode == 2 and "--workers: 0 is not from 1 to 64" in done.stderr


def test_the_engine_database_is_created_once(postgres_url: str) -> None:
    from personalab.graph.api import PersonaLab
    from personalab.graph.cli.serve_production import engine_database_url

    assert engine_database_url("postgresql+psycopg://u@h:5432/pl?options=-csearch_path%3Dx") == (
        "postgresql://u@h:5432/pl_aegra"
    )
    name = f"aegra_t_{uuid.uuid4().hex[:10]}"
    url = f"{PG_BASE.replace('+psycopg', '').rsplit('/', 1)[0]}/{name}"
    admin = PersonaLab(database_url=postgres_url).admin
    try:
        assert admin.ensure_database(url) is True
        assert admin.ensure_database(url) is False  # there: left as it is
    finally:
        import psycopg

        with psycopg.connect(PG_BASE.replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
    with pytest.raises(Exception, match="not allowed|operator"):
        PersonaLab(owner="alice", database_url=postgres_url).admin.ensure_database(url)


def test_the_run_lease_is_short_unless_the_operator_set_it(tmp_path: Path) -> None:
    """Issue 27 (kill -9 of one process): serve-production gives Aegra a run lease of 10 s renewed every 2 s and a
    reaper every 2 s, not Aegra's 30 / 10 / 15 s (a killed process's runs replayed within 12 s, not 45 s); an
    operator who sets any of the three keeps theirs (Aegra's defaults for the others); a lease Aegra would refuse
    is one line, exit 2, before anything starts."""
    from personalab.graph.cli.serve_production import LEASE_DEFAULTS, lease_settings

    assert lease_settings({}) == LEASE_DEFAULTS
    assert int(LEASE_DEFAULTS["LEASE_DURATION_SECONDS"]) + int(LEASE_DEFAULTS["REAPER_INTERVAL_SECONDS"]) <= 12
    assert int(LEASE_DEFAULTS["LEASE_DURATION_SECONDS"]) > 2 * int(LEASE_DEFAULTS["HEARTBEAT_INTERVAL_SECONDS"])
    assert lease_settings({"LEASE_DURATION_SECONDS": "60"}) == {}
    done = _run(
        tmp_path, "--workers", "1", PERSONALAB_DATABASE_URL=PG_BASE, HEARTBEAT_INTERVAL_SECONDS="20"
    )  # Aegra's lease (30 s) is not over 2 x 20 s
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "personalab: error: LEASE_DURATION_SECONDS (30) must be over 2 x HEARTBEAT_INTERVAL_SECONDS (20)"
    ]
    done = _run(tmp_path, "--workers", "1", PERSONALAB_DATABASE_URL=PG_BASE, LEASE_DURATION_SECONDS="soon")
    assert done.returncode == 2
    assert "LEASE_DURATION_SECONDS: 'soon' is not a whole number of seconds ≥ 1" in done.stderr
