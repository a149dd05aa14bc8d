"""The memory builder, rule by rule (seed 000), plus the seed's two worked examples from the fixture file."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from personalab.nodes.rules.memory_builder import build_memory, recall_window
from personalab.stores.tables import Line

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "memory_builder_seed_examples.json").read_text("utf-8"))


def line(attribute: str, content: str, **fields: Any) -> dict[str, Any]:
    return {"attribute": attribute, "content": content, **fields}


def me(content: str, **fields: Any) -> dict[str, Any]:
    return line("assistant", content, role_id=1, display_name="钦灵", **fields)


def other(name: str, content: str, **fields: Any) -> dict[str, Any]:
    return line("assistant", content, display_name=name, **fields)


def user(content: str) -> dict[str, Any]:
    return line("user", content, display_name="莱姆")


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda c: c["name"])
def test_seed_examples_come_out_exactly(case: dict[str, Any]) -> None:
    assert build_memory(case["lines"], **case["target"]) == case["expected"]


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda c: c["name"])
def test_sqlmodel_lines_build_like_dicts(case: dict[str, Any]) -> None:
    lines = [
        Line(
            id=raw["line_id"],
            save_id=1,
            **{k: (str(v) if k == "script_role_id" and v is not None else v) for k, v in raw.items() if k != "line_id"},
        )
        for raw in case["lines"]
    ]
    assert build_memory(lines, **case["target"]) == case["expected"]


def test_system_lines_of_other_characters_are_dropped() -> None:
    lines = [line("system", "你叫钦灵", role_id=1), line("system", "你叫白小喵", script_role_id="1"), user("嗨")]
    assert build_memory(lines, role_id=1) == [
        {"role": "system", "content": "你叫钦灵"},
        {"role": "user", "content": "嗨"},
    ]


def test_system_line_matches_by_script_role_id_or_display_name() -> None:
    lines = [line("system", "A", script_role_id="npc7"), line("system", "B", display_name="白小喵")]
    assert build_memory(lines, script_role_id="npc7") == [{"role": "system", "content": "A"}]
    assert build_memory(lines, display_name="白小喵") == [{"role": "system", "content": "B"}]


def test_system_lines_without_speaker_identity_are_kept() -> None:
    lines = [line("system", "世界规则：禁止魔法"), line("system", "你叫白小喵", script_role_id="1")]
    assert build_memory(lines, role_id=1) == [{"role": "system", "content": "世界规则：禁止魔法"}]


def test_each_kept_system_line_is_its_own_message_in_history_order() -> None:
    lines = [line("system", "设定一"), user("你好"), me("嗯"), line("system", "设定二", role_id=1), user("再见")]
    assert build_memory(lines, role_id=1) == [
        {"role": "system", "content": "设定一"},
        {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "嗯"},
        {"role": "system", "content": "设定二"},
        {"role": "user", "content": "再见"},
    ]


def test_kept_system_line_closes_the_pending_user_message_first() -> None:
    lines = [other("旁白", "夜深了"), user("睡吧"), line("system", "插入的设定"), me("晚安")]
    assert build_memory(lines, role_id=1) == [
        {"role": "user", "content": "{旁白:夜深了}\n睡吧"},
        {"role": "system", "content": "插入的设定"},
        {"role": "assistant", "content": "晚安"},
    ]


def test_dropped_system_line_does_not_split_a_merged_reply() -> None:
    lines = [me("一"), line("system", "别人的设定", script_role_id="9"), me("二")]
    assert build_memory(lines, role_id=1) == [{"role": "assistant", "content": "一二"}]


def test_consecutive_own_lines_merge_into_one_assistant_message() -> None:
    lines = [
        me("你来啦", original_emotion="开心", tts_content="来たね", action_content="摇尾巴"),
        me("作业写完了吗?", original_emotion="好奇", tts_content="宿題は?"),
    ]
    assert build_memory(lines, role_id=1) == [
        {"role": "assistant", "content": "【开心】你来啦<来たね>(摇尾巴)【好奇】作业写完了吗?<宿題は?>"}
    ]


def test_own_line_fields_each_optional() -> None:
    cases = [
        ({"original_emotion": "开心"}, "【开心】嗯"),
        ({"tts_content": "うん"}, "嗯<うん>"),
        ({"action_content": "点头"}, "嗯(点头)"),
        ({}, "嗯"),
    ]
    for fields, expected in cases:
        assert build_memory([me("嗯", **fields)], role_id=1) == [{"role": "assistant", "content": expected}]


def test_empty_strings_count_as_absent() -> None:
    lines = [me("嗯", original_emotion="", tts_content="", action_content=""), other("旁白", "风起", action_content="")]
    assert build_memory(lines, role_id=1) == [
        {"role": "assistant", "content": "嗯"},
        {"role": "user", "content": "{旁白:风起}"},
    ]


def test_other_speakers_go_into_one_block_with_action_and_without_tts() -> None:
    lines = [
        other("旁白", "门开了"),
        other("白小喵", "欢迎", original_emotion="开心", tts_content="ようこそ", action_content="鞠躬"),
        me("你好"),
    ]
    assert build_memory(lines, role_id=1) == [
        {"role": "user", "content": "{旁白:门开了\n白小喵:欢迎(鞠躬)}"},
        {"role": "assistant", "content": "你好"},
    ]


def test_block_emotion_is_optional_as_the_seed_prose_describes() -> None:
    lines = [other("白小喵", "欢迎", original_emotion="开心")]
    assert build_memory(lines, role_id=1, block_emotion=True) == [{"role": "user", "content": "{白小喵:【开心】欢迎}"}]


def test_user_lines_before_another_speaker_go_inside_the_block() -> None:
    lines = [other("白小喵", "喵"), user("你是谁"), other("白小喵", "我是猫"), user("哦"), me("别理她")]
    assert build_memory(lines, role_id=1) == [
        {"role": "user", "content": "{白小喵:喵\n莱姆:你是谁\n白小喵:我是猫}\n哦"},
        {"role": "assistant", "content": "别理她"},
    ]


def test_user_lines_before_own_reply_stand_outside_joined_with_nothing() -> None:
    lines = [other("旁白", "下雨了"), user("快进来"), user("别淋湿了"), me("谢谢")]
    assert build_memory(lines, role_id=1)[0] == {"role": "user", "content": "{旁白:下雨了}\n快进来别淋湿了"}


def test_consecutive_user_lines_without_block_join_with_nothing() -> None:
    assert build_memory([user("你好"), user("在吗"), me("在")], role_id=1)[0] == {"role": "user", "content": "你好在吗"}


def test_history_ending_on_other_speakers_ends_with_a_block_only_message() -> None:
    lines = [user("嗨"), me("嗨"), other("旁白", "突然停电了"), user("怎么回事"), other("白小喵", "喵!")]
    assert build_memory(lines, role_id=1)[-1] == {
        "role": "user",
        "content": "{旁白:突然停电了\n莱姆:怎么回事\n白小喵:喵!}",
    }


def test_history_ending_on_user_after_block_keeps_the_user_input_outside() -> None:
    lines = [other("旁白", "天黑了"), user("回家吧")]
    assert build_memory(lines, role_id=1) == [{"role": "user", "content": "{旁白:天黑了}\n回家吧"}]


def test_without_identity_every_assistant_line_is_the_character() -> None:
    lines = [line("system", "设定", script_role_id="x"), user("你好"), other("谁都行", "嗯", original_emotion="开心")]
    assert build_memory(lines) == [
        {"role": "system", "content": "设定"},
        {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "【开心】嗯"},
    ]


def test_ids_compare_as_text() -> None:
    assert build_memory([line("assistant", "喵", script_role_id=1)], script_role_id="1") == [
        {"role": "assistant", "content": "喵"}
    ]


def test_speaker_name_fallbacks_in_the_block() -> None:
    lines = [
        line("assistant", "风声"),
        line("assistant", "我是NPC", script_role_id="guard"),
        line("assistant", "我是角色", role_id=5),
        line("user", "嗯?"),
        line("assistant", "旁白二"),
    ]
    assert build_memory(lines, role_id=1) == [
        {"role": "user", "content": "{旁白:风声\nguard:我是NPC\n角色5:我是角色\n用户:嗯?\n旁白:旁白二}"}
    ]


def test_empty_history_builds_nothing() -> None:
    assert build_memory([], role_id=1) == []


@pytest.mark.parametrize("attribute", ["narrator", "", None, "Assistant"])
def test_unknown_attribute_raises_naming_the_line(attribute: Any) -> None:
    with pytest.raises(ValueError, match="line 42"):
        build_memory([user("ok"), {"id": 42, "attribute": attribute, "content": "x"}])


@pytest.mark.parametrize("content", [None, "", "   "])
def test_missing_content_raises_naming_the_line(content: Any) -> None:
    with pytest.raises(ValueError, match="line 7: no content"):
        build_memory([{"line_id": 7, "attribute": "user", "content": content}])


# ---- the recall window: which lines of a long path a turn reads ----------------------------------------------


def preamble_and_last_turns(messages: list[dict[str, str]], turns: int) -> tuple[list[Any], list[Any]]:
    """The messages before the first user message, and those of the last `turns` turns (a turn starts at a
    user message), as the prompt's middle region and the maintenance read them."""
    starts = [i for i, m in enumerate(messages) if m["role"] == "user"]
    first = starts[0] if starts else len(messages)
    return messages[:first], messages[starts[-turns] if len(starts) >= turns else first :]


