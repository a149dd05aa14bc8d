"""The dialogue record (issue 11: nothing said is ever unreachable): every line of every turn is kept as a
``record`` memory with its line id, outside seed 001's layer flow, and searched with the curated memories."""

from __future__ import annotations

import json
from typing import Any

from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.maintenance import maintain_layers, model_summariser
from personalab.nodes.rules.memory_layers import EXTRACTIVE_LABEL, RECORD_LAYER
from personalab.nodes.rules.prompts import detect_purpose, event_summary_messages
from personalab.nodes.rules.record import record_items
from personalab.nodes.rules.retrieval import RetrievalConfig, retrieve
from personalab.stores.background import flush_event_writes
from personalab.stores.memory import MemoryStore

FACT = "我妹妹今年十二岁，她叫小雨"


def test_record_items_name_every_speaker_and_keep_line_ids() -> None:
    lines = [
        {"id": 7, "attribute": "system", "content": "夜色降临。"},
        {"id": 8, "attribute": "user", "content": FACT, "display_name": "莱姆"},
        {"id": 9, "attribute": "assistant", "content": "【温柔】真可爱。", "role_id": 3},
    ]
    items = record_items(lines, 2, character_role_id=3, character_name="雷娜", user_name="莱姆")
    assert [i["content"] for i in items] == ["旁白：夜色降临。", f"莱姆：{FACT}", "雷娜：【温柔】真可爱。"]
    assert [i["line_id"] for i in items] == [7, 8, 9]
    assert [i["related_character"] for i in items] == [
        "旁白",
        "莱姆",
        "雷娜",
    ]  # who said it (recall favours a named one)
    assert {i["type"] for i in items} == {"record"} and {i["layer"] for i in items} == {RECORD_LAYER}
    assert items[1]["context"] == "旁白：夜色降临。"  # the line before, as context
    assert items[2]["context"] == f"旁白：夜色降临。\n莱姆：{FACT}"  # two lines at most
    earlier = [
        {"id": 5, "attribute": "user", "content": "早。"},
        {"id": 6, "attribute": "assistant", "content": "嗯。", "role_id": 3},
    ]
    later = record_items(lines, 3, character_role_id=3, character_name="雷娜", user_name="莱姆", previous_lines=earlier)
    assert later[0]["context"] == "莱姆：早。\n雷娜：嗯。" and later[1]["context"] == "雷娜：嗯。\n旁白：夜色降临。"
    assert items[1]["importance"] > items[2]["importance"]  # a fact weighs more than small talk


def test_fading_never_deletes_the_record(db_url: str) -> None:
    instance = create_sample_instance(db_url)
    store = MemoryStore(db_url=db_url)
    (record,) = store.add_memories(
        instance, [{"content": f"莱姆：{FACT}", "type": "record", "turn": 2, "line_id": 5, "importance": 0.1}]
    )
    faded = store.add_memory(instance, "莱姆：今天天气不错", type="internal", importance=0.0, turn=2)
    for turn in (40, 200, 3000):
        report = maintain_layers(store, instance, turn)
    assert faded.id not in {m.id for m in store.list_memories(instance)}  # the curated memory faded
    kept = store.get_memory(instance, record.id)  # the record did not
    assert (kept.layer, kept.type, kept.line_id, kept.activity) == (RECORD_LAYER, "record", 5, 1.0)
    assert all(sum(counts.values()) == 0 for counts in report.counts.values())  # not in any layer's count
    assert [m.id for m in store.list_memories(instance, layer="record")] == [record.id]
    assert store.list_memories(instance) == []  # listing shows the curated memories; the record when asked
    assert [m.id for m in store.list_memories(instance, include_record=True)] == [record.id]
    found = retrieve(store, instance, "你妹妹几岁了？", turn=3000, config=RetrievalConfig(mark_mentioned=False))
    (item,) = [i for i in found.items if i.id == record.id]
    assert item.layer == RECORD_LAYER and item.data["type"] == "record" and item.data["line_id"] == 5


