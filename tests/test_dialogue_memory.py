"""Dialogue lines as memories (nodes.rules.dialogue_memory) and what the store does with them: a context stored in front
of the memory and weighing half in BM25, and bulk adds with precomputed embeddings (SQLite and PostgreSQL, real
Chroma in the tmp data dir)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from personalab.nodes.rules.dialogue_memory import DialogueLine, dialogue_memories, line_text
from personalab.nodes.rules.retrieval import RetrievalConfig, retrieve
from personalab.stores.db import session_scope
from personalab.stores.memory import MemoryStore
from personalab.stores.saves import create_save

LINES = [
    DialogueLine("Aiko", "I adopted a grey kitten!", when="3 March, 2023"),
    DialogueLine("Bram", "What did you name it?", when="3 March, 2023"),
    DialogueLine("Aiko", "Pixel.", when="3 March, 2023", attachment="a photo of a kitten on a sofa"),
]


@pytest.fixture
def store(db_url: str, data_dir: Path) -> MemoryStore:
    return MemoryStore(db_url=db_url, chroma_path=str(data_dir / "chroma"))


def new_instance(store: MemoryStore) -> int:
    with session_scope(store.db_url) as session:
        return create_save(session, None, None).id  # type: ignore[return-value]


def test_each_line_becomes_a_conversation_memory_with_the_two_lines_before_as_context() -> None:
    items = dialogue_memories(LINES, first_turn=10)
    assert [item["content"] for item in items] == [
        "[3 March, 2023] Aiko: I adopted a grey kitten!",
        "[3 March, 2023] Bram: What did you name it?",
        "[3 March, 2023] Aiko: Pixel. [shares a photo of a kitten on a sofa]",
    ]
    assert [item["context"] for item in items] == [
        "",
        "Aiko: I adopted a grey kitten!",
        "Aiko: I adopted a grey kitten!\nBram: What did you name it?",
    ]
    assert [item["turn"] for item in items] == [10, 11, 12]
    assert {item["type"] for item in items} == {"conversation"}
    assert [item["related_character"] for item in items] == ["Aiko", "Bram", "Aiko"]


def test_the_context_window_is_configurable() -> None:
    assert [item["context"] for item in dialogue_memories(LINES, context_lines=0)] == ["", "", ""]
    one = dialogue_memories(LINES, context_lines=1)[2]["context"]
    assert one == "Bram: What did you name it?"
    assert line_text(DialogueLine("", "没有说话人的一句")) == "没有说话人的一句"


def test_a_bad_line_is_named_and_nothing_is_returned() -> None:
    with pytest.raises(ValueError, match="dialogue line 2 says nothing"):
        dialogue_memories([LINES[0], DialogueLine("Bram", "  ")])
    with pytest.raises(ValueError, match="dialogue line 1: 'hello' is not a DialogueLine"):
        dialogue_memories(["hello"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="context_lines -1"):
        dialogue_memories(LINES, context_lines=-1)


def test_a_context_is_stored_in_front_of_the_memory_and_weighs_half_in_keyword_search(store: MemoryStore) -> None:
    instance = new_instance(store)
    store.add_memories(instance, [{"content": f"Bram: line {n} about the weather"} for n in range(4)])
    in_context = store.add_memory(instance, "Bram: I started pottery classes.", context="Aiko: my kitten sleeps a lot")
    own = store.add_memory(instance, "Aiko: my kitten sleeps a lot.", context="Bram: I started pottery classes")
    assert store.get_memory(instance, in_context.id).content == (
        "Aiko: my kitten sleeps a lot\nBram: I started pottery classes."
    )
    ranked = [memory_id for memory_id, _ in store.index(instance).bm25_search(["kitten"], 10)]
    assert ranked == [own.id, in_context.id]  # both hold the word: the one whose own line says it comes first


def test_dialogue_memories_are_found_by_a_question_about_them(store: MemoryStore) -> None:
    instance = new_instance(store)
    entries = store.add_memories(instance, dialogue_memories(LINES))
    result = retrieve(store, instance, "What is the name of Aiko's kitten?", config=RetrievalConfig.for_recall())
    assert entries[2].id in [item.id for item in result.items[:2]]  # "Pixel." is found through its context
    assert all(entry.mention_count == 0 for entry in store.list_memories(instance))  # recall marks nothing


CHAT = [
    DialogueLine("林澈", "今天风好大，我们找个地方避一避吧。"),
    DialogueLine("雷娜", "前面那栋楼还算结实。"),
    DialogueLine("林澈", "我最怕深水，小时候差点淹死在村口的水库里。"),
    DialogueLine("雷娜", "难怪你每次过河都走得那么慢。"),
    DialogueLine("林澈", "我们约好了，要是走散了，就在旧水塔下面碰头。"),
    DialogueLine("雷娜", "好，我记住了。"),
    *[DialogueLine("林澈" if n % 2 else "雷娜", f"第{n}段路上的沙子又多又烫，你会不会觉得累？") for n in range(8)],
]


def test_a_chinese_question_in_other_words_finds_its_fact(store: MemoryStore) -> None:
    instance = new_instance(store)
    entries = store.add_memories(instance, dialogue_memories(CHAT))
    # 害怕 / 最怕 share only 怕: the characters of the words are searched too; 什么 is not searched for
    found = retrieve(store, instance, "我最害怕的是什么？", k=3, config=RetrievalConfig.for_recall())
    assert entries[2].id in [item.id for item in found.items]


def test_the_users_own_words_count_beside_a_rewritten_query(store: MemoryStore) -> None:
    instance = new_instance(store)
    entries = store.add_memories(instance, dialogue_memories(CHAT))
    rewrite = "分开以后（上下文：沙子又多又烫）"  # a rewrite that lost the message's words and added the dialogue's
    alone = retrieve(store, instance, rewrite, k=3, config=RetrievalConfig.for_recall())
    assert entries[4].id not in [item.id for item in alone.items]
    message = "万一我们走散了，你会去哪儿碰头等我？"
    both = retrieve(store, instance, rewrite, message=message, k=3, config=RetrievalConfig.for_recall())
    assert entries[4].id in [item.id for item in both.items]
    assert (
        retrieve(store, instance, message, message=message, k=3, config=RetrievalConfig.for_recall()).query == message
    )


def test_recall_expands_the_keyword_query_with_the_best_matchs_words(store: MemoryStore) -> None:
    instance = new_instance(store)
    filler = [DialogueLine("Bram", f"The weather on day {n} was grey and windy.") for n in range(6)]
    lines = [
        DialogueLine("Aiko", "Guess what, I got mentored by a business coach yesterday!"),
        DialogueLine("Bram", "What did the coach teach you?"),
        DialogueLine("Aiko", "To price my pottery higher and sell it at the Sunday market."),
        *filler,
    ]
    entries = store.add_memories(instance, dialogue_memories(lines, context_lines=0))
    question = "When did Aiko get mentored?"
    plain = retrieve(store, instance, question, k=3, config=RetrievalConfig.for_recall(expansion_terms=0))
    expanded = retrieve(store, instance, question, k=3, config=RetrievalConfig.for_recall())
    assert plain.items[0].id == expanded.items[0].id == entries[0].id  # the best match stays first
    # the coach of the best match brings the turn that names the coach without the question's words
    assert expanded.items[0].breakdown.paths.get("bm25") == 1 and entries[1].id in [i.id for i in expanded.items]
    assert entries[1].id in [item.id for item in expanded.items if "bm25" in item.breakdown.paths]
    assert entries[1].id not in [item.id for item in plain.items if "bm25" in item.breakdown.paths]


def test_recall_favours_the_lines_of_the_speaker_a_question_names(store: MemoryStore) -> None:
    instance = new_instance(store)
    weather = [DialogueLine("Bram", f"The weather on day {n} was windy.") for n in range(3)]
    lines = [
        DialogueLine("Aiko", "I adopted a grey kitten on Sunday, from the shelter by the river."),
        *weather,
        DialogueLine("Bram", "The shelter by the river? Aiko, I adopted my dog there!"),  # echoes the question's words
        *weather,
    ]
    entries = store.add_memories(instance, dialogue_memories(lines, context_lines=0))
    question = "What did Aiko adopt from the shelter?"
    plain = retrieve(store, instance, question, k=2, config=RetrievalConfig.for_recall(speaker_boost=0.0))
    assert [item.id for item in plain.items] == [entries[4].id, entries[0].id]  # Bram's echo first
    named = retrieve(store, instance, question, k=2, config=RetrievalConfig.for_recall())
    assert [item.id for item in named.items] == [entries[0].id, entries[4].id]  # what Aiko said comes first
    assert named.items[0].breakdown.context_relevance == pytest.approx(plain.items[1].breakdown.context_relevance + 0.2)
    # someone else named ("Ai" is not "Aiko"): ranked as without the bonus
    other = retrieve(store, instance, "What did Ai adopt from the shelter?", k=2, config=RetrievalConfig.for_recall())
    assert [item.id for item in other.items] == [entries[4].id, entries[0].id]
    # a turn's retrieval does not favour a named speaker: in a turn a name is whom the user talks to
    assert RetrievalConfig().speaker_boost == 0.0


def test_a_chinese_question_names_a_speaker_inside_its_words(store: MemoryStore) -> None:
    instance = new_instance(store)
    weather = [DialogueLine("雷娜", f"第{n}天的天气很好。") for n in range(3)]
    lines = [
        DialogueLine("莱姆", "我妹妹小雨上六年级了。"),
        *weather,
        DialogueLine("雷娜", "莱姆，你妹妹小雨真可爱，我也有个妹妹。"),
        *weather,
    ]
    entries = store.add_memories(instance, dialogue_memories(lines, context_lines=0))
    question = "莱姆的妹妹小雨上几年级？"  # 莱姆 is named with no space around it
    plain = retrieve(store, instance, question, k=2, config=RetrievalConfig.for_recall(speaker_boost=0.0))
    named = retrieve(store, instance, question, k=2, config=RetrievalConfig.for_recall())
    assert [item.id for item in named.items] == [item.id for item in plain.items] == [entries[0].id, entries[4].id]
    before = [item.breakdown.context_relevance for item in plain.items]
    after = [item.breakdown.context_relevance for item in named.items]
    assert after == pytest.approx([before[0] + 0.2, before[1]])  # 莱姆's line favoured, 雷娜's (naming 莱姆) not


def test_memories_can_be_added_with_precomputed_embeddings(store: MemoryStore) -> None:
    instance = new_instance(store)
    vectors = np.eye(2, 512, dtype=np.float32)
    entries = store.add_memories(instance, [{"content": "第一条"}, {"content": "第二条"}], embeddings=vectors)
    stored = store.embeddings(instance, 0, [e.id for e in entries])
    assert np.allclose(stored[entries[0].id], vectors[0]) and np.allclose(stored[entries[1].id], vectors[1])
    nearest = store.vector_search(instance, 0, vectors[1], 1)
    assert nearest[0][0] == entries[1].id


def test_a_wrong_number_of_embeddings_stores_nothing(store: MemoryStore) -> None:
    instance = new_instance(store)
    with pytest.raises(ValueError, match=r"expected 2 vector\(s\), one per memory, got shape \(1, 512\)"):
        store.add_memories(instance, [{"content": "a"}, {"content": "b"}], embeddings=np.zeros((1, 512)))
    with pytest.raises(ValueError, match="not a finite number"):
        store.add_memories(instance, [{"content": "a"}], embeddings=[[float("nan")] * 512])
    assert store.count(instance) == 0
    store.add_memories(instance, [{"content": "a"}], embeddings=np.ones((1, 512)))
    with pytest.raises(ValueError, match="embeddings have 3 dimensions, the instance's memories 512"):
        store.add_memories(instance, [{"content": "b"}], embeddings=np.ones((1, 3)))
    assert [m.content for m in store.list_memories(instance)] == ["a"]
