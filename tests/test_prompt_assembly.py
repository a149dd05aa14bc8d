"""Prompt regions under token budgets (seed 002 Prompt区域分配策略): head / middle / 32K+ / tail."""

from __future__ import annotations

import json

import pytest
from langchain_core.messages.utils import count_tokens_approximately
from personalab.nodes.rules import prompts
from personalab.nodes.rules.core_memory import initial_core_memory
from personalab.nodes.rules.plot import apply_progress, new_plot_state
from personalab.nodes.rules.prompt_assembly import RegionBudgets, RetrievedBlock, assemble_prompt, split_latest_user

OUTLINE = [
    "发现背叛者的线索",
    "潜入敌人据点",
    "与仇人对峙",
    "做出关键选择",
    "应对选择的后果",
    "重整帮派",
    "揭开幕后黑手",
    "最终决战",
    "废土新秩序",
    "尾声",
]
INSTRUCTION = prompts.role_play_instruction("老大")

EVENTS_TITLE = "【历史事件】（本次故事中过去发生的、与当前话题相关的事件）"


def turns(count: int, size: int = 10) -> list[dict[str, str]]:
    messages = []
    for n in range(1, count + 1):
        messages.append({"role": "user", "content": f"用户第{n}轮" + "话" * size})
        messages.append({"role": "assistant", "content": f"【平静】角色第{n}轮" + "答" * size})
    return messages


def assemble(**overrides: object):  # noqa: ANN201 - AssembledPrompt
    arguments: dict[str, object] = {
        "system_instruction": INSTRUCTION,
        "core_memory": initial_core_memory("老大", "被背叛的前帮派老大"),
        "plot_state": apply_progress(new_plot_state(OUTLINE), [{"index": 1, "status": "completed"}], 2),
        "relationship": {"trust": 0.4, "affection": 0.1, "familiarity": 0.3},
        "world_setting": "核战后的废土世界，资源匮乏，强者为王。",
        "recent_messages": turns(3),
        "retrieved_blocks": [RetrievedBlock(EVENTS_TITLE, ["在据点外发现叛徒的记号", "铁狼帮换了首领"])],
        "user_input": "我们今晚就潜进去。",
        "budgets": RegionBudgets(),
        "turn": 3,
    }
    arguments.update(overrides)
    return assemble_prompt(**arguments)  # type: ignore[arg-type]


def region(prompt, name: str) -> list[dict[str, str]]:  # noqa: ANN001
    return [m for m, r in zip(prompt.messages, prompt.regions, strict=True) if r == name]


def tokens(messages: list[dict[str, str]], budgets: RegionBudgets) -> int:
    return count_tokens_approximately(messages, chars_per_token=budgets.chars_per_token) if messages else 0


def test_regions_come_in_order_head_middle_retrieved_tail() -> None:
    prompt = assemble()
    assert prompt.regions == ["head", "middle", *["middle"] * 6, "retrieved", "tail", "tail"]
    assert prompt.messages[-1] == {"role": "user", "content": "我们今晚就潜进去。"}


def test_the_head_holds_instruction_core_memory_and_the_whole_outline_as_json() -> None:
    [head] = region(assemble(), "head")
    text = head["content"]
    assert head["role"] == "system" and text.startswith(INSTRUCTION)
    core = json.loads(text.split(prompts.HEAD_CORE_MEMORY, 1)[1].split("\n\n" + prompts.HEAD_PLOT_STATE)[0])
    assert core["name"] == "老大"
    plot = json.loads(text.split(prompts.HEAD_PLOT_STATE, 1)[1])
    assert [p["content"] for p in plot["story_outline"]] == OUTLINE
    assert [p["status"] for p in plot["story_outline"][:3]] == ["completed", "in_progress", "pending"]
    assert plot["current_plot_index"] == 2


def test_what_changes_every_turn_opens_the_tail_not_the_head() -> None:
    # issue 30: the turn number and the relationship change every turn; in the head they made a local server's
    # prompt cache re-evaluate the whole prompt after them
    prompt = assemble()
    [head] = region(prompt, "head")
    assert "【当前轮次】" not in head["content"] and prompts.HEAD_RELATIONSHIP not in head["content"]
    state, user = region(prompt, "tail")
    assert state["role"] == "system" and state["content"].startswith(
        "【当前轮次】第3轮\n\n" + prompts.HEAD_RELATIONSHIP
    )
    assert json.loads(state["content"].split(prompts.HEAD_RELATIONSHIP, 1)[1])["trust"] == 0.4
    assert user["role"] == "user"


def test_no_relationship_no_relationship_section() -> None:
    prompt = assemble(relationship=None)
    assert all(prompts.HEAD_RELATIONSHIP not in m["content"] for m in prompt.messages)


