"""Retrieved memory that stays where it was shown (issue 30, `PERSONALAB_MEMORY_STAYS`, nodes/rules/shown_memory.py):
a turn's retrieved region stays in the next turns' prompts before that turn's line, so a local server's prompt cache
reads only the new exchange and the new memories; a later turn shows only what no staying region shows. Checked on
the rules, on the assembled prompt, and on what the real ChatOpenAI client sends to the stub's slow server (its
prompt cache reuses the longest common prefix with the previous request)."""

from __future__ import annotations

from typing import Any

import pytest
from openai_stub import OpenAIStub, SlowServer, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.evals.play import repeated_lines
from personalab.graph.runner import create_sample_instance
from personalab.nodes.context import Context
from personalab.nodes.rules.injection import memory_line, time_ago
from personalab.nodes.rules.plot import new_plot_state
from personalab.nodes.rules.prompt_assembly import RegionBudgets, RetrievedBlock, assemble_prompt
from personalab.nodes.rules.shown_memory import not_shown, staying_memory, stretch_after
from personalab.nodes.rules.types import ShownMemory
from turn_helpers import play_turns, reply_requests

FACT = "记住，我的暗号是青鸟落在第七根旗杆上。"
MESSAGES = [
    FACT,
    "我妹妹叫林小满，最爱吃糖葫芦。",
    "今天风好大，我们去看看水井。",
    "那边的车队什么时候出发？",
    "我的暗号是什么来着？青鸟落在哪里？",
    "先休息一下吧，林小满在哪里？",
    "我们继续往前走。",
    "水井边上有人吗？",
    "你还记得我妹妹爱吃什么吗？",
    "天快黑了。",
]


def region(turn: int, first_turn: int = 1, keys: list[str] | None = None) -> ShownMemory:
    return {"turn": turn, "first_turn": first_turn, "text": f"region of turn {turn}", "keys": keys or []}


def test_a_stretch_stays_for_fewer_than_n_turns_then_a_fresh_region_starts() -> None:
    shown = [region(5), region(4)]
    assert [r["turn"] for r in staying_memory(shown, turn=6, stays=3)] == [4, 5]  # oldest first
    assert staying_memory(shown, turn=7, stays=3) == []  # turns 4-6 held: turn 7 starts a new stretch
    assert staying_memory(shown, turn=6, stays=1) == [] and staying_memory(shown, turn=6, stays=0) == []
    # a region of this turn or a later one (a rewind whose stored state is ahead) never stays
    assert staying_memory([region(6)], turn=6, stays=5) == []
    after = stretch_after([region(4)], turn=5, first_turn=1, region="new", items=["- 莱姆：青鸟（1 轮前）"])
    assert [r["turn"] for r in after] == [4, 5] and after[-1]["keys"] == ["- 莱姆：青鸟（）"]
    assert stretch_after([region(4)], turn=5, first_turn=1, region=None, items=[]) == [region(4)]


@pytest.mark.parametrize("language", ["zh", "en"])
def test_a_memory_shown_before_is_the_same_memory_when_its_time_has_moved_on(language: str) -> None:
    content = "I have 3 apples" if language == "en" else "我有3个苹果"
    earlier = memory_line(content, time_ago(3, 200_000, language), language)
    now = memory_line(content, time_ago(4, 290_000, language), language)
    changed = memory_line(content.replace("3", "5"), time_ago(4, None, language), language)
    staying = stretch_after([], turn=3, first_turn=1, region="r", items=[earlier])
    blocks = not_shown([RetrievedBlock("=== 相关记忆 ===", [now, changed])], staying)
    # the same memory is not shown again; a changed number is another memory, shown
    assert blocks[0].items == [changed]


def dialogue(turns: int) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = []
    for number in range(1, turns + 1):
        messages += [{"role": "user", "content": f"第{number}句"}, {"role": "assistant", "content": f"回答{number}"}]
    return messages


def assemble(turns: int, staying: dict[int, str], middle: int = 28000) -> Any:
    return assemble_prompt(
        system_instruction="你是雷娜。",
        core_memory={"name": "雷娜"},
        plot_state=new_plot_state(["出发"]),
        relationship=None,
        world_setting="",
        recent_messages=dialogue(turns),
        retrieved_blocks=[RetrievedBlock("=== 相关记忆 ===", ["- 新的记忆"])],
        user_input="继续",
        budgets=RegionBudgets(middle=middle, max_turns=20),
        staying_memory=staying,
    )


