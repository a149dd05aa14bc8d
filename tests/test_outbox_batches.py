"""A turn's queued writes applied together (issue 11, back-to-back turns): one embeddings call for every text the
turn stores (its event, its record lines, its memory, which is the event's text, embedded once), one Chroma upsert
per collection, and still every write once, in order. Real SQLite and PostgreSQL, real Chroma, the offline USE model
(wrapped to count its calls), the offline scripted chat model."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chromadb.api.models.Collection import Collection
from langchain_core.embeddings import Embeddings
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.stores import embeddings as embeddings_module
from personalab.stores import outbox
from personalab.stores.background import flush_event_writes
from personalab.stores.memory import MemoryStore
from test_outbox import FACT, _never_applied, assert_each_write_once, rows

MOVED = "我们继续赶路吧，我住在北京。"  # a fact the consolidation (on by default) stores with the turn's other writes


class CountingEmbeddings(Embeddings):
    """The configured model, each call of it recorded (the texts it was given)."""

    def __init__(self, model: Embeddings) -> None:
        self.model = model
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return self.model.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.model.embed_query(text)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> CountingEmbeddings:
    """Stored texts' embeddings counted (`embed_stored_texts`, which the writes use); nothing kept from before."""
    model = CountingEmbeddings(embeddings_module.get_embeddings())
    monkeypatch.setattr(embeddings_module, "get_embeddings", lambda: model)
    return model


