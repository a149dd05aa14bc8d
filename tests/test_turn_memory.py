"""Long-term memory in the turn (seeds 001 + 004): what the retrieval node puts in the prompt the model gets,
checked on the request the real ChatOpenAI client sends to the stub server."""

from __future__ import annotations

from typing import Any

import pytest
from openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.runner import create_sample_instance, run_turn, turn_config, turn_graph
from personalab.nodes.context import Context
from personalab.stores.background import flush_event_writes
from personalab.stores.db import session_scope
from personalab.stores.memory import MemoryStore
from personalab.stores.saves import get_save
from personalab.stores.worldbook import GLOBAL, Scope, add_knowledge, add_worldbook_entry


def one_turn(url: str, instance: int, message: str, **ctx: Any) -> dict[str, Any]:
    with turn_graph(Context(database_url=url, **ctx)) as (graph, context):
        return run_turn(graph, context, instance, message)


def retrieved_region(stub: OpenAIStub) -> str:
    """The system message of the retrieved region in the last reply request."""
    messages = stub.requests[-1]["messages"]
    region = [m["content"] for m in messages if m["role"] == "system" and "=== " in m["content"]]
    assert len(region) == 1, messages
    return region[0]


def test_memories_world_book_and_knowledge_reach_the_prompt_in_the_seeds_order(
    sqlite_url: str, openai_stub: OpenAIStub
) -> None:
    instance = create_sample_instance(sqlite_url)
    MemoryStore(db_url=sqlite_url).add_memory(instance, "莱姆把金色怀表藏在了旧仓库的地板下", importance=0.9, turn=0)
    with session_scope(sqlite_url) as s:
        role_id = get_save(s, instance).role_id
        add_knowledge(s, "地点", "旧仓库在据点东侧，夜里无人看守", keywords=["旧仓库"], importance=0.8)
        add_worldbook_entry(s, "黑鸦是叛徒的代号，只在夜里出没", keywords=["黑鸦"], scope=Scope(role_id=role_id))
    openai_stub.queue("【认真】在旧仓库。")
    state = one_turn(sqlite_url, instance, "黑鸦把怀表藏在旧仓库哪里了？")
    region = retrieved_region(openai_stub)
    knowledge_at, memories_at = region.index("=== 世界知识 ==="), region.index("=== 相关记忆 ===")
    assert knowledge_at < region.index("[地点] 旧仓库在据点东侧") < memories_at
    assert knowledge_at < region.index("黑鸦是叛徒的代号") < memories_at
    assert region.index("莱姆把金色怀表藏在了旧仓库的地板下") > memories_at
    (item,) = [i for i in state["retrieved"] if "金色怀表" in i["content"]]
    breakdown = item["breakdown"]
    for factor in ("context_relevance", "keyword", "vector", "recency", "importance", "diversity", "layer_priority"):
        assert isinstance(breakdown[factor], float), factor
    assert breakdown["score"] == item["score"] and breakdown["paths"]
    assert state["debug"]["retrieval"]["scene"]
    assert any(row["status"] == "included" for row in state["debug"]["retrieval"]["injection"])


