"""Turn lock, turn records, archival events and checkpointers on the real backends."""

from __future__ import annotations

import operator
import threading
import uuid
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from personalab.nodes.rules.errors import InstanceBusy
from personalab.stores.background import flush_event_writes, run_in_background
from personalab.stores.checkpoints import open_checkpointer, thread_id_for
from personalab.stores.db import session_scope
from personalab.stores.events import search_events, search_story, write_event_async
from personalab.stores.saves import create_save
from personalab.stores.turn_tables import TurnRecord
from personalab.stores.turns import acquire_turn_lock, last_turn_time, record_turn, release_turn_lock


def _save(url: str) -> int:
    with session_scope(url) as s:
        return create_save(s, None, None).id  # type: ignore[return-value]


def test_thread_id_is_a_stable_uuid_per_instance() -> None:
    assert uuid.UUID(thread_id_for(1)).version == 5
    assert thread_id_for(1) == thread_id_for("1") != thread_id_for(2)


def test_one_turn_at_a_time_per_instance(db_url: str) -> None:
    a, b = _save(db_url), _save(db_url)
    token = acquire_turn_lock(a, 60, db_url)
    with pytest.raises(InstanceBusy, match=f"instance {a} is busy"):
        acquire_turn_lock(a, 60, db_url)
    other = acquire_turn_lock(b, 60, db_url)  # other instances are not blocked
    release_turn_lock(a, token, db_url)
    release_turn_lock(b, other, db_url)
    release_turn_lock(a, acquire_turn_lock(a, 60, db_url), db_url)


def test_an_expired_lock_is_taken_over(db_url: str) -> None:
    a = _save(db_url)
    acquire_turn_lock(a, -1, db_url)  # a crashed holder's lease, already over
    acquire_turn_lock(a, 60, db_url)


def test_last_turn_time(db_url: str) -> None:
    a = _save(db_url)
    with session_scope(db_url) as s:
        assert last_turn_time(s, a) is None
        record_turn(s, TurnRecord(save_id=a, turn=1))
        second = record_turn(s, TurnRecord(save_id=a, turn=2))
    with session_scope(db_url) as s:
        assert last_turn_time(s, a) == second.created_at


def test_events_are_filtered_by_instance_within_their_story(data_dir: Path) -> None:
    write_event_async("莱姆在据点和守卫起了冲突", instance_id=1, character_id=1, background_id=1, turn=1)
    write_event_async("莱姆在据点和守卫起了冲突", instance_id=2, character_id=1, background_id=1, turn=1)
    write_event_async("钦灵换好了衣服", instance_id=1, character_id=1, background_id=1, turn=2)
    flush_event_writes()
    write_event_async("莱姆在据点和守卫起了冲突", instance_id=3, character_id=2, background_id=1, turn=1)
    flush_event_writes()
    mine = search_events("据点冲突", 5, character_id=1, background_id=1, instance_id=1)
    assert {e["instance_id"] for e in mine} == {1} and len(mine) == 2
    assert mine[0]["text"] == "莱姆在据点和守卫起了冲突"
    others = search_events("据点冲突", 5, character_id=1, background_id=1, instance_id={"$ne": 1})
    assert [e["instance_id"] for e in others] == [2], "another story's event (instance 3) is never a reference"


class _Count(TypedDict):
    n: Annotated[int, operator.add]


def _counter_graph():  # type: ignore[no-untyped-def]
    builder = StateGraph(_Count)
    builder.add_node("inc", lambda s: {"n": 1})
    builder.add_edge(START, "inc")
    builder.add_edge("inc", END)
    return builder


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_checkpointer_keeps_state_across_openings(backend: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(f"{backend}_url")
    config = {"configurable": {"thread_id": thread_id_for(7)}}
    for expected in (1, 2):
        with open_checkpointer(url) as saver:
            graph = _counter_graph().compile(checkpointer=saver)
            assert graph.invoke({"n": 0}, config)["n"] == expected


def test_story_search_gives_the_same_layers_as_two_filtered_searches(data_dir: Path) -> None:
    texts = ["莱姆在据点和守卫起了冲突", "雷娜修好了卡车", "老七交出了账本", "沙暴封住了北边的路", "黑鸦在工厂出现"]
    for turn, text in enumerate(texts, start=1):
        write_event_async(text, instance_id=1, character_id=1, background_id=1, turn=turn)
        write_event_async(f"另一段故事：{text}", instance_id=2, character_id=1, background_id=1, turn=turn)
    flush_event_writes()
    story = {"character_id": 1, "background_id": 1}
    for pool in (60, 3):  # 3: the unfiltered look is too short and the filtered searches fill the layers
        current, others = search_story("据点冲突", instance_id=1, current_k=4, others_k=2, pool=pool, **story)
        expected_current = search_events("据点冲突", 4, instance_id=1, **story)
        expected_others = search_events("据点冲突", 2, instance_id={"$ne": 1}, **story)
        assert [e["text"] for e in current] == [e["text"] for e in expected_current], pool
        assert [e["text"] for e in others] == [e["text"] for e in expected_others], pool
        assert current[0]["score"] == pytest.approx(expected_current[0]["score"], abs=1e-3)


def test_background_work_waits_for_the_running_turn(db_url: str) -> None:
    """A queued store write does not take the interpreter from a turn in progress: it runs once the turn
    releases its lock."""
    save = _save(db_url)
    ran = threading.Event()
    token = acquire_turn_lock(save, 60, db_url)
    try:
        run_in_background(ran.set, after_turn_of=save)
        assert not ran.wait(0.3)
    finally:
        release_turn_lock(save, token, db_url)
    assert ran.wait(5)
    flush_event_writes()


def test_another_instances_turn_never_holds_background_work_back(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Back-to-back turns of a batch run: the next instance's turn does not keep the last one's writes waiting."""
    monkeypatch.setattr("personalab.stores.background.MAX_DEFER_S", 60.0)
    busy, done = _save(db_url), _save(db_url)
    token = acquire_turn_lock(busy, 60, db_url)
    try:
        assert run_in_background(lambda: "written", after_turn_of=done).result(timeout=5) == "written"
    finally:
        release_turn_lock(busy, token, db_url)


def test_background_work_is_late_never_starved(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn that never ends (a crashed process's, or steady load) holds queued work back only so long."""
    monkeypatch.setattr("personalab.stores.background.MAX_DEFER_S", 0.2)
    save = _save(db_url)
    token = acquire_turn_lock(save, 60, db_url)
    try:
        done = run_in_background(lambda: "written", after_turn_of=save)
        assert done.result(timeout=5) == "written"
    finally:
        release_turn_lock(save, token, db_url)


def test_the_next_turn_of_the_same_instance_never_holds_the_last_ones_work_back(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Back-to-back turns of one instance: the work the first queued waits for the first only."""
    monkeypatch.setattr("personalab.stores.background.MAX_DEFER_S", 60.0)
    save = _save(db_url)
    writer_free = threading.Event()
    run_in_background(writer_free.wait, 10)  # the writer looks at the marks only once the second turn runs
    first = acquire_turn_lock(save, 60, db_url)
    queued = run_in_background(lambda: "written", after_turn_of=save)
    release_turn_lock(save, first, db_url)
    second = acquire_turn_lock(save, 60, db_url)
    writer_free.set()
    try:
        assert queued.result(timeout=5) == "written"
    finally:
        release_turn_lock(save, second, db_url)
