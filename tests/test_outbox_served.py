"""Durable writes and checkpoint pruning in the served graph (issue 14), against `langgraph dev` (the server fixture
of tests/test_served.py): writes a dead process left are applied when the server loads the graph, and a served
thread keeps a bounded number of checkpoints that `personalab doctor --repair` prunes to the latest."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_helpers import cli
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.stores.background import flush_event_writes
from personalab.stores.checkpoints import checkpoint_sizes, thread_id_for
from personalab.stores.db import session_scope
from personalab.stores.memory import MemoryStore
from personalab.stores.outbox_tables import OutboxWrite
from sqlmodel import col, select
from test_served import _run, server  # noqa: F401 - the fixture

FACT = "我妹妹今年十二岁，她叫小雨"


def pending(instance: int) -> int:
    with session_scope() as session:
        stmt = select(OutboxWrite.id).where(
            col(OutboxWrite.instance_id) == instance, col(OutboxWrite.applied_at).is_(None)
        )
        return len(session.exec(stmt).all())


@pytest.fixture
def left_writes(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """An instance whose last turn's writes were stored with its reply and never applied (the process died)."""
    from personalab.nodes import review, write_back

    instance = create_sample_instance()
    with monkeypatch.context() as dying:
        dying.setattr(write_back, "apply_soon", lambda *args: None)
        dying.setattr(review, "apply_soon", lambda *args: None)
        with turn_graph(Context()) as (graph, context):
            # a turn the review says to remember (issue 26): it queues its turn memory beside its event and record
            run_turn(graph, context, instance, FACT, selected_choice={"level": "important"})
        flush_event_writes()
    assert pending(instance) >= 3
    return instance


def test_the_served_graph_resumes_left_writes_and_prunes_its_checkpoints(
    left_writes: int,
    server: str,  # noqa: F811 - the fixture
    capsys: pytest.CaptureFixture[str],
) -> None:
    from langgraph_sdk import get_sync_client

    instance = left_writes
    deadline = time.monotonic() + 120
    while pending(instance):  # the server applies them once it has loaded the graph
        assert time.monotonic() < deadline, "the server did not apply the writes left behind"
        time.sleep(0.5)
    assert any(FACT in m.content for m in MemoryStore().list_memories(instance, type="record"))

    thread_id = thread_id_for(instance)
    client = get_sync_client(url=server, timeout=httpx.Timeout(60.0, connect=5.0))
    client.threads.create(thread_id=thread_id, if_exists="do_nothing")
    for message in ("我们出发吧。", "前面有人。", "小心点。"):
        _run(client, thread_id, instance, message)
    # the served graph writes about ten checkpoints a turn; the prune queued at each turn's end keeps the latest
    deadline = time.monotonic() + 60
    while checkpoint_sizes()[thread_id]["checkpoints"] >= 10:
        assert time.monotonic() < deadline, checkpoint_sizes()[thread_id]
        time.sleep(0.5)

    code, out, _ = cli(capsys, "doctor", "--repair", "--json")
    report: dict[str, Any] = json.loads(out)
    assert code == 0, report
    assert checkpoint_sizes()[thread_id]["checkpoints"] == 1
    assert client.threads.get_state(thread_id)["values"]["turn"] == 4
    _run(client, thread_id, instance, "继续。")
    assert client.threads.get_state(thread_id)["values"]["turn"] == 5
