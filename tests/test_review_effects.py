"""The pure rules of a review's persistent effects (nodes.review_effects): relationship, memory text, gap,
validation, plot-node summary, world-book suggestion, the per-turn plan."""

from __future__ import annotations

import math
from typing import Any

import pytest
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.review.effects import (
    RELATIONSHIP_START,
    apply_relationship,
    check_choice,
    check_gap,
    gap_from_seconds,
    is_large_change,
    plan_review_effects,
    plot_node_summary,
    relationship_causes,
    relationship_event,
    relationship_memory_text,
    turn_memories,
    worldbook_suggestion_from_turn,
)
from personalab.nodes.rules.review.rules import run_rule_review
from personalab.nodes.rules.review.types import GAPS, RelationshipDelta, ReviewInput, ReviewOutput
from personalab.nodes.rules.worldbook import MAX_CONTENT_CHARS


def review(user_message: str, level: str | None = None, gap: str | None = None, reply: str = "好的。") -> ReviewOutput:
    return run_rule_review(
        ReviewInput(
            "conv",
            "char",
            "user",
            user_message,
            reply,
            selected_choice=None if level is None else {"level": level, "text": "离开营地"},
            real_time_context=None if gap is None else {"gap": gap},
        )
    )


# --- apply_relationship ---------------------------------------------------------------------------


def test_relationship_starts_at_zero() -> None:
    assert apply_relationship(None, {}) == RELATIONSHIP_START == {"trust": 0, "affection": 0, "familiarity": 0}
    assert apply_relationship(None, {"trust": 1, "familiarity": 1}) == {"trust": 1, "affection": 0, "familiarity": 1}


def test_relationship_adds_the_delta_and_missing_keys_start_at_zero() -> None:
    current = {"trust": 5, "affection": -3}
    assert apply_relationship(current, {"trust": -2, "affection": 2, "familiarity": 1}) == {
        "trust": 3,
        "affection": -1,
        "familiarity": 1,
    }


def test_relationship_is_clamped_to_its_range() -> None:
    high = apply_relationship({"trust": 99, "affection": 100, "familiarity": 100}, {"trust": 5, "affection": 1})
    assert high == {"trust": 100, "affection": 100, "familiarity": 100}
    low = apply_relationship({"trust": -99, "affection": -100, "familiarity": 0}, {"trust": -5, "familiarity": -1})
    assert low == {"trust": -100, "affection": -100, "familiarity": 0}


def test_relationship_values_stored_out_of_range_are_clamped_on_update() -> None:
    assert apply_relationship({"trust": 250, "affection": -300, "familiarity": -4}, {}) == {
        "trust": 100,
        "affection": -100,
        "familiarity": 0,
    }


def test_relationship_keeps_other_keys_and_does_not_change_its_input() -> None:
    current = {"trust": 1, "affection": 1, "familiarity": 1, "stage": "friends"}
    result = apply_relationship(current, {"trust": 1})
    assert result == {"trust": 2, "affection": 1, "familiarity": 1, "stage": "friends"}
    assert current["trust"] == 1


def test_relationship_takes_the_reviews_delta_object() -> None:
    assert apply_relationship(None, RelationshipDelta(trust=1, affection=2, familiarity=1)) == {
        "trust": 1,
        "affection": 2,
        "familiarity": 1,
    }


