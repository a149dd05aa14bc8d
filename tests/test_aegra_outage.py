"""Bad input to PersonaLab served by Aegra (issue 27 "Bad input"; docs/deployment.md "Bad input on Aegra"), against
one real `personalab serve-production` for the whole file (each Aegra start costs about a minute of CI): Python 3.12,
`.venv312`, 1 process, PersonaLab's data in a fresh PostgreSQL schema, Aegra's in a fresh database of its own, its
PersonaLab database and its Redis each reached through a TCP relay (evals/outage.py) that stops listening and cuts
every connection:
- two hosts starting at once: two `serve-production --prepare-only` started together on the fresh schema and an
  Aegra database that does not exist yet (before the server) both exit 0, one creates the database, and the server
  started after them plays a turn;
- PersonaLab's database goes away: its routes answer 503 naming the database, a turn fails without a user line
  stored half (no line without its reply), and once the database is back the same server plays the next turn;
- a client disconnects in the middle of a stream: the run ends (finished or cancelled: the user's line may stay
  without a reply, as for every failed turn), the instance plays on at once;
- Redis goes away: a run asked for meanwhile is a 503 naming Redis, no run of the outage is left to be played later,
  PersonaLab's own routes keep answering, and once Redis is back the next turn plays at once.
Each case uses an instance of its own. Needs PostgreSQL and Redis (127.0.0.1:6379; `PERSONALAB_TEST_REDIS`)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from personalab.evals.outage import PostgresLink, TcpLink, postgres_link, tcp_link
from personalab.evals.served import aegra_server, fresh_postgres_database, python312_venv
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


def _whole(instance: int, url: str | None = None, *, unanswered: frozenset[str] = frozenset()) -> list[str]:
    """The instance's user lines, each asserted to have its reply (nothing half-written); a line in `unanswered`
    may have none: a turn that failed or was cancelled keeps the user's line and stores no reply (docs/architecture.md
    "Failures free the instance at once")."""
    lines = _lines(instance, url)
    said = []
    for index, line in enumerate(lines):
        if line.attribute == "user":
            after = lines[index + 1] if index + 1 < len(lines) else None
            answered = after is not None and after.attribute == "assistant"
            assert answered or line.content in unanswered, f"{line.content!r} has no reply"
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


@dataclass
class Served:
    """The module's one Aegra server (each start costs about a minute of CI), reaching PersonaLab's database and
    Redis through relays the tests take away and give back; and the two `--prepare-only` runs made before it."""

    url: str
    database: PostgresLink
    redis: TcpLink
    database_url: str
    workdir: Path
    prepared: list[subprocess.CompletedProcess[str]]


def _prepare_at_once(
    settings: dict[str, str], engine_url: str, count: int = 2
) -> list[subprocess.CompletedProcess[str]]:
    """`count` `personalab serve-production --prepare-only` started at once (the first hosts of a deployment)."""
    personalab = python312_venv(REPO).with_name("personalab")
    env = {key: value for key, value in os.environ.items() if not key.startswith("PERSONALAB_")}
    env.pop("VIRTUAL_ENV", None)
    env.update(LANGGRAPH_CLI_NO_ANALYTICS="1", **settings)
    command = [
        str(personalab), "serve-production", "--prepare-only", "--workers", "1",
        "--engine-database-url", engine_url, "--redis-url", REDIS_URL, "--config", str(REPO / "langgraph.json"),
    ]  # fmt: skip
    starts = [
        subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    done = []
    for process in starts:
        out, err = process.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(command, process.returncode, out, err))
    return done


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Two `--prepare-only` at once on a fresh PersonaLab schema and a fresh (not yet created) Aegra database, then
    one server (1 process) on them, its PersonaLab database and Redis each by way of a relay."""
    from conftest import postgres_test_schema

    root = tmp_path_factory.mktemp("aegra_outage")
    (root / "data").mkdir()
    workdir = root / "server"
    redis = urlsplit(REDIS_URL)
    try:
        with (
            postgres_test_schema() as database_url,
            fresh_postgres_database(PG_BASE, create=False) as engine_url,
            postgres_link(database_url) as database,
            tcp_link(redis.hostname or "127.0.0.1", redis.port or 6379) as redis_link,
        ):
            settings = {
                "PERSONALAB_DATA_DIR": str(root / "data"),
                "PERSONALAB_LLM": "scripted",
                "PERSONALAB_DATABASE_URL": database_url,
            }
            prepared = _prepare_at_once(settings, engine_url)
            through = {**settings, "PERSONALAB_DATABASE_URL": database.url_through(database_url)}
            redis_through = redis._replace(netloc=f"127.0.0.1:{redis_link.port}").geturl()
            with aegra_server(
                REPO, workdir, through, engine_database_url=engine_url, redis_url=redis_through, workers=1
            ) as url:
                yield Served(url, database, redis_link, database_url, workdir, prepared)
    finally:
        print(f"--- Aegra log ---\n{_log(workdir)}")


