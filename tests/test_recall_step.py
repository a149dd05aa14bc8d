"""`PERSONALAB_RECALL_STEP` (issue 30): the recent dialogue's first turn moves `step` turns at a time, so a local
model server's prompt cache (which reuses a prompt up to its first change) keeps the dialogue between two moves.
Checked on what the real ChatOpenAI client sends to the stub server, and on the retrieved region agreeing with
the window (each exchange once, issue 26)."""

from __future__ import annotations

from typing import Any

import pytest
from openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.runner import create_sample_instance
from personalab.nodes.context import Context, most_recall_turns
from personalab.nodes.rules.curation import recall_window_turns
from turn_helpers import play_turns, reply_requests


def test_the_window_start_moves_step_turns_at_a_time() -> None:
    # step 1: always the last 3 turns
    assert [recall_window_turns(turn, 3) for turn in range(1, 10)] == [3] * 9
    # step 3: 3 to 5 turns; the first kept turn (turn - kept) is 1, 1, 1, 1, 1, 1, 4, 4, 4, 7
    kept = [recall_window_turns(turn, 3, 3) for turn in range(1, 11)]
    assert kept == [3, 3, 3, 3, 4, 5, 3, 4, 5, 3]
    assert [max(1, turn - k) for turn, k in zip(range(1, 11), kept, strict=True)] == [1, 1, 1, 1, 1, 1, 4, 4, 4, 7]
    assert most_recall_turns(Context(recall_turns=3, recall_step=3)) == 5
    assert most_recall_turns(Context(recall_turns=3, recall_step=1)) == 3


def play(url: str, instance: int, messages: list[str], step: int) -> list[dict[str, Any]]:
    ctx = Context(database_url=url, recall_turns=3, recall_step=step, rag_timeout_s=30.0)
    return play_turns(ctx, instance, messages, user_name="莱姆")


def first_dialogue_line(request: dict[str, Any]) -> str:
    """The first user message of the prompt's recent dialogue (the middle region; the last message is the input)."""
    users = [m["content"] for m in request["messages"][:-1] if m["role"] == "user"]
    return users[0] if users else ""


@pytest.mark.parametrize(("step", "starts"), [(1, [1, 1, 1, 2, 3, 4, 5, 6]), (3, [1, 1, 1, 1, 1, 4, 4, 4])])
def test_the_prompts_dialogue_starts_at_the_same_line_between_moves(
    sqlite_url: str, openai_stub: OpenAIStub, step: int, starts: list[int]
) -> None:
    instance = create_sample_instance(sqlite_url)
    messages = [f"第{i}句：我们继续往前走。" for i in range(1, 10)]
    play(sqlite_url, instance, messages, step)
    firsts = [first_dialogue_line(r) for r in reply_requests(openai_stub)][1:]  # turns 2-9
    assert firsts == [f"第{n}句：我们继续往前走。" for n in starts]


def test_the_retrieved_region_leaves_out_what_the_longer_window_shows(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    """At turn 6 with step 3 the window holds turns 1-5: the fact of turn 1 is in the dialogue, not retrieved
    again; with step 1 (turns 3-5) it is retrieved."""
    fillers = ["今天风好大", "我们去看看水井", "那边有人吗", "先休息一下吧"]
    fact = "记住，我的暗号是青鸟落在第七根旗杆上"
    for step, in_dialogue in ((3, True), (1, False)):
        openai_stub.requests.clear()
        instance = create_sample_instance(sqlite_url)
        states = play(sqlite_url, instance, [fact, *fillers, "我的暗号是什么来着？青鸟落在哪里？"], step)
        assert states[-1]["turn"] == 6
        last = reply_requests(openai_stub)[-1]["messages"]
        dialogue = "\n".join(m["content"] for m in last[:-1] if m["role"] in ("user", "assistant"))
        retrieved = "\n".join(m["content"] for m in last if m["role"] == "system" and "=== " in m["content"])
        assert (fact in dialogue) is in_dialogue, (step, dialogue)
        assert ("青鸟落在第七根旗杆上" in retrieved) is not in_dialogue, (step, retrieved)