@pytest.mark.parametrize(
    ("current", "delta", "named"),
    [
        (None, {"love": 1}, "love"),
        (None, {"trust": 1.5}, "trust"),
        (None, {"affection": True}, "affection"),
        (None, "trust+1", "mapping"),
        ({"familiarity": "3"}, {}, "familiarity"),
        ([1, 2, 3], {}, "mapping"),
    ],
)
def test_relationship_bad_input_names_the_item(current: Any, delta: Any, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        apply_relationship(current, delta)


# --- relationship_memory_text ---------------------------------------------------------------------


def test_small_relationship_changes_make_no_memory() -> None:
    assert relationship_memory_text({"familiarity": 1}, None, "艾拉", "小明") is None
    assert relationship_memory_text({"trust": 1, "familiarity": 1}, None, "艾拉", "小明") is None
    assert relationship_memory_text({"trust": 1, "affection": -1}, None, "艾拉", "小明") is None


def test_a_total_change_of_three_makes_a_memory() -> None:
    text = relationship_memory_text({"trust": 1, "affection": 1, "familiarity": 1}, None, "艾拉", "小明")
    assert text == "艾拉与小明的关系有了变化：艾拉对小明的信任上升（+1）、好感上升（+1）、熟悉度上升（+1）。"


def test_one_value_moving_by_two_makes_a_memory() -> None:
    text = relationship_memory_text({"affection": -2}, None, "艾拉", "小明")
    assert text == "艾拉与小明的关系有了变化：艾拉对小明的好感明显下降（-2）。"


def test_memory_thresholds_are_configurable() -> None:
    delta = {"trust": 1, "affection": 1, "familiarity": 1}
    assert relationship_memory_text(delta, None, "艾拉", "小明", total_threshold=4) is None
    assert relationship_memory_text({"trust": 1}, None, "艾拉", "小明", total_threshold=9, single_threshold=1)
    assert is_large_change({"familiarity": 2}) and not is_large_change({"familiarity": 2}, single_threshold=3)


def test_memory_causes_come_from_the_review_in_chinese() -> None:
    out = review("谢谢你,我喜欢你", level="turning_point", gap="days")
    text = relationship_memory_text(out.relationship_delta, out, "艾拉", "小明")
    assert text is not None
    assert text.endswith("起因：小明说了“谢谢”；小明表达了亲近（“喜欢”）；剧情迎来转折点；小明隔了几天才回来。")
    assert not any(c.isascii() and c.isalpha() for c in text)  # no English from the review's reasons


def test_memory_causes_read_from_the_rule_reasons_dict_match_the_review() -> None:
    out = review("感谢,但我讨厌等待", level="important", gap="long_absence")
    from_reasons = relationship_memory_text(out.relationship_delta, out.reasons, "艾拉", "小明")
    from_output = relationship_memory_text(out.relationship_delta, out.to_dict(), "艾拉", "小明")
    assert from_reasons == from_output
    assert from_reasons is not None and "小明表达了不满（“讨厌”）" in from_reasons
    assert relationship_causes(out, "小明") == [
        "小明说了“感谢”",
        "小明表达了不满（“讨厌”）",
        "小明做出了重要选择",
        "小明隔了很久才回来",
    ]


def test_memory_uses_a_chinese_llm_reason_and_given_causes_as_they_are() -> None:
    delta = {"trust": 2}
    llm = relationship_memory_text(delta, {"relationship": "他在危险中保护了她"}, "艾拉", "小明")
    assert llm is not None and llm.endswith("起因：他在危险中保护了她。")
    listed = relationship_memory_text(delta, ["一起打退了狼群", "分享了食物"], "艾拉", "小明")
    assert listed is not None and listed.endswith("起因：一起打退了狼群；分享了食物。")
    assert relationship_memory_text(delta, "一起打退了狼群", "艾拉", "小明") == listed.replace("；分享了食物", "")


def test_memory_names_fall_back_when_missing() -> None:
    text = relationship_memory_text({"trust": 3}, None, "", None)
    assert text is not None and text.startswith("角色与用户的关系有了变化：角色对用户的")


@pytest.mark.parametrize("reasons", [42, [1, 2]])
def test_memory_rejects_reasons_of_a_wrong_type(reasons: Any) -> None:
    with pytest.raises(ValueError, match="reasons"):
        relationship_memory_text({"trust": 3}, reasons, "艾拉", "小明")


# --- gap ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "gap"),
    [
        (None, "none"),
        (0, "none"),
        (59.9, "none"),
        (60, "minutes"),
        (3_599, "minutes"),
        (3_600, "hours"),
        (86_399, "hours"),
        (86_400, "days"),
        (7 * 86_400 - 1, "days"),
        (7 * 86_400, "long_absence"),
        (365 * 86_400, "long_absence"),
    ],
)
def test_gap_from_seconds_thresholds(seconds: float | None, gap: str) -> None:
    assert gap_from_seconds(seconds) == gap
    assert gap in GAPS


