"""Knowledge time prefix (seed 001 常识知识库 creationTick, issue 11): an entry made from an event keeps the turn it
was made at and is injected as `[tag] N 轮前，content`; permanent knowledge (no creation turn) has no prefix. The
turn survives the store, export/import and an older database that lacks the column."""

from __future__ import annotations

import pytest
from openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.injection import knowledge_items
from personalab.nodes.rules.knowledge import KnowledgeEntry, ScoredKnowledge, validate_knowledge
from personalab.stores.db import dispose_engines, get_engine, session_scope
from personalab.stores.saves import create_role, create_save
from personalab.stores.worldbook import Scope, add_knowledge, list_knowledge
from personalab.stores.worldbook_files import export_knowledge, import_knowledge
from sqlalchemy import text


def texts(*entries: KnowledgeEntry, turn: int | None) -> list[str]:
    return [item.text for item in knowledge_items([ScoredKnowledge(e, 1.0) for e in entries], turn)]


def test_knowledge_made_from_an_event_gets_the_time_prefix_and_permanent_knowledge_none() -> None:
    event = KnowledgeEntry("1", "事件", "据点的水泵坏了", created_turn=3)
    permanent = KnowledgeEntry("2", "世界设定", "废土上没有政府")
    assert texts(event, permanent, turn=10) == ["[事件] 7 轮前，据点的水泵坏了", "[世界设定] 废土上没有政府"]
    assert texts(event, turn=3) == ["[事件] 本轮，据点的水泵坏了"]
    # a turn after the injecting one (another instance's count) and an unknown current turn: no prefix
    assert texts(event, turn=2) == texts(event, turn=None) == ["[事件] 据点的水泵坏了"]


def test_a_creation_turn_is_a_whole_number_from_zero() -> None:
    with pytest.raises(InvalidInput, match="created_turn"):
        validate_knowledge({"id": "1", "tag": "事件", "content": "x", "created_turn": -1}, "entry 1")


def test_the_creation_turn_is_stored_exported_and_imported(db_url: str) -> None:
    with session_scope(db_url) as s:
        role = create_role(s, "Alice")
        assert role.id is not None
        save = create_save(s, role.id, None)
        assert save.id is not None
        scope, other = Scope(save_id=save.id), Scope(role_id=role.id)
        add_knowledge(s, "事件", "据点的水泵坏了", scope=scope, created_turn=4)
        add_knowledge(s, "世界设定", "废土上没有政府", scope=scope)
    with session_scope(db_url) as s:
        assert [k.created_turn for k in list_knowledge(s, scope)] == [4, None]
        exported = export_knowledge(s, scope)
    assert exported["entries"][0]["created_turn"] == 4 and "created_turn" not in exported["entries"][1]
    with session_scope(db_url) as s:
        import_knowledge(s, exported, other)
    with session_scope(db_url) as s:
        assert [(k.content, k.created_turn) for k in list_knowledge(s, other)] == [
            ("据点的水泵坏了", 4),
            ("废土上没有政府", None),
        ]


def test_an_older_database_gains_the_creation_turn_column(sqlite_url: str) -> None:
    with session_scope(sqlite_url) as s:
        add_knowledge(s, "世界设定", "废土上没有政府")
    with get_engine(sqlite_url).begin() as conn:  # the table as the version before the column made it
        conn.execute(text("ALTER TABLE knowledge_entry DROP COLUMN created_turn"))
    dispose_engines()
    with session_scope(sqlite_url) as s:
        assert [(k.content, k.created_turn) for k in list_knowledge(s, Scope())] == [("废土上没有政府", None)]
        add_knowledge(s, "事件", "水泵修好了", created_turn=2)
    with session_scope(sqlite_url) as s:
        assert [k.created_turn for k in list_knowledge(s, Scope())] == [None, 2]


def test_a_turn_injects_event_knowledge_with_its_age(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    instance = create_sample_instance(sqlite_url)
    with session_scope(sqlite_url) as s:
        add_knowledge(
            s, "事件", "旧仓库的水泵昨夜被人拆走了", keywords=["水泵"], scope=Scope(save_id=instance), created_turn=0
        )
        add_knowledge(s, "地点", "旧仓库在据点东侧", keywords=["旧仓库"], scope=Scope(save_id=instance))
    openai_stub.queue("【认真】我去看看。")
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, "旧仓库的水泵怎么了？")
    assert state["error"] is None
    turn = state["turn"]
    messages = openai_stub.requests[-1]["messages"]
    (region,) = [m["content"] for m in messages if m["role"] == "system" and "=== 世界知识 ===" in m["content"]]
    ago = "本轮" if turn == 0 else f"{turn} 轮前"
    assert f"[事件] {ago}，旧仓库的水泵昨夜被人拆走了" in region
    assert "[地点] 旧仓库在据点东侧" in region