def random_path(rng: random.Random, length: int) -> list[dict[str, Any]]:
    """A path of every kind of line: the character (by role id, by id as text, by name only), other characters,
    narration, user lines, system lines (own, another's, no identity), in any order."""
    makers = [
        lambda: me(f"我说{rng.randint(0, 99)}", original_emotion=rng.choice([None, "开心"])),
        lambda: line("assistant", "我也说", role_id="1"),
        lambda: line("assistant", "还是我", display_name="钦灵"),
        lambda: other("莱卡", f"莱卡说{rng.randint(0, 99)}", action_content=rng.choice([None, "笑"])),
        lambda: line("assistant", "风吹过。"),
        lambda: user(f"问{rng.randint(0, 99)}"),
        lambda: user("再问"),
        lambda: line("system", "钦灵的设定", role_id=1),
        lambda: line("system", "莱卡的设定", display_name="莱卡"),
        lambda: line("system", "场景说明"),
    ]
    weights = [8, 2, 2, 3, 1, 8, 2, 1, 1, 1]
    return [rng.choices(makers, weights)[0]() for _ in range(length)]


@pytest.mark.parametrize("seed", range(200))
def test_the_window_builds_the_same_preamble_and_last_turns_as_the_whole_path(seed: int) -> None:
    rng = random.Random(seed)
    path = random_path(rng, rng.randint(0, 160))
    for index, item in enumerate(path, start=1):
        item["id"] = index
    turns = rng.randint(1, 12)
    head_end, tail_start = recall_window(path, turns, role_id=1, display_name="钦灵")
    assert 0 <= head_end <= tail_start <= len(path)
    whole = build_memory(path, role_id=1, display_name="钦灵")
    window = build_memory(path[:head_end] + path[tail_start:], role_id=1, display_name="钦灵")
    assert preamble_and_last_turns(window, turns) == preamble_and_last_turns(whole, turns)


