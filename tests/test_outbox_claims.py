"""Two drains of one queued write (issue 27): under load a drain's claim can lapse while it is between reading what
is fresh and storing it, and another drain (of this process or another, a killed worker's row taken over) then
takes the row over. Whatever the timing, the row's memories are stored once and each memory's vector is written
once, with no vector left for a row rolled back. The lapse is forced deterministically: the first drain's claim is
expired and a second drain runs to its end at the very point between the first one's check and its write. Real
SQLite and PostgreSQL, real Chroma, the offline embeddings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from personalab.graph.runner import create_sample_instance
from personalab.stores import outbox
from personalab.stores.background import flush_event_writes
from personalab.stores.db import session_scope
from personalab.stores.memory import MemoryStore
from personalab.stores.outbox_tables import OutboxWrite
from sqlalchemy import update
from sqlmodel import col
from test_outbox import FACT, assert_each_write_once, rows

LINE = 2


def _queue_a_turns_writes(url: str, instance: int) -> None:
    """What a turn queues for its writer (the memory kinds): its line's dialogue-record entry and its memories."""
    record = {"items": [{"content": f"莱姆：{FACT}", "type": "record", "line_id": LINE, "turn": 1}]}
    memory = {
        "items": [
            {"content": "第1轮：莱姆说她妹妹十二岁，叫小雨", "type": "event", "line_id": LINE, "turn": 1},
            {"content": "小雨", "context": "莱姆的妹妹", "type": "event", "line_id": LINE, "turn": 1},
        ]
    }
    with session_scope(url) as session:
        outbox.queue_writes(
            session,
            [
                outbox.write_row("record", instance, f"record:i{instance}-l{LINE}", record),
                outbox.write_row("memory", instance, f"memory:i{instance}-l{LINE}", memory),
            ],
        )


def _lapse_and_take_over(url: str, instance: int, drains: list[dict[str, Any]]) -> None:
    """The first drain's claims lapse (a loaded machine: it was descheduled past CLAIM_S) and a second drain takes
    the rows over and applies them to the end; `drains` gets its result (a placeholder while it runs, so the hooks
    pass the second drain through)."""
    drains.append({})
    with session_scope(url) as session:
        session.exec(
            update(OutboxWrite)
            .where(col(OutboxWrite.instance_id) == instance, col(OutboxWrite.applied_at).is_(None))
            .values(claimed_until=0.0)
        )
    drains[-1] = outbox.drain_instance(url, None, instance)


def _memories(url: str, instance: int) -> list[tuple[int | None, str]]:
    store = MemoryStore(db_url=url)
    return sorted((m.line_id, m.content) for m in store.list_memories(instance, include_record=True))


EXPECTED = sorted([(LINE, "莱姆的妹妹\n小雨"), (LINE, "第1轮：莱姆说她妹妹十二岁，叫小雨"), (LINE, f"莱姆：{FACT}")])