@pytest.fixture
def upserts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The collection of every Chroma upsert, in order."""
    seen: list[str] = []
    real = Collection.upsert

    def counted(self: Collection, *args: Any, **kwargs: Any) -> Any:
        seen.append(self.name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Collection, "upsert", counted)
    return seen


def test_a_turns_writes_take_one_embeddings_call_and_one_upsert_per_collection(
    db_url: str, data_dir: Path, counting: CountingEmbeddings, upserts: list[str]
) -> None:
    instance = create_sample_instance(db_url)
    with turn_graph(Context(database_url=db_url)) as (graph, context):
        run_turn(graph, context, instance, "你好，雷娜。")
        flush_event_writes()
        counting.calls.clear()
        upserts.clear()
        told = run_turn(graph, context, instance, FACT, selected_choice={"level": "important"})  # a turn memory too
        flush_event_writes()
    # the turn's writes: its event, its record lines (the user's and the reply's), its memory (the event's text)
    assert len(counting.calls) == 1, counting.calls
    (texts,) = counting.calls
    assert len(texts) == len(set(texts))  # each text once
    store = MemoryStore(db_url=db_url)
    reply_line = told["debug"]["reply_line_ids"][-1]
    memory = [m for m in store.list_memories(instance) if m.line_id == reply_line]
    assert memory and memory[0].content in texts and memory[0].content.startswith("第2轮")
    record = [m for m in store.list_memories(instance, type="record") if m.turn == 2]
    assert {m.content for m in record} <= set(texts) and any(FACT in m.content for m in record)
    # one upsert of the story's events, one of the instance's memories and record entries
    assert sorted(Counter(upserts).values()) == [1, 1], upserts
    assert not rows(db_url, instance, applied=False)
    assert_each_write_once(db_url, instance)


def test_writes_left_by_several_turns_are_applied_together_each_once_and_applied_again_embed_nothing(
    db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch, counting: CountingEmbeddings
) -> None:
    instance = create_sample_instance(db_url)
    with monkeypatch.context() as dying:
        _never_applied(dying)  # a process that died after its replies: three turns' writes wait
        with turn_graph(Context(database_url=db_url)) as (graph, context):
            for message in ("你好，雷娜。", FACT, MOVED):
                # every turn one the review writes (issue 26: small talk leaves its lines in the record only)
                run_turn(graph, context, instance, message, selected_choice={"level": "important"})
        flush_event_writes()
    queued = rows(db_url, instance, applied=False)
    assert {row.kind for row in queued} == {"event", "record", "memory", "mention"} or len(queued) >= 9
    counting.calls.clear()
    assert outbox.apply_pending(db_url)["applied"] == len(queued)
    assert len(counting.calls) == 1, counting.calls  # the three turns' texts in one call
    assert not rows(db_url, instance, applied=False)
    assert_each_write_once(db_url, instance)
    store = MemoryStore(db_url=db_url)
    assert {1, 2, 3} <= {m.turn for m in store.list_memories(instance)}
    assert any(FACT in m.content for m in store.list_memories(instance, type="record"))
    from personalab.stores.consolidation import consolidation_steps

    assert [step["action"] for step in consolidation_steps(db_url, instance)] == ["add"]  # the third turn's fact

    # applied again (a crash after the write, before the mark): nothing stored twice, no text embedded again
    from personalab.stores.db import session_scope
    from personalab.stores.outbox_tables import OutboxWrite
    from sqlalchemy import update
    from sqlmodel import col

    before = {m.id: (m.mention_count, m.content) for m in store.list_memories(instance, include_record=True)}
    with session_scope(db_url) as session:
        session.exec(
            update(OutboxWrite)
            .where(col(OutboxWrite.id).in_([row.id for row in queued]))
            .values(applied_at=None, claimed_by=None, claimed_until=None)
        )
    counting.calls.clear()
    assert outbox.apply_pending(db_url)["applied"] == len(queued)
    assert counting.calls == []
    assert {m.id: (m.mention_count, m.content) for m in store.list_memories(instance, include_record=True)} == before
    assert_each_write_once(db_url, instance)
    assert len(consolidation_steps(db_url, instance)) == 1  # the fact's line was not consolidated again


def test_a_stored_texts_vector_is_computed_once(counting: CountingEmbeddings) -> None:
    first = embeddings_module.embed_stored_texts(["雷娜把旧地图藏在了铁轨桥下。", "莱姆：我们去黑市。"])
    again = embeddings_module.embed_stored_texts(["莱姆：我们去黑市。", "莱姆：我们去黑市。", "新的一句。"])
    assert counting.calls == [["雷娜把旧地图藏在了铁轨桥下。", "莱姆：我们去黑市。"], ["新的一句。"]]
    assert again[0] is again[1] is first[1]  # the one kept array, not a copy per caller
    assert np.allclose(again[2], counting.model.embed_documents(["新的一句。"])[0], atol=1e-6)


def test_a_written_memorys_vector_is_kept_once_not_copied_per_cache(db_url: str, data_dir: Path) -> None:
    """Issue 29 (a long process's memory): the vector a turn's write computed is the one array the memory-vector
    cache keeps for the new memory, not a second copy of it."""
    from personalab.stores.memory_index import VECTORS

    instance = create_sample_instance(db_url)
    with turn_graph(Context(database_url=db_url)) as (graph, context):
        run_turn(graph, context, instance, FACT, selected_choice={"level": "important"})
        flush_event_writes()
        run_turn(graph, context, instance, "那张地图后来怎么样了？")  # its retrieval scores the new memories
        flush_event_writes()
    store = MemoryStore(db_url=db_url)
    memories = {m.id: m for m in store.list_memories(instance, include_record=True)}
    assert memories
    shared = 0
    for key, (_, vector) in VECTORS.items():
        memory = memories.get(key[2])
        if key[0] != store._chroma_path() or not key[1].startswith(f"memories_{instance}_") or memory is None:
            continue
        written = embeddings_module._stored.get(memory.content)
        assert written is not None and vector is written, memory.content
        assert not vector.flags.writeable  # shared: no holder may change it in place
        shared += 1
    assert shared >= len(memories) // 2, (shared, len(memories))


def test_a_turn_that_tells_a_changed_fact_is_consolidated_within_its_one_embeddings_call(
    db_url: str, data_dir: Path, counting: CountingEmbeddings
) -> None:
    """Issue 26, consolidation on by default: the fact the user tells is stored, decided (an update closing the old
    value) and embedded with the turn's other texts, in the same single call; its memory has its vector."""
    from personalab.graph.api import PersonaLab

    instance = create_sample_instance(db_url)
    with turn_graph(Context(database_url=db_url)) as (graph, context):  # the settings' default: consolidation on
        run_turn(graph, context, instance, "我住在北京。")
        flush_event_writes()
        counting.calls.clear()
        run_turn(graph, context, instance, "跟你说，我搬到上海了。")
        flush_event_writes()
    assert len(counting.calls) == 1, counting.calls
    (texts,) = counting.calls
    store = MemoryStore(db_url=db_url)
    facts = [m for m in store.list_memories(instance) if "fact" in (m.tags or [])]
    current = [m for m in facts if m.valid_to_turn is None]
    assert [m.content for m in current] == ["【住处】用户：跟你说，我搬到上海了。"], facts
    assert current[0].content in texts
    assert [m.valid_to_turn for m in facts if "北京" in m.content] == [2]  # the old value kept, closed at turn 2
    steps = PersonaLab(database_url=db_url).memories.steps(instance)
    assert [(step["action"], step["slot"]) for step in steps] == [("add", "住处"), ("update", "住处")]
    assert not rows(db_url, instance, applied=False)
    assert_each_write_once(db_url, instance)  # every memory, the facts too, with its vector
