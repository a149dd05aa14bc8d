"""A served server killed with a run in flight, then restarted (issue 27, "a killed server replays turns"): the
replayed run answers with the turn it stored, never a user line stored twice, none lost, never a second reply.

`langgraph dev` keeps its run records in `.langgraph_api` of the folder it runs from, flushed every 10 s; a run
saved as `running` by a process that died is queued again when the next process starts (with the same run id:
`configurable.run_id`, which the stored user line keeps in `turn_run`). So the run here lasts longer than one flush:
its reply comes from the OpenAI stub slowly (one chunk a second), and the server dies
- mid-reply (kill -9 of its process group from the test, the reply not yet stored), or
- right after the reply was stored (`PERSONALAB_FAILPOINT=after_reply`: the server SIGKILLs itself there, as an
  operator's kill -9 would, before the run ends; its client may already have seen the reply).
Then the same folder is served again (no failpoint, a fast model) and the client joins the same run.
Real `langgraph dev`, SQLite in the data folder, the real graph.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai_stub import LLM_ENV, OpenAIStub, StubReply
from personalab.evals.served import graph_server
from personalab.graph.runner import create_sample_instance
from personalab.stores.checkpoints import thread_id_for
from personalab.stores.db import session_scope
from personalab.stores.tables import Line
from personalab.stores.turn_tables import TurnRecord
from sqlmodel import col, select

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.served

SLOW_REPLY = "【平静】" + "我记得那座桥，" * 4  # 32 characters, 16 chunks a second apart: longer than one flush
FLUSH_S = 10.0  # langgraph_runtime_inmem's flush interval of its run records


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIStub]:
    running = OpenAIStub().start()
    for name in LLM_ENV:
        monkeypatch.delenv(name, raising=False)
    yield running
    running.stop()


def _settings(data_dir: Path, stub: OpenAIStub, **extra: str) -> dict[str, str]:
    return {
        "PERSONALAB_DATA_DIR": str(data_dir),
        "OPENAI_API_KEY": "sk-stub",
        "OPENAI_BASE_URL": stub.base_url,
        # the slow reply must not be cut by the turn's deadline
        "PERSONALAB_TURN_DEADLINE": "90",
        "PERSONALAB_LLM_TIMEOUT": "60",
        **extra,
    }


def _client(url: str) -> Any:
    from langgraph_sdk import get_sync_client

    return get_sync_client(url=url, timeout=httpx.Timeout(120.0, connect=5.0))


def _lines(instance: int) -> list[Line]:
    with session_scope() as s:
        return list(s.exec(select(Line).where(Line.save_id == instance).order_by(col(Line.id))).all())


def _answered(instance: int) -> int:
    with session_scope() as s:
        return len(s.exec(select(TurnRecord).where(TurnRecord.save_id == instance, TurnRecord.status == "ok")).all())


def _wait_for(condition: Any, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _reply_requests(stub: OpenAIStub) -> int:
    return sum("〔PersonaLab任务：reply〕" in str(request.get("messages")) for request in stub.requests)


def _log(workdir: Path) -> str:
    log = workdir / "server.log"
    return log.read_text(errors="replace")[-20000:] if log.exists() else ""


@pytest.mark.parametrize("when", ["mid_reply", "after_reply"])
def test_a_killed_served_run_is_replayed_into_its_stored_turn(
    when: str, data_dir: Path, tmp_path: Path, stub: OpenAIStub
) -> None:
    instance = create_sample_instance()
    thread_id = thread_id_for(instance)
    workdir = tmp_path / "server"
    message = "你还记得那座桥吗？"
    stub.queue_for("reply", StubReply(SLOW_REPLY, chunk=2, chunk_delay=1.0))
    killer = (
        {"PERSONALAB_FAILPOINT": "after_reply", "PERSONALAB_FAILPOINT_ACTION": "kill"} if when == "after_reply" else {}
    )
    try:
        with graph_server(REPO, workdir, _settings(data_dir, stub, **killer), inherit_settings=False) as url:
            client = _client(url)
            client.threads.create(thread_id=thread_id, if_exists="do_nothing")
            run = client.runs.create(thread_id, "personalab", input={"instance_id": instance, "message": message})
            pid = int((workdir / "server.pid").read_text())
            # the run is in its (slow) reply; wait past one flush of the run records so `running` is on disk
            _wait_for(lambda: _reply_requests(stub) >= 1, "the reply request")
            time.sleep(FLUSH_S + 2)
            if when == "mid_reply":
                assert not [line for line in _lines(instance) if line.attribute == "assistant"]
                os.killpg(pid, signal.SIGKILL)
            # after_reply: the server kills itself once the reply is stored
            _wait_for(lambda: _dead(pid), "the server to die", timeout=60)
    finally:
        print(f"--- first server log ---\n{_log(workdir)}")
    users = [line.content for line in _lines(instance) if line.attribute == "user"]
    assert users == [message]  # stored once, before the kill
    stored_reply = [line.content for line in _lines(instance) if line.attribute == "assistant"]
    assert bool(stored_reply) is (when == "after_reply")

    # the same folder served again: the run is queued again under its id and answers with the stored turn
    stub.queue_for("reply", StubReply("【平静】这是重放后的回复。"))
    try:
        with graph_server(REPO, workdir, _settings(data_dir, stub), inherit_settings=False) as url:
            client = _client(url)
            values = client.runs.join(thread_id, run["run_id"])
            assert client.runs.get(thread_id, run["run_id"])["status"] == "success", values
            assert isinstance(values, dict) and not values.get("error"), values
            lines = _lines(instance)
            assert [line.content for line in lines if line.attribute == "user"] == [message]
            replies = [line.content for line in lines if line.attribute == "assistant"]
            assert replies, "the replayed run stored no reply"
            if when == "after_reply":
                # no second, different reply: the replay answered with the one stored before the kill
                assert replies == stored_reply
            assert values["reply"] and values["turn"] == 1
            assert _answered(instance) == 1
            # the instance plays on: the next turn is turn 2, one more user line
            after = client.runs.wait(thread_id, "personalab", input={"instance_id": instance, "message": "走吧。"})
            assert isinstance(after, dict) and not after.get("error") and after["turn"] == 2, after
            users = [line.content for line in _lines(instance) if line.attribute == "user"]
            assert users == [message, "走吧。"]
            assert _answered(instance) == 2
    finally:
        print(f"--- second server log ---\n{_log(workdir)}")


def _dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie (killed, not yet reaped by the test's Popen) counts as dead
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True