@pytest.fixture
def settings(served: Served, monkeypatch: pytest.MonkeyPatch) -> Served:
    """This process on the module's PersonaLab schema (directly, not through the relay)."""
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", served.database_url)
    return served


def test_two_servers_preparing_at_once_on_fresh_databases_both_succeed(settings: Served) -> None:
    """Two `serve-production --prepare-only` at once on a fresh PersonaLab schema and an Aegra database that does
    not exist yet: both exit 0 (the second waits for the first's migrations under the schema lock, then finds
    everything done), and the server started after them plays a turn."""
    for done in settings.prepared:
        assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
        assert "--prepare-only: not serving" in done.stdout, done.stdout
    created = [done for done in settings.prepared if "Aegra database: created" in done.stdout]
    assert len(created) == 1, [done.stdout for done in settings.prepared]
    instance = create_sample_instance()
    _thread(settings.url, instance)
    _plays(settings.url, instance, "你好。")
    assert _whole(instance) == ["你好。"]


def test_a_database_gone_is_a_503_and_the_server_plays_on_when_it_is_back(settings: Served) -> None:
    url, link = settings.url, settings.database
    instance = create_sample_instance()
    _thread(url, instance)
    _plays(url, instance, "你好。")
    link.down()
    try:
        listed = httpx.get(f"{url}/instances/{instance}", timeout=60)
        assert listed.status_code == 503 and "database" in listed.text.lower(), listed.text
        failed = _turn(url, instance, "数据库不在了吗？")
        assert failed.status_code >= 400 or failed.json().get("error") or "__error__" in failed.json(), failed.text
    finally:
        link.up()
    assert _whole(instance) in (["你好。"], ["你好。", "数据库不在了吗？"])
    assert httpx.get(f"{url}/instances/{instance}", timeout=60).status_code == 200
    _plays(url, instance, "回来了。")
    assert _whole(instance)[-1] == "回来了。"


def test_a_client_gone_mid_stream_leaves_nothing_half_written(settings: Served) -> None:
    url = settings.url
    instance = create_sample_instance()
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
    runs = _settled_runs(url, thread)
    assert runs and all(run["status"] in {"success", "interrupted", "error"} for run in runs), runs
    print(f"the run whose client went away: {[run['status'] for run in runs]}")
    # cancelled before its user line was stored, after it (the line kept, no reply), or answered in time
    cancelled = frozenset({"讲个长故事。"})
    assert _whole(instance, unanswered=cancelled) in ([], ["讲个长故事。"])
    _plays(url, instance, "接着说。")
    assert _whole(instance, unanswered=cancelled)[-1] == "接着说。"


def test_redis_gone_is_a_503_naming_it_and_the_server_plays_on_when_it_is_back(settings: Served) -> None:
    """Redis (the runs' queue) taken away: a turn asked for meanwhile is a 503 naming Redis, and no run is left
    behind to be played later (the turn is not stored, not even once Redis is back); once it is back, the next
    turn plays at once (no "instance is busy" from a run of the outage)."""
    url, link = settings.url, settings.redis
    instance = create_sample_instance()
    thread = thread_id_for(instance)
    _thread(url, instance)
    _plays(url, instance, "你好。")
    link.down()
    try:
        for path in ("runs/wait", "runs/stream", "runs"):
            body = {"assistant_id": ASSISTANT, "input": {"instance_id": instance, "message": "Redis 不在了吗？"}}
            failed = httpx.post(f"{url}/threads/{thread}/{path}", json=body, timeout=60)
            assert failed.status_code == 503 and "redis" in failed.text.lower(), (path, failed.text)
        # PersonaLab's own routes need no Redis
        assert httpx.get(f"{url}/instances/{instance}", timeout=60).status_code == 200
    finally:
        link.up()
    _plays(url, instance, "回来了。")
    assert _whole(instance) == ["你好。", "回来了。"]
    runs = _settled_runs(url, thread)
    assert sorted(run["status"] for run in runs) == ["success", "success"], runs
    assert _whole(instance) == ["你好。", "回来了。"]  # nothing of the outage played meanwhile


def _settled_runs(url: str, thread: str) -> list[dict[str, Any]]:
    """The thread's runs once none is pending or running (up to 90 s)."""
    runs: list[dict[str, Any]] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        runs = httpx.get(f"{url}/threads/{thread}/runs", timeout=60).json()
        if runs and all(run["status"] not in {"pending", "running"} for run in runs):
            break
        time.sleep(0.5)
    return runs