def test_record_and_layers_keep_their_own_rules(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    store = MemoryStore(db_url=sqlite_url)
    for bad in ({"content": "x", "type": "record", "layer": "active"}, {"content": "x", "layer": "record"}):
        try:
            store.add_memories(instance, [bad])
        except ValueError as exc:
            assert "record" in str(exc)
        else:
            raise AssertionError(f"accepted {bad}")
    assert store.list_memories(instance) == []


def _prompt_retrieved(state: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in state["prompt"] if m["region"] == "retrieved")


def test_a_fact_told_at_turn_2_is_in_the_prompt_after_60_turns(sqlite_url: str) -> None:
    """Scripted model, maintenance every 10 turns (the layer flow fades ordinary turns): the probe's prompt
    still holds the fact, from the record."""
    instance = create_sample_instance(sqlite_url)
    with turn_graph(Context(database_url=sqlite_url, maintenance_every=10)) as (graph, context):
        run_turn(graph, context, instance, "你好，雷娜。")
        run_turn(graph, context, instance, FACT)
        for number in range(60):
            run_turn(graph, context, instance, f"我们继续赶路吧，第{number}段路。")
            flush_event_writes()
        state = run_turn(graph, context, instance, "你还记得我妹妹叫什么、几岁吗？")
    assert "十二岁" in _prompt_retrieved(state), _prompt_retrieved(state)
    records = [i for i in state["retrieved"] if i.get("type") == "record" or i.get("layer") == RECORD_LAYER]
    assert any("十二岁" in i["content"] and i.get("line_id") for i in records)
    store = MemoryStore(db_url=sqlite_url)
    record_lines = store.list_memories(instance, type="record")
    assert len(record_lines) >= 2 * 63  # every turn: the user's line and the reply
    assert all(m.line_id for m in record_lines)


def _fading_event_log(store: MemoryStore, instance: int) -> list[int]:
    texts = ["莱姆：我把怀表埋在了老橡树下", "雷娜：明天黄昏在桥头见面", "莱姆：车队第三辆车的轮胎坏了"]
    entries = store.add_memories(
        instance, [{"content": t, "layer": "event_log", "importance": 0.5, "turn": n} for n, t in enumerate(texts)]
    )
    return [e.id for e in entries]


def test_memories_fading_out_of_the_event_log_leave_a_summary(db_url: str) -> None:
    instance = create_sample_instance(db_url)
    store = MemoryStore(db_url=db_url)
    ids = _fading_event_log(store, instance)
    report = maintain_layers(store, instance, 5000, summarise=model_summariser())  # the scripted model
    assert set(ids) <= set(report.deleted)
    (summary,) = store.list_memories(instance)
    assert summary.layer == "archive" and summary.type == "episodic" and "summary" in summary.tags
    assert summary.content.startswith("【事件摘要】第0–2轮：") and EXTRACTIVE_LABEL in summary.content
    assert "怀表埋在了老橡树下" in summary.content and "桥头见面" in summary.content
    assert all(f"#{i}" in summary.notes for i in ids)
    found = retrieve(store, instance, "怀表埋在哪里？", turn=5000, config=RetrievalConfig(mark_mentioned=False))
    assert found.items[0].id == summary.id  # the summary is itself a memory, retrievable


def test_an_event_log_summary_carries_the_line_of_its_memories(sqlite_url: str) -> None:
    """Seed 000's tree: a summary of memories of one branch carries the deepest of their lines, so it is
    retrieved on the branches through all of them; memories without a line (every branch) give an untagged
    one."""
    instance = create_sample_instance(sqlite_url)
    with turn_graph(Context(database_url=sqlite_url)) as (graph, context):
        first, second = (run_turn(graph, context, instance, text) for text in ("我们出发吧。", "去北边。"))
    store = MemoryStore(db_url=sqlite_url)
    _fading_event_log(store, instance)  # no line
    lines = [first["debug"]["reply_line_ids"][-1], second["debug"]["reply_line_ids"][-1]]
    faded = store.add_memories(
        instance,
        [
            {"content": text, "layer": "event_log", "importance": 0.5, "turn": turn, "line_id": line}
            for turn, (text, line) in enumerate(zip(("莱姆：桥下有船", "雷娜：船是老七的"), lines, strict=True), 1)
        ],
    )
    before = {m.id for m in store.list_memories(instance)}
    maintain_layers(store, instance, 5000, summarise=model_summariser())
    summaries = [m for m in store.list_memories(instance) if m.id not in before and "summary" in m.tags]
    by_line = {m.line_id: m for m in summaries}
    assert set(by_line) == {None, lines[1]}, [(m.line_id, m.content) for m in summaries]
    assert "桥下有船" in by_line[lines[1]].content and "船是老七的" in by_line[lines[1]].content
    assert all(f"#{m.id}" in by_line[lines[1]].notes for m in faded)
    assert "老橡树" in by_line[None].content and "桥下" not in by_line[None].content


def test_a_failing_summariser_keeps_the_extractive_summary_and_none_means_no_summary(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    store = MemoryStore(db_url=sqlite_url)
    _fading_event_log(store, instance)

    def broken(_memories: list[str]) -> str:
        raise RuntimeError("model down")

    maintain_layers(store, instance, 5000, summarise=broken)
    (summary,) = store.list_memories(instance)
    assert EXTRACTIVE_LABEL in summary.content and "老橡树" in summary.content
    other = create_sample_instance(sqlite_url)
    _fading_event_log(store, other)
    maintain_layers(store, other, 5000)
    assert store.list_memories(other) == []


def test_the_summary_prompt_lists_the_memories_for_a_real_model() -> None:
    messages = event_summary_messages(["莱姆：我妹妹今年十二岁", "雷娜：记住了"], 300)
    assert detect_purpose(messages[0]["content"]) == "event_summary" and "300" in messages[0]["content"]
    assert messages[1]["content"].endswith("1. 莱姆：我妹妹今年十二岁\n2. 雷娜：记住了")


def test_the_greeting_is_never_retrieved_again_as_a_memory(db_url: str) -> None:
    """Issue 28: the greeting opens the instance and stays in every prompt's opening; the record of the first
    turn does not carry it as context, so no retrieval (the turn's, its debug, a search) brings it back."""
    from personalab.graph.api import PersonaLab

    api = PersonaLab(database_url=db_url)
    character = api.characters.create({"name": "雷娜", "greetings": ["你终于醒了。灯塔镇北边的水塔昨晚倒了。"]})
    background = api.backgrounds.create({"name": "废土", "outline": ["重逢", "追查"]})
    instance = api.instances.create({"character_id": character.id, "background_id": background.id}).id
    with turn_graph(Context(database_url=db_url, recall_turns=1)) as (graph, context):
        for number in range(4):
            run_turn(graph, context, instance, f"第{number}件事：我们继续赶路")
            flush_event_writes()
        state = run_turn(graph, context, instance, "灯塔镇的水塔怎么了？")
    retrieved = json.dumps([state["retrieved"], state["debug"]["retrieval"]], ensure_ascii=False)
    assert "第0件事" in retrieved  # the first turn's record is retrieved ...
    assert "水塔昨晚倒了" not in retrieved  # ... without the greeting
    found = api.memories.search(instance, "灯塔镇 水塔 昨晚倒了", k=20)
    assert "水塔昨晚倒了" not in json.dumps(found.model_dump(mode="json"), ensure_ascii=False)
    assert all(
        "水塔昨晚倒了" not in (m.content + m.search_text) for m in MemoryStore(db_url=db_url).list_memories(instance)
    )
