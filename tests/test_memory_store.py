"""The memory store on SQLite and PostgreSQL with a real Chroma in the tmp data dir, and retrieval through it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from personalab.nodes.maintenance import maintain_layers
from personalab.nodes.rules.errors import InstanceNotFound, InvalidInput
from personalab.nodes.rules.keywords import tokenize
from personalab.nodes.rules.memory_layers import Layer, LayerConfig, LayerPolicy, MaintenancePlan
from personalab.nodes.rules.retrieval import Candidate, PathHit, PathQuery, RetrievalConfig, retrieve
from personalab.stores.db import session_scope
from personalab.stores.memory import MemoryNotFoundError, MemoryStore, memory_to_dict
from personalab.stores.memory_index import BM25Index
from personalab.stores.saves import create_role, create_save
from rank_bm25 import BM25Okapi

NO_MARK = RetrievalConfig(mark_mentioned=False)


@pytest.fixture
def store(db_url: str, data_dir: Path) -> MemoryStore:
    return MemoryStore(db_url=db_url, chroma_path=str(data_dir / "chroma"))


def new_instance(store: MemoryStore, role: str | None = "白小喵") -> int:
    with session_scope(store.db_url) as session:
        role_id = create_role(session, role).id if role else None
        return create_save(session, role_id, None).id  # type: ignore[return-value]


def snapshot(store: MemoryStore, instance_id: int) -> list[dict[str, Any]]:
    return [memory_to_dict(m) for m in store.list_memories(instance_id)]


def chroma_ids(store: MemoryStore, instance_id: int) -> set[str]:
    character = store.resolve_character(instance_id)
    return set(store._collection(instance_id, character).get(include=[])["ids"])


def test_a_memory_keeps_every_field_of_the_seed(store: MemoryStore) -> None:
    instance = new_instance(store)
    added = store.add_memory(
        instance,
        "昨天和John讨论了种植计划",
        type="conversation",
        tags=["种植", "计划"],
        turn=7,
        related_character="John",
        location="农田",
        notes="重要的约定",
    )
    got = store.get_memory(instance, added.id)
    assert got.content == "昨天和John讨论了种植计划"
    assert (got.type, got.layer, got.turn) == ("conversation", "active", 7)  # new memories enter active
    assert got.importance == 0.5 and got.activity == 1.0  # importance by type
    assert got.tags == ["种植", "计划"] and {"种植", "讨论", "john"} <= set(got.keywords)
    assert (got.related_character, got.location, got.notes) == ("John", "农田", "重要的约定")
    assert not got.user_edited and not got.pinned and got.mention_count == 0 and got.last_mentioned_turn is None
    assert got.created_at is not None and got.instance_id == instance


def test_seed_004_types_are_accepted(store: MemoryStore) -> None:
    instance = new_instance(store)
    for kind in ("episodic", "semantic", "trait", "goal"):
        assert store.add_memory(instance, f"a {kind} memory", type=kind).type == kind


def test_a_memory_is_indexed_in_chroma_with_its_scope(store: MemoryStore) -> None:
    instance = new_instance(store)
    added = store.add_memory(instance, "上周建造了新的防御塔", type="action", layer="situational")
    character = store.resolve_character(instance)
    got = store._collection(instance, character).get(ids=[str(added.id)], include=["metadatas", "documents"])
    assert got["documents"] == ["上周建造了新的防御塔"]
    assert got["metadatas"][0] == {
        "instance_id": instance,
        "character_id": character,
        "memory_id": added.id,
        "layer": "situational",
        "type": "action",
        "turn": 0,
    }


def test_an_instance_never_sees_another_instances_memories(store: MemoryStore) -> None:
    mine, theirs = new_instance(store), new_instance(store, role="钦灵")
    own = store.add_memory(mine, "我最喜欢吃鱼干")
    secret = store.add_memory(theirs, "我最喜欢吃鱼干，这是秘密")
    assert [m.id for m in store.list_memories(mine)] == [own.id]
    result = retrieve(store, mine, "你最喜欢吃什么？鱼干吗", config=NO_MARK)
    assert [item.id for item in result.items] == [own.id]
    for action in (
        lambda: store.get_memory(mine, secret.id),
        lambda: store.edit_memory(mine, secret.id, content="改掉"),
        lambda: store.delete_memory(mine, secret.id),
        lambda: store.set_pinned(mine, secret.id),
    ):
        with pytest.raises(MemoryNotFoundError, match=f"memory {secret.id} does not exist in instance {mine}"):
            action()
    assert store.get_memory(theirs, secret.id).content == "我最喜欢吃鱼干，这是秘密"


def test_an_unknown_instance_is_named(store: MemoryStore) -> None:
    for action in (
        lambda: store.add_memory(999, "x"),
        lambda: store.list_memories(999),
        lambda: maintain_layers(store, 999),
        lambda: retrieve(store, 999, "x"),
    ):
        with pytest.raises(InstanceNotFound, match="instance 999 does not exist"):
            action()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s, i, m: s.add_memory(i, "   "), "memory content is empty"),
        (lambda s, i, m: s.add_memory(i, "x", type="dream"), "memory type 'dream'"),
        (lambda s, i, m: s.add_memory(i, "x", layer="deep"), "memory layer 'deep'"),
        (lambda s, i, m: s.add_memory(i, "x", importance=1.5), "importance 1.5"),
        (lambda s, i, m: s.add_memory(i, "x", turn=-1), "turn -1"),
        (lambda s, i, m: s.edit_memory(i, m, content=""), "memory content is empty"),
        (lambda s, i, m: s.edit_memory(i, m, importance=-0.2), "importance -0.2"),
        (lambda s, i, m: s.edit_memory(i, m, layer="deep"), "memory layer 'deep'"),
        (lambda s, i, m: s.edit_memory(i, m), r"nothing to change in memory \d+"),
        (lambda s, i, m: s.edit_memory(i, m + 100, content="新内容"), r"memory \d+ does not exist in instance"),
        (lambda s, i, m: s.delete_memory(i, m + 100), r"memory \d+ does not exist in instance"),
        (lambda s, i, m: maintain_layers(s, i, turn=-5), "turn -5"),
    ],
)
def test_bad_input_names_the_problem_and_changes_nothing(store: MemoryStore, call: Any, message: str) -> None:
    instance = new_instance(store)
    memory = store.add_memory(instance, "和Mary是好朋友", type="relationship", tags=["朋友"])
    before, vectors = snapshot(store, instance), chroma_ids(store, instance)
    with pytest.raises((ValueError, LookupError), match=message):
        call(store, instance, memory.id)
    assert snapshot(store, instance) == before
    assert chroma_ids(store, instance) == vectors


def test_adding_many_is_all_or_nothing(store: MemoryStore) -> None:
    instance = new_instance(store)
    with pytest.raises(ValueError, match="memory 2 of 3: importance 7"):
        store.add_memories(instance, [{"content": "a"}, {"content": "b", "importance": 7}, {"content": "c"}])
    assert store.list_memories(instance) == []
    added = store.add_memories(instance, [{"content": "a", "turn": 1}, {"content": "b", "turn": 2}])
    assert [m.content for m in store.list_memories(instance)] == ["a", "b"] and len(chroma_ids(store, instance)) == 2
    assert [m.id for m in added] == [m.id for m in store.list_memories(instance)]


def test_a_memory_that_is_not_an_object_is_named(store: MemoryStore) -> None:
    instance = new_instance(store)
    with pytest.raises(InvalidInput, match="memory 2 of 2: must be an object of fields, got int"):
        store.add_memories(instance, [{"content": "a"}, 7])  # type: ignore[list-item]
    assert store.list_memories(instance) == []


def test_edit_marks_the_memory_user_edited_and_reindexes_it(store: MemoryStore) -> None:
    instance = new_instance(store)
    memory = store.add_memory(instance, "昨天和John讨论了种植计划", tags=["种植"])
    edited = store.edit_memory(
        instance, memory.id, content="昨天和Mary讨论了钓鱼计划", tags="钓鱼,湖边", importance=0.9
    )
    assert edited.user_edited and edited.importance == 0.9 and edited.tags == ["钓鱼", "湖边"]
    assert "钓鱼" in edited.keywords and "种植" not in edited.keywords
    result = retrieve(store, instance, "钓鱼", config=NO_MARK)
    assert [item.id for item in result.items] == [memory.id]
    assert result.items[0].breakdown.paths.keys() >= {"bm25", "tags"}
    assert store.index(instance).bm25_search(["种植"], 5) == []  # the old words are gone from the index
    document = store._collection(instance, store.resolve_character(instance)).get(ids=[str(memory.id)])["documents"]
    assert document == ["昨天和Mary讨论了钓鱼计划"]


def test_pin_and_unpin(store: MemoryStore) -> None:
    instance = new_instance(store)
    memory = store.add_memory(instance, "第一次见面是在雨天")
    assert store.set_pinned(instance, memory.id).pinned
    assert store.get_memory(instance, memory.id).pinned
    assert not store.set_pinned(instance, memory.id, False).pinned


def test_delete_removes_the_memory_and_its_vector(store: MemoryStore) -> None:
    instance = new_instance(store)
    keep = store.add_memory(instance, "我最喜欢吃鱼干")
    gone = store.add_memory(instance, "上周建造了新的防御塔")
    store.delete_memory(instance, gone.id)
    assert [m.id for m in store.list_memories(instance)] == [keep.id]
    assert chroma_ids(store, instance) == {str(keep.id)}
    assert retrieve(store, instance, "防御塔", config=NO_MARK).items == ()


def test_maintenance_applies_the_layer_flow_to_database_and_chroma(store: MemoryStore) -> None:
    instance = new_instance(store)
    trivial = store.add_memory(instance, "看到一只蝴蝶飞过", importance=0.1, turn=0)
    chat = store.add_memory(instance, "聊了聊今天的晚饭", importance=0.5, turn=0)
    event = store.add_memory(instance, "基地遭受了袭击", importance=0.8, turn=0)
    fresh = store.add_memory(instance, "刚刚喝了一杯茶", importance=0.5, turn=50)
    report = maintain_layers(store, instance, turn=50)
    layers = {m.id: m.layer for m in store.list_memories(instance)}
    assert layers == {chat.id: "situational", event.id: "situational", fresh.id: "active"}
    assert trivial.id in report.deleted
    assert chroma_ids(store, instance) == {str(chat.id), str(event.id), str(fresh.id)}
    meta = store._collection(instance, store.resolve_character(instance)).get(ids=[str(chat.id)])["metadatas"]
    assert meta[0]["layer"] == "situational"
    maintain_layers(store, instance, turn=5000)
    layers = {m.id: m.layer for m in store.list_memories(instance)}
    assert layers == {event.id: "archive"}  # the conversation faded from the event log, the event stays
    assert retrieve(store, instance, "袭击", config=NO_MARK).items[0].layer == "archive"


def test_maintenance_respects_configured_capacities(store: MemoryStore) -> None:
    instance = new_instance(store)
    for turn in range(5):
        store.add_memory(instance, f"第{turn}件小事", importance=0.5, turn=turn)
    config = LayerConfig(active=LayerPolicy(2, 0.1, 0.5, 0.0))
    maintain_layers(store, instance, turn=4, config=config)
    active = store.list_memories(instance, layer="active")
    assert [m.content for m in active] == ["第3件小事", "第4件小事"]


def test_user_edits_and_pins_are_never_undone_by_the_system(store: MemoryStore) -> None:
    instance = new_instance(store)
    pinned = store.add_memory(instance, "她送我的第一件礼物是一条围巾", importance=0.05, turn=0)
    store.set_pinned(instance, pinned.id)
    edited = store.add_memory(instance, "原来的内容", importance=0.05, turn=0)
    store.edit_memory(instance, edited.id, content="用户改过的内容", layer="active")
    for _ in range(3):
        store.add_memory(instance, "无关的闲聊", importance=0.05, turn=0)
    before = {m.id: memory_to_dict(m) for m in store.list_memories(instance) if m.id in (pinned.id, edited.id)}
    for turn in (10, 100, 1000, 100_000):
        retrieve(store, instance, "礼物 围巾 用户改过的内容", turn=turn)  # recalls them (mention + activity)
        maintain_layers(store, instance, turn=turn, config=LayerConfig(active=LayerPolicy(0, 1, 1, 0)))
    after = {m.id: memory_to_dict(m) for m in store.list_memories(instance)}
    assert set(after) == {pinned.id, edited.id}  # the unprotected ones faded
    for memory_id, old in before.items():
        new = after[memory_id]
        for name in ("content", "layer", "importance", "pinned", "user_edited", "tags", "keywords", "type"):
            assert new[name] == old[name], name


def test_the_store_applies_a_plan_but_never_to_a_pinned_or_edited_memory(store: MemoryStore) -> None:
    """The rule decides (the caller's plan); the store loads, applies in one transaction and keeps its guard."""
    instance = new_instance(store)
    pinned = store.add_memory(instance, "她送我的第一件礼物是一条围巾", turn=0)
    store.set_pinned(instance, pinned.id)
    edited = store.add_memory(instance, "原来的内容", turn=0)
    store.edit_memory(instance, edited.id, content="用户改过的内容")
    plain = store.add_memory(instance, "无关的闲聊", turn=0)
    moved = store.add_memory(instance, "一次普通的散步", turn=0)
    character = store.resolve_character(instance)
    with store.maintenance(instance, turn=3) as batch:
        assert batch.turn == 3 and {m.id for m in batch.memories[character]} == {
            pinned.id,
            edited.id,
            plain.id,
            moved.id,
        }
        assert {m.id for m in batch.memories[character] if m.protected} == {pinned.id, edited.id}
        by_id = {m.id: m for m in batch.memories[character]}
        down = [replace(by_id[i], layer=Layer.SITUATIONAL) for i in (pinned.id, edited.id, moved.id)]
        batch.apply(character, MaintenancePlan(updated=tuple(down), deleted=(pinned.id, edited.id, plain.id)))
    layers = {m.id: m.layer for m in store.list_memories(instance)}
    assert layers == {pinned.id: "active", edited.id: "active", moved.id: "situational"}
    assert batch.report().deleted == (plain.id,)
    assert chroma_ids(store, instance) == {str(pinned.id), str(edited.id), str(moved.id)}


def test_a_failing_maintenance_block_writes_nothing(store: MemoryStore) -> None:
    instance = new_instance(store)
    memory = store.add_memory(instance, "无关的闲聊", turn=0)
    before = snapshot(store, instance)
    with pytest.raises(RuntimeError), store.maintenance(instance) as batch:
        batch.apply(store.resolve_character(instance), MaintenancePlan(deleted=(memory.id,)))
        raise RuntimeError("the planner failed")
    assert snapshot(store, instance) == before and chroma_ids(store, instance) == {str(memory.id)}


def test_retrieval_ranks_the_relevant_memory_first_and_explains_it(store: MemoryStore) -> None:
    instance = new_instance(store)
    target = store.add_memory(instance, "昨天和John讨论了种植计划", turn=9, tags=["种植"])
    for turn, text in enumerate(
        ["上周建造了新的防御塔", "因为朋友的死亡而感到悲伤", "和Mary是好朋友", "我最喜欢吃鱼干"]
    ):
        store.add_memory(instance, text, turn=turn)
    result = retrieve(store, instance, "你还记得种植计划吗？", turn=10, config=NO_MARK)
    assert result.scene.scene.value == "work_discussion"  # 计划 + 种植 beat 记得
    top = result.items[0]
    assert top.id == target.id and top.kind == "memory"
    b = top.breakdown
    assert b.keyword == 1.0 and 0 < b.vector <= 1 and b.paths.keys() == {"bm25", "vector", "tags"}
    assert top.score == pytest.approx(sum(b.weighted.values()) * b.mention_penalty)
    assert result.timings_ms["total"] > 0


def test_retrieval_in_english(store: MemoryStore) -> None:
    instance = new_instance(store, role=None)
    target = store.add_memory(instance, "Caroline went to the LGBTQ support group on Sunday", turn=1)
    store.add_memory(instance, "Melanie painted a sunrise over the lake", turn=2)
    store.add_memory(instance, "They talked about adopting a dog", turn=3)
    result = retrieve(store, instance, "When did Caroline go to the support group?", config=NO_MARK)
    assert result.items[0].id == target.id
    assert result.character_id == 0


def test_retrieving_marks_the_selected_memories_as_mentioned(store: MemoryStore) -> None:
    instance = new_instance(store)
    memory = store.add_memory(instance, "我最喜欢吃鱼干", turn=3)
    first = retrieve(store, instance, "鱼干", turn=5)
    assert first.items[0].breakdown.mention_penalty == 1.0
    got = store.get_memory(instance, memory.id)
    assert got.mention_count == 1 and got.last_mentioned_turn == 5 and got.last_mentioned_at is not None
    second = retrieve(store, instance, "鱼干", turn=6)
    assert second.items[0].breakdown.mention_penalty == pytest.approx(0.8)
    assert second.items[0].score < first.items[0].score
    retrieve(store, instance, "鱼干", turn=7, config=NO_MARK)
    assert store.get_memory(instance, memory.id).mention_count == 2


def test_what_the_character_said_recently_is_not_retrieved_again(store: MemoryStore) -> None:
    instance = new_instance(store)
    said = store.add_memory(instance, "我们昨天一起去了海边看日落")
    other = store.add_memory(instance, "我们约好下次再去海边")
    result = retrieve(store, instance, "海边", recent_own_lines=["我们昨天一起去了海边看日落！"], config=NO_MARK)
    assert [item.id for item in result.items] == [other.id]
    assert {"kind": "memory", "id": said.id, "reason": "said_recently", "similarity": 1.0} in result.dropped


def test_the_tag_path_finds_memories_by_tag(store: MemoryStore) -> None:
    instance = new_instance(store)
    tagged = store.add_memory(instance, "那天下了很大的雨", tags=["约会"])
    store.add_memory(instance, "今天吃了火锅")
    result = retrieve(store, instance, "还记得我们的约会吗", config=NO_MARK)
    assert result.items[0].id == tagged.id and "tags" in result.items[0].breakdown.paths
    explicit = retrieve(store, instance, "随便说说", tags=["约会"], config=NO_MARK)
    assert tagged.id in [item.id for item in explicit.items]


def test_memory_search_in_a_two_memory_pool_puts_the_memory_sharing_the_querys_word_first(store: MemoryStore) -> None:
    """Issue 29's gate in a new instance (CI, 2026-11-27: with the gate on, two-memory pools ranked the unrelated
    memory first). BM25 gives a word found in one of two memories IDF 0, so the match is by meaning and by the shared
    word; the older, less important memory that shares 怀表 still comes first, the unrelated one second."""
    instance = new_instance(store)
    related = store.add_memory(instance, "莱姆把怀表埋在老橡树下", importance=0.3, turn=0)
    unrelated = store.add_memory(instance, "车队明天出发", importance=0.8, turn=10)
    found = retrieve(store, instance, "怀表在哪里", config=NO_MARK)  # `memory search`'s ranking
    assert [item.id for item in found.items] == [related.id, unrelated.id]
    assert found.items[0].breakdown.context_relevance > found.items[1].breakdown.context_relevance
    # the seed's plain sum: recency and importance put the unrelated memory first
    plain = retrieve(store, instance, "怀表在哪里", config=replace(NO_MARK, relevance_gate=0.0, character_evidence=1.0))
    assert plain.items[0].id == unrelated.id


SMALL_TALK = [
    "今天的风有点大，我们找个地方避一避吧。",
    "背包越来越沉了，等会儿歇一会儿。",
    "你看那边的云，像不像一只狗？",
    "这里的地图好像不太准，我们换条路走怎么样？",
    "天色暗下来了，我们得赶紧找个过夜的地方。",
    "罐头还剩三个，省着点吃。",
    "前面那片废墟里好像有人影。",
    "我的靴子又磨破了一个洞。",
    "收音机里只有沙沙的杂音。",
    "昨晚的篝火差点被雨浇灭。",
    "那只野狗一直跟着我们。",
    "水壶里的水只够两天了。",
    "远处的工厂烟囱还在冒烟，奇怪。",
    "你擦枪的样子很专注。",
    "这条公路以前一定很热闹。",
    "我梦见了下雪的城市。",
    "把地图收好，别被风吹走了。",
    "前面的桥看起来不太结实。",
    "我们走了多久了？",
    "你听，好像有车的声音。",
    "这罐豆子已经过期了，还能吃吗？",
    "今晚轮到我守夜。",
    "那个商人开价太高了。",
    "找到一本被烧了一半的书。",
    "电池快没电了，手电筒省着用。",
]


ASKED_IN_OTHER_WORDS = "那个吹曲子的小玩意儿你放哪了？"


def harmonica_fact(store: MemoryStore) -> tuple[int, Any]:
    """An instance with a fact (turn 2), small talk, and the fact asked after in its own words (turn 60): (instance,
    the fact)."""
    instance = new_instance(store)
    fact = store.add_memory(instance, "老周的口琴我一直替他收在铁皮盒里。", importance=0.8, turn=2)
    for position, line in enumerate(SMALL_TALK):
        store.add_memory(instance, line, importance=0.3, turn=5 + 2 * position)
    store.add_memory(instance, "老周那把口琴你收在哪儿了？", importance=0.5, turn=60)
    return instance, fact


def test_a_question_in_other_words_finds_its_fact_through_the_same_question_asked_before(store: MemoryStore) -> None:
    """Issue 26 (`long_horizon_facts` turn 307): a question sharing no telling word with its fact is found through
    the memory of the same question asked before in the fact's words, which the encoder does find far above the rest
    (pseudo-relevance feedback from the dense path); also when the query is a rewrite that adds the dialogue's
    context: the feedback reads the user's own words. Without it the fact is not among the five."""
    instance, fact = harmonica_fact(store)
    asked = ASKED_IN_OTHER_WORDS
    rewrite = "那个吹曲子的小玩意儿你放哪了（上下文：电池快没电了）"
    five = replace(NO_MARK, k=5)
    off = replace(five, feedback_terms=0)

    def found(query: str, config: RetrievalConfig, message: str = "") -> bool:
        return fact.id in [
            item.id for item in retrieve(store, instance, query, message=message, turn=80, config=config).items
        ]

    assert found(asked, five) and not found(asked, off)
    assert found(rewrite, five, message=asked) and not found(rewrite, off, message=asked)
    assert not found(rewrite, five)  # the rewrite's own nearest hit is the context's line: nothing to learn from it


def test_the_feedback_reads_past_the_same_question_the_recent_dialogue_holds(store: MemoryStore) -> None:
    """Issue 26 (the played store's turn 309, one-shot CLI): the user asks again what they asked two turns ago; the
    nearest memory is that turn's, whose words are the question's own, not the fact's. The feedback reads the best
    match older than the prompt's recent dialogue (`recent_from_turn`), the question asked in the fact's words."""
    instance, fact = harmonica_fact(store)
    asked = ASKED_IN_OTHER_WORDS
    again = store.add_memory(instance, asked, importance=0.5, turn=78)  # two turns ago: in the recent dialogue
    # the turn asks for twice its slots (the memories its recent dialogue shows are left out after): all of them here
    every = replace(NO_MARK, k=40)

    def keyword_rank(recent_from_turn: int | None) -> int | None:
        result = retrieve(store, instance, asked, turn=80, recent_from_turn=recent_from_turn, config=every)
        ranks = {item.id: item.breakdown.paths.get("bm25") for item in result.items}
        assert again.id in ranks  # still a candidate: the turn leaves out what its recent dialogue shows itself
        return ranks[fact.id]

    found = keyword_rank(70)
    assert found is not None and found <= 3  # the fact's words came from turn 60's question
    assert keyword_rank(None) is None  # the nearest is turn 78's question: its words add nothing


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"query": " "}, "query is empty"),
        ({"k": 0}, "k 0"),
        ({"turn": -1}, "turn -1"),
        ({"recent_from_turn": "70"}, "recent_from_turn '70'"),
    ],
)
def test_a_retrieval_with_a_bad_argument_names_it(store: MemoryStore, arguments: dict[str, Any], named: str) -> None:
    instance = new_instance(store)
    memory = store.add_memory(instance, "莱姆把怀表埋在老橡树下", turn=1)
    call: dict[str, Any] = {"query": "怀表", **arguments}
    with pytest.raises(InvalidInput, match=named):
        retrieve(store, instance, call.pop("query"), **call)
    assert store.get_memory(instance, memory.id).mention_count == 0  # nothing marked


