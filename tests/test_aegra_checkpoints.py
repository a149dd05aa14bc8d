"""Aegra's checkpoints are pruned (issue 27): Aegra ignores the checkpointer of langgraph.json and keeps the served
graph's checkpoints in its own PostgreSQL database, so the prune after each turn (stores/checkpoints.py
`prune_thread`, which went to PersonaLab's database) never reached them and a thread grew by every checkpoint of
every turn. Served by Aegra (`personalab serve-production`, 1 process, `.venv312`), after several turns the
instance's thread in Aegra's database holds its latest checkpoint only (the prune runs after each turn's end, so a
checkpoint written after it may stay until the next turn's: at most a couple), and a rewind still gives the branch's
turn. Needs PostgreSQL and Redis (127.0.0.1:6379)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from personalab.evals.served import aegra_server, fresh_postgres_database
from personalab.stores.checkpoints import thread_id_for

REPO = Path(__file__).resolve().parents[1]
PG_BASE = os.environ.get("PERSONALAB_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("PERSONALAB_TEST_REDIS", "redis://127.0.0.1:6379/0")
pytestmark = pytest.mark.served
TURNS = 4


@pytest.fixture
def aegra(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Aegra with one process on a PostgreSQL schema of PersonaLab's and a database of its own; (url, its db)."""
    from conftest import postgres_test_schema

    (tmp_path / "data").mkdir()
    settings = {"PERSONALAB_DATA_DIR": str(tmp_path / "data"), "PERSONALAB_LLM": "scripted"}
    log = tmp_path / "server" / "server.log"
    try:
        with postgres_test_schema() as database_url, fresh_postgres_database(PG_BASE) as engine_url:
            settings["PERSONALAB_DATABASE_URL"] = database_url
            with aegra_server(
                REPO, tmp_path / "server", settings, engine_database_url=engine_url, redis_url=REDIS_URL, workers=1
            ) as url:
                yield url, engine_url
    finally:
        print(f"--- Aegra log ---\n{log.read_text(errors='replace')[-20000:] if log.exists() else ''}")


def _checkpoints(engine_url: str, thread_id: str) -> int:
    with psycopg.connect(engine_url) as conn:
        row = conn.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = %s", (thread_id,)).fetchone()
    return int(row[0]) if row else 0


def test_aegras_checkpoints_are_pruned_after_each_turn(aegra: tuple[str, str]) -> None:
    from langgraph_sdk import get_sync_client

    url, engine_url = aegra
    with httpx.Client(base_url=url, timeout=120) as http:
        character = http.post("/characters", json={"name": "雷娜", "greetings": ["你来了。"]}).json()
        background = http.post("/backgrounds", json={"name": "废土", "outline": ["一", "二", "三"]}).json()
        instance = http.post(
            "/instances", json={"character_id": character["id"], "background_id": background["id"]}
        ).json()["id"]
    thread_id = thread_id_for(instance)
    client = get_sync_client(url=url, timeout=httpx.Timeout(120.0, connect=5.0))
    client.threads.create(thread_id=thread_id, if_exists="do_nothing")
    results: list[dict[str, Any]] = []
    for turn in range(TURNS):
        result = client.runs.wait(thread_id, "personalab", input={"instance_id": instance, "message": f"第{turn}句。"})
        assert isinstance(result, dict) and not result.get("error"), result
        results.append(result)
    assert results[-1]["turn"] == TURNS
    # each turn writes about ten checkpoints; pruned, the thread keeps its latest (and at most one written after
    # the last prune started)
    deadline = time.monotonic() + 30
    while _checkpoints(engine_url, thread_id) > 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert 1 <= _checkpoints(engine_url, thread_id) <= 2
    # the story is intact: the state read back is the last turn's
    assert client.threads.get_state(thread_id)["values"]["turn"] == TURNS
    with httpx.Client(base_url=url, timeout=120) as http:
        lines = http.get(f"/instances/{instance}/history").json()
    assert f"第{TURNS - 1}句。" in str(lines)
