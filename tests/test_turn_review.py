"""The review of seed 003 inside the turn graph: relationship state, memory writes, plot nodes, world-book
suggestions that wait for approval, the time gap, bad input, and failures that never lose the turn."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes import review as review_node
from personalab.nodes.context import Context
from personalab.stores.background import flush_event_writes
from personalab.stores.db import session_scope
from personalab.stores.history import get_chat_history
from personalab.stores.memory import MemoryStore
from personalab.stores.review import approve_suggestion, list_plot_nodes, list_suggestions
from personalab.stores.tables import Line
from personalab.stores.turn_tables import TurnRecord
from personalab.stores.worldbook import Scope, list_worldbook
from sqlmodel import select


def play(url: str, instance: int, *messages: str, **extra: Any) -> list[dict[str, Any]]:
    with turn_graph(Context(database_url=url)) as (graph, ctx):
        return [run_turn(graph, ctx, instance, message, **extra) for message in messages]


def test_relationship_moves_and_persists_across_turns(db_url: str, data_dir: Any) -> None:
    instance = create_sample_instance(db_url)
    first, second = play(db_url, instance, "谢谢你，我相信你。", "今天天气不错。")
    assert first["relationship"] == {"trust": 1, "affection": 0, "familiarity": 1}
    assert second["relationship"] == {"trust": 1, "affection": 0, "familiarity": 2}
    assert second["review"]["relationship_delta"] == {"trust": 0, "affection": 0, "familiarity": 1}


def test_relationship_reaches_the_prompt_after_its_stable_head(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    instance = create_sample_instance(sqlite_url)
    openai_stub.queue("【开心】不客气。", "独立查询：再见", "【平静】再见。")
    play(sqlite_url, instance, "谢谢你，我相信你。", "再见。")
    messages = [m["content"] for m in openai_stub.requests[-1]["messages"]]
    # issue 30: what the review moves every turn sits after the stable head (the server's prompt cache reuses it)
    assert "【关系状态】" not in messages[0]
    (state,) = [m for m in messages[1:] if "【关系状态】" in m]
    assert '"trust": 1' in state


def test_a_turning_point_writes_memory_plot_node_and_a_pending_suggestion(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    (state,) = play(sqlite_url, instance, "我决定放过老七，让他加入我们。", selected_choice={"level": "turning_point"})
    assert state["review"]["should_write_memory"] and state["review"]["suggest_worldbook_update"]
    flush_event_writes()
    memories = MemoryStore(db_url=sqlite_url).list_memories(instance)
    assert any("我决定放过老七" in m.content and m.importance == state["review"]["memory_value"] for m in memories)
    assert any(m.type == "relationship" for m in memories), "a large relationship change is remembered too"
    with session_scope(sqlite_url) as s:
        assert [(n.turn, n.level) for n in list_plot_nodes(s, instance)] == [(1, "turning_point")]
        (suggestion,) = list_suggestions(s, instance)
        assert suggestion.status == "pending"
        assert list_worldbook(s, Scope(save_id=instance), visible=True) == [], "nothing changes before approval"
        approved = approve_suggestion(s, suggestion.id)
    with session_scope(sqlite_url) as s:
        entries = list_worldbook(s, Scope(save_id=instance), visible=True)
        assert [str(e.id) for e in entries] == [str(approved.worldbook_entry_id)]


def test_an_ordinary_turn_is_kept_in_the_record_only(sqlite_url: str) -> None:
    """Issue 26: a skipped turn leaves no curated memory (the review does not say to write one); its lines are in
    the dialogue record."""
    instance = create_sample_instance(sqlite_url)
    (state,) = play(sqlite_url, instance, "嗯。")
    assert state["review"]["skipped"] is True
    flush_event_writes()
    assert MemoryStore(db_url=sqlite_url).list_memories(instance) == []
    records = MemoryStore(db_url=sqlite_url).list_memories(instance, include_record=True)
    assert any("嗯。" in memory.content for memory in records)


def test_gap_is_computed_from_stored_timestamps(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    play(sqlite_url, instance, "晚安。")
    with session_scope(sqlite_url) as s:
        record = s.exec(select(TurnRecord)).one()
        record.created_at = datetime.now(UTC) - timedelta(days=3)
        s.add(record)
    (state,) = play(sqlite_url, instance, "我回来了。")
    assert state["review"]["gap"] == "days"
    assert state["review"]["relationship_delta"]["familiarity"] == 2
    assert state["review"]["should_write_memory"], "a reunion after days is worth remembering"


def test_gap_given_by_the_host_wins(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    (state,) = play(sqlite_url, instance, "好久不见。", time_gap="long_absence")
    assert state["review"]["gap"] == "long_absence"


@pytest.mark.parametrize(
    ("extra", "field"),
    [({"selected_choice": {"level": "epic"}}, "selected_choice"), ({"time_gap": "weeks"}, "time_gap")],
)
def test_unknown_choice_or_gap_is_a_clear_error_and_nothing_is_written(
    sqlite_url: str, extra: dict[str, Any], field: str
) -> None:
    instance = create_sample_instance(sqlite_url)
    with pytest.raises(ValueError, match=field):
        play(sqlite_url, instance, "你好", **extra)
    with session_scope(sqlite_url) as s:
        assert s.exec(select(Line)).all() == []


def test_a_failing_review_never_loses_the_turn(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("review store is down")

    monkeypatch.setattr(review_node, "store_turn_review", broken)
    instance = create_sample_instance(sqlite_url)
    (state,) = play(sqlite_url, instance, "谢谢你。")
    assert state["error"] is None and state["reply"]
    assert state["debug"]["review"]["error"] == "RuntimeError: review store is down"
    with session_scope(sqlite_url) as s:
        assert [line.attribute for line in get_chat_history(s, instance)][0] == "user"
        assert len(get_chat_history(s, instance)) >= 2


def test_llm_review_mode_fills_the_model_scores(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONALAB_REVIEW_MODE", "llm")
    instance = create_sample_instance(sqlite_url)
    (state,) = play(sqlite_url, instance, "谢谢你，我相信你。")
    quality = state["review"]["quality"]
    assert state["review"]["source"] == "llm"
    assert quality["character_fidelity"] is not None and quality["risk"] is not None
