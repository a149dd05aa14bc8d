"""Core memory (seed 002 需求2): schema and complexity limits, maintenance request and answer, versions."""

from __future__ import annotations

import copy
import json

import pytest
from personalab.nodes.rules import prompts
from personalab.nodes.rules.core_memory import (
    MAX_BINARY,
    MAX_TERNARY,
    CoreMemoryHistory,
    accept_core_memory,
    initial_core_memory,
    maintenance_messages,
    parse_core_memory,
    should_maintain,
    validate_core_memory,
)


def persona() -> dict:
    return {
        "name": "老大",
        "identity": "被手下背叛的前帮派老大，正在废土上寻找复仇的机会。",
        "traits": ["冷静", "多疑", "重义气"],
        "binary_oppositions": [
            {"a": "复仇", "b": "宽恕", "balance": 0.8, "note": "仇恨仍占上风"},
            {"a": "信任", "b": "戒备", "balance": 0.3, "note": "被背叛后很难再信人"},
        ],
        "ternary_tensions": [
            {"poles": ["忠诚", "背叛", "中立"], "weights": [0.5, 0.2, 0.3], "note": "对旧部的立场"},
        ],
        "values": ["言出必行"],
        "goals": ["找出背叛者"],
        "speech_style": "话少，语气冷硬，偶尔带点黑色幽默。",
        "recent_changes": [{"turn": 10, "change": "开始怀疑副手"}],
    }


def with_(**changes: object) -> dict:
    core = persona()
    core.update(changes)
    return core


def test_a_full_persona_is_valid() -> None:
    assert validate_core_memory(persona()) == []


def test_the_initial_core_memory_is_valid_and_carries_the_persona() -> None:
    core = initial_core_memory(" 老大 ", "被手下背叛的前帮派老大。" * 30)
    assert validate_core_memory(core) == []
    assert core["name"] == "老大" and core["identity"].startswith("被手下背叛") and len(core["identity"]) == 200
    with pytest.raises(ValueError, match="role_name"):
        initial_core_memory("  ", "x")


def test_at_most_three_binary_oppositions() -> None:
    pair = {"a": "爱", "b": "恨", "balance": 0.5, "note": ""}
    assert validate_core_memory(with_(binary_oppositions=[pair] * MAX_BINARY)) == []
    assert validate_core_memory(with_(binary_oppositions=[pair] * (MAX_BINARY + 1))) == [
        "binary_oppositions: 4 groups, at most 3 (seed 002 需求2)"
    ]


def test_at_most_two_ternary_tensions() -> None:
    tension = {"poles": ["忠诚", "背叛", "中立"], "weights": [0.4, 0.3, 0.3], "note": ""}
    assert validate_core_memory(with_(ternary_tensions=[tension] * MAX_TERNARY)) == []
    assert validate_core_memory(with_(ternary_tensions=[tension] * (MAX_TERNARY + 1))) == [
        "ternary_tensions: 3 groups, at most 2 (seed 002 需求2)"
    ]


@pytest.mark.parametrize(
    ("core", "problem"),
    [
        ({k: v for k, v in persona().items() if k != "goals"}, "missing field(s) goals"),
        (with_(mood="好"), "unknown field(s) mood"),
        (with_(name=" "), "name: must not be empty"),
        (with_(traits="冷静"), "traits: expected a list"),
        (with_(traits=["冷静"] * 9), "traits: 9 items, at most 8"),
        (with_(values=[3]), "values[0]: expected a string"),
        (with_(speech_style="说" * 201), "speech_style: 201 characters, over 200"),
        (with_(binary_oppositions=[{"a": "爱", "b": "恨", "balance": 1.5, "note": ""}]), "balance: expected a number"),
        (with_(binary_oppositions=[{"a": "爱", "b": "爱", "balance": 0.5, "note": ""}]), "the two poles are the same"),
        (with_(binary_oppositions=[{"a": "爱", "b": "恨", "note": ""}]), "binary_oppositions[0]: missing balance"),
        (
            with_(ternary_tensions=[{"poles": ["a", "b"], "weights": [0.5, 0.5], "note": ""}]),
            "expected a list of 3 poles",
        ),
        (with_(ternary_tensions=[{"poles": ["a", "b", "a"], "weights": [0.4, 0.3, 0.3], "note": ""}]), "must differ"),
        (with_(ternary_tensions=[{"poles": ["a", "b", "c"], "weights": [0.5, 0.5, 0.5], "note": ""}]), "summing to 1"),
        (with_(recent_changes=[{"turn": -1, "change": "x"}]), "recent_changes[0].turn"),
        (with_(recent_changes=[{"turn": 1, "change": "x"}] * 6), "recent_changes: 6 items, at most 5"),
        ("不是对象", "expected a JSON object"),
    ],
)
def test_each_broken_rule_is_reported(core: object, problem: str) -> None:
    problems = validate_core_memory(core)
    assert any(problem in p for p in problems), problems


def test_the_whole_json_has_a_size_limit() -> None:
    core = with_(traits=["特" * 200] * 8, values=["值" * 200] * 6, goals=["目" * 200] * 5)
    assert any("characters of JSON, over 2400" in p for p in validate_core_memory(core))


