"""`personalab doctor [--json] [--repair]` (issue 14): queued writes, orphan vectors and memories without one,
expired turn locks, checkpoint sizes; the repairs; exit 0 when healthy, 1 while a problem remains. Real SQLite and
PostgreSQL, real Chroma in the test's data folder."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from chromadb.api.models.Collection import Collection
from cli_helpers import cli
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.stores.background import flush_event_writes
from personalab.stores.checkpoints import thread_id_for
from personalab.stores.db import session_scope
from personalab.stores.memory import MemoryStore
from personalab.stores.memory_tables import MemoryEntry
from personalab.stores.turn_tables import TurnLock
from sqlalchemy import delete
from sqlmodel import col


def doctor(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, dict]:
    code, out, err = cli(capsys, "doctor", "--json", *flags)
    assert err == "" or "Traceback" not in err, err
    return code, json.loads(out)


def problems(report: dict, check: str) -> list[dict]:
    return [f for f in report["findings"] if f["check"] == check and f["status"] == "problem"]


def test_doctor_reports_and_repairs_orphan_vectors_missing_vectors_and_expired_locks(
    db_url: str, data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    instance = create_sample_instance(db_url)
    with turn_graph(Context(database_url=db_url)) as (graph, context):
        run_turn(graph, context, instance, "你好，雷娜。")
        run_turn(graph, context, instance, "我们出发吧。")
    flush_event_writes()
    code, report = doctor(capsys)
    assert code == 0 and report["healthy"], report
    store = MemoryStore(db_url=db_url)
    kept, gone, unembedded, *_ = store.list_memories(instance, include_record=True)
    collection = store._collection(instance, kept.character_id)

    # a memory row gone with its vector left (an orphan), a vector lost, a lock whose holder died
    with session_scope(db_url) as session:
        session.exec(delete(MemoryEntry).where(col(MemoryEntry.id) == gone.id))
        session.add(TurnLock(save_id=instance, token="dead", expires_at=time.time() - 60, holder="host:4242"))
    collection.delete(ids=[str(unembedded.id)])

    code, report = doctor(capsys)
    assert code == 1 and not report["healthy"]
    orphan, lacking = problems(report, "vectors")
    assert "1 orphan vector" in orphan["message"] and "(their memory rows are gone)" in orphan["message"]
    assert f"instance {instance}: 1 memory(ies)" in lacking["message"] and "without a vector" in lacking["message"]
    (lock,) = problems(report, "locks")
    assert f"instance {instance}" in lock["message"] and "host:4242" in lock["message"]
    code, out, _ = cli(capsys, "doctor")
    assert code == 1 and any(line.startswith("problem  locks:") for line in out.splitlines())

    code, report = doctor(capsys, "--repair")
    assert code == 0 and report["healthy"], report
    repaired = [f["check"] for f in report["findings"] if f["status"] == "repaired"]
    assert {"vectors", "locks"} <= set(repaired)
    ids = set(collection.get(include=[])["ids"])
    assert str(gone.id) not in ids and str(unembedded.id) in ids
    assert {str(m.id) for m in store.list_memories(instance, include_record=True)} == ids
    with session_scope(db_url) as session:
        assert session.get(TurnLock, instance) is None
    with turn_graph(Context(database_url=db_url)) as (graph, context):  # the instance plays again
        assert run_turn(graph, context, instance, "继续。")["reply"]


def test_doctor_applies_writes_that_failed_and_reports_checkpoint_sizes(
    db_url: str, data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    instance = create_sample_instance(db_url)
    real_upsert = Collection.upsert

    def chroma_down(self: Collection, *args: object, **kwargs: object) -> None:
        raise ConnectionError("Chroma is unreachable")

    with turn_graph(Context(database_url=db_url)) as (graph, context):
        run_turn(graph, context, instance, "你好，雷娜。")
        flush_event_writes()
        monkeypatch.setattr(Collection, "upsert", chroma_down)
        run_turn(graph, context, instance, "我们出发吧。")
        flush_event_writes()
    code, report = doctor(capsys)
    (pending,) = problems(report, "outbox")
    assert code == 1 and pending["data"]["failing"] >= 1 and "Chroma is unreachable" in pending["message"]

    monkeypatch.setattr(Collection, "upsert", real_upsert)
    code, report = doctor(capsys, "--repair")
    assert code == 0 and report["healthy"], report
    assert any(f["check"] == "outbox" and f["status"] == "repaired" for f in report["findings"])
    (thread,) = [f for f in report["findings"] if f["data"].get("thread_id") == thread_id_for(instance)]
    assert thread["data"]["checkpoints"] == 1 and thread["data"]["turns"] == 2 and thread["data"]["bytes"] > 0
    assert "bytes per turn" in thread["message"]
