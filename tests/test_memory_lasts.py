"""Issue 11 part A, memory that lasts: read your writes (one process, back-to-back turns; two CLI processes in
sequence), cold start of a one-shot CLI turn, mentioned means used, don't repeat the recent dialogue, relative
time on injected memories, the director's between-turns search seeing later events."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.injection import known_items, memory_used, time_ago
from personalab.stores.background import flush_event_writes
from personalab.stores.memory import MemoryStore

FACT = "我妹妹叫林小禾，今年十二岁，住在银杏镇。"
QUESTION = "你还记得我妹妹林小禾住在哪里吗？"
FILLER = ["今天风很大。", "我们往北走吧。", "水壶里还有水吗？", "前面好像有人。"]


def contents(state: dict[str, Any]) -> list[str]:
    return [item["content"] for item in state.get("retrieved") or []]


def test_back_to_back_turns_retrieve_the_previous_turns_memories(sqlite_url: str) -> None:
    """No pause, no flush between turns: each turn's retrieval reads the memories the turns before it wrote
    (written after their replies, off the reply's path) — the one just before too, which the search finds and
    leaves to the recent dialogue that shows it (issue 26: each exchange once)."""
    instance = create_sample_instance(sqlite_url)
    # a one-turn recent-dialogue window: at turn 4 the prompt shows turn 3, so the fact's turn 2 is a memory
    with turn_graph(Context(database_url=sqlite_url, recall_turns=1)) as (graph, ctx):
        run_turn(graph, ctx, instance, FILLER[0])
        run_turn(graph, ctx, instance, FACT, selected_choice={"level": "important"})  # a turn the review writes
        after = run_turn(graph, ctx, instance, FILLER[1], selected_choice={"level": "important"})
        asked = run_turn(graph, ctx, instance, QUESTION)
        stored = MemoryStore(db_url=sqlite_url).list_memories(instance, include_record=True)
    # what the turn just before wrote was in the store when the next one searched: found, and left to the dialogue
    assert {entry.id for entry in stored if entry.turn == 2} & set(after["debug"]["retrieval"]["in_recent_dialogue"])
    assert {entry.id for entry in stored if entry.turn == 3} & set(asked["debug"]["retrieval"]["in_recent_dialogue"])
    assert asked["debug"]["retrieval"]["status"] == "ok"
    assert any("林小禾" in text and "第2轮" in text for text in contents(asked)), contents(asked)


PERSONALAB = str(Path(sys.executable).with_name("personalab"))


def test_back_to_back_turns_as_the_server_runs_them_retrieve_the_previous_turns_memories(sqlite_url: str) -> None:
    """The served graph's way (graph.invoke, no run_turn around it): the same read-your-writes."""
    from personalab.graph.runner import turn_config

    instance = create_sample_instance(sqlite_url)
    with turn_graph(Context(database_url=sqlite_url, recall_turns=1)) as (graph, ctx):
        for message in (FILLER[0], FACT, FILLER[1]):  # the fact's turn 2 is out of turn 4's one-turn window
            # the fact's turn one the review writes (issue 26: not every turn leaves a turn memory)
            choice = {"level": "important"} if message == FACT else None
            graph.invoke(
                {"instance_id": instance, "message": message, "selected_choice": choice},
                turn_config(instance),
                context=ctx,
            )
        graph.invoke({"instance_id": instance, "message": QUESTION}, turn_config(instance), context=ctx)
        asked = graph.get_state(turn_config(instance)).values
    assert any("林小禾" in item["content"] and "第2轮" in item["content"] for item in asked["retrieved"])


def _cli(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A fresh `personalab` process (cold: nothing loaded), offline, with a one-turn recent-dialogue window."""
    env = {**os.environ, "PERSONALAB_DATA_DIR": str(data), "PERSONALAB_LLM": "scripted", "PERSONALAB_RECALL_TURNS": "1"}
    env.pop("PERSONALAB_DATABASE_URL", None)
    env.pop("OPENAI_API_KEY", None)
    return subprocess.run([PERSONALAB, *args], env=env, capture_output=True, text=True, timeout=300, check=False)


def test_one_shot_cli_turns_in_sequence_read_each_others_memories(tmp_path: Path) -> None:
    """Two `personalab turn` processes in sequence: the first flushes its writes before it exits, the second
    (a cold process) retrieves them within its time cap, and its `--json` output says so."""
    data = tmp_path / "data"
    created = _cli(data, "instance", "create", "--sample")
    assert created.returncode == 0, created.stderr
    instance = created.stdout.strip()
    for message in (FACT, FILLER[0]):
        played = _cli(data, "turn", "--instance", instance, message)
        assert played.returncode == 0, played.stderr
    second = _cli(data, "turn", "--instance", instance, "--json", QUESTION)
    assert second.returncode == 0, second.stderr
    out = json.loads(second.stdout)
    assert out["debug"]["retrieval"]["status"] == "ok", out["debug"]["retrieval"]
    assert any("林小禾" in item["content"] for item in out["retrieved_events"])
    retrieved_region = [m for m in out["prompt"] if m.get("region") == "retrieved"]
    assert any("林小禾" in m["content"] for m in retrieved_region), out["prompt"]


# --------------------------------------------------------------------------------------------------
# 3. Mentioned means used


def test_a_memory_is_mentioned_when_the_reply_used_it_not_when_it_was_retrieved(
    sqlite_url: str, openai_stub: OpenAIStub
) -> None:
    """Seed 001 MarkMemoryAsMentioned: of two retrieved memories, the one whose key terms the reply says gets
    a mention (and its mention penalty next time); the other, only retrieved, keeps its full score."""
    instance = create_sample_instance(sqlite_url)
    store = MemoryStore(db_url=sqlite_url)
    used = store.add_memory(instance, "莱姆把金色怀表藏在了旧仓库的地板下", importance=0.9, turn=0)
    unused = store.add_memory(instance, "莱姆的金色怀表是父亲留下的遗物", importance=0.9, turn=0)
    openai_stub.queue("【认真】怀表？在旧仓库，地板下面。")
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, "金色怀表在哪里？")
    retrieved = {item["id"] for item in state["retrieved"]}
    assert {used.id, unused.id} <= retrieved
    assert state["debug"]["mention_check"] >= 2  # checked after the reply, off its path
    flush_event_writes()
    marked, left = store.get_memory(instance, used.id), store.get_memory(instance, unused.id)
    assert marked.mention_count == 1 and marked.last_mentioned_turn == state["turn"]
    assert left.mention_count == 0


@pytest.mark.parametrize(
    ("memory", "message", "reply", "used"),
    [
        ("林小禾今年十二岁，住在银杏镇", "我妹妹住在哪？", "她住在银杏镇。", True),
        (
            "林小禾今年十二岁，住在银杏镇",
            "你记得林小禾吗？",
            "林小禾？我不记得了。",
            False,
        ),  # only the question's words
        ("雷娜在加油站救过莱姆一命", "还记得我们怎么认识的吗？", "当然，加油站那次我救了你。", True),
        ("雷娜在加油站救过莱姆一命", "今天天气怎么样？", "风沙很大，莱姆。", False),  # a name is not a use
    ],
)
def test_memory_used_rule(memory: str, message: str, reply: str, used: bool) -> None:
    assert bool(memory_used(memory, reply, message=message, ignore=["雷娜", "莱姆"])) is used


# --------------------------------------------------------------------------------------------------
# 4. Don't repeat


def retrieved_region_text(state: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in state["prompt"] if m.get("region") == "retrieved")


def test_turns_in_the_recent_dialogue_are_not_memories_again_and_what_was_said_is_listed(sqlite_url: str) -> None:
    """Seed 001 避免重复: the turn the prompt's recent dialogue still has is not injected as a memory; an older
    one (outside the window) is; the character's last lines are listed under 已知信息(请勿重复)."""
    instance = create_sample_instance(sqlite_url)
    with turn_graph(Context(database_url=sqlite_url, recall_turns=2)) as (graph, ctx):
        run_turn(
            graph, ctx, instance, FACT, selected_choice={"level": "important"}
        )  # turn 1: outside the window at turn 4
        run_turn(graph, ctx, instance, "林小禾最喜欢银杏叶。")  # turn 3: inside it
        run_turn(graph, ctx, instance, FILLER[1])
        asked = run_turn(graph, ctx, instance, QUESTION)
    debug = asked["debug"]["retrieval"]
    items = asked["retrieved"]
    assert not [i for i in items if isinstance(i.get("turn"), int) and i["turn"] > 2 and i.get("type") == "record"]
    assert not [i for i in items if str(i["content"]).startswith(("第3轮", "第4轮"))]
    assert debug["in_recent_dialogue"], debug  # turn 3's memory and lines were found, and left out
    assert any(str(i["content"]).startswith("第1轮") for i in items)  # the older turn is a memory
    region = retrieved_region_text(asked)
    assert "=== 已知信息(请勿重复) ===" in region
    known = region.split("=== 已知信息(请勿重复) ===", 1)[1]
    from personalab.stores.db import session_scope
    from personalab.stores.history import get_chat_history

    with session_scope(sqlite_url) as session:  # the character's last line before this turn's reply
        said = [
            line.content
            for line in get_chat_history(session, instance)
            if line.attribute == "assistant" and line.id not in asked["debug"]["reply_line_ids"]
        ]
    assert said[-1][:20] in known
    assert any(row["section"] == "known" for row in debug["injection"])  # under the retrieved region's budget


def run_reply_of(url: str, instance: int, turn: int) -> str:
    """The character's reply of `turn` (the n-th assistant line of the dialogue)."""
    from personalab.stores.db import session_scope
    from personalab.stores.history import get_chat_history

    with session_scope(url) as session:
        replies = [line.content for line in get_chat_history(session, instance) if line.attribute == "assistant"]
    return replies[turn - 1]


def test_known_items_are_the_last_lines_cut_short() -> None:
    lines = ["第一句。", "第二句。", "  第三句\n换行  ", "长" * 200]
    items = known_items(lines)
    assert [item.text for item in items][:2] == ["- 第二句。", "- 第三句 换行"]
    assert items[-1].text.endswith("…") and len(items[-1].text) < 100


# --------------------------------------------------------------------------------------------------
# 5. Time


def test_time_ago() -> None:
    assert time_ago(3, 2 * 86400 + 5) == "3 轮前，2 天前"
    assert time_ago(0, 10) == "本轮"
    assert time_ago(1, 90 * 60) == "1 轮前，1 小时前"
    assert time_ago(None, 400 * 86400) == "1 年前"
    assert time_ago(None, None) == ""


def test_injected_memories_say_when_they_happened(sqlite_url: str) -> None:
    """Seed 001 FormatMemoriesForInjection adds the time: each injected memory says how many turns and how much
    real time ago it happened."""
    instance = create_sample_instance(sqlite_url)
    store = MemoryStore(db_url=sqlite_url)
    old = store.add_memory(instance, "莱姆把金色怀表藏在了旧仓库的地板下", importance=0.9, turn=0)
    from datetime import UTC, datetime, timedelta

    from personalab.stores.db import session_scope
    from personalab.stores.memory_tables import MemoryEntry

    with session_scope(sqlite_url) as session:  # stored two days ago
        entry = session.get(MemoryEntry, old.id)
        assert entry is not None
        entry.created_at = datetime.now(UTC) - timedelta(days=2, minutes=1)
        session.add(entry)
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        for message in FILLER[:2]:
            run_turn(graph, ctx, instance, message)
        state = run_turn(graph, ctx, instance, "金色怀表藏在哪里了？")
    assert state["turn"] == 3
    assert "莱姆把金色怀表藏在了旧仓库的地板下（3 轮前，2 天前）" in retrieved_region_text(state)


# --------------------------------------------------------------------------------------------------
# 6. The director's search between turns sees the events written after it


def test_the_directors_search_between_turns_sees_events_written_after_it(data_dir: Path) -> None:
    """The search for the next turn runs right after this turn's event; other play-throughs (and this one)
    write events after it. The next turn takes the kept result with those events merged in, as a search then
    would find them."""
    from personalab.stores.events import (
        StorySearch,
        prefetch_story,
        search_story,
        take_prefetched_story,
        write_event_async,
    )

    story = {"character_id": 1, "background_id": 1}
    for turn, text in enumerate(["雷娜修好了卡车", "沙暴封住了北边的路", "老七交出了账本"], start=1):
        write_event_async(text, instance_id=1, turn=turn, **story)
        write_event_async(f"另一段故事：{text}", instance_id=2, turn=turn, **story)
    flush_event_writes()
    search = StorySearch("潜入敌人据点", instance_id=1, current_k=15, others_k=5, **story)
    prefetch_story(search, for_turn=4).result(timeout=60)
    # written after the search ran: another play-through's and this one's, both about the query
    write_event_async("另一段故事：莱姆潜入了敌人据点", instance_id=3, turn=9, **story)
    write_event_async("雷娜和莱姆商量潜入敌人据点", instance_id=1, turn=4, **story)
    flush_event_writes()
    found = take_prefetched_story(search, for_turn=4)
    assert found is not None
    current, others = found
    assert "雷娜和莱姆商量潜入敌人据点" in [event["text"] for event in current]
    assert "另一段故事：莱姆潜入了敌人据点" in [event["text"] for event in others]
    fresh_current, fresh_others = search_story(search.query, instance_id=1, current_k=15, others_k=5, **story)
    assert [e["text"] for e in current] == [e["text"] for e in fresh_current]
    assert [e["text"] for e in others] == [e["text"] for e in fresh_others]


def test_a_kept_directors_search_is_used_as_is_when_nothing_was_written_since(data_dir: Path) -> None:
    from personalab.stores.events import StorySearch, prefetch_story, take_prefetched_story, write_event_async

    story = {"character_id": 1, "background_id": 1}
    write_event_async("雷娜修好了卡车", instance_id=1, turn=1, **story)
    flush_event_writes()
    search = StorySearch("卡车", instance_id=1, current_k=15, others_k=5, **story)
    prefetch_story(search, for_turn=2).result(timeout=60)
    found = take_prefetched_story(search, for_turn=2)
    assert found is not None and [e["text"] for e in found[0]] == ["雷娜修好了卡车"]
    assert take_prefetched_story(search, for_turn=2) is None  # once


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(pytest.main([__file__, "-x", "-q"]))
