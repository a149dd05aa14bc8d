"""Curated memory (issue 26): each exchange reaches the prompt once, the turn memory only when the review says so,
private memories in their own block, witnesses, and fact consolidation (with its undo) — checked on what reaches
the prompt the real ChatOpenAI client sends to the stub server, and on the stores."""

from __future__ import annotations

from typing import Any

import pytest
from openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rag_retrieve import recall_witnessed
from personalab.nodes.rules.consolidation import asks_about_past, decide, extract_facts
from personalab.nodes.rules.curation import (
    IMPORTANT_HEADER,
    IMPORTANT_INSTRUCTIONS,
    PRIVATE_HEADER,
    PRIVATE_NOTE,
    drop_repeated_exchanges,
)
from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.nodes.rules.injection import dialogue_lines, once_per_line
from personalab.nodes.rules.prompts import KNOWN_INFO_HEADER
from personalab.stores.background import flush_event_writes
from personalab.stores.consolidation import (
    closed_records_query,
    consolidate_message,
    consolidation_steps,
    undo_step,
)
from personalab.stores.db import session_scope
from personalab.stores.history import get_path_ids, line_times
from personalab.stores.memory import MemoryStore
from personalab.stores.turns import token_usage
from personalab.stores.worldbook import add_knowledge
from sqlalchemy import text
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect


def turn(url: str, instance: int, message: str, **extra: Any) -> dict[str, Any]:
    extra.setdefault("user_name", "莱姆")
    with turn_graph(Context(database_url=url, recall_turns=2, rag_timeout_s=30.0, consolidation=True)) as (
        graph,
        context,
    ):
        state = run_turn(graph, context, instance, message, **extra)
    flush_event_writes()
    return state


def region(stub: OpenAIStub) -> str:
    """The retrieved region (system message with `=== ` headers) of the last reply request, "" when none."""
    replies = [r for r in stub.requests if "〔PersonaLab任务：reply〕" in r["messages"][0]["content"]]
    messages = replies[-1]["messages"]
    found = [m["content"] for m in messages if m["role"] == "system" and "=== " in m["content"]]
    return found[0] if found else ""


# --- each exchange once (rules) ---------------------------------------------------------------------------


def item(memory_id: int, turn_no: int, content: str, **data: Any) -> dict[str, Any]:
    return {"kind": "memory", "id": memory_id, "turn": turn_no, "content": content, **data}


def test_an_exchange_is_presented_once_and_the_rest_is_named_as_a_duplicate() -> None:
    items = [
        item(1, 3, "莱姆：我妹妹叫小雨", type="record", line_id=10),
        item(2, 3, "第3轮：莱姆说「我妹妹叫小雨」；雷娜回应「记住了」", type="conversation"),
        item(
            3, 3, "莱姆：我妹妹叫小雨\n雷娜：记住了", type="record", line_id=11
        ),  # the reply, the user's line as context
        item(4, 9, "莱姆：今天下雨", type="record", line_id=30),  # inside the recall window
        item(5, 2, "雷娜内心害怕黑暗", type="internal"),
    ]
    kept, duplicates, in_window = drop_repeated_exchanges(
        items, turn=10, window_turns=2, window_lines=["莱姆：你还记得吗"]
    )
    assert [i["id"] for i in kept] == [1, 3, 5]
    assert kept[1]["content"] == "雷娜：记住了" and kept[1]["trimmed_context"] == 1  # the user's line said once
    assert duplicates == [{"kind": "memory", "id": 2, "reason": "same_exchange", "of": 1, "turn": 3}]
    assert in_window == [4]


def test_a_memory_repeating_a_line_of_the_recall_window_is_dropped() -> None:
    items = [item(1, 3, "雷娜：记住了", type="record", line_id=11)]
    kept, duplicates, _ = drop_repeated_exchanges(items, turn=10, window_turns=2, window_lines=["雷娜：记住了"])
    assert kept == [] and duplicates[0]["of"] == "recall_window"