@pytest.mark.parametrize("seconds", [-1, math.nan, True, "60"])
def test_gap_from_seconds_rejects_bad_values(seconds: Any) -> None:
    with pytest.raises(ValueError, match="gap seconds"):
        gap_from_seconds(seconds)


def test_check_gap_accepts_the_seeds_gaps_and_none() -> None:
    assert [check_gap(g) for g in GAPS] == list(GAPS)
    assert check_gap(None) == "none"


@pytest.mark.parametrize("value", ["weeks", "", 3, "Days"])
def test_check_gap_names_the_field_and_the_allowed_values(value: Any) -> None:
    with pytest.raises(ValueError, match=r"time_gap must be one of none, minutes, hours, days, long_absence"):
        check_gap(value)


def test_check_choice_accepts_levels_choices_and_none() -> None:
    assert check_choice("turning_point") == "turning_point"
    assert check_choice({"level": "ending", "text": "离开"}) == "ending"
    assert check_choice(None) is None


@pytest.mark.parametrize("value", ["epic", {"text": "离开"}, {"level": "big"}, 1])
def test_check_choice_names_the_field_and_the_allowed_levels(value: Any) -> None:
    with pytest.raises(ValueError, match=r"choice level.*normal, important, turning_point, ending"):
        check_choice(value)


# --- plot node and world-book suggestion ----------------------------------------------------------


def test_plot_node_summary_names_the_level_the_choice_and_the_exchange() -> None:
    summary = plot_node_summary(
        "我们今晚就离开营地。", "好,我去收拾行李。", {"level": "turning_point", "text": "离开营地"}, user_name="小明"
    )
    assert summary == "转折点：小明选择了「离开营地」；小明说：我们今晚就离开营地；角色：好,我去收拾行李"


def test_suggestion_keywords_come_from_jieba_not_spaces() -> None:
    s = worldbook_suggestion_from_turn(
        "我们决定离开营地,去北方的废墟寻找净水器。",
        "艾拉点点头:废墟里的净水器也许还能用。",
        {"level": "turning_point", "text": "前往北方废墟"},
        12,
    )
    assert {"废墟", "净水器"} <= set(s["keywords"])
    assert len(s["keywords"]) <= 5
    assert all(" " not in k and len(k) < 10 for k in s["keywords"])
    assert s["trigger_type"] == "keyword"


def test_suggestion_content_records_turn_level_choice_and_exchange() -> None:
    s = worldbook_suggestion_from_turn(
        "我们离开营地吧!", "好,明天一早就出发。", {"level": "ending", "label": "离开"}, 3, character_name="艾拉"
    )
    assert s["content"] == "第3轮（结局）：用户选择了「离开」。用户说：我们离开营地吧!艾拉：好,明天一早就出发。"
    assert s["title"] == "第3轮结局"
    assert (s["turn"], s["choice_level"], s["kind"]) == (3, "ending", "episodic")


def test_suggestions_are_instance_scoped_by_default() -> None:
    assert worldbook_suggestion_from_turn("去北方", "好", {"level": "turning_point"}, 1)["scope"] == "instance"
    assert worldbook_suggestion_from_turn("去北方", "好", None, 1, scope="global")["scope"] == "global"


def test_suggestion_without_keywords_is_semantic() -> None:
    s = worldbook_suggestion_from_turn("嗯。", "好。", None, 4)
    assert s["keywords"] == [] and s["trigger_type"] == "semantic"
    assert s["content"] == "第4轮（剧情事件）：用户说：嗯。角色：好。"


