"""Bad input to PersonaLab served by Aegra (issue 27 "Bad input"), each against a real `personalab serve-production`
(Python 3.12, `.venv312`), PersonaLab's data in a PostgreSQL schema, Aegra's in a database of its own, Redis:
- PersonaLab's database goes away (a TCP relay, evals/outage.py, stops and cuts every connection): its routes
  answer 503 naming the database, a turn fails without a user line stored half (no line without its reply), and
  once the database is back the same server plays the next turn;
- a client disconnects in the middle of a stream: the run ends (finished or cancelled), nothing half-written, the
  instance plays on.
Redis going away and two servers starting at once on a fresh Aegra database are not proved here: both fail today
(docs/benchmarks/2026-11-27-aegraload.md). Needs PostgreSQL and Redis (127.0.0.1:6379)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from personalab.evals.outage import postgres_link
from personalab.evals.served import aegra_server, fresh_postgres_database
from personalab.graph.runner import create_sample_instance
from personalab.stores.checkpoints import thread_id_for
from personalab.stores.db import session_scope
from personalab.stores.tables import Line
from sqlmodel import col, select

REPO = Path(__file__).resolve().parents[1]
PG_BASE = os.environ.get("PERSONALAB_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("PERSONALAB_TEST_REDIS", "redis://127.0.0.1:6379/0")
ASSISTANT = "personalab"
pytestmark = pytest.mark.served


def _log(workdir: Path) -> str:
    log = workdir / "server.log"
    return log.read_text(errors="replace")[-20000:] if log.exists() else ""


def _lines(instance: int, url: str | None = None) -> list[Line]:
    with session_scope(url) as s:
        return list(s.exec(select(Line).where(Line.save_id == instance).order_by(col(Line.id))).all())


def _whole(instance: int, url: str | None = None) -> list[str]:
    """The instance's user lines, each asserted to have its reply (nothing half-written)."""
    lines = _lines(instance, url)
    said = []
    for index, line in enumerate(lines):
        if line.attribute == "user":
            after = lines[index + 1] if index + 1 < len(lines) else None
            assert after is not None and after.attribute == "assistant", f"{line.content!r} has no reply"
            said.append(line.content)
    return said


def _turn(url: str, instance: int, message: str) -> httpx.Response:
    body = {"assistant_id": ASSISTANT, "input": {"instance_id": instance, "message": message}}
    return httpx.post(f"{url}/threads/{thread_id_for(instance)}/runs/wait", json=body, timeout=120)


def _plays(url: str, instance: int, message: str) -> dict[str, Any]:
    response = _turn(url, instance, message)
    assert response.status_code == 200, response.text
    output = response.json()
    assert output.get("reply") and not output.get("error"), output
    return dict(output)


def _thread(url: str, instance: int) -> None:
    body = {"thread_id": thread_id_for(instance), "if_exists": "do_nothing"}
    assert httpx.post(f"{url}/threads", json=body, timeout=60).status_code == 200


@pytest.fixture
def settings(tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", postgres_url)
    (tmp_path / "data").mkdir()
    return {
        "PERSONALAB_DATA_DIR": str(tmp_path / "data"),
        "PERSONALAB_LLM": "scripted",
        "PERSONALAB_DATABASE_URL": postgres_url,
    }


def test_a_database_gone_is_a_503_and_the_server_plays_on_when_it_is_back(
    tmp_path: Path, postgres_url: str, settings: dict[str, str]
) -> None:
    instance = create_sample_instance()
    workdir = tmp_path / "server"
    try:
        with (
            postgres_link(postgres_url) as link,
            fresh_postgres_database(PG_BASE) as engine_url,
            aegra_server(
                REPO, workdir, {**settings, "PERSONALAB_DATABASE_URL": link.url_through(postgres_url)},
                engine_database_url=engine_url, redis_url=REDIS_URL, workers=1,
            ) as url,
        ):  # fmt: skip
            _thread(url, instance)
            _plays(url, instance, "你好。")
            link.down()
            listed = httpx.get(f"{url}/instances/{instance}", timeout=60)
            assert listed.status_code == 503 and "database" in listed.text.lower(), listed.text
            failed = _turn(url, instance, "数据库不在了吗？")
            assert failed.status_code >= 400 or failed.json().get("error") or "__error__" in failed.json(), failed.text
            link.up()
            assert _whole(instance) in (["你好。"], ["你好。", "数据库不在了吗？"])
            assert httpx.get(f"{url}/instances/{instance}", timeout=60).status_code == 200
            _plays(url, instance, "回来了。")
            assert _whole(instance)[-1] == "回来了。"
    finally:
        print(f"--- Aegra log ---\n{_log(workdir)}")


def test_a_client_gone_mid_stream_leaves_nothing_half_written(tmp_path: Path, settings: dict[str, str]) -> None:
    instance = create_sample_instance()
    workdir = tmp_path / "server"
    try:
        with (
            fresh_postgres_database(PG_BASE) as engine_url,
            aegra_server(
                REPO, workdir, settings, engine_database_url=engine_url, redis_url=REDIS_URL, workers=1
            ) as url,
        ):
            _thread(url, instance)
            body = {
                "assistant_id": ASSISTANT,
                "input": {"instance_id": instance, "message": "讲个长故事。"},
                "stream_mode": ["messages-tuple"],
            }
            thread = thread_id_for(instance)
            with httpx.Client(timeout=120) as client:
                with client.stream("POST", f"{url}/threads/{thread}/runs/stream", json=body) as stream:
                    for chunk in stream.iter_lines():
                        if chunk.startswith("event: metadata"):
                            break  # the client goes away: the connection closes in the middle of the stream
            runs = httpx.get(f"{url}/threads/{thread}/runs", timeout=60).json()
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                runs = httpx.get(f"{url}/threads/{thread}/runs", timeout=60).json()
                if runs and all(run["status"] not in {"pending", "running"} for run in runs):
                    break
                time.sleep(0.5)
            assert runs and all(run["status"] in {"success", "interrupted", "error"} for run in runs), runs
            print(f"the run whose client went away: {[run['status'] for run in runs]}")
            assert _whole(instance) in ([], ["讲个长故事。"])
            _plays(url, instance, "接着说。")
            assert _whole(instance)[-1] == "接着说。"
    finally:
        print(f"--- Aegra log ---\n{_log(workdir)}")