def test_a_staying_region_stands_before_its_turns_line_and_goes_with_that_turn() -> None:
    prompt = assemble(3, {1: "region of turn 3", 2: "region of turn 2"})
    contents = [m["content"] for m in prompt.messages]
    assert contents.index("region of turn 2") + 1 == contents.index("第2句")
    assert contents.index("region of turn 3") + 1 == contents.index("第3句")
    regions = dict(zip(contents, prompt.regions, strict=True))
    assert regions["region of turn 2"] == regions["region of turn 3"] == "retrieved"
    assert regions["第2句"] == "middle" and prompt.regions[-2] == "retrieved"  # this turn's own region after it
    assert prompt.retrieved_items == ["- 新的记忆"]
    assert prompt.debug["retrieved"]["staying_tokens"] > 0
    # the middle's budget drops the oldest turns with their regions: no region without its turn
    short = assemble(3, {1: "region of turn 3", 2: "region of turn 2"}, middle=prompt.debug["middle"]["tokens"] // 2)
    kept = [m["content"] for m in short.messages]
    assert "第2句" not in kept and "region of turn 2" not in kept and "region of turn 3" in kept


def play(url: str, instance: int, messages: list[str], stays: int) -> list[dict[str, Any]]:
    ctx = Context(
        database_url=url, recall_turns=2, recall_step=3, memory_stays=stays, query_rewrite="rules", rag_timeout_s=30.0
    )
    return play_turns(ctx, instance, messages, user_name="莱姆")


def reply_prompts(stub: OpenAIStub) -> list[list[dict[str, str]]]:
    return [r["messages"] for r in reply_requests(stub)]


def retrieved_texts(state: dict[str, Any]) -> list[str]:
    return [m["content"] for m in state["prompt"] if m["region"] == "retrieved"]


def test_the_next_prompt_begins_with_the_last_one_up_to_its_memory_region(
    sqlite_url: str, openai_stub: OpenAIStub
) -> None:
    instance = create_sample_instance(sqlite_url)
    states = play(sqlite_url, instance, MESSAGES, stays=3)
    assert [s["error"] for s in states] == [None] * len(MESSAGES)
    requests = reply_prompts(openai_stub)
    continued = 0
    for number in range(1, len(states)):
        staying = states[number]["debug"]["prompt"]["retrieved"]["staying"]
        shown_before = {r["turn"] for r in states[number - 1]["shown_memory"]}
        if number not in staying["turns"] or number not in shown_before:  # turn `number` showed no region that stays
            continue
        continued += 1
        before, after = requests[number - 1], requests[number]
        own = max(i for i, m in enumerate(before) if m["role"] == "system" and m["content"].startswith("以下是"))
        # the server's cache holds the last prompt up to its memory region; then comes that turn's line
        assert after[: own + 1] == before[: own + 1], f"turn {number + 1} reads turn {number}'s prompt again"
        assert after[own + 1] == {"role": "user", "content": MESSAGES[number - 1]}
    assert continued >= 2, "the play never continued a stretch"
    for state in states:
        # each memory once in a stretch: the turn's own region shows nothing a staying region shows
        keys = [key for region in state["shown_memory"] for key in region["keys"]]
        assert len(keys) == len(set(keys)), state["turn"]
        # nor a line of the dialogue a staying region's memory holds (the same exchange in another memory's window)
        assert repeated_lines(state["prompt"], MESSAGES) == [], state["turn"]
        assert len(state["shown_memory"]) <= 3
    dropped = [s["debug"]["prompt"]["retrieved"]["staying"].get("dropped") for s in states]
    assert any(reason and "held 3 turns" in reason for reason in dropped), dropped
    assert any(reason and "first turn moved" in reason for reason in dropped), dropped


def test_the_stretch_is_kept_with_the_story_for_the_next_process(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    instance = create_sample_instance(sqlite_url)
    second = play(sqlite_url, instance, MESSAGES[:2], stays=3)[1]
    assert [r["turn"] for r in second["shown_memory"]] == [2]
    third = play(sqlite_url, instance, MESSAGES[2:3], stays=3)[0]  # a new graph: the stored story, no process cache
    assert third["debug"]["prompt"]["retrieved"]["staying"]["turns"] == [2]
    before, after = reply_prompts(openai_stub)[1:3]
    own = max(i for i, m in enumerate(before) if m["role"] == "system" and m["content"].startswith("以下是"))
    assert after[: own + 1] == before[: own + 1]


def test_with_memory_staying_the_slow_server_reads_less_of_each_prompt(
    sqlite_url: str, openai_stub: OpenAIStub
) -> None:
    reuse = {}
    for stays in (0, 3):
        openai_stub.slow = SlowServer(prompt_per_s=5000, gen_per_s=2000)
        states = play(sqlite_url, create_sample_instance(sqlite_url), MESSAGES, stays)
        assert [s["error"] for s in states] == [None] * len(MESSAGES)
        # the fact of turn 1 reaches the prompt when asked again at turn 5 (its dialogue or memory)
        assert "第七根旗杆" in "\n".join(m["content"] for m in states[4]["prompt"][:-1])
        reuse[stays] = openai_stub.slow.reuse(from_turn=1)
    assert reuse[3] > reuse[0] + 0.02, reuse
