"""Injection order and the one token budget (seed 001 智能注入系统, seed 004 injectionConfig)."""

from __future__ import annotations

import pytest
from langchain_core.messages.utils import count_tokens_approximately
from personalab.nodes.rules.injection import (
    InjectionItem,
    build_injection,
    count_tokens,
    plan_injection,
    world_knowledge_items,
    worldbook_items,
)
from personalab.nodes.rules.knowledge import KnowledgeEntry, select_knowledge
from personalab.nodes.rules.worldbook import TriggeredEntry, WorldbookConfig, WorldbookEntry


def fired(entry_id: str, content: str, *, trigger: str = "keyword", **fields: object) -> TriggeredEntry:
    return TriggeredEntry(WorldbookEntry(entry_id, content, **fields), 1.0, trigger, "test")  # type: ignore[arg-type]


def test_count_tokens_is_langchains_approximation_for_a_string() -> None:
    text = "长安实行宵禁，夜鼓响后坊门关闭。" * 3
    assert count_tokens(text) == count_tokens_approximately([text], chars_per_token=1.5, extra_tokens_per_message=0)
    assert count_tokens(text, chars_per_token=4) == count_tokens_approximately([text], extra_tokens_per_message=0)
    assert count_tokens("") == 0


def test_sections_come_in_the_seeds_order() -> None:
    plan = plan_injection(
        ["你是钦灵，性格开朗。"], ["[世界设定] 温带森林"], ["- 昨天和莱姆讨论了种植计划"], budget=1000
    )
    assert plan.system_text == (
        "=== 指令/规则 ===\n你是钦灵，性格开朗。\n\n"
        "=== 世界知识 ===\n[世界设定] 温带森林\n\n"
        "=== 相关记忆 ===\n- 昨天和莱姆讨论了种植计划"
    )
    assert [i.section for i in plan.included] == ["guidelines", "world_knowledge", "character_memories"]


def test_everything_fits_in_one_budget_and_skipped_items_say_why() -> None:
    memories = [InjectionItem(f"memory:{i}", f"第{i}条记忆" + "记忆" * 40) for i in range(10)]
    plan = plan_injection(["规则" * 20], ["[设定] 世界" * 5], memories, budget=120)
    assert count_tokens(plan.system_text) <= 120
    assert sum(i.tokens for i in plan.included) <= 120
    skipped = [s for s in plan.skipped if s.section == "character_memories"]
    assert skipped and all(s.reason.startswith("over budget: needs") for s in skipped)
    assert len(plan.included) + len(plan.skipped) == 12


def test_guidelines_win_the_budget_over_memories() -> None:
    alone = plan_injection(["规则" * 30], budget=1000).tokens_used
    plan = plan_injection(["规则" * 30], [], ["记忆" * 30], budget=alone + 1)
    assert [i.key for i in plan.included] == ["guidelines:1"]
    assert [s.key for s in plan.skipped] == ["character_memories:1"]


def test_a_shorter_later_item_still_uses_what_a_long_one_could_not() -> None:
    items = [InjectionItem("long", "长" * 400), InjectionItem("short", "短句")]
    plan = plan_injection(character_memories=items, budget=20)
    assert [i.key for i in plan.included] == ["short"]
    assert [s.key for s in plan.skipped] == ["long"]


def test_duplicates_and_empty_items_are_skipped_with_a_reason() -> None:
    plan = plan_injection(
        ["同一句话"], [InjectionItem("knowledge:1", "同一句话"), InjectionItem("knowledge:2", "  ")], budget=100
    )
    assert [(s.key, s.reason) for s in plan.skipped] == [
        ("knowledge:1", "duplicate of guidelines:1"),
        ("knowledge:2", "empty text"),
    ]


def test_zero_budget_injects_nothing_and_negative_is_an_error() -> None:
    plan = plan_injection(["规则"], budget=0)
    assert plan.system_text == "" and plan.tokens_used == 0
    with pytest.raises(ValueError, match="negative"):
        plan_injection(["规则"], budget=-1)


def test_world_knowledge_holds_knowledge_lines_then_world_book_entries() -> None:
    knowledge = select_knowledge([KnowledgeEntry("1", "世界设定", "温带森林", 0.8)], "")
    triggered = [fired("c", "大唐贞观年间", trigger="constant", constant=True), fired("k", "长安实行宵禁")]
    items, skipped = world_knowledge_items(knowledge, triggered, WorldbookConfig())
    plan = plan_injection(world_knowledge=items, budget=500, skipped=skipped)
    assert plan.sections["world_knowledge"] == (
        "=== 世界知识 ===\n[世界设定] 温带森林\n【世界书】\n- 大唐贞观年间\n- 长安实行宵禁"
    )


def test_world_book_entries_can_be_grouped_by_kind_with_a_template() -> None:
    triggered = [fired("1", "去过长安", kind="episodic"), fired("2", "怕黑", kind="trait"), fired("3", "长安很大")]
    config = WorldbookConfig(separate_by_type=True, template="* {content}")
    items, _ = worldbook_items(triggered, config)
    plan = plan_injection(world_knowledge=items, budget=500)
    assert plan.system_text == (
        "=== 世界知识 ===\n【世界书·情景记忆】\n* 去过长安\n【世界书·特质记忆】\n* 怕黑\n【世界书·语义记忆】\n* 长安很大"
    )


def test_user_and_assistant_positions_get_their_own_text_in_the_same_budget() -> None:
    triggered = [fired("1", "她压低声音说话", position="user"), fired("2", "长安实行宵禁")]
    config = WorldbookConfig()
    items, _ = worldbook_items(triggered, config)
    plan = plan_injection(world_knowledge=items, budget=500)
    assert plan.texts["user"] == "=== 世界知识 ===\n【世界书】\n- 她压低声音说话"
    assert plan.texts["system"] == "=== 世界知识 ===\n【世界书】\n- 长安实行宵禁"
    assert plan.texts["assistant"] == ""
    assert plan.tokens_used == count_tokens(plan.texts["user"]) + count_tokens(plan.texts["system"])
    assert WorldbookConfig(inject_position="assistant").inject_position == "assistant"
    items, _ = worldbook_items([fired("3", "x")], WorldbookConfig(inject_position="assistant"))
    assert items[0].position == "assistant"


def test_world_book_share_is_capped_by_its_own_length_budget() -> None:
    triggered = [fired(str(i), f"第{i}条" + "条目内容" * 10) for i in range(5)]
    config = WorldbookConfig(max_total_tokens=40)
    items, skipped = worldbook_items(triggered, config)
    assert sum(count_tokens(i.text + "\n") for i in items) + count_tokens("【世界书】\n") <= 40
    assert skipped and all("world book's budget" in s.reason for s in skipped)
    plan = plan_injection(world_knowledge=items, budget=1000, skipped=skipped)
    assert {s.key for s in plan.skipped} == {s.key for s in skipped}


def test_build_injection_reports_the_world_book_entries_that_made_it_in() -> None:
    triggered = [fired("7", "长安实行宵禁"), fired("8", "很长的条目" * 100)]
    result = build_injection(guidelines=["你是钦灵"], triggered=triggered, character_memories=["- 昨天"], budget=60)
    assert result.fired_worldbook_ids == ["7"]
    statuses = {row["key"]: row["status"] for row in result.plan.debug()}
    assert statuses == {
        "guidelines:1": "included",
        "worldbook:7": "included",
        "worldbook:8": "skipped",
        "character_memories:1": "included",
    }