@pytest.mark.parametrize(
    "answer",
    [
        json.dumps(persona(), ensure_ascii=False),
        "```json\n" + json.dumps(persona(), ensure_ascii=False, indent=2) + "\n```",
        "好的，新的核心记忆如下：\n```\n" + json.dumps(persona(), ensure_ascii=False) + "\n```\n以上。",
        "新的核心记忆：" + json.dumps(persona(), ensure_ascii=False) + " 希望有帮助",
    ],
)
def test_the_json_is_found_in_the_answer(answer: str) -> None:
    assert parse_core_memory(answer) == persona()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("抱歉，我无法完成。", "no JSON object"),
        ('{"name": "老大",}', "malformed JSON"),
        ("```json\n[1, 2]\n```", "no JSON object"),
    ],
)
def test_a_malformed_answer_is_a_value_error(answer: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_core_memory(answer)


def test_a_valid_answer_is_accepted() -> None:
    old = initial_core_memory("老大", "前帮派老大")
    assert accept_core_memory(old, json.dumps(persona(), ensure_ascii=False)) == (persona(), [])


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ("这不是 JSON", "no JSON object"),
        (json.dumps(with_(binary_oppositions=persona()["binary_oppositions"] * 2), ensure_ascii=False), "at most 3"),
        (json.dumps(with_(name="小弟"), ensure_ascii=False), "name: changed"),
    ],
)
def test_an_unusable_answer_keeps_the_old_core(answer: str, problem: str) -> None:
    old = persona()
    core, problems = accept_core_memory(old, answer)
    assert core == old and core is not old
    assert any(problem in p for p in problems), problems


def test_the_maintenance_request_has_old_core_dialogue_and_events() -> None:
    turns = [
        {"role": "user", "content": "我查到副手和铁狼帮有来往"},
        {"role": "assistant", "content": "【愤怒】果然是他<やっぱり>(一拳砸在桌上)"},
    ]
    system, user = maintenance_messages(persona(), turns, ["信任度下降", {"text": "副手背叛被揭穿"}], turn=20)
    assert prompts.detect_purpose(system["content"]) == prompts.PURPOSE_CORE_MEMORY
    assert "最多3组" in system["content"] and "最多2组" in system["content"]
    content = user["content"]
    old = content.split("```json\n", 1)[1].split("\n```", 1)[0]
    assert json.loads(old) == persona()
    assert "用户：我查到副手和铁狼帮有来往" in content and "角色：【愤怒】果然是他(一拳砸在桌上)" in content
    assert "やっぱり" not in content
    assert "- 信任度下降" in content and "- 副手背叛被揭穿" in content and "第20轮" in content


def test_a_bad_state_event_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="state event 1"):
        maintenance_messages(persona(), [], ["ok", 3])


@pytest.mark.parametrize(("turn", "due"), [(10, True), (20, True), (0, False), (5, False), (11, False)])
def test_maintenance_every_ten_turns(turn: int, due: bool) -> None:
    assert should_maintain(turn) is due


def test_maintenance_period_must_be_positive() -> None:
    assert should_maintain(6, every=3)
    with pytest.raises(ValueError, match="every"):
        should_maintain(10, every=0)


# --- versions ---------------------------------------------------------------------------------------------------


def test_versions_grow_and_keep_the_newest() -> None:
    history = CoreMemoryHistory()
    for turn in range(0, 60, 10):
        history = history.push(
            with_(recent_changes=[{"turn": turn, "change": "x"}]), turn=turn, reason=f"t{turn}", keep=4
        )
    assert [v["version"] for v in history.versions] == [3, 4, 5, 6]
    assert history.current["recent_changes"][0]["turn"] == 50


def test_rollback_makes_an_earlier_version_current_as_a_new_version() -> None:
    first, second = initial_core_memory("老大", "前帮派老大"), persona()
    history = CoreMemoryHistory().push(first, turn=0, reason="initial").push(second, turn=10, reason="maintenance")
    back = history.rollback(turn=12)
    assert back.current == first
    assert back.versions[-1]["version"] == 3 and back.versions[-1]["reason"] == "rollback to version 1"
    assert back.rollback(to_version=2).current == second
    assert history.current == second  # the original history is unchanged


def test_rollback_needs_an_earlier_kept_version() -> None:
    history = CoreMemoryHistory().push(persona(), turn=0, reason="initial")
    with pytest.raises(LookupError, match="no earlier version"):
        history.rollback()
    with pytest.raises(LookupError, match="version 7 is not kept"):
        history.rollback(to_version=7)


def test_an_invalid_core_is_not_pushed() -> None:
    with pytest.raises(ValueError, match="at most 3"):
        CoreMemoryHistory().push(with_(binary_oppositions=persona()["binary_oppositions"] * 2), turn=1, reason="x")


def test_the_history_round_trips_through_plain_state() -> None:
    history = CoreMemoryHistory().push(persona(), turn=0, reason="initial")
    state = json.loads(json.dumps(history.to_state(), ensure_ascii=False))
    restored = CoreMemoryHistory.from_state(state)
    assert restored == history
    state[0]["core"]["name"] = "改掉"
    assert restored.current["name"] == "老大"  # no shared objects with the state
    assert CoreMemoryHistory.from_state(None).current is None
    with pytest.raises(ValueError, match="item 0"):
        CoreMemoryHistory.from_state([{"version": 1}])


def test_validation_does_not_change_its_input() -> None:
    core = persona()
    before = copy.deepcopy(core)
    validate_core_memory(core)
    assert core == before