def test_another_instances_memories_and_world_book_stay_out(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    a, b = create_sample_instance(sqlite_url), create_sample_instance(sqlite_url)
    MemoryStore(db_url=sqlite_url).add_memory(a, "暗号是“北风吹过红色的塔”", importance=0.9, turn=0)
    with session_scope(sqlite_url) as s:
        add_worldbook_entry(s, "只属于实例A的秘密：地下室有一扇暗门", keywords=["暗号"], scope=Scope(save_id=a))
    openai_stub.queue("【平静】不知道。")
    one_turn(sqlite_url, b, "暗号是什么？")
    sent = str(openai_stub.requests[-1]["messages"])
    assert "北风吹过红色的塔" not in sent and "暗门" not in sent


def test_world_book_entries_for_the_user_position_go_with_the_input(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    instance = create_sample_instance(sqlite_url)
    with session_scope(sqlite_url) as s:
        add_worldbook_entry(s, "（提示：信号枪只剩一发）", keywords=["信号枪"], position="user", scope=GLOBAL)
    openai_stub.queue("【紧张】省着用。")
    one_turn(sqlite_url, instance, "把信号枪给我。")
    last = openai_stub.requests[-1]["messages"][-1]
    assert last["role"] == "user" and "信号枪只剩一发" in last["content"] and last["content"].endswith("把信号枪给我。")


def test_a_small_retrieved_budget_drops_memories_and_says_why(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    store = MemoryStore(db_url=sqlite_url)
    store.add_memories(instance, [{"content": f"据点的第{i}条传闻：" + "风沙" * 40, "turn": 0} for i in range(8)])
    state = one_turn(sqlite_url, instance, "据点有什么传闻？", retrieved_tokens=120)
    rows = state["debug"]["retrieval"]["injection"]
    assert any(r["status"] == "skipped" and "budget" in r["reason"] for r in rows)
    assert state["debug"]["prompt"]["retrieved"]["tokens"] <= 120 + 20  # region budget holds (block titles aside)


def test_pinned_memory_survives_maintenance_in_the_turn(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    store = MemoryStore(db_url=sqlite_url)
    pinned = store.add_memory(instance, "雷娜发誓永远不背叛莱姆", importance=0.05, turn=0)
    store.set_pinned(instance, pinned.id, True)
    with turn_graph(Context(database_url=sqlite_url, maintenance_every=1)) as (graph, ctx):
        for message in ("走吧。", "继续。", "再走走。"):
            state = run_turn(graph, ctx, instance, message)
    assert state["debug"]["maintenance"]["memory_layers"]["status"] == "queued"
    flush_event_writes()
    ids = {m.id for m in store.list_memories(instance)}
    assert pinned.id in ids
    assert store.get_memory(instance, pinned.id).content == "雷娜发誓永远不背叛莱姆"


def test_a_fired_world_book_entry_pulls_in_memories_sharing_its_keywords(sqlite_url: str) -> None:
    """Seed 004: the world book triggers memories — its keywords are one more candidate path."""
    instance = create_sample_instance(sqlite_url)
    store = MemoryStore(db_url=sqlite_url)
    linked = store.add_memory(instance, "老七说过，叛徒代号只在夜里用", importance=0.5, turn=0)
    store.add_memory(instance, "卡车的轮胎又漏气了", importance=0.5, turn=0)
    with session_scope(sqlite_url) as s:
        add_worldbook_entry(s, "黑鸦：叛徒在废土上的代号", keywords=["黑鸦", "叛徒代号"], scope=GLOBAL)
    state = one_turn(sqlite_url, instance, "黑鸦来了。")
    (item,) = [i for i in state["retrieved"] if i["id"] == linked.id]
    assert "worldbook" in item["breakdown"]["paths"]


def test_the_keyword_index_is_rebuilt_between_turns_not_on_the_next_one(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn's memory write and the layer maintenance both change the memories; the keyword index is
    rebuilt right after them on the background writer, so the next turn's retrieval finds it current."""
    instance = create_sample_instance(sqlite_url)
    store = MemoryStore(db_url=sqlite_url)
    old = [store.add_memory(instance, f"很久以前的第{n}件小事", importance=0.1, turn=0) for n in range(3)]
    with turn_graph(Context(database_url=sqlite_url, maintenance_every=1)) as (graph, ctx):
        graph.update_state(turn_config(instance), {"turn": 499}, as_node="maintenance")
        state = run_turn(graph, ctx, instance, "走吧。")
    assert state["turn"] == 500 and state["debug"]["maintenance"]["memory_layers"]["status"] == "queued"
    flush_event_writes()
    assert {m.layer for m in store.list_memories(instance) if m.id in {o.id for o in old}} != {"active"}

    def no_rebuild(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the keyword index was rebuilt on the turn's path")

    monkeypatch.setattr("personalab.stores.memory.BM25Index.__init__", no_rebuild)
    assert len(MemoryStore(db_url=sqlite_url).index(instance)) >= 1


def test_a_memory_only_recalled_in_a_turn_is_not_marked_as_mentioned(sqlite_url: str) -> None:
    """Seed 001 MarkMemoryAsMentioned counts what the reply used (tests/test_memory_lasts.py), not what the
    retrieval found: the scripted reply repeats the question and says nothing of the memory."""
    instance = create_sample_instance(sqlite_url)
    store = MemoryStore(db_url=sqlite_url)
    watch = store.add_memory(instance, "莱姆把金色怀表藏在了旧仓库的地板下", importance=0.9, turn=0)
    state = one_turn(sqlite_url, instance, "金色怀表藏在哪里了？")
    assert any(item["id"] == watch.id for item in state["retrieved"])
    flush_event_writes()
    assert store.get_memory(instance, watch.id).mention_count == 0