@pytest.mark.parametrize(
    ("window", "event", "other"),
    [
        (
            "- 雷娜：记住了。\n莱姆：我把备用油桶藏在教堂后面的蓝布下面。（4 轮前）",
            "第2轮：莱姆说「我把备用油桶藏在教堂后面的蓝布下面。」；雷娜回应「好的。」",
            "- 莱姆：今天风好大，我们去看看水井。（3 轮前）",
        ),
        (
            "- Mara: Noted.\nLin: I hid the spare fuel can under the blue tarp. (4 turns ago)",
            'Turn 2: Lin said "I hid the spare fuel can under the blue tarp."; Mara answered "Good."',
            "- Lin: Well, this place must have been busy once. (3 turns ago)",
        ),
    ],
)
def test_a_line_one_memory_holds_is_not_told_again_by_another(window: str, event: str, other: str) -> None:
    # a record entry's window holds the line; the director's event of its turn comes after it: left out
    blocks = once_per_line([("memories", [window, other]), ("events", [event])])
    assert blocks == [("memories", [window, other]), ("events", [])]
    # a region staying from an earlier turn (as sent: numbered) holds the window: neither is told again here
    staying = "=== 相关记忆 ===\n1. " + window.replace("4 轮前", "3 轮前").replace("4 turns", "3 turns")
    assert once_per_line([("memories", [window, other, event])], dialogue_lines(staying)) == [("memories", [other])]
    # another entry's window sharing one line with it keeps its other line, its list mark and how long ago
    said = window.splitlines()[1]
    neighbour = f"{said.split('（')[0].split(' (')[0]}\n{other[2:]}"
    assert once_per_line([("memories", [window, "- " + neighbour])]) == [("memories", [window, other])]


# --- the turn memory only when the review says so -------------------------------------------------------------