@pytest.mark.parametrize("seed", range(200))
def test_a_path_read_at_its_ends_only_gives_the_same_window_or_asks_for_more(seed: int) -> None:
    rng = random.Random(seed)
    path = random_path(rng, rng.randint(0, 160))
    turns = rng.randint(1, 12)
    whole = recall_window(path, turns, role_id=1, display_name="钦灵")
    head, tail = rng.randint(0, len(path)), rng.randint(0, len(path))
    partial = [line if index < head or index >= len(path) - tail else None for index, line in enumerate(path)]
    assert recall_window(partial, turns, role_id=1, display_name="钦灵") in (whole, None)
    if head + tail >= len(path):
        assert recall_window(partial, turns, role_id=1, display_name="钦灵") == whole


def test_a_long_path_leaves_its_middle_out() -> None:
    path = [line("system", "开场设定"), me("你来了。")]
    for n in range(50):
        path += [user(f"第{n}问"), me(f"第{n}答")]
    head_end, tail_start = recall_window(path, 10, role_id=1)
    # the preamble and the first turn, then the last ten turns (and the one they start after)
    assert head_end == 2 and len(path) - tail_start == 2 * 10
    assert build_memory(path[tail_start:], role_id=1)[0] == {"role": "user", "content": "第40问"}


def test_a_short_path_is_read_whole() -> None:
    path = [user("你好"), me("嗯。"), user("走吧"), me("好。")]
    assert recall_window(path, 2, role_id=1) == (4, 4)
    assert recall_window([], 5) == (0, 0)


def test_only_the_characters_own_reply_makes_a_cut() -> None:
    """A user line after another speaker joins that speaker's scene block, so it is never a cut."""
    path = [user("甲"), other("莱卡", "乙"), user("丙"), other("莱卡", "丁")] * 30
    assert recall_window(path, 3, role_id=1, display_name="钦灵") == (len(path), len(path))


def test_recall_window_needs_a_positive_turn_count() -> None:
    with pytest.raises(ValueError, match="turns must be a positive integer"):
        recall_window([], 0)
