"""Durable writes (issue 14): a turn's writes (event, dialogue record, memories, mention marks) are outbox rows stored
with the reply, applied at least once by the instance's writer, retried while Chroma is down, resumed by the next
process after a crash, never applied twice; checkpoints pruned to the latest per thread with rewinds intact.
Real SQLite and PostgreSQL, real Chroma (in each test's own data folder), the real checkpointer, the offline scripted
model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from chromadb.api.models.Collection import Collection
from personalab.graph.api import dialogue
from personalab.graph.runner import create_sample_instance, run_turn, turn_config, turn_graph
from personalab.nodes.context import Context
from personalab.stores import outbox
from personalab.stores.background import flush_event_writes
from personalab.stores.checkpoints import checkpoint_sizes, thread_id_for
from personalab.stores.db import session_scope
from personalab.stores.events import story_collection
from personalab.stores.memory import MemoryStore
from personalab.stores.outbox_tables import OutboxWrite
from personalab.stores.saves import get_save
from personalab.stores.vectors import get_collection
from sqlalchemy import update
from sqlmodel import col, select

FACT = "我妹妹今年十二岁，她叫小雨"
FILLER = "我们继续赶路吧。"
ASK = "你还记得我妹妹叫什么、几岁吗？"
# a turn the review says to remember: it queues its turn memory too (issue 26: small talk does not)
IMPORTANT = {"level": "important"}
# the prompt keeps one turn of recent dialogue: a fact two turns back reaches it only from the memory's writes
ONE_TURN = {"recall_turns": 1}


def rows(url: str, instance: int, *, applied: bool | None = None) -> list[OutboxWrite]:
    with session_scope(url) as session:
        stmt = select(OutboxWrite).where(col(OutboxWrite.instance_id) == instance).order_by(col(OutboxWrite.id))
        if applied is not None:
            stmt = stmt.where(
                col(OutboxWrite.applied_at).is_not(None) if applied else col(OutboxWrite.applied_at).is_(None)
            )
        return list(session.exec(stmt).all())


def wait_until(check: Any, timeout: float = 60.0) -> None:
    """Poll `check()` until true (the retry timers run on their own); no timing is asserted."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.2)


def story_events(url: str, instance: int) -> list[str]:
    with session_scope(url) as session:
        save = get_save(session, instance)
        role, background = save.role_id, save.background_id
    found = get_collection(story_collection(role, background))._collection.get(where={"instance_id": instance})
    return list(found["ids"])


def assert_each_write_once(url: str, instance: int) -> None:
    """Every line recorded once, every turn's memories once, every event once."""
    store = MemoryStore(db_url=url)
    record = store.list_memories(instance, type="record")
    assert all(count == 1 for count in Counter(m.line_id for m in record).values()), record
    curated = store.list_memories(instance)
    assert all(count == 1 for count in Counter((m.line_id, m.content) for m in curated).values()), curated
    events = story_events(url, instance)
    assert len(events) == len(set(events))
    # and every memory has its vector
    for character in {m.character_id for m in [*record, *curated]}:
        ids = set(store._collection(instance, character).get(include=[])["ids"])
        assert {str(m.id) for m in [*record, *curated] if m.character_id == character} == ids