def test_small_talk_leaves_no_turn_memory_and_a_turning_point_does(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    small = turn(sqlite_url, instance, "嗯")
    assert small["review"]["should_write_memory"] is False
    important = turn(
        sqlite_url, instance, "我决定了，我们明天一早就出发去据点", selected_choice={"level": "turning_point"}
    )
    assert important["review"]["should_write_memory"] is True
    memories = MemoryStore(db_url=sqlite_url).list_memories(instance, include_record=True)
    turn_memories = [m for m in memories if m.content.startswith("第") and "轮：" in m.content[:6]]
    assert [m.turn for m in turn_memories] == [2]  # small talk (turn 1) has its lines in the record only
    assert {m.turn for m in memories if m.type == "record"} == {1, 2}


# --- each exchange once (the prompt) --------------------------------------------------------------------------


def test_a_fact_told_long_ago_reaches_the_prompt_once(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    instance = create_sample_instance(sqlite_url)
    turn(sqlite_url, instance, "记住，我的暗号是青鸟落在第七根旗杆上", selected_choice={"level": "important"})
    for filler in ("今天风好大", "我们去看看水井", "那边有人吗", "先休息一下吧"):
        turn(sqlite_url, instance, filler)
    openai_stub.queue("【认真】青鸟落在第七根旗杆上。")
    state = turn(sqlite_url, instance, "我的暗号是什么来着？青鸟落在哪里？")
    text = region(openai_stub)
    assert text.count("青鸟落在第七根旗杆上") == 1, text
    assert state["debug"]["retrieval"]["duplicates"] or state["debug"]["retrieval"]["count"] >= 1


# --- private memories -----------------------------------------------------------------------------------------


def test_a_private_memory_reaches_the_prompt_as_unspoken_knowledge(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    instance = create_sample_instance(sqlite_url)
    store = MemoryStore(db_url=sqlite_url)
    store.add_memory(instance, "雷娜内心其实害怕黑暗，从不告诉别人", type="internal", importance=0.9, turn=0)
    store.add_memory(instance, "雷娜在据点里养了一只黑猫", importance=0.9, turn=0)
    openai_stub.queue("【平静】没什么。")
    turn(sqlite_url, instance, "雷娜，你害怕黑暗吗？你的黑猫呢？")
    text = region(openai_stub)
    private_at = text.index(PRIVATE_HEADER)
    assert text.index(PRIVATE_NOTE) > private_at
    assert text.index("雷娜内心其实害怕黑暗") > private_at  # in the private block, after its note
    memories_at = text.index("=== 相关记忆 ===")
    assert memories_at < text.index("雷娜在据点里养了一只黑猫") < private_at
    assert "害怕黑暗" not in text[memories_at:private_at]  # never among what may be said


# --- witnesses ------------------------------------------------------------------------------------------------


def test_an_npc_recalls_only_what_it_witnessed(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    turn(
        sqlite_url,
        instance,
        "雷娜，金库的钥匙我藏在了水塔顶上",
        lines_before=[{"attribute": "assistant", "display_name": "旁白", "content": "深夜，只有雷娜和莱姆在屋里。"}],
    )
    for filler in ("今天风好大", "我们去看看水井", "先休息一下吧", "好的"):
        turn(sqlite_url, instance, filler)
    turn(
        sqlite_url,
        instance,
        "老陈，你来了",
        lines_before=[
            {
                "attribute": "assistant",
                "display_name": "老陈",
                "script_role_id": "laochen",
                "content": "我刚到，外面全是沙。",
            }
        ],
    )
    character = recall_witnessed(sqlite_url, instance, "金库的钥匙藏在哪里？")
    assert any("水塔" in i["content"] for i in character["items"])
    npc = recall_witnessed(sqlite_url, instance, "金库的钥匙藏在哪里？", npc="laochen")
    assert npc["witness"] == "npc:laochen"
    assert not any("水塔" in i["content"] for i in npc["items"]), npc["items"]
    assert npc["unwitnessed"]
    assert any(
        "外面全是沙" in i["content"] for i in recall_witnessed(sqlite_url, instance, "沙", npc="laochen")["items"]
    )
    with pytest.raises(InvalidInput, match="xiaomiao"):
        recall_witnessed(sqlite_url, instance, "钥匙", npc="xiaomiao")


# --- consolidation ----------------------------------------------------------------------------------------------


def test_the_rules_decide_add_update_merge_and_none() -> None:
    (fact,) = extract_facts("我搬到上海了")
    assert fact.slot == "住处" and fact.value == "上海"
    assert decide(fact, []).action == "add"
    assert decide(fact, [{"id": 1, "value": "北京"}]).action == "update"
    assert decide(fact, [{"id": 1, "value": "上海"}]).action == "none"
    assert decide(fact, [{"id": 1, "value": "上海浦东"}]).action == "merge"
    assert extract_facts("你住在哪里？") == []
    # a question about one's own fact tells nothing (it once closed the current fact as an "update")
    assert extract_facts("我现在住在哪个城市？") == [] and extract_facts("我住在哪") == []
    assert extract_facts("Where do I live now?") == []
    assert [f.value for f in extract_facts("你猜怎么着？我搬到上海了。")] == ["上海"]
    # someone else's fact is not the user's (consolidation on by default: it would close the user's own age)
    assert extract_facts("我妹妹叫林小禾，今年十二岁，住在银杏镇。") == []
    assert [(f.slot, f.value) for f in extract_facts("我叫莱姆，今年28岁。")] == [("名字", "莱姆"), ("年龄", "28")]
    assert asks_about_past("我以前住在哪里？") and asks_about_past("Where did I use to live before?")
    assert not asks_about_past("我住在哪里？")


def test_a_changed_fact_keeps_the_old_version_closed_and_the_step_can_be_undone(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    store = MemoryStore(db_url=sqlite_url)
    (add,) = consolidate_message(store, instance, message="我住在北京。", user_name="莱姆", turn=1)
    (update,) = consolidate_message(store, instance, message="我搬到上海了", user_name="莱姆", turn=100)
    (repeat,) = consolidate_message(store, instance, message="我现在住在上海", user_name="莱姆", turn=120)
    assert (add["action"], update["action"], repeat["action"]) == ("add", "update", "none")
    assert update["decided_by"] == "rules" and update["target_id"] == add["memory_id"]
    old, new = store.get_memory(instance, add["memory_id"]), store.get_memory(instance, update["memory_id"])
    assert (old.valid_to_turn, old.superseded_by) == (100, new.id) and new.valid_to_turn is None
    assert len(consolidation_steps(sqlite_url, instance)) == 3

    with pytest.raises(InvalidInput, match=f"step {add['id']}"):
        undo_step(sqlite_url, instance, add["id"])  # its fact was replaced: the later step first
    undone = undo_step(sqlite_url, instance, update["id"])
    assert undone["undone_at"] is not None
    reopened = store.get_memory(instance, add["memory_id"])
    assert (reopened.valid_to_turn, reopened.superseded_by) == (None, None)
    with pytest.raises(NotFound):
        store.get_memory(instance, update["memory_id"])
    with pytest.raises(InvalidInput, match="undone already"):
        undo_step(sqlite_url, instance, update["id"])
    with pytest.raises(NotFound):
        undo_step(sqlite_url, instance, 9999)


def test_the_closed_records_every_turn_reads_come_from_their_own_index(sqlite_url: str) -> None:
    """Every turn's retrieval reads the instance's closed record entries: through the partial index of closed
    memories, not a pass over all of the instance's memories (issue 28: ~20 ms a turn at 10,000 memories)."""
    instance = create_sample_instance(sqlite_url)
    statement = closed_records_query(instance).compile(dialect=sqlite_dialect(), compile_kwargs={"literal_binds": True})
    with session_scope(sqlite_url) as session:
        plan = " ".join(str(row[-1]) for row in session.execute(text(f"EXPLAIN QUERY PLAN {statement}")).all())
    assert "ix_memory_entry_closed" in plan, plan


def test_the_current_truth_comes_first_and_the_past_is_answerable(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    instance = create_sample_instance(sqlite_url)
    turn(sqlite_url, instance, "我住在北京。")
    for filler in ("今天风好大", "我们去看看水井", "先休息一下吧"):
        turn(sqlite_url, instance, filler)
    turn(sqlite_url, instance, "告诉你，我搬到上海了")
    for filler in ("那边有人吗", "好的", "走吧"):
        turn(sqlite_url, instance, filler)
    steps = consolidation_steps(sqlite_url, instance)
    assert [s["action"] for s in steps] == ["add", "update"]

    openai_stub.queue("【平静】上海。")
    now = turn(sqlite_url, instance, "我现在住在哪个城市？")
    text = region(openai_stub)
    assert "【住处】莱姆：告诉你，我搬到上海了" in text
    memories = text[text.index("=== 相关记忆 ===") :].split("\n\n")[0]
    assert "我住在北京" not in memories  # neither the closed fact nor its line in the dialogue record
    assert steps[0]["memory_id"] in now["debug"]["retrieval"]["superseded"]

    openai_stub.queue("【平静】北京。")
    turn(sqlite_url, instance, "我以前住在哪个城市？")
    text = region(openai_stub)
    assert "已过时" in text, text
    assert text.index("搬到上海了") < text.index("【住处】莱姆：我住在北京。（已过时：第5轮起不再如此）")


# --- guidelines and the 重要指令 block ------------------------------------------------------------------------


def test_a_guideline_of_the_library_and_the_important_instructions_reach_the_prompt(
    sqlite_url: str, openai_stub: OpenAIStub
) -> None:
    instance = create_sample_instance(sqlite_url)
    with session_scope(sqlite_url) as s:
        add_knowledge(s, "指令", "雷娜说话简短，从不超过三句", importance=0.9)
        add_knowledge(s, "地点", "旧仓库在据点东侧", keywords=["旧仓库"], importance=0.8)
    turn(sqlite_url, instance, "你好")
    openai_stub.queue("【平静】嗯。")
    turn(sqlite_url, instance, "旧仓库在哪？")
    text = region(openai_stub)
    rules_at = text.index("=== 指令/规则 ===")
    assert rules_at < text.index("雷娜说话简短，从不超过三句") < text.index("=== 世界知识 ===")
    assert "[指令]" not in text  # a rule, not world knowledge
    assert text.index(KNOWN_INFO_HEADER) < text.index(IMPORTANT_HEADER)
    assert all(line in text for line in IMPORTANT_INSTRUCTIONS)


# --- a time on every line, tokens per turn ------------------------------------------------------------------


def test_every_line_has_its_time_and_every_turn_its_tokens(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    first = turn(sqlite_url, instance, "你好")
    turn(sqlite_url, instance, "今天去哪？")
    with session_scope(sqlite_url) as s:
        ids = get_path_ids(s, instance)
        times = line_times(s, instance, ids)
    assert set(times) == set(ids) and all(times[i] is not None for i in ids)
    usage = token_usage(sqlite_url, instance)
    assert [t["turn"] for t in usage["turns"]] == [1, 2] and usage["turns_counted"] == 2
    assert usage["turns"][0]["prompt_tokens"] == first["debug"]["prompt"]["total_tokens"] > 0
    assert usage["prompt_tokens"] == sum(t["prompt_tokens"] for t in usage["turns"])
    assert usage["reply_tokens"] > 0
    with pytest.raises(NotFound):
        token_usage(sqlite_url, 9999)


def test_the_directors_event_of_a_line_said_again_lately_is_left_out(sqlite_url: str) -> None:
    """Issue 26 (each exchange once): the user said the same words again within the recent dialogue, so the
    director's event of the first time is not told again; an event the window shows is named as such, the others stay.
    The one-turn window at turn 4 shows turn 3 (the middle region keeps the last `recall_turns` turns before it)."""
    from personalab.nodes.director import events_left_out
    from personalab.nodes.rules.curation import window_texts

    instance = create_sample_instance(sqlite_url)
    history = [
        {"attribute": "user", "content": "我的狗叫豆包。"},
        {"attribute": "assistant", "content": "【平静】记住了。", "role_id": 1},
        {"attribute": "user", "content": "它还好吗？"},
    ]
    state: Any = {
        "turn": 4,
        "message": "它还好吗？",
        "instance_id": instance,
        "history": history,
        "character": {"role_id": 1, "name": "雷娜", "language": "zh"},
        "user_name": "莱姆",
    }
    state["window_lines"] = window_texts(history, state["character"], "莱姆", 1)  # as memory_build makes them
    current = [
        {"turn": 1, "text": "第1轮：莱姆说「我的狗叫豆包。」；雷娜回应「好名字。」"},
        {"turn": 2, "text": "第2轮：莱姆说「今天风很大。」；雷娜回应「嗯。」"},
        {"turn": 3, "text": "第3轮：莱姆说「我的狗叫豆包。」；雷娜回应「【平静】记住了。」"},
    ]
    left_out = events_left_out(state, Context(database_url=sqlite_url, recall_turns=1), current)
    assert left_out["in_recent_dialogue"] == [3]
    assert left_out["said_again"] == [1]
    assert left_out["no_longer_true"] == []


def test_a_reply_reciting_a_turns_memory_is_not_listed_as_already_said() -> None:
    """The 已知信息 block (seed 001) lists the character's recent lines to avoid; a line that recites a memory
    (``第N轮：A说「…」``, ``Turn N: A said "…"``) is a memory quoted, and listing it would show that exchange twice."""
    from personalab.nodes.rules.curation import recollects_memory

    assert recollects_memory("【认真】我想起来了——第2轮：莱姆说「我最爱吃红烧肉。」；雷娜回应「")
    assert recollects_memory('I remember: Turn 3: Ash said "my dog is Bean"; Mira answered "…"')
    assert not recollects_memory("【平静】你说「今天风很大」……让我想一想。")


def test_the_recall_windows_lines_count_a_cut_turns_line_with_the_turn_it_joins() -> None:
    """Issue 30: user lines in a row are one turn, as the prompt counts them (a turn cut at the deadline keeps its line
    without a reply), so the window's lines — what no memory presents again — are the prompt's dialogue."""
    from personalab.nodes.rules.curation import window_texts

    history = [
        {"attribute": "user", "content": "第一轮的话。"},
        {"attribute": "assistant", "content": "【平静】第一轮的回答。", "role_id": 1},
        {"attribute": "user", "content": "第二轮的话。"},
        {"attribute": "assistant", "content": "【平静】第二轮的回答。", "role_id": 1},
        {"attribute": "user", "content": "被截断的一句。"},
        {"attribute": "user", "content": "又被截断的一句。"},
        {"attribute": "user", "content": "现在的话。"},
    ]
    lines = window_texts(history, {"role_id": 1, "name": "雷娜", "language": "zh"}, "莱姆", 1)
    # the one-turn window is the second turn, then the current one with the cut lines before it
    assert lines[:5] == [
        "莱姆：现在的话。",
        "莱姆：又被截断的一句。",
        "莱姆：被截断的一句。",
        "雷娜：【平静】第二轮的回答。",
        "莱姆：第二轮的话。",
    ]
    assert "莱姆：第一轮的话。" not in lines