def test_the_middle_holds_the_world_setting_then_the_dialogue() -> None:
    middle = region(assemble(), "middle")
    assert middle[0] == {
        "role": "system",
        "content": prompts.WORLD_SETTING + "\n核战后的废土世界，资源匮乏，强者为王。",
    }
    assert middle[1:] == turns(3)


def test_the_retrieved_region_has_titled_numbered_blocks() -> None:
    blocks = [
        {"title": EVENTS_TITLE, "items": ["事件甲", {"text": "事件乙"}]},
        RetrievedBlock(prompts.DIRECTOR_REFERENCE_TITLE, ["别处的经验"]),
    ]
    [retrieved] = region(assemble(retrieved_blocks=blocks), "retrieved")
    assert retrieved["role"] == "system"
    assert retrieved["content"] == (
        f"{prompts.RETRIEVED_REGION}\n\n{EVENTS_TITLE}\n1. 事件甲\n2. 事件乙\n\n"
        f"{prompts.DIRECTOR_REFERENCE_TITLE}\n1. 别处的经验"
    )


def test_nothing_retrieved_no_retrieved_message() -> None:
    prompt = assemble(retrieved_blocks=[RetrievedBlock("【历史事件】", [])])
    assert region(prompt, "retrieved") == []
    assert "no items" in prompt.debug["retrieved"]["notes"][0]


def test_only_the_last_20_turns_are_kept() -> None:
    preamble = [{"role": "system", "content": "你叫老大，进行角色扮演"}]
    prompt = assemble(recent_messages=preamble + turns(25))
    middle = region(prompt, "middle")
    assert middle[1] == preamble[0]
    assert middle[2]["content"].startswith("用户第6轮") and len(middle) == 2 + 40
    dropped = prompt.debug["middle"]["dropped"]
    # one summary entry for the whole run of turns that are too old
    assert len(dropped) == 1 and dropped[0]["count"] == 5 and "last 20 turns" in dropped[0]["reason"]
    assert dropped[0]["item"] == "5 turn(s) (recent_messages[1:11])"
    assert (prompt.debug["middle"]["turns_kept"], prompt.debug["middle"]["turns_total"]) == (20, 25)


def test_lines_of_cut_turns_never_move_the_dialogues_start() -> None:
    # issue 30: a turn cut at the deadline keeps its user line without a reply, and the story's turn number does not
    # advance; counted as turns, each such line moved the window's first turn, so the next prompt changed near its
    # top, a slow model's server read it all again and cut that turn too (every turn after the first cut, seen with
    # the 1.5B model)
    budgets = RegionBudgets(max_turns=10)
    answered = turns(12)
    before = region(assemble(recent_messages=answered, budgets=budgets), "middle")
    cut = [{"role": "user", "content": f"被截断的第{n}句"} for n in range(1, 4)]
    for count in range(1, 4):
        prompt = assemble(recent_messages=answered + cut[:count], budgets=budgets)
        middle = region(prompt, "middle")
        assert middle[: len(before)] == before, "the dialogue's start moved"
        assert [m["content"] for m in middle[len(before) :]] == [m["content"] for m in cut[:count]]
        assert (prompt.debug["middle"]["turns_kept"], prompt.debug["middle"]["turns_total"]) == (10, 12)
    # answered at last, the cut lines are one turn with the reply: the window moves by one turn, not by four
    later = answered + cut + [{"role": "assistant", "content": "【平静】终于回答了"}]
    middle = region(assemble(recent_messages=later, budgets=budgets), "middle")
    assert middle[1]["content"].startswith("用户第4轮")
    assert middle[-4:] == [*cut, {"role": "assistant", "content": "【平静】终于回答了"}]


def test_every_budget_holds_with_large_inputs() -> None:
    budgets = RegionBudgets(head=3000, middle=600, retrieved=300, tail=100, max_turns=20)
    blocks = [
        RetrievedBlock(EVENTS_TITLE, [f"历史事件{n}" + "事" * 40 for n in range(20)]),
        RetrievedBlock(prompts.DIRECTOR_CURRENT_TITLE, [f"当前事件{n}" + "事" * 40 for n in range(15)]),
    ]
    prompt = assemble(recent_messages=turns(40, size=30), retrieved_blocks=blocks, budgets=budgets)
    for name in ("head", "middle", "retrieved", "tail"):
        debug = prompt.debug[name]
        assert debug["tokens"] == tokens(region(prompt, name), budgets)
        assert debug["tokens"] <= debug["budget"] and not debug["over_budget"], name
    assert prompt.debug["total_tokens"] == tokens(prompt.messages, budgets)
    assert prompt.debug["middle"]["dropped"] and prompt.debug["retrieved"]["dropped"]