def test_a_turn_played_while_chroma_is_down_keeps_its_writes_until_chroma_is_back(
    db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = create_sample_instance(db_url)
    real_upsert = Collection.upsert

    def chroma_down(self: Collection, *args: Any, **kwargs: Any) -> None:
        raise ConnectionError("Chroma is unreachable")

    with turn_graph(Context(database_url=db_url, **ONE_TURN)) as (graph, context):
        run_turn(graph, context, instance, "你好，雷娜。")
        flush_event_writes()
        applied_before = len(rows(db_url, instance, applied=True))
        monkeypatch.setattr(Collection, "upsert", chroma_down)
        told = run_turn(graph, context, instance, FACT, selected_choice=IMPORTANT)
        assert told["reply"] and told.get("error") is None  # the turn itself plays
        flush_event_writes()
        waiting = rows(db_url, instance, applied=False)
        assert {row.kind for row in waiting} >= {"event", "record", "memory"}
        assert waiting[0].attempts >= 1 and "Chroma is unreachable" in (waiting[0].last_error or "")
        assert all(row.attempts == 0 for row in waiting[1:])  # in order: the later ones wait behind the first
        reply_line = told["debug"]["reply_line_ids"][-1]
        assert f"i{instance}-l{reply_line}" not in story_events(db_url, instance)
        store = MemoryStore(db_url=db_url)
        # issue 29: the record entry's row is stored (the next retrieval's keyword side reads it at once), its
        # vector waits with the queued writes
        recorded = [m for m in store.list_memories(instance, type="record") if FACT in m.content]
        assert recorded and store.vectorless(instance, [m.line_id for m in recorded])
        # retried with backoff while it stays down
        wait_until(lambda: rows(db_url, instance, applied=False)[0].attempts >= 2)

        monkeypatch.setattr(Collection, "upsert", real_upsert)  # Chroma is back: the next retry applies them
        wait_until(lambda: not rows(db_url, instance, applied=False))
        flush_event_writes()
        # each waiting write once, and the turn's queued review, which its review node settled in the turn
        assert len(rows(db_url, instance, applied=True)) == applied_before + len(waiting) + 1
        assert f"i{instance}-l{reply_line}" in story_events(db_url, instance)
        assert_each_write_once(db_url, instance)
        run_turn(graph, context, instance, FILLER)
        asked = run_turn(graph, context, instance, ASK)
    assert any("十二岁" in item["content"] for item in asked["retrieved"]), asked["retrieved"]


def _never_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process dies right after storing the reply: its writes are committed, its worker never runs them."""
    from personalab.nodes import review, write_back

    monkeypatch.setattr(write_back, "apply_soon", lambda *args: None)
    monkeypatch.setattr(review, "apply_soon", lambda *args: None)


def test_writes_left_by_a_process_that_died_after_the_reply_are_applied_by_the_next(
    db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = create_sample_instance(db_url)
    with monkeypatch.context() as dying:
        _never_applied(dying)
        with turn_graph(Context(database_url=db_url, **ONE_TURN)) as (graph, context):
            run_turn(graph, context, instance, FACT, selected_choice=IMPORTANT)
            run_turn(graph, context, instance, FILLER)
        flush_event_writes()
    left = rows(db_url, instance, applied=False)
    assert {row.kind for row in left} >= {"event", "record", "memory"}
    assert MemoryStore(db_url=db_url).list_memories(instance, include_record=True) == []

    with turn_graph(Context(database_url=db_url, **ONE_TURN)) as (
        graph,
        context,
    ):  # the next process: resumes at start-up
        asked = run_turn(graph, context, instance, ASK)
    flush_event_writes()
    assert not rows(db_url, instance, applied=False)
    assert any("十二岁" in item["content"] for item in asked["retrieved"]), asked["retrieved"]
    assert_each_write_once(db_url, instance)


def test_a_row_applied_twice_or_by_two_processes_at_once_writes_once(
    db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = create_sample_instance(db_url)
    with monkeypatch.context() as dying:
        _never_applied(dying)
        with turn_graph(Context(database_url=db_url)) as (graph, context):
            run_turn(graph, context, instance, "你好，雷娜。", selected_choice=IMPORTANT)
            run_turn(graph, context, instance, FACT, selected_choice=IMPORTANT)
        flush_event_writes()
    queued = rows(db_url, instance, applied=False)
    assert len(queued) >= 6

    # four appliers start at once (two processes resuming, doctor --repair…): each row is claimed by one
    results: list[dict[str, Any]] = []
    start = threading.Barrier(4)

    def applier() -> None:
        start.wait()
        results.append(outbox.apply_pending(db_url))

    threads = [threading.Thread(target=applier) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wait_until(lambda: not rows(db_url, instance, applied=False))  # a row held by one applier may be retried
    flush_event_writes()
    assert_each_write_once(db_url, instance)
    store = MemoryStore(db_url=db_url)
    before = {m.id: (m.mention_count, m.content) for m in store.list_memories(instance, include_record=True)}

    # applied again (a crash after the write, before the mark): nothing more is written
    with session_scope(db_url) as session:
        session.exec(update(OutboxWrite).where(col(OutboxWrite.instance_id) == instance).values(applied_at=None))
    # every row again, and the turns' reviews (settled in their turns) replayed too: the memory writes those queue
    # again are applied as already stored
    assert outbox.apply_pending(db_url)["applied"] >= len(queued)
    after = {m.id: (m.mention_count, m.content) for m in store.list_memories(instance, include_record=True)}
    assert after == before
    assert_each_write_once(db_url, instance)


def test_a_failed_turn_queues_no_writes(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from personalab.nodes import write_back
    from personalab.nodes.rules.errors import InstanceBusy

    instance = create_sample_instance(sqlite_url)
    real = write_back.save_story_state

    def fails(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise InstanceBusy("the database went away mid-transaction")

    monkeypatch.setattr(write_back, "save_story_state", fails)
    with turn_graph(Context(database_url=sqlite_url)) as (graph, context), pytest.raises(InstanceBusy):
        run_turn(graph, context, instance, FACT, selected_choice=IMPORTANT)
    assert rows(sqlite_url, instance) == []


def test_checkpoints_keep_only_the_latest_and_rewind_and_swipe_still_work(db_url: str, data_dir: Path) -> None:
    instance = create_sample_instance(db_url)
    with turn_graph(Context(database_url=db_url)) as (graph, context):
        states = [run_turn(graph, context, instance, text) for text in ("你好", "今天做什么", "出发吧")]
    flush_event_writes()
    assert checkpoint_sizes(db_url)[thread_id_for(instance)]["checkpoints"] == 1
    first_reply = states[0]["debug"]["reply_line_ids"][-1]
    dialogue.rewind(instance, first_reply, database_url=db_url)
    assert dialogue.story_state(instance, database_url=db_url)["turn"] == 1
    with turn_graph(Context(database_url=db_url)) as (graph, context):
        assert graph.get_state(turn_config(instance)).values["turn"] == 1  # the kept checkpoint follows the rewind
        again = run_turn(graph, context, instance, "换个方向走")
        assert again["turn"] == 2
        # back to the first branch: its user line is a sibling of the new one; its end is turn 3's reply
        dialogue.swipe(instance, states[1]["user_line_id"], database_url=db_url)
        assert graph.get_state(turn_config(instance)).values["turn"] == 3
        assert run_turn(graph, context, instance, "继续")["turn"] == 4
    flush_event_writes()
    assert checkpoint_sizes(db_url)[thread_id_for(instance)]["checkpoints"] == 1


def test_pruning_on_postgresql_keeps_one_connection_and_makes_it_again_when_it_ended(
    postgres_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27: a process prunes its threads' checkpoints after each turn on one PostgreSQL connection, not a new one
    per turn (connecting was most of a served worker's prune); when the server ends that connection, the next turn's
    prune makes it again and prunes as before."""
    import psycopg
    from psycopg import Connection

    made: list[tuple[str, Connection[Any]]] = []
    connect = Connection.connect

    def counted(*args: Any, **kwargs: Any) -> Connection[Any]:
        conn = connect(*args, **kwargs)
        made.append((threading.current_thread().name, conn))
        return conn

    monkeypatch.setattr(Connection, "connect", counted)
    instance = create_sample_instance(postgres_url)
    thread = thread_id_for(instance)
    with turn_graph(Context(database_url=postgres_url)) as (graph, context):
        run_turn(graph, context, instance, "你好")
        flush_event_writes()
        pruning = [conn for name, conn in made if name.startswith("writer-")]
        assert len(pruning) == 1
        before = len(made)
        for text in ("今天做什么", "出发吧", "往北走"):
            run_turn(graph, context, instance, text)
        flush_event_writes()
        assert len(made) == before  # the same connection pruned after each of these turns
        assert checkpoint_sizes(postgres_url)[thread]["checkpoints"] == 1
        base = postgres_url.replace("postgresql+psycopg://", "postgresql://", 1).split("?")[0]
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pruning[0].info.backend_pid,))
        assert run_turn(graph, context, instance, "继续")["turn"] == 5
        flush_event_writes()
    assert len([name for name, _ in made[before:] if name.startswith("writer-")]) == 1  # made again once
    assert checkpoint_sizes(postgres_url)[thread]["checkpoints"] == 1


