"""Conversational RAG query rewrite (seed 002 需求3): the request and the answer's parsing."""

from __future__ import annotations

import re

import pytest
from personalab.nodes.rules import prompts
from personalab.nodes.rules.rewrite import needs_rewrite, parse_rewrite, rewrite_messages

INPUT = "你还记得我们在据点的那次冲突吗？"


def dialogue(count: int) -> list[dict[str, str]]:
    return [
        {
            "role": "user" if n % 2 == 0 else "assistant",
            "content": f"第{n}条消息" + ("<tts文本>(动作)" if n % 2 else ""),
        }
        for n in range(count)
    ]


def test_the_request_has_the_instruction_the_last_ten_messages_and_the_input() -> None:
    system, user = rewrite_messages(INPUT, dialogue(14))
    assert system["role"] == "system" and prompts.detect_purpose(system["content"]) == prompts.PURPOSE_QUERY_REWRITE
    assert "独立" in system["content"]
    assert user["role"] == "user"
    shown = [line for line in user["content"].splitlines() if line.startswith(("用户：", "角色："))]
    assert [re.match(r"第\d+条消息", line.split("：", 1)[1])[0] for line in shown] == [
        f"第{n}条消息" for n in range(4, 14)
    ]
    assert user["content"].rstrip().endswith("请输出改写后的独立检索查询（一行）：")
    assert INPUT in user["content"]


def test_the_history_size_is_five_to_ten() -> None:
    _, user = rewrite_messages(INPUT, dialogue(14), max_messages=5)
    assert "第8条消息" not in user["content"] and "第9条消息" in user["content"]
    for bad in (4, 11):
        with pytest.raises(ValueError, match="max_messages"):
            rewrite_messages(INPUT, dialogue(14), max_messages=bad)


def test_character_lines_lose_emotion_and_tts_but_keep_the_action() -> None:
    history = [{"role": "assistant", "content": "【愤怒】铁狼帮的老大出手了<くそっ>(咬紧牙关)"}]
    _, user = rewrite_messages(INPUT, history)
    assert "角色：铁狼帮的老大出手了(咬紧牙关)" in user["content"]
    assert "くそっ" not in user["content"] and "愤怒" not in user["content"]


def test_system_lines_and_a_repeated_input_are_left_out() -> None:
    history = [
        {"role": "system", "content": "你叫老大，进行角色扮演"},
        {"role": "user", "content": "出发吧"},
        {"role": "user", "content": INPUT},
    ]
    _, user = rewrite_messages(INPUT, history)
    assert "你叫老大" not in user["content"]
    assert user["content"].count(INPUT) == 1 and "用户：出发吧" in user["content"]


def test_long_lines_are_cut() -> None:
    _, user = rewrite_messages(INPUT, [{"role": "user", "content": "长" * 500}])
    assert "长" * 200 + "…" in user["content"] and "长" * 201 not in user["content"]


def test_no_history_needs_no_rewrite() -> None:
    assert not needs_rewrite([]) and not needs_rewrite([{"role": "system", "content": "设定"}])
    assert needs_rewrite([{"role": "assistant", "content": "【开心】你来啦"}])


def test_an_empty_input_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="user_input"):
        rewrite_messages(" ", [])


@pytest.mark.parametrize(
    "answer",
    [
        "据点冲突事件，涉及主角与某人的对抗",
        "独立查询：据点冲突事件，涉及主角与某人的对抗",
        "改写后的查询：“据点冲突事件，涉及主角与某人的对抗”",
        "Query: 据点冲突事件，涉及主角与某人的对抗",
        '"据点冲突事件，涉及主角与某人的对抗"',
        "「据点冲突事件，涉及主角与某人的对抗」",
        "1. 据点冲突事件，涉及主角与某人的对抗",
        "\n\n  据点冲突事件，涉及主角与某人的对抗  \n（我把代词换成了具体事件）",
    ],
)
def test_the_answer_becomes_one_clean_query(answer: str) -> None:
    assert parse_rewrite(answer, INPUT) == "据点冲突事件，涉及主角与某人的对抗"


@pytest.mark.parametrize("answer", [None, "", "   \n ", "无", "None", "？？？……", "“”", "查询：", "长" * 201])
def test_an_unusable_answer_falls_back_to_the_input(answer: str | None) -> None:
    assert parse_rewrite(answer, f" {INPUT} ") == INPUT