def test_dialogue_over_budget_drops_the_oldest_first() -> None:
    preamble = [{"role": "system", "content": "你叫老大，进行角色扮演"}]
    budgets = RegionBudgets(middle=300)
    prompt = assemble(recent_messages=preamble + turns(10, size=30), budgets=budgets)
    middle = region(prompt, "middle")
    kept = prompt.debug["middle"]["turns_kept"]
    assert 0 < kept < 10
    assert middle[1:] == turns(10, size=30)[-2 * kept :]  # a suffix: the newest turns, preamble gone
    dropped = prompt.debug["middle"]["dropped"]
    assert dropped[0]["item"].startswith("preamble")
    assert [d["preview"][:5] for d in dropped[1:]] == [f"用户第{n}轮" for n in range(1, 11 - kept)]
    assert all("budget of 300" in d["reason"] for d in dropped)


def test_retrieved_over_budget_drops_the_lowest_ranked_first() -> None:
    blocks = [
        RetrievedBlock("【甲】", [f"甲{n}" + "字" * 30 for n in range(1, 7)]),
        RetrievedBlock("【乙】", [f"乙{n}" + "字" * 30 for n in range(1, 4)]),
    ]
    prompt = assemble(retrieved_blocks=blocks, budgets=RegionBudgets(retrieved=150))
    dropped = [d["item"] for d in prompt.debug["retrieved"]["dropped"]]
    # ranks 6, 5, 4 of 甲 first; then rank 3 of 乙 before rank 3 of 甲 (later block on a tie) ...
    assert dropped[:5] == ["【甲】 #6", "【甲】 #5", "【甲】 #4", "【乙】 #3", "【甲】 #3"]
    [retrieved] = region(prompt, "retrieved")
    kept = prompt.debug["retrieved"]["items_kept"]
    assert kept == 9 - len(dropped) and "甲1" in retrieved["content"]
    assert all("lowest-ranked" in d["reason"] for d in prompt.debug["retrieved"]["dropped"])


def test_a_block_emptied_by_the_budget_loses_its_title() -> None:
    blocks = [RetrievedBlock("【甲】", ["甲1" + "字" * 30]), RetrievedBlock("【乙】", ["乙1" + "字" * 30])]
    prompt = assemble(retrieved_blocks=blocks, budgets=RegionBudgets(retrieved=60))
    [retrieved] = region(prompt, "retrieved")
    assert "【甲】" in retrieved["content"] and "【乙】" not in retrieved["content"]


def test_an_oversized_head_keeps_the_outline_and_says_so() -> None:
    prompt = assemble(budgets=RegionBudgets(head=50))
    [head] = region(prompt, "head")
    assert all(point in head["content"] for point in OUTLINE)
    debug = prompt.debug["head"]
    assert debug["over_budget"] and debug["tokens"] > 50 and debug["dropped"] == []
    assert "nothing is dropped from the head" in debug["notes"][0]


def test_an_oversized_input_is_sent_whole_and_flagged() -> None:
    prompt = assemble(user_input="说" * 500, budgets=RegionBudgets(tail=20))
    assert prompt.messages[-1]["content"] == "说" * 500
    assert prompt.debug["tail"]["over_budget"] and prompt.debug["tail"]["notes"]


def test_an_oversized_world_setting_is_kept_and_the_dialogue_goes() -> None:
    prompt = assemble(world_setting="废" * 1000, budgets=RegionBudgets(middle=100))
    middle = region(prompt, "middle")
    assert middle == [{"role": "system", "content": prompts.WORLD_SETTING + "\n" + "废" * 1000}]
    assert prompt.debug["middle"]["over_budget"] and "world setting" in prompt.debug["middle"]["notes"][0]


def test_the_debug_is_plain_json() -> None:
    json.dumps(assemble(recent_messages=turns(30)).debug, ensure_ascii=False)


def test_split_latest_user_takes_the_trailing_input() -> None:
    messages = [*turns(1), {"role": "user", "content": "{旁白:天黑了}\n我们走吧"}]
    assert split_latest_user(messages) == (turns(1), "{旁白:天黑了}\n我们走吧")
    assert split_latest_user(turns(1)) == (turns(1), None)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"user_input": "  "}, "user_input"),
        ({"system_instruction": ""}, "system_instruction"),
        ({"plot_state": {"story_outline": []}}, "story_outline"),
        ({"core_memory": ["not", "a", "dict"]}, "core_memory"),
        ({"recent_messages": [{"role": "tool", "content": "x"}]}, r"recent_messages\[0\]"),
        ({"retrieved_blocks": [{"items": ["x"]}]}, "retrieved block 0"),
        ({"retrieved_blocks": [RetrievedBlock("【甲】", [3])]}, r"retrieved block 0 \(【甲】\) item 0"),
    ],
)
def test_bad_input_is_a_value_error_naming_it(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        assemble(**overrides)


@pytest.mark.parametrize("name", ["head", "middle", "retrieved", "tail", "max_turns", "chars_per_token"])
def test_a_bad_budget_is_a_value_error_naming_it(name: str) -> None:
    with pytest.raises(ValueError, match=f"RegionBudgets.{name}"):
        RegionBudgets(**{name: 0})