def scripted_data_folder(data_dir: Path) -> tuple[str, int, dict[str, str]]:
    """A sample instance in the default data folder's SQLite database, and the environment of a `personalab`
    process playing it there with the offline scripted model and one turn of recent dialogue in the prompt;
    returns (database URL, instance id, environment)."""
    url = f"sqlite:///{data_dir / 'personalab.db'}"
    env = {
        **os.environ,
        "PERSONALAB_DATA_DIR": str(data_dir),
        "PERSONALAB_LLM": "scripted",
        "PERSONALAB_RECALL_TURNS": "1",
    }
    return url, create_sample_instance(url), env


def personalab_turn(env: dict[str, str], instance: int, message: str) -> subprocess.CompletedProcess[str]:
    """`personalab turn --json` in a new process: the next process after one that was killed."""
    cli = Path(sys.executable).parent / "personalab"
    return subprocess.run(
        [str(cli), "turn", "--json", "--instance", str(instance), message],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


KILLED_TURN = """
import os, signal, sys
from personalab.graph.runner import run_turn, turn_graph
from personalab.nodes import review, write_back
from personalab.nodes.context import Context

# the writer never gets to run: the process is killed (SIGKILL) right after the reply is stored
write_back.apply_soon = review.apply_soon = lambda *args: None
with turn_graph(Context()) as (graph, context):
    for message in sys.argv[2:]:
        state = run_turn(graph, context, int(sys.argv[1]), message)
        print(state["reply"], flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_process_killed_after_the_reply_loses_no_write(data_dir: Path, tmp_path: Path) -> None:
    """A real `kill -9` after the reply (SQLite, the default data folder): the next `personalab turn` process
    applies the writes at start-up and its turn retrieves them."""
    url, instance, env = scripted_data_folder(data_dir)
    script = tmp_path / "killed_turn.py"
    script.write_text(KILLED_TURN, encoding="utf-8")
    killed = subprocess.run(
        [sys.executable, str(script), str(instance), FACT, FILLER], env=env, capture_output=True, text=True, timeout=600
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert killed.stdout.strip()  # the reply was shown before the kill
    assert rows(url, instance, applied=False)
    assert MemoryStore(db_url=url).list_memories(instance, include_record=True) == []

    nxt = personalab_turn(env, instance, ASK)
    assert nxt.returncode == 0, nxt.stderr
    retrieved = json.loads(nxt.stdout)["retrieved_events"]
    assert any("十二岁" in item["content"] for item in retrieved), retrieved  # from the writes the killed one left
    assert not rows(url, instance, applied=False)
    assert_each_write_once(url, instance)


def test_a_write_the_stores_refuse_is_set_aside_and_the_next_ones_go_on(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    refused = {"items": [{"content": "", "type": "record", "line_id": 1}]}  # InvalidInput: memory content is empty
    good = {"items": [{"content": f"莱姆：{FACT}", "type": "record", "line_id": 2, "turn": 1}]}
    with session_scope(sqlite_url) as session:
        outbox.queue_writes(
            session,
            [
                outbox.write_row("record", instance, f"record:i{instance}-l1", refused),
                outbox.write_row("record", instance, f"record:i{instance}-l2", good),
            ],
        )
    assert outbox.drain_instance(sqlite_url, None, instance) == {"applied": 1, "failed": 1, "waiting": 0}
    assert [m.line_id for m in MemoryStore(db_url=sqlite_url).list_memories(instance, type="record")] == [2]
    summary = outbox.pending_summary(sqlite_url)
    assert summary["pending"] == 1 and summary["set_aside"] == 1
    assert "memory content is empty" in summary["last_error"]["error"]
    assert outbox.resume_pending(sqlite_url) == []  # not retried on its own
    assert outbox.apply_pending(sqlite_url)["failed"] == 1  # doctor --repair tries it once more


def test_a_write_that_fails_because_the_database_is_down_is_retried_not_set_aside(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from personalab.nodes.rules.errors import StoreUnavailable

    instance = create_sample_instance(sqlite_url)
    item = {"items": [{"content": f"莱姆：{FACT}", "type": "record", "line_id": 2, "turn": 1}]}
    with session_scope(sqlite_url) as session:
        outbox.queue_writes(session, [outbox.write_row("record", instance, f"record:i{instance}-l2", item)])

    def database_down(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("the database cannot be reached")

    with monkeypatch.context() as down:
        down.setattr(MemoryStore, "add_memories", database_down)
        assert outbox.drain_instance(sqlite_url, None, instance) == {"applied": 0, "failed": 1, "waiting": 1}
    (row,) = rows(sqlite_url, instance, applied=False)
    assert row.attempts == 1 and row.claimed_by is None and "cannot be reached" in (row.last_error or "")
    assert row.next_attempt_at > row.created_at.timestamp()  # backoff
    wait_until(lambda: not rows(sqlite_url, instance, applied=False))  # its retry, once the database is back
    assert [m.line_id for m in MemoryStore(db_url=sqlite_url).list_memories(instance, type="record")] == [2]
