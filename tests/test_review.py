"""The post-turn review of seed 003: one test per table row and per decision rule."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import replace
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.prompts import detect_purpose
from personalab.nodes.rules.review.pipeline import (
    EVENT_NAMES,
    AssessmentCache,
    EventBus,
    ReviewPipeline,
    get_review_pipeline,
)
from personalab.nodes.rules.review.prompts import REVIEW_SYSTEM_PROMPT, build_review_messages
from personalab.nodes.rules.review.rules import run_rule_review
from personalab.nodes.rules.review.types import (
    LLMAssessment,
    RelationshipDelta,
    ReviewConfig,
    ReviewInput,
    ReviewOutput,
)

FILLER = "嗯"  # a character in no keyword list: builds messages of an exact length


def make(
    user_message: str = "我今天很开心",
    level: str | None = None,
    gap: str | None = None,
    **extra: Any,
) -> ReviewInput:
    return ReviewInput(
        conversation_id=extra.pop("conversation_id", "conv_abc"),
        character_id="char_xyz",
        user_id="user_123",
        user_message=user_message,
        assistant_message=extra.pop("assistant_message", "太好了!"),
        selected_choice=None if level is None else {"id": "c1", "text": "跟她走", "level": level},
        real_time_context=None if gap is None else {"gap": gap},
        **extra,
    )


def review(*args: Any, config: ReviewConfig | None = None, **kwargs: Any) -> ReviewOutput:
    return run_rule_review(make(*args, **kwargs), config)


def delta(out: ReviewOutput) -> dict[str, int]:
    return out.relationship_delta.to_dict()


# ------------------------------------------------------------------ the seed's usage example (基本用法)


def test_seed_usage_example() -> None:
    event_bus = EventBus()
    seen: list[str] = []
    event_bus.subscribe("*", lambda name, payload: seen.append(name))
    pipeline = get_review_pipeline(event_bus=event_bus)

    inp = ReviewInput(
        conversation_id="conv_abc",
        character_id="char_xyz",
        user_id="user_123",
        user_message="我今天很开心",
        ai_reply="太好了!",
    )
    output = pipeline.run(inp)

    assert inp.assistant_message == "太好了!"
    assert output.skipped is True
    assert output.should_write_memory is False
    assert delta(output) == {"trust": 0, "affection": 0, "familiarity": 1}
    assert output.total_delta == 1
    assert seen[0] == "review.started" and seen[-1] == "review.finished"


def test_seed_character_runtime_example_fields() -> None:
    """与 CharacterRuntime 集成: the fields the host passes, and applying the result."""
    inp = ReviewInput(
        conversation_id=7,
        character_id=3,
        user_id="user_123",
        user_message="谢谢你一直陪着我",
        assistant_message="我会一直在。",
        selected_choice={"id": "c9", "level": "turning_point"},
        turn_context={"turn": 12, "scene": "雨夜"},
        real_time_context={"gap": "hours", "seconds": 7200},
    )
    output = get_review_pipeline(event_bus=EventBus()).run(inp)
    assert output.should_write_memory is True
    assert output.relationship_delta  # the host's `if output.relationship_delta:`
    assert delta(output) == {"trust": 2, "affection": 2, "familiarity": 1}


# ------------------------------------------------------------------------------ 关系变化判断 (rows)


@pytest.mark.parametrize("word", ["谢谢", "感谢", "信任", "放心"])
def test_trust_keyword_gives_trust_plus_one(word: str) -> None:
    out = review(f"这次真的{word}")
    assert delta(out) == {"trust": 1, "affection": 0, "familiarity": 1}
    assert out.matched_keywords["trust"] == [word]


@pytest.mark.parametrize("word", ["喜欢", "爱", "想你", "宝贝"])
def test_affection_keyword_gives_affection_plus_one(word: str) -> None:
    out = review(f"今天也{word}")
    assert delta(out) == {"trust": 0, "affection": 1, "familiarity": 1}


@pytest.mark.parametrize("word", ["讨厌", "烦死", "滚", "生气"])
def test_negative_keyword_gives_affection_minus_one(word: str) -> None:
    out = review(f"你真{word}")
    assert delta(out) == {"trust": 0, "affection": -1, "familiarity": 1}


def test_important_choice_gives_affection_and_trust_plus_one() -> None:
    assert delta(review(level="important")) == {"trust": 1, "affection": 1, "familiarity": 1}


def test_turning_point_choice_gives_affection_plus_two_trust_plus_one() -> None:
    assert delta(review(level="turning_point")) == {"trust": 1, "affection": 2, "familiarity": 1}


@pytest.mark.parametrize("level", ["normal", "ending"])
def test_normal_and_ending_choices_change_no_relationship_value(level: str) -> None:
    assert delta(review(level=level)) == {"trust": 0, "affection": 0, "familiarity": 1}


def test_every_turn_gives_familiarity_plus_one() -> None:
    assert review("好").relationship_delta.familiarity == 1


@pytest.mark.parametrize(("gap", "familiarity"), [("days", 2), ("long_absence", 2), ("hours", 1), ("minutes", 1)])
def test_long_gap_gives_familiarity_plus_one(gap: str, familiarity: int) -> None:
    assert review(gap=gap).relationship_delta.familiarity == familiarity


def test_keyword_list_counts_once_per_turn() -> None:
    assert review("谢谢,感谢,我信任你").relationship_delta.trust == 1


def test_affection_and_negative_keywords_cancel_out() -> None:
    assert review("喜欢你但是讨厌下雨").relationship_delta.affection == 0


def test_keyword_and_choice_add_up() -> None:
    assert delta(review("谢谢你,我喜欢你", level="turning_point")) == {"trust": 2, "affection": 3, "familiarity": 1}


def test_keywords_in_the_characters_reply_do_not_count() -> None:
    out = review("好的", assistant_message="谢谢你,我喜欢你")
    assert delta(out) == {"trust": 0, "affection": 0, "familiarity": 1}


def test_keywords_match_inside_chinese_text_and_full_width_latin() -> None:
    config = ReviewConfig(trust_keywords=("OK",))
    assert review("我们一言为定谢谢啦").relationship_delta.trust == 1  # no spaces around the word
    assert review("那就ＯＫ了", config=config).relationship_delta.trust == 1  # full-width matches


def test_substring_matching_has_no_negation() -> None:
    """Documented choice: "不喜欢" contains "喜欢"."""
    assert review("我不喜欢").relationship_delta.affection == 1


def test_keyword_lists_are_configurable() -> None:
    config = ReviewConfig(trust_keywords=("谢谢", "多谢"), negative_keywords=("走开",))
    assert review("多谢", config=config).relationship_delta.trust == 1
    assert review("走开", config=config).relationship_delta.affection == -1
    assert review("滚", config=config).relationship_delta.affection == 0


def test_config_rejects_an_empty_keyword() -> None:
    with pytest.raises(ValueError, match="trust_keywords"):
        ReviewConfig(trust_keywords=("谢谢", ""))


# ---------------------------------------------------------------------------- 记忆价值计算 (rows)


@pytest.mark.parametrize(("level", "value"), [("turning_point", 0.9), ("important", 0.8), ("ending", 0.95)])
def test_choice_level_memory_value(level: str, value: float) -> None:
    assert review("好", level=level).memory_value == value


def test_normal_choice_has_no_memory_value() -> None:
    assert review("好", level="normal").memory_value == 0.0


@pytest.mark.parametrize(("chars", "value"), [(101, 0.3), (150, 0.3)])
def test_message_over_100_chars_adds_0_3(chars: int, value: float) -> None:
    assert review(FILLER * chars).memory_value == value


@pytest.mark.parametrize(("chars", "value"), [(50, 0.0), (51, 0.2), (100, 0.2)])
def test_message_over_50_chars_adds_0_2(chars: int, value: float) -> None:
    assert review(FILLER * chars).memory_value == value


def test_message_length_counts_characters_without_outer_whitespace() -> None:
    assert review("  " + FILLER * 50 + "\n").memory_value == 0.0


def test_trust_keyword_adds_0_2() -> None:
    assert review("谢谢").memory_value == 0.2


def test_affection_keyword_adds_0_2() -> None:
    assert review("想你").memory_value == 0.2


def test_negative_keyword_adds_nothing() -> None:
    assert review("讨厌").memory_value == 0.0


def test_gap_days_adds_0_65() -> None:
    assert review("好", gap="days").memory_value == 0.65


def test_gap_long_absence_adds_0_75() -> None:
    assert review("好", gap="long_absence").memory_value == 0.75


def test_memory_value_rows_add_up() -> None:
    # 60 chars (+0.2) + trust (+0.2) + affection (+0.2), exactly 0.6
    assert review("谢谢" + "喜欢" + FILLER * 56).memory_value == 0.6


def test_memory_value_is_clamped_to_one() -> None:
    out = review("谢谢" + FILLER * 120, level="ending", gap="long_absence")
    assert out.memory_value == 1.0
    assert "clamped" in out.reasons["memory_value"]


# --------------------------------------------------------------------------- 记忆写入判断 (rules)

# Each condition alone: the config zeroes the other routes to a write.
NO_CHOICE_VALUE = ReviewConfig(choice_memory_value={})
NO_GAP_VALUE = ReviewConfig(gap_memory_value={})


def test_write_when_memory_value_reaches_0_65() -> None:
    # >100 chars 0.3 + trust 0.2 + affection 0.2 = 0.7; affection cancels (讨厌), so total_delta is 2
    out = review("谢谢,喜欢,讨厌" + FILLER * 100)
    assert out.total_delta == 2 and out.memory_value == 0.7
    assert out.should_write_memory is True
    assert "memory_value 0.7 >= 0.65" in out.reasons["should_write_memory"]


def test_no_write_just_below_0_65() -> None:
    # 0.6; its total_delta 3 would write on its own, so this config raises that threshold
    out = review("谢谢" + "喜欢" + FILLER * 56, config=ReviewConfig(write_total_delta_threshold=4))
    assert out.memory_value == 0.6
    assert out.should_write_memory is False


@pytest.mark.parametrize("level", ["important", "turning_point", "ending"])
def test_write_for_an_important_choice_level(level: str) -> None:
    out = review("好", level=level, config=NO_CHOICE_VALUE)
    assert out.memory_value == 0.0
    assert out.should_write_memory is True
    assert f"choice level {level}" in out.reasons["should_write_memory"]


def test_no_write_for_a_normal_choice() -> None:
    assert review("好", level="normal").should_write_memory is False


def test_write_when_total_delta_reaches_3() -> None:
    out = review("谢谢,喜欢")  # trust 1 + affection 1 + familiarity 1
    assert out.memory_value == 0.4
    assert out.total_delta == 3
    assert out.should_write_memory is True


def test_total_delta_sums_absolute_values() -> None:
    out = review("讨厌", gap="days", config=NO_GAP_VALUE)  # affection -1, familiarity 2
    assert out.total_delta == 3


def test_no_write_when_total_delta_is_2() -> None:
    out = review("谢谢")
    assert out.total_delta == 2
    assert out.should_write_memory is False


@pytest.mark.parametrize("gap", ["days", "long_absence"])
def test_write_for_a_long_gap(gap: str) -> None:
    out = review("好", gap=gap, config=NO_GAP_VALUE)
    assert out.memory_value == 0.0 and out.total_delta == 2
    assert out.should_write_memory is True
    assert f"gap {gap}" in out.reasons["should_write_memory"]


@pytest.mark.parametrize("gap", ["none", "minutes", "hours"])
def test_no_write_for_a_short_gap(gap: str) -> None:
    assert review("好", gap=gap).should_write_memory is False


# -------------------------------------------------------------------------- 剧情更新 / 世界书更新


@pytest.mark.parametrize(
    ("level", "plot"),
    [(None, False), ("normal", False), ("important", True), ("turning_point", True), ("ending", True)],
)
def test_plot_node_for_important_turning_point_and_ending(level: str | None, plot: bool) -> None:
    assert review(level=level).suggest_plot_node is plot


@pytest.mark.parametrize(
    ("level", "book"),
    [(None, False), ("normal", False), ("important", False), ("turning_point", True), ("ending", True)],
)
def test_worldbook_update_for_turning_point_and_ending(level: str | None, book: bool) -> None:
    assert review(level=level).suggest_worldbook_update is book


# --------------------------------------------------------------------------------- 跳过逻辑 (rules)


def test_small_talk_is_skipped() -> None:
    out = review("今天吃了面")
    assert out.skipped is True
    assert out.reasons["skipped"].startswith("skipped")


def test_a_normal_choice_is_not_skipped() -> None:
    out = review("好", level="normal")
    assert out.skipped is False
    assert out.should_write_memory is False


def test_memory_value_of_0_3_is_not_skipped() -> None:
    out = review(FILLER * 101)  # 0.3, total_delta 1: reviewed, not written
    assert out.memory_value == 0.3
    assert out.skipped is False
    assert out.should_write_memory is False


def test_memory_value_just_below_0_3_is_skipped() -> None:
    assert review(FILLER * 60).memory_value == 0.2
    assert review(FILLER * 60).skipped is True


def test_long_gap_is_not_skipped() -> None:
    out = review("好", gap="days", config=ReviewConfig(gap_memory_value={}, familiarity_long_gap=0))
    assert out.skipped is False


def test_a_turn_with_a_memory_to_write_is_not_skipped() -> None:
    out = review("好", config=ReviewConfig(write_total_delta_threshold=1))
    assert out.should_write_memory is True
    assert out.skipped is False


def test_skipped_turn_still_reports_the_relationship_delta() -> None:
    out = review("烦死了")
    assert out.skipped is True
    assert delta(out) == {"trust": 0, "affection": -1, "familiarity": 1}
    assert out.total_delta == 2


# ---------------------------------------------------------------------------------------- 质量评分


@pytest.mark.parametrize(
    ("level", "progress"),
    [(None, 0.0), ("normal", 0.2), ("important", 0.6), ("turning_point", 0.9), ("ending", 1.0)],
)
def test_story_progress_by_choice_level(level: str | None, progress: float) -> None:
    assert review(level=level).quality.story_progress == progress


def test_relationship_progress_from_total_delta() -> None:
    assert review("好").quality.relationship_progress == 0.2
    assert review("谢谢喜欢", level="turning_point").quality.relationship_progress == 1.0  # total 6, capped


def test_user_engagement_from_message_length() -> None:
    assert review(FILLER * 30).quality.user_engagement == 0.3
    assert review(FILLER * 300).quality.user_engagement == 1.0


def test_quality_memory_value_is_the_memory_value() -> None:
    out = review("谢谢", level="important")
    assert out.quality.memory_value == out.memory_value == 1.0


def test_llm_quality_scores_are_none_without_an_assessment() -> None:
    q = review().quality
    assert (q.character_fidelity, q.immersion, q.world_consistency, q.risk) == (None, None, None, None)


def test_llm_quality_scores_come_from_the_cached_assessment() -> None:
    out = run_rule_review(make(), assessment=LLMAssessment(0.9, 0.8, 0.7, 0.1))
    q = out.quality
    assert (q.character_fidelity, q.immersion, q.world_consistency, q.risk) == (0.9, 0.8, 0.7, 0.1)


# ------------------------------------------------------------------------------------------ output


def test_output_is_json_serialisable_and_round_trips() -> None:
    out = review("谢谢", level="turning_point", gap="days")
    text = json.dumps(out.to_dict(), ensure_ascii=False)
    assert ReviewOutput.from_dict(json.loads(text)) == out
    assert set(out.to_dict()["reasons"]) == {
        "memory_value",
        "should_write_memory",
        "relationship",
        "plot_node",
        "worldbook",
        "skipped",
    }


# ------------------------------------------------------------------------------------------- input


@pytest.mark.parametrize("level", ["big", "Important", "", None])
def test_unknown_choice_level_raises_at_construction(level: Any) -> None:
    with pytest.raises(ValueError, match=r"selected_choice\.level must be one of normal, important, turning_point"):
        ReviewInput("c", "ch", "u", "hi", selected_choice={"level": level})


def test_choice_without_level_raises() -> None:
    with pytest.raises(ValueError, match="selected_choice needs a 'level'"):
        ReviewInput("c", "ch", "u", "hi", selected_choice={"id": "c1"})


def test_unknown_gap_raises_at_construction() -> None:
    with pytest.raises(ValueError, match=r"real_time_context\.gap must be one of none, minutes, hours, days"):
        ReviewInput("c", "ch", "u", "hi", real_time_context={"gap": "weeks"})


@pytest.mark.parametrize("context", [None, {}, {"gap": None}, {"seconds": 30}])
def test_missing_gap_means_none(context: dict[str, Any] | None) -> None:
    assert ReviewInput("c", "ch", "u", "hi", real_time_context=context).gap == "none"


def test_ai_reply_and_assistant_message_must_agree() -> None:
    assert ReviewInput("c", "ch", "u", "hi", "好", ai_reply="好").ai_reply == "好"
    with pytest.raises(ValueError, match="assistant_message and ai_reply"):
        ReviewInput("c", "ch", "u", "hi", "好", ai_reply="不好")


@pytest.mark.parametrize(("field", "value"), [("conversation_id", ""), ("user_message", None), ("user_id", True)])
def test_bad_ids_and_messages_raise_naming_the_field(field: str, value: Any) -> None:
    data: dict[str, Any] = {"conversation_id": "c", "character_id": "ch", "user_id": "u", "user_message": "hi"}
    data[field] = value
    with pytest.raises(ValueError, match=field):
        ReviewInput.from_dict(data)


def test_run_accepts_a_mapping_and_validates_it() -> None:
    pipeline = ReviewPipeline(event_bus=EventBus())
    data = {"conversation_id": "c", "character_id": "ch", "user_id": "u", "user_message": "谢谢", "ai_reply": "嗯"}
    assert pipeline.run(data).relationship_delta.trust == 1
    with pytest.raises(ValueError, match=r"real_time_context\.gap"):
        pipeline.run({**data, "real_time_context": {"gap": "weeks"}})
    with pytest.raises(ValueError, match="unknown fields"):
        pipeline.run({**data, "mood": "happy"})


# --------------------------------------------------------------------------------------- 事件发射


def record(bus: EventBus) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    bus.subscribe("*", lambda name, payload: events.append((name, payload)))
    return events


def test_pipeline_emits_the_five_events_in_order_with_their_payloads() -> None:
    bus = EventBus()
    events = record(bus)
    out = ReviewPipeline(event_bus=bus).run(make("谢谢", level="turning_point"))

    assert [name for name, _ in events] == list(EVENT_NAMES)
    assert [name for name, _ in events] == [
        "review.started",
        "review.memory.scored",
        "review.relationship.scored",
        "review.plot.scored",
        "review.finished",
    ]
    payloads = dict(events)
    assert payloads["review.started"]["conversation_id"] == "conv_abc"
    assert payloads["review.started"]["character_id"] == "char_xyz"
    assert payloads["review.memory.scored"]["memory_value"] == 1.0
    assert payloads["review.memory.scored"]["should_write_memory"] is True
    assert payloads["review.relationship.scored"]["relationship_delta"] == {
        "trust": 2,
        "affection": 2,
        "familiarity": 1,
    }
    assert payloads["review.relationship.scored"]["total_delta"] == 5
    assert payloads["review.plot.scored"]["suggest_plot_node"] is True
    assert payloads["review.plot.scored"]["suggest_worldbook_update"] is True
    finished = payloads["review.finished"]
    assert finished["skipped"] is False and finished["source"] == "rule"
    assert finished["relationship_delta"] == out.relationship_delta.to_dict()
    for _, payload in events:
        json.dumps(payload)


def test_subscriber_to_one_event_sees_only_that_event() -> None:
    bus = EventBus()
    seen: list[str] = []
    bus.subscribe("review.plot.scored", lambda name, payload: seen.append(name))
    ReviewPipeline(event_bus=bus).run(make())
    assert seen == ["review.plot.scored"]


def test_failing_subscriber_is_logged_and_does_not_break_the_review(caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus()

    def broken(name: str, payload: dict[str, Any]) -> None:
        raise RuntimeError("subscriber bug")

    bus.subscribe("*", broken)
    events = record(bus)
    with caplog.at_level(logging.ERROR, logger="personalab.nodes.rules.review"):
        out = ReviewPipeline(event_bus=bus).run(make())
    assert out.skipped is True
    assert len(events) == 5
    assert "subscriber bug" in caplog.text


def test_a_subscriber_editing_its_payload_does_not_change_the_next_ones() -> None:
    bus = EventBus()
    bus.subscribe("review.finished", lambda name, payload: payload["relationship_delta"].clear())
    events = record(bus)
    ReviewPipeline(event_bus=bus).run(make())
    assert events[-1][1]["relationship_delta"] == {"trust": 0, "affection": 0, "familiarity": 1}


def test_unsubscribe() -> None:
    bus = EventBus()
    seen: list[str] = []
    unsubscribe = bus.subscribe("*", lambda name, payload: seen.append(name))
    unsubscribe()
    bus.emit("review.started", {})
    assert seen == []


def test_get_review_pipeline_is_rule_mode_and_shares_the_assessment_cache() -> None:
    first, second = get_review_pipeline(event_bus=EventBus()), get_review_pipeline(event_bus=EventBus())
    assert first.mode == "rule"
    assert first.cache is second.cache


# -------------------------------------------------------------------------------------------- LLM mode

VALID_ANSWER: dict[str, Any] = {
    "skipped": False,
    "should_write_memory": True,
    "memory_value": 0.7,
    "relationship_delta": {"trust": 1, "affection": -2, "familiarity": 1},
    "suggest_plot_node": False,
    "suggest_worldbook_update": False,
    "quality": {"character_fidelity": 0.9, "immersion": 0.8, "world_consistency": 0.75, "risk": 0.05},
    "reasons": {"memory_value": "用户第一次说出心事", "relationship": "语气里有怨气"},
}


def fake_llm(*answers: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter(answers))


class RaisingChatModel(BaseChatModel):
    """A chat model whose every call fails, like a provider outage."""

    @property
    def _llm_type(self) -> str:
        return "raising-fake"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **_: Any) -> ChatResult:
        raise ConnectionError("provider unreachable")


def llm_pipeline(
    llm: BaseChatModel, bus: EventBus | None = None, cache: AssessmentCache | None = None
) -> ReviewPipeline:
    return ReviewPipeline(mode="llm", event_bus=bus or EventBus(), llm=llm, cache=cache or AssessmentCache())


def test_llm_mode_uses_a_valid_answer() -> None:
    bus = EventBus()
    events = record(bus)
    out = llm_pipeline(fake_llm(json.dumps(VALID_ANSWER, ensure_ascii=False)), bus).run(make("好"))

    assert out.source == "llm" and out.fallback_reason is None
    assert out.should_write_memory is True and out.skipped is False
    assert out.memory_value == 0.7 and out.quality.memory_value == 0.7
    assert delta(out) == {"trust": 1, "affection": -2, "familiarity": 1}
    assert out.total_delta == 4  # recomputed from the answer's deltas
    q = out.quality
    assert (q.character_fidelity, q.immersion, q.world_consistency, q.risk) == (0.9, 0.8, 0.75, 0.05)
    assert q.user_engagement == 0.01  # omitted by the model: the rule value
    assert out.reasons["memory_value"] == "用户第一次说出心事"
    assert out.reasons["plot_node"] == "(the model gave no reason)"
    assert [name for name, _ in events] == list(EVENT_NAMES)
    assert events[-1][1]["source"] == "llm"


def test_llm_mode_accepts_a_fenced_answer() -> None:
    answer = "```json\n" + json.dumps(VALID_ANSWER) + "\n```"
    assert llm_pipeline(fake_llm(answer)).run(make()).source == "llm"


def test_llm_assessment_is_cached_per_conversation_and_read_in_rule_mode() -> None:
    cache = AssessmentCache()
    llm_pipeline(fake_llm(json.dumps(VALID_ANSWER)), cache=cache).run(make(conversation_id="conv_1"))

    rule = ReviewPipeline(event_bus=EventBus(), cache=cache)
    assert rule.run(make(conversation_id="conv_1")).quality.risk == 0.05
    assert rule.run(make(conversation_id="conv_2")).quality.risk is None


def test_llm_fallback_keeps_the_previous_cached_assessment() -> None:
    cache = AssessmentCache()
    cache.put("conv_abc", LLMAssessment(0.5, 0.5, 0.5, 0.2))
    out = llm_pipeline(fake_llm("not json"), cache=cache).run(make())
    assert out.source == "rule" and out.quality.risk == 0.2


def test_llm_invalid_json_falls_back_to_the_rule_result(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="personalab.nodes.rules.review"):
        out = llm_pipeline(fake_llm("我觉得这轮对话很好。")).run(make("谢谢"))
    assert out == replace(run_rule_review(make("谢谢")), fallback_reason=out.fallback_reason)
    assert out.source == "rule"
    assert out.fallback_reason is not None and "not JSON" in out.fallback_reason
    assert "fell back to the rule review" in caplog.text


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"memory_value": 1.5}, "memory_value"),
        ({"should_write_memory": "yes"}, "should_write_memory"),
        ({"relationship_delta": {"trust": 1, "affection": 0}}, "relationship_delta.familiarity"),
        ({"relationship_delta": {"trust": 1.5, "affection": 0, "familiarity": 1}}, "relationship_delta.trust"),
        ({"relationship_delta": {"trust": 9, "affection": 0, "familiarity": 1}}, "relationship_delta.trust"),
        ({"quality": {"character_fidelity": 0.9, "immersion": 0.8, "world_consistency": 0.7}}, "quality.risk"),
        ({"skipped": True}, "contradicts"),
    ],
)
def test_llm_answer_violating_the_schema_falls_back(change: dict[str, Any], named: str) -> None:
    cache = AssessmentCache()
    out = llm_pipeline(fake_llm(json.dumps({**VALID_ANSWER, **change})), cache=cache).run(make())
    assert out.source == "rule"
    assert out.fallback_reason is not None and named in out.fallback_reason
    assert cache.get("conv_abc") is None  # nothing cached from a broken answer


def test_llm_answer_that_is_not_an_object_falls_back() -> None:
    out = llm_pipeline(fake_llm("[1, 2]")).run(make())
    assert out.fallback_reason is not None and "not an object" in out.fallback_reason


def test_llm_call_that_raises_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus()
    events = record(bus)
    with caplog.at_level(logging.WARNING, logger="personalab.nodes.rules.review"):
        out = llm_pipeline(RaisingChatModel(), bus).run(make("谢谢"))
    assert out.source == "rule"
    assert out.fallback_reason == "LLM call failed: ConnectionError: provider unreachable"
    assert out.relationship_delta.trust == 1
    assert [name for name, _ in events] == list(EVENT_NAMES)
    assert events[-1][1]["fallback_reason"] == out.fallback_reason
    assert "provider unreachable" in caplog.text


def test_llm_mode_async_run() -> None:
    out = asyncio.run(llm_pipeline(fake_llm(json.dumps(VALID_ANSWER))).arun(make()))
    assert out.source == "llm"
    fallback = asyncio.run(llm_pipeline(RaisingChatModel()).arun(make()))
    assert fallback.fallback_reason is not None and "ConnectionError" in fallback.fallback_reason


def test_llm_mode_needs_a_model_and_modes_are_checked() -> None:
    with pytest.raises(ValueError, match="needs an llm"):
        ReviewPipeline(mode="llm")
    with pytest.raises(ValueError, match="'rule' or 'llm'"):
        ReviewPipeline(mode="magic")  # type: ignore[arg-type]


def test_llm_prompt_carries_the_turn_and_the_rule_baseline() -> None:
    inp = make("谢谢你", level="important")
    messages = build_review_messages(inp.to_dict(), run_rule_review(inp).to_dict())
    assert messages[0].content.endswith(REVIEW_SYSTEM_PROMPT)
    assert detect_purpose(messages[0].content) == "review"  # how the offline scripted model knows it
    assert "谢谢你" in messages[1].content and '"level": "important"' in messages[1].content
    assert '"should_write_memory": true' in messages[1].content


# ------------------------------------------------------------------ errors are InvalidInput, naming the field


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (
            lambda: ReviewInput("c", "ch", "u", "hi", selected_choice={"level": "big"}),
            "ReviewInput.selected_choice.level",
        ),
        (lambda: ReviewInput("c", "ch", "u", 3), "ReviewInput.user_message"),
        (lambda: ReviewInput.from_dict({"conversation_id": "c"}), "ReviewInput needs 'character_id', 'user_id'"),
        (lambda: ReviewConfig(engagement_full_chars=0), "ReviewConfig.engagement_full_chars"),
        (lambda: ReviewConfig(choice_memory_value={"big": 0.5}), "ReviewConfig.choice_memory_value key must be one of"),
        (lambda: RelationshipDelta(1.5), "RelationshipDelta.trust"),
        (lambda: LLMAssessment(1.5, 0.5, 0.5, 0.5), "LLMAssessment.character_fidelity"),
        (lambda: ReviewOutput.from_dict({**review().to_dict(), "memory_value": 2}), "ReviewOutput.memory_value"),
        (lambda: ReviewOutput.from_dict({**review().to_dict(), "mood": 1}), "ReviewOutput got unknown fields"),
    ],
)
def test_bad_values_raise_invalid_input_naming_the_field(build: Any, named: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(named)):
        build()


def test_replace_validates_the_new_values() -> None:
    with pytest.raises(InvalidInput, match="ReviewOutput.memory_value"):
        replace(review(), memory_value=1.5)


# ------------------------------------------------------------------------ run and arun: one pipeline


@pytest.mark.parametrize("answer", [json.dumps(VALID_ANSWER), "not json", None])
def test_run_and_arun_give_the_same_output_and_events(answer: str | None) -> None:
    def pipeline(bus: EventBus) -> ReviewPipeline:
        if answer is None:
            return ReviewPipeline(event_bus=bus)
        return llm_pipeline(fake_llm(answer), bus)

    sync_bus, async_bus = EventBus(), EventBus()
    sync_events, async_events = record(sync_bus), record(async_bus)
    sync_out = pipeline(sync_bus).run(make("谢谢", level="important"))
    async_out = asyncio.run(pipeline(async_bus).arun(make("谢谢", level="important")))
    assert sync_out == async_out
    assert sync_events == async_events