def test_a_drain_whose_claim_lapsed_before_its_rows_are_stored_stores_nothing_twice(
    db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Phase 1 of a batch: the first drain read the turn's memories as not stored, lost its claim, and the second
    stored them; the first one's store is rolled back (its claim is checked in the same transaction)."""
    instance = create_sample_instance(db_url)
    _queue_a_turns_writes(db_url, instance)
    real = outbox._store_rows
    second: list[dict[str, Any]] = []

    def store_rows(*args: Any, **kwargs: Any) -> Any:
        if not second:  # the first drain, between its check of what is fresh and its write
            _lapse_and_take_over(db_url, instance, second)
        return real(*args, **kwargs)

    monkeypatch.setattr(outbox, "_store_rows", store_rows)
    first = outbox.drain_instance(db_url, None, instance)
    flush_event_writes()
    assert second == [{"applied": 2, "failed": 0, "waiting": 0}]
    assert _memories(db_url, instance) == EXPECTED
    assert not rows(db_url, instance, applied=False)
    assert len(rows(db_url, instance, applied=True)) == 2
    assert_each_write_once(db_url, instance)  # and every memory has its vector, no other vector is left
    assert first["applied"] == 0 and first["failed"] == 0  # left to the drain that took it over, not an error


def test_a_drain_whose_claim_lapsed_while_applying_one_by_one_leaves_no_vector_behind(
    db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows applied one at a time (the batch's first phase failed): the first drain's claim lapses between
    its check and its write, the second applies the rows; the first one's memories and their vectors are not
    written (on SQLite a rolled-back memory's id is the next memory's: a vector left for it would be that one's)."""
    instance = create_sample_instance(db_url)
    _queue_a_turns_writes(db_url, instance)
    real_rows, real_add = outbox._store_rows, MemoryStore.add_memories
    second: list[dict[str, Any]] = []
    failed_once: list[bool] = []

    def store_rows(*args: Any, **kwargs: Any) -> Any:
        if not failed_once:  # the first drain's batch fails: it goes on one row at a time
            failed_once.append(True)
            raise ConnectionError("the database went away for a moment (test)")
        return real_rows(*args, **kwargs)

    def add_memories(store: MemoryStore, *args: Any, **kwargs: Any) -> Any:
        if not second:
            _lapse_and_take_over(db_url, instance, second)
        return real_add(store, *args, **kwargs)

    monkeypatch.setattr(outbox, "_store_rows", store_rows)
    monkeypatch.setattr(MemoryStore, "add_memories", add_memories)
    first = outbox.drain_instance(db_url, None, instance)
    flush_event_writes()
    assert second == [{"applied": 2, "failed": 0, "waiting": 0}]
    assert _memories(db_url, instance) == EXPECTED
    assert not rows(db_url, instance, applied=False)
    assert_each_write_once(db_url, instance)
    # a later memory (on SQLite it may take a rolled-back id) is found by its own text, not by a left-over vector
    later = MemoryStore(db_url=db_url).add_memories(instance, [{"content": "营地在旧加油站", "line_id": 9, "turn": 2}])
    store = MemoryStore(db_url=db_url)
    character = later[0].character_id
    got = store._collection(instance, character).get(ids=[str(later[0].id)], include=["documents"])
    assert got["documents"] == ["营地在旧加油站"]
    assert_each_write_once(db_url, instance)
    assert first["applied"] == 0 and first["failed"] == 0  # left to the drain that took it over, not an error


def test_a_consolidation_whose_claim_lapsed_before_its_write_consolidates_once(
    db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A queued consolidation (issue 26): the first drain found the line's facts not consolidated, lost its claim,
    and the second consolidated them; the first one's decision is not stored (one fact memory, one step)."""
    from personalab.stores import consolidation
    from personalab.stores.memory_tables import MemoryConsolidation
    from sqlmodel import select

    instance = create_sample_instance(db_url)
    told = {"message": "我住在旧加油站", "user_name": "莱姆", "turn": 1, "line_id": LINE, "witnesses": None}
    with session_scope(db_url) as session:
        outbox.queue_writes(
            session, [outbox.write_row("consolidate", instance, f"consolidate:i{instance}-l{LINE}", told)]
        )
    real = consolidation.consolidate_message
    second: list[dict[str, Any]] = []

    def consolidate(*args: Any, **kwargs: Any) -> Any:
        if not second:  # the first drain, after its check that the line was not consolidated
            _lapse_and_take_over(db_url, instance, second)
        return real(*args, **kwargs)

    monkeypatch.setattr(consolidation, "consolidate_message", consolidate)
    first = outbox.drain_instance(db_url, None, instance)
    flush_event_writes()
    assert second == [{"applied": 1, "failed": 0, "waiting": 0}]
    facts = [m for m in MemoryStore(db_url=db_url).list_memories(instance) if "旧加油站" in m.content]
    assert len(facts) == 1, [m.content for m in facts]
    with session_scope(db_url) as session:
        steps = session.exec(select(MemoryConsolidation).where(MemoryConsolidation.instance_id == instance)).all()
    assert len(steps) == 1, steps
    assert not rows(db_url, instance, applied=False)
    assert_each_write_once(db_url, instance)
    assert first["applied"] == 0 and first["failed"] == 0
