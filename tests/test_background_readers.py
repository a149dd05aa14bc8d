"""Back-to-back turns (issue 29): the next turn waits for the writes it reads and not for the others. The director
reads the story's events, so it does not wait for the layer maintenance, the persona-change archive or a checkpoint
prune (they write no event). The memory retrieval does not wait for the layer maintenance either (the memories the
turns told are in without it): it reads the memories before the step or after it, never between the summary the
step stores and the fading of what it summarises. It reads the archived persona changes as soon as their rows are in
(their vectors after). Real SQLite and Chroma, the offline USE model and the offline scripted chat model."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from personalab.graph.api.preview import preview_retrieval
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.maintenance import run_layer_maintenance
from personalab.nodes.rules.memory_layers import SUMMARY_TAG
from personalab.nodes.rules.persona_changes import PersonaChange, persona_change_memory
from personalab.stores import persona_changes
from personalab.stores.background import (
    begin_memory_read,
    flush_event_writes,
    memories_read,
    memories_rewritten,
    pending_writes,
    run_in_background,
    wait_for_writes,
)
from personalab.stores.memory import MemoryStore

FACT = "我妹妹今年十二岁，她叫小雨"
ASK = "你还记得我妹妹叫什么、几岁吗？"
INSTANCE = 424_242  # a lane of its own: no turn of the tests' instances queues on it


def test_the_directors_wait_ends_with_the_last_event_writing_job_not_with_the_memory_jobs_after_it() -> None:
    release = threading.Event()
    events_written = threading.Event()
    run_in_background(lambda: events_written.wait(0.2), after_turn_of=INSTANCE)  # the drain: its events
    held = run_in_background(release.wait, 30, after_turn_of=INSTANCE, unread_by_director=True)  # a maintenance
    try:
        waited = wait_for_writes(INSTANCE, timeout=10, whole=True)
        assert waited >= 150  # the drain was waited for
        assert not held.done() and pending_writes(INSTANCE) == 1  # the maintenance was not
        # the memory retrieval reads what the maintenance changes: it still waits for it (here until the timeout)
        assert wait_for_writes(INSTANCE, timeout=0.3) >= 300
    finally:
        release.set()
        flush_event_writes()


def test_an_event_writing_job_queued_after_a_memory_job_is_still_waited_for() -> None:
    release = threading.Event()
    ended: list[str] = []
    run_in_background(release.wait, 30, after_turn_of=INSTANCE, unread_by_director=True)
    run_in_background(lambda: ended.append("events"), after_turn_of=INSTANCE)  # in order: after the memory job
    try:
        assert wait_for_writes(INSTANCE, timeout=0.3, whole=True) >= 300 and not ended
    finally:
        release.set()
        flush_event_writes()
    assert ended == ["events"]


def test_the_turn_right_after_a_maintenance_turn_waits_for_the_told_memories_not_for_the_layer_maintenance(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The director runs every turn (the story stalls at once) and the maintenance every second turn; the layer
    maintenance of turn 2 is slowed to 3 s. Turn 3's director and memory retrieval go on without it, and the fact
    turn 2 told is in turn 3's retrieval."""
    import personalab.nodes.maintenance as maintenance

    real = maintenance.maintain_layers

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(3.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(maintenance, "maintain_layers", slow)
    instance = create_sample_instance()
    context = Context(stall_turns=1, maintenance_every=2, rag_timeout_s=30.0, recall_turns=1)
    with turn_graph(context) as (graph, ctx):
        run_turn(graph, ctx, instance, "我们继续赶路吧。")
        second = run_turn(graph, ctx, instance, FACT, selected_choice={"level": "important"})
        third = run_turn(graph, ctx, instance, ASK)  # back to back: no pause, no flush
    assert "maintenance" in second["debug"], "turn 2 is a maintenance turn"
    director, retrieval = third["debug"]["director"], third["debug"]["retrieval"]
    assert retrieval["waited_for_writes_ms"] < 2000, retrieval  # the layer maintenance is not waited for
    assert director["waited_for_writes_ms"] < 2000, director  # no event of the story is written by it
    assert any("十二岁" in str(memory.get("content")) for memory in third["retrieved"]), third["retrieved"]
    flush_event_writes()


def test_a_retrieval_during_a_layer_maintenance_never_sees_a_summary_beside_what_it_summarises(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step stores the event-log summary, then fades what it summarises; the storing is slowed by 1.5 s. A
    retrieval that starts right after the summary is stored waits for the step, and finds the summary alone."""
    instance = create_sample_instance()
    texts = ["莱姆：我把怀表埋在了老橡树下，只有你知道", "雷娜：明天黄昏在桥头见面，别让守卫看见"]
    items = [{"content": text, "layer": "event_log", "importance": 0.5, "turn": 1} for text in texts]
    MemoryStore().add_memories(instance, items, restore=[{"activity": 0.01}] * len(items))  # fading at the next step
    stored = threading.Event()
    real_add = MemoryStore.add_memories

    def slow_add(self: MemoryStore, *args: Any, **kwargs: Any) -> Any:
        entries = real_add(self, *args, **kwargs)
        stored.set()
        time.sleep(1.5)
        return entries

    monkeypatch.setattr(MemoryStore, "add_memories", slow_add)
    step = threading.Thread(target=run_layer_maintenance, args=(MemoryStore(), instance, 2, "zh"))
    step.start()
    try:
        assert stored.wait(30)
        tried = preview_retrieval(instance, "怀表埋在哪棵树下？", None)
    finally:
        step.join(30)
    watch = [m["content"] for m in tried["memories"] if "怀表" in str(m.get("content"))]
    assert texts[0] not in watch, "the summarised memory had faded when the retrieval read"
    assert len(watch) == 1, watch  # the summary, which holds it
    (summary,) = [m for m in MemoryStore().list_memories(instance) if SUMMARY_TAG in m.tags]
    assert watch == [summary.content]


def test_archived_persona_changes_are_read_before_their_vectors_are_written(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archive's rows first (the next retrieval finds them by keyword and by vector at once), then the vectors,
    held here until the retrieval has looked."""
    instance = create_sample_instance()
    vectors_may_go = threading.Event()
    real_put = MemoryStore.put_vectors

    def held_put(self: MemoryStore, *args: Any, **kwargs: Any) -> None:
        assert vectors_may_go.wait(30)
        real_put(self, *args, **kwargs)

    monkeypatch.setattr(MemoryStore, "put_vectors", held_put)
    change = PersonaChange(turn=1, text="雷娜不再提防莱姆，愿意把后背交给他")
    item = persona_change_memory(change, version=2, line_id=None, role_id=None, language="zh")
    item.pop("witnesses")  # what the instance's character witnessed (witnesses are another test's subject)
    archived = run_in_background(
        persona_changes.archive_persona_changes, MemoryStore(), instance, [item], None, after_turn_of=instance
    )
    try:
        wait_for_writes(instance, timeout=10)  # the next retrieval's wait: over once the rows are in
        assert not archived.done(), "its vectors are still held"
        tried = preview_retrieval(instance, "雷娜还提防莱姆吗？她愿意把后背交给他吗？", None)
        found = [m for m in tried["memories"] if "后背交给他" in str(m.get("content"))]
        assert found and {"bm25", "vector"} <= set(found[0].get("trigger") or []), tried["memories"]
    finally:
        vectors_may_go.set()
    assert len(archived.result(timeout=30)) == 1


def test_a_retrieval_waits_for_a_maintenance_step_writing_never_for_one_waiting_on_a_stuck_search() -> None:
    """A search left running past its cap keeps reading: the step waits for it, the next retrievals do not."""
    from personalab.stores import background

    stuck = begin_memory_read(INSTANCE)  # a capped search that goes on
    writing = threading.Event()
    done = threading.Event()

    def step() -> None:
        with memories_rewritten(INSTANCE):
            writing.set()
            time.sleep(0.5)
            done.set()  # its last write

    monkey = pytest.MonkeyPatch()
    monkey.setattr(background, "REWRITE_WAIT_S", 5.0)
    try:
        thread = threading.Thread(target=step)
        thread.start()
        assert not writing.wait(0.3), "the step waits for the search reading"
        started = time.monotonic()
        with memories_read(INSTANCE):  # the next turn's retrieval: not held by the waiting step
            assert time.monotonic() - started < 0.2
        stuck()
        assert writing.wait(5)
        started = time.monotonic()
        with memories_read(INSTANCE):  # now the step writes: the retrieval reads after it
            assert done.is_set() and time.monotonic() - started >= 0.3
        thread.join(5)
    finally:
        monkey.undo()