def test_an_extra_candidate_path_plugs_in(store: MemoryStore) -> None:
    instance = new_instance(store)
    memory = store.add_memory(instance, "龙族的长老曾经救过我")
    seen: list[PathQuery] = []

    def worldbook(query: PathQuery) -> list[PathHit]:
        seen.append(query)
        entry = Candidate(
            kind="worldbook", id="wb-1", content="龙族不能进入人类城市", keywords=("龙族",), importance=0.9
        )
        return [PathHit(memory.id, 1.0), PathHit("wb-1", 1.0, kind="worldbook", item=entry)]

    result = retrieve(store, instance, "龙族", extra_paths={"worldbook": worldbook})
    assert seen and seen[0].instance_id == instance and seen[0].query == "龙族" and seen[0].embedding.shape == (512,)
    by_kind = {item.kind: item for item in result.items}
    assert by_kind["worldbook"].content == "龙族不能进入人类城市"
    assert "worldbook" in by_kind["memory"].breakdown.paths
    assert store.get_memory(instance, memory.id).mention_count == 1
    with pytest.raises(ValueError, match="extra path 'bm25'"):
        retrieve(store, instance, "龙族", extra_paths={"bm25": worldbook})


def test_the_keyword_index_is_kept_and_follows_every_write(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept index is changed by each write of this process (no rebuild), and sees another process's writes:
    there, only the revision in the database tells, and the search re-indexes what differs."""
    instance = new_instance(store)
    fish = store.add_memory(instance, "我最喜欢吃鱼干")
    first = store.index(instance)
    revision = first.revision
    assert store.index(instance) is first  # no rebuild per query
    retrieve(store, instance, "鱼干")  # marking mentions changes no indexed text
    assert store.index(instance) is first and first.revision == revision

    def no_rebuild(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the keyword index was rebuilt")

    monkeypatch.setattr("personalab.stores.memory.BM25Index.__init__", no_rebuild)
    added = store.add_memory(instance, "上周建造了新的防御塔")
    second = store.index(instance)
    assert second is first and second.revision > revision
    assert [i for i, _ in second.bm25_search(["防御"], 5)] == [added.id]
    # another process: its writes reach this one through the database only
    clear_written = "personalab.stores.memory.note_written"
    monkeypatch.setattr(clear_written, lambda *args, **kwargs: None)
    other_handle = MemoryStore(db_url=store.db_url, chroma_path=store.chroma_path)
    other_handle.delete_memory(instance, added.id)
    assert store.index(instance).bm25_search(["防御"], 5) == []
    other_handle.edit_memory(instance, fish.id, content="我最喜欢吃海边的烤鱼")
    assert store.index(instance).bm25_search(tokenize("鱼干"), 5) == []
    assert [i for i, _ in store.index(instance).bm25_search(tokenize("海边的烤鱼"), 5)] == [fish.id]


def test_threads_wanting_a_missing_index_at_once_build_it_once(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process's first turn: its retrieval and the writer of its writes both want the index; the second waits for
    the first's build and takes it (reading and indexing 10,000 memories twice once pushed a turn past its cap)."""
    import threading
    import time

    from personalab.stores import memory
    from personalab.stores.memory_index import clear_index_cache

    instance = new_instance(store)
    store.add_memory(instance, "我最喜欢吃鱼干")
    clear_index_cache()
    builds: list[int] = []
    rows = memory.index_rows

    def slow_rows(*args: Any) -> Any:
        builds.append(1)
        time.sleep(0.3)
        return rows(*args)

    monkeypatch.setattr(memory, "index_rows", slow_rows)
    found: list[Any] = []
    threads = [threading.Thread(target=lambda: found.append(store.index(instance))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and len(found) == 3 and all(index is found[0] for index in found)
    assert [len(index) for index in found] == [1, 1, 1]


def test_bm25_index_scores_are_rank_bm25_scores() -> None:
    rng = np.random.default_rng(7)
    vocabulary = ["种植", "计划", "john", "防御", "塔", "鱼干", "海边", "日落", "朋友"]
    docs = [list(rng.choice(vocabulary, size=int(rng.integers(0, 8)))) for _ in range(40)]
    index = BM25Index(list(range(100, 140)), docs, k1=1.5, b=0.75)
    reference = BM25Okapi(docs, k1=1.5, b=0.75).get_scores(["种植", "塔", "塔", "不存在"])
    hits = dict(index.top(["种植", "塔", "塔", "不存在"], 40))
    for position, score in enumerate(reference):
        assert hits.get(100 + position, 0.0) == pytest.approx(score)
    assert BM25Index([], []).top(["x"], 5) == []
    assert BM25Index([1], [[]]).top(["x"], 5) == []


def test_reindex_restores_vectors_lost_by_chroma(store: MemoryStore) -> None:
    instance = new_instance(store)
    memory = store.add_memory(instance, "我最喜欢吃鱼干")
    collection = store._collection(instance, store.resolve_character(instance))
    collection.delete(ids=[str(memory.id)])
    assert store.reindex(instance) == 1
    assert chroma_ids(store, instance) == {str(memory.id)}
    assert store.count(instance) == 1


def test_memories_of_two_characters_in_one_instance_are_kept_apart(store: MemoryStore) -> None:
    instance = new_instance(store)
    own = store.add_memory(instance, "我最喜欢吃鱼干")
    other = store.add_memory(instance, "我最喜欢吃鱼干和牛奶", character_id=4242)
    assert [i.id for i in retrieve(store, instance, "鱼干", config=NO_MARK).items] == [own.id]
    assert [i.id for i in retrieve(store, instance, "鱼干", character_id=4242, config=NO_MARK).items] == [other.id]
    assert {m.id for m in store.list_memories(instance)} == {own.id, other.id}
    assert [m.id for m in store.list_memories(instance, character_id=4242)] == [other.id]
    leaky = {"worldbook": lambda query: [PathHit(other.id, 1.0)]}  # a path naming another character's memory
    assert [i.id for i in retrieve(store, instance, "鱼干", extra_paths=leaky, config=NO_MARK).items] == [own.id]


def test_default_turn_is_the_latest_memory_turn(store: MemoryStore) -> None:
    instance = new_instance(store)
    store.add_memory(instance, "a", turn=12)
    assert store.add_memory(instance, "b").turn == 12
    assert retrieve(store, instance, "b", config=NO_MARK).turn == 12
    assert Layer(store.list_memories(instance)[0].layer) is Layer.ACTIVE


def spy_on_vector_reads(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The ids of every `get` of vectors the store asks Chroma for, from now on."""
    asked: list[list[str]] = []
    real = store._collection

    class Spy:
        def __init__(self, collection: Any) -> None:
            self.collection = collection

        def __getattr__(self, name: str) -> Any:
            return getattr(self.collection, name)

        def get(self, *args: Any, **kwargs: Any) -> Any:
            if "embeddings" in (kwargs.get("include") or []):
                asked.append(list(kwargs.get("ids") or []))
            return self.collection.get(*args, **kwargs)

    monkeypatch.setattr(store, "_collection", lambda instance, character: Spy(real(instance, character)))
    return asked


def test_a_retrieval_takes_the_vectors_of_candidates_seen_before_from_the_process(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = new_instance(store)
    store.add_memories(instance, [{"content": f"第{n}次在净水厂找到了零件"} for n in range(8)])
    asked = spy_on_vector_reads(store, monkeypatch)
    added_here = retrieve(store, instance, "净水厂的零件", config=NO_MARK)
    assert asked == []  # the vectors of memories this process wrote are kept when they are written
    store._forget_vectors(instance, store.resolve_character(instance))  # as in a process that did not write them
    first = retrieve(store, instance, "净水厂的零件", config=NO_MARK)
    assert len(asked) == 1 and len(asked[0]) == 8
    asked.clear()
    again = retrieve(store, instance, "净水厂的零件", config=NO_MARK)
    assert asked == []
    assert [item.id for item in again.items] == [item.id for item in first.items] == [i.id for i in added_here.items]
    assert [item.score for item in again.items] == [item.score for item in first.items]
    assert [item.score for item in added_here.items] == pytest.approx([item.score for item in first.items], abs=1e-6)


def test_a_memory_whose_text_changed_gets_its_new_vector(store: MemoryStore) -> None:
    instance = new_instance(store)
    (entry,) = store.add_memories(instance, [{"content": "旧的说法"}], embeddings=np.eye(1, 512, dtype=np.float32))
    character = store.resolve_character(instance)
    assert store.embeddings(instance, character, [entry.id], {entry.id: "旧的说法"})[entry.id][0] == 1.0
    store.edit_memory(instance, entry.id, content="新的说法")  # re-embedded by the model
    fresh = store.embeddings(instance, character, [entry.id], {entry.id: "新的说法"})[entry.id]
    assert fresh[0] != 1.0 and np.allclose(fresh, store.embed_query("新的说法"), atol=1e-5)
    # written by another process: nothing here forgot the kept vector, the text tells it apart
    store._collection(instance, character).upsert(
        ids=[str(entry.id)], embeddings=[np.eye(1, 512, 7)[0].tolist()], documents=["别处改的"]
    )
    assert store.embeddings(instance, character, [entry.id], {entry.id: "别处改的"})[entry.id][7] == 1.0


def test_reindex_replaces_the_kept_vectors(store: MemoryStore) -> None:
    instance = new_instance(store)
    (entry,) = store.add_memories(instance, [{"content": "一条记忆"}], embeddings=np.eye(1, 512, dtype=np.float32))
    character = store.resolve_character(instance)
    assert store.embeddings(instance, character, [entry.id], {entry.id: "一条记忆"})[entry.id][0] == 1.0
    store.reindex(instance)  # same text, the model's vector now
    again = store.embeddings(instance, character, [entry.id], {entry.id: "一条记忆"})[entry.id]
    assert np.allclose(again, store.embed_query("一条记忆"), atol=1e-5)