def test_suggestion_of_long_messages_stays_short() -> None:
    s = worldbook_suggestion_from_turn("长" * 5_000, "回" * 20_000, {"level": "ending"}, 1)
    assert len(s["content"]) < 400 < MAX_CONTENT_CHARS
    assert "…" in s["content"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("a", "b", {"level": "huge"}, 1), "selected_choice.level"),
        (("a", "b", None, -1), "turn"),
        (("a", "b", None, True), "turn"),
        ((None, "b", None, 1), "user_message"),
        (("a", 3, None, 1), "assistant_reply"),
    ],
)
def test_suggestion_bad_input_names_the_field(args: tuple[Any, ...], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        worldbook_suggestion_from_turn(*args)
    with pytest.raises(ValueError, match="scope"):
        worldbook_suggestion_from_turn("a", "b", None, 1, scope="world")


# --- the plan of one reviewed turn ----------------------------------------------------------------


def test_plan_for_small_talk_only_moves_familiarity() -> None:
    out = review("今天天气不错")
    plan = plan_review_effects(
        out, relationship={"trust": 4, "affection": 2, "familiarity": 9}, user_message="今天天气不错",
        assistant_reply="是啊。", choice=None, turn=5,
    )  # fmt: skip
    assert plan == {
        "relationship": {"trust": 4, "affection": 2, "familiarity": 10},
        "relationship_memory": None,
        "plot_node": None,
        "worldbook_suggestion": None,
    }


def test_plan_for_a_turning_point_has_every_effect() -> None:
    choice = {"level": "turning_point", "text": "离开营地"}
    out = review("谢谢你陪我,我们离开营地吧", level="turning_point")
    plan = plan_review_effects(
        out.to_dict(), relationship=None, user_message="谢谢你陪我,我们离开营地吧", assistant_reply="好。",
        choice=choice, turn=7, character_name="艾拉", user_name="小明",
    )  # fmt: skip
    assert plan["relationship"] == {"trust": 2, "affection": 2, "familiarity": 1}
    assert plan["relationship_memory"].startswith("艾拉与小明的关系有了变化")
    assert plan["plot_node"]["turn"] == 7 and plan["plot_node"]["level"] == "turning_point"
    assert plan["plot_node"]["summary"].startswith("转折点：小明选择了「离开营地」")
    assert plan["worldbook_suggestion"]["turn"] == 7 and "营地" in plan["worldbook_suggestion"]["keywords"]


def test_plan_for_an_important_choice_has_a_plot_node_but_no_world_book_update() -> None:
    out = review("我选这个", level="important")
    plan = plan_review_effects(
        out, relationship=None, user_message="我选这个", assistant_reply="好。",
        choice={"level": "important"}, turn=2,
    )  # fmt: skip
    assert plan["plot_node"] is not None and plan["worldbook_suggestion"] is None


def test_plan_rejects_something_that_is_not_a_review() -> None:
    with pytest.raises(ValueError, match="review must be a ReviewOutput"):
        plan_review_effects(
            {"skipped": True}, relationship=None, user_message="a", assistant_reply="b", choice=None, turn=1
        )


def test_a_turn_leaves_a_memory_when_the_review_says_so() -> None:
    """Issue 26: small talk leaves no turn memory (the dialogue record keeps its lines); a turn worth writing does."""
    ordinary = run_rule_review(ReviewInput("c", "ch", "u", "嗯", "好"))
    assert not ordinary.should_write_memory
    assert turn_memories(ordinary, {"relationship_memory": None}, "第1轮：嗯", 1) == []
    important = run_rule_review(ReviewInput("c", "ch", "u", "我决定了", "好", {"level": "turning_point"}))
    turn, relation = turn_memories(important, {"relationship_memory": "信任加深"}, "第2轮：我决定了", 2)
    assert (turn["type"], turn["importance"], turn["tags"]) == ("conversation", important.memory_value, ["important"])
    assert relation == {"content": "信任加深", "type": "relationship", "importance": important.memory_value, "turn": 2}


def test_relationship_event_only_when_something_moved() -> None:
    assert relationship_event(3, RelationshipDelta(0, 0, 0)) is None
    assert relationship_event(3, RelationshipDelta(1, -1, 1)) == "第3轮：关系变化 信任+1 好感-1 熟悉+1"


def test_causes_of_something_that_is_not_a_review_are_refused() -> None:
    with pytest.raises(InvalidInput, match="review must be a ReviewOutput"):
        relationship_causes(3)  # type: ignore[arg-type]
