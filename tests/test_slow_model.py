"""Turns that fit a slow local model (issue 30), with the real ChatOpenAI client against the stub's slow CPU server
(tests/openai_stub.py `SlowServer`: one request at a time, a prompt cache reusing the longest common prefix with
the previous request, a request cancelled when its client closes the connection). The speeds are the test's, far
above a real CPU model's: what is checked is what the server had to evaluate and what it cancelled, not time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import pytest
from openai_stub import OpenAIStub, SlowServer, StubReply, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.llm import busy_seconds, get_chat_model, measured_speed, stream_answer
from personalab.nodes.rules.curation import recall_window_turns
from personalab.nodes.rules.deadline import (
    ModelSpeed,
    next_reply_tokens,
    prompt_tokens_over,
    reply_tokens_within,
    whole_sentences,
)
from personalab.stores.memory import MemoryStore
from personalab.stores.model_servers import KeptServers, read_kept_servers

MESSAGES = ["雷娜，我们从哪里开始？", "去据点看看。", "那里安全吗？", "你还记得那次冲突吗？", "继续前进。"]


def play(url: str, instance: int, messages: list[str]) -> list[dict]:
    with turn_graph(Context(database_url=url)) as (graph, ctx):
        return [run_turn(graph, ctx, instance, message) for message in messages]


def test_a_slow_model_gets_rules_for_the_rewrite_and_its_prompt_cache_reuses_the_stable_prefix(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the rewrite's share is 1.2 s of 8; at 300 prompt tokens/s and 50 answer tokens/s its request takes longer
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "8")
    openai_stub.slow = SlowServer(prompt_per_s=300, gen_per_s=50)
    states = play(sqlite_url, create_sample_instance(sqlite_url), MESSAGES)
    assert [s["error"] for s in states] == [None] * len(MESSAGES)
    assert states[0]["debug"]["query_rewrite"]["status"] == "no dialogue before the input"
    for state in states[1:]:
        status = state["debug"]["query_rewrite"]["status"]
        assert status.startswith("rules (the model is slow: about") and "over the rewrite's 1.2 s" in status
    # the short follow-up question carries the previous user line into retrieval
    assert states[2]["query"] == "去据点看看。 那里安全吗？"
    log = openai_stub.slow.log
    assert [r.purpose for r in log] == ["reply"] * len(MESSAGES), "only the replies reached the server"
    # from the second turn on, the server re-evaluates only what changed: the new exchange, memories, the input
    assert openai_stub.slow.reuse(from_turn=1) >= 0.7
    server = states[-1]["debug"]["server"]
    assert server["cached_tokens"] == log[-1].cached > 0 and server["prompt_tokens"] == log[-1].prompt_tokens


def test_rewrite_and_reply_taking_turns_leave_the_reply_nothing_to_reuse(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # why the slow model's rewrite is skipped rather than run: a one-slot cache holds the last request's prompt,
    # and the rewrite's shares next to nothing with the reply's
    monkeypatch.setenv("PERSONALAB_QUERY_REWRITE", "model")
    openai_stub.slow = SlowServer(prompt_per_s=5000, gen_per_s=500)
    states = play(sqlite_url, create_sample_instance(sqlite_url), MESSAGES[:3])
    assert [s["error"] for s in states] == [None] * 3
    assert [r.purpose for r in openai_stub.slow.log] == ["reply", "query_rewrite", "reply", "query_rewrite", "reply"]
    assert openai_stub.slow.reuse(from_turn=1) < 0.1
    assert states[1]["debug"]["query_rewrite"]["server"]["prompt_tokens"] > 0


def test_rules_rewrite_setting_never_asks_the_model(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_QUERY_REWRITE", "rules")
    openai_stub.slow = SlowServer(prompt_per_s=5000, gen_per_s=500)
    states = play(sqlite_url, create_sample_instance(sqlite_url), MESSAGES[:2])
    assert states[1]["debug"]["query_rewrite"]["status"] == "rules (PERSONALAB_QUERY_REWRITE=rules)"
    assert [r.purpose for r in openai_stub.slow.log] == ["reply", "reply"]


def test_a_rewrite_past_its_share_is_cancelled_at_the_server_before_the_reply_starts(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the rewrite runs on a slow model of the same one-request server (its ~350-token prompt: 7 s at 50 tokens/s,
    # over its 1.5 s share); the reply's model is fast. The abandoned rewrite must not hold the server.
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "10")
    monkeypatch.setenv("PERSONALAB_QUERY_REWRITE", "model")
    monkeypatch.setenv("PERSONALAB_MODEL_QUERY_REWRITE", "slow-rewriter")
    openai_stub.slow = SlowServer(prompt_per_s=5000, gen_per_s=500, per_model={"slow-rewriter": (50, 5)})
    states = play(sqlite_url, create_sample_instance(sqlite_url), MESSAGES[:2])
    assert [s["error"] for s in states] == [None, None]
    assert "model error" in states[1]["debug"]["query_rewrite"]["status"]
    first, rewrite, reply = openai_stub.slow.log
    assert (first.purpose, rewrite.purpose, reply.purpose) == ("reply", "query_rewrite", "reply")
    assert rewrite.cancelled == "prompt" and rewrite.evaluated < rewrite.prompt_tokens
    assert reply.cancelled == "" and reply.started >= rewrite.ended, "the reply ran after the cancelled rewrite"
    assert openai_stub.answered == 2


def test_after_a_rewrite_that_found_no_answer_in_its_share_the_rules_take_over(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # auto: no speed measured yet (the replies reuse the cache, too few tokens evaluated to time), so the first
    # rewrite is asked; it times out, and that is the measure: the next turns do not ask again
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "10")
    monkeypatch.setenv("PERSONALAB_MODEL_QUERY_REWRITE", "slow-rewriter")
    openai_stub.slow = SlowServer(prompt_per_s=5000, gen_per_s=500, per_model={"slow-rewriter": (50, 5)})
    states = play(sqlite_url, create_sample_instance(sqlite_url), MESSAGES[:4])
    assert [s["error"] for s in states] == [None] * 4
    statuses = [s["debug"]["query_rewrite"]["status"] for s in states[1:]]
    assert statuses[0].startswith("model error") and all(s.startswith("rules (the model is slow") for s in statuses[1:])
    assert [r.purpose for r in openai_stub.slow.log].count("query_rewrite") == 1


# --- a server that reports no usage, a prompt that would not fit what is left (llama-cpp-python's server) ---------

PLACES = ["北门", "粮仓", "水井", "钟楼", "马厩", "铁匠铺", "酒馆", "河边", "城墙", "地窖", "集市", "神庙"]
PREY = ["老鼠", "麻雀", "蜥蜴", "鱼", "蝙蝠", "蛇", "青蛙", "蟋蟀", "甲虫", "兔子"]
WEATHER = ["下雨", "刮风", "下雪", "晴天", "起雾"]


def instance_with_cat_memories(url: str, count: int = 30) -> int:
    """The sample instance with `count` distinct memories a question about the cat retrieves (a long memory block)."""
    instance = create_sample_instance(url)
    store = MemoryStore(db_url=url)
    for n in range(count):
        fact = f"雷娜的黑猫在{PLACES[n % 12]}抓到过{PREY[n % 10]}，那天{WEATHER[n % 5]}，守卫{n}号看见了"
        store.add_memory(instance, fact, importance=0.5, turn=0)
    return instance


def cat_instance_with_speed_measured(url: str, stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> int:
    """`instance_with_cat_memories` played one turn on the stub's slow server (300 / 100 tokens a second, no usage
    reported) with the rewrite by rules: 30 s for the first prompt, evaluated whole, so the model's speed is timed."""
    monkeypatch.setenv("PERSONALAB_QUERY_REWRITE", "rules")
    stub.slow = SlowServer(prompt_per_s=300, gen_per_s=100, reports_usage=False)
    instance = instance_with_cat_memories(url)
    play(url, instance, ["雷娜，我们从哪里开始？"])
    return instance


def test_a_server_that_reports_no_usage_is_timed_with_the_engines_own_counts(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama-cpp-python's server streams no usage: the engine counts the prompt, what the server's cache holds of it
    # (the last prompt sent) and the answer, so the slow model is measured and its rewrite done by rules
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "8")
    openai_stub.slow = SlowServer(prompt_per_s=300, gen_per_s=50, reports_usage=False)
    states = play(sqlite_url, create_sample_instance(sqlite_url), MESSAGES[:3])
    assert [s["error"] for s in states] == [None] * 3
    assert all(s["debug"]["query_rewrite"]["status"].startswith("rules (the model is slow") for s in states[1:])
    log = openai_stub.slow.log
    assert [r.purpose for r in log] == ["reply"] * 3
    server = states[-1]["debug"]["server"]
    assert server["counted_by"].startswith("engine")
    # the engine's estimate of the reuse is the server's, within the counters' difference (markers, rounding)
    assert abs(server["cached_tokens"] - log[-1].cached) <= 0.1 * log[-1].prompt_tokens
    assert abs(server["prompt_tokens"] - log[-1].prompt_tokens) <= 0.1 * log[-1].prompt_tokens


def test_a_memory_block_too_long_for_what_is_left_gives_way_instead_of_the_turn_being_cut(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = cat_instance_with_speed_measured(sqlite_url, openai_stub, monkeypatch)
    # 2.5 s: the ~780 new tokens of a question about the cat (the exchange, 25 memories, the tail) take ~2.6 s at
    # 300 tokens/s; the memory block gives up its lowest-ranked items so that the rest fits
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "2.5")
    (state,) = play(sqlite_url, instance, ["你的黑猫最近抓到什么了吗？"])
    assert state["error"] is None, state["error"]
    fitted = state["debug"]["slow_model"]
    assert fitted["reason"].startswith("about ") and "over 85% of the" in fitted["reason"]
    assert 1 <= fitted["items_kept"]["after"] < fitted["items_kept"]["before"]
    assert fitted["retrieved_tokens"]["after"] < fitted["retrieved_tokens"]["before"]
    notes = state["debug"]["prompt"]["window"]["notes"]
    assert any(note.startswith("retrieved budget") and "slow model" in note for note in notes)
    sent = openai_stub.slow.log[-1]
    assert sent.cancelled == "" and sent.written > 0


def test_the_turn_after_a_cut_counts_the_prompt_the_server_is_still_reading(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama-cpp-python evaluates a given-up prompt to its end before it takes the next request: the next turn's
    # reply waits for it, and its prompt is fitted to what is left after that wait
    monkeypatch.setenv("PERSONALAB_QUERY_REWRITE", "rules")
    openai_stub.slow = SlowServer(prompt_per_s=300, gen_per_s=100, reports_usage=False, evaluates_abandoned=True)
    instance = instance_with_cat_memories(sqlite_url)
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        run_turn(graph, ctx, instance, "雷娜，我们从哪里开始？")
        # a long line: even without memories its prompt takes the server ~1.5 s, past the 0.3 s deadline
        cut = run_turn(graph, replace(ctx, turn_deadline_s=0.3), instance, "你的黑猫呢？" + "我一直在想这件事，" * 40)
        assert cut["error"] and "turn deadline" in cut["error"]
        state = run_turn(graph, replace(ctx, turn_deadline_s=4), instance, "它在粮仓抓到过什么？")
    assert state["error"] is None, state["error"]
    assert state["debug"]["slow_model"]["server_busy_s"] > 0
    abandoned, answered = openai_stub.slow.log[-2:]
    assert abandoned.cancelled == "prompt" and answered.started >= abandoned.ended, "the reply waited for it"


def test_the_new_tokens_over_what_is_left_are_what_the_reply_cannot_read_in_time() -> None:
    speed = ModelSpeed(prompt_per_s=50, gen_per_s=5, reply_tokens=40)
    # 30 s left: 85 % is 25.5 s, of which a usual reply's 40 tokens take 8 s; 17.5 s read 875 tokens
    assert prompt_tokens_over(speed, 800, speed.usual_reply_tokens(256), 30) == 0
    assert prompt_tokens_over(speed, 1000, speed.usual_reply_tokens(256), 30) == 125
    assert prompt_tokens_over(speed, 1000, 40, 5) == 1000, "no time to read anything: every new token is over"
    # until a reply was counted, a quarter of the cap; the running mean moves towards each new reply
    assert ModelSpeed(prompt_per_s=50).usual_reply_tokens(256) == 64
    assert next_reply_tokens(None, 30) == 30 and next_reply_tokens(30, 130) == 60


LONG_LINES = [f"第{n}件事：我们沿着河岸走到第{n}座桥，桥下的水很急，你还记得那里的石头吗？" for n in range(1, 9)]


def long_dialogue_on_slow_server(
    url: str, stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, list[dict[str, Any]]]:
    """An instance that played `LONG_LINES` on a slow server reporting no usage (llama-cpp-python's), the window's
    start moving every turn (6 turns, step 1), the rewrite by rules and no maintenance: (instance, its states)."""
    monkeypatch.setenv("PERSONALAB_QUERY_REWRITE", "rules")
    monkeypatch.setenv("PERSONALAB_RECALL_TURNS", "6")
    monkeypatch.setenv("PERSONALAB_RECALL_STEP", "1")
    monkeypatch.setenv("PERSONALAB_MAINTENANCE_EVERY", "100")
    stub.slow = SlowServer(prompt_per_s=300, gen_per_s=100, reports_usage=False)
    instance = create_sample_instance(url)
    played = play(url, instance, LONG_LINES)
    assert [s["error"] for s in played] == [None] * len(LONG_LINES)
    return instance, played


def test_a_dialogue_read_again_gives_up_older_turns_and_the_next_turns_keep_its_start(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the window's start moves every turn (step 1), so the server reads the whole dialogue again each turn; with
    # too little time left the prompt keeps fewer, most recent turns instead of the turn being cut, and the turns
    # after it start their dialogue at the same turn, so the server's cache keeps it
    instance, played = long_dialogue_on_slow_server(sqlite_url, openai_stub, monkeypatch)
    assert "slow_model" not in played[-1]["debug"], "30 s is enough for the whole window"
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "1.6")
    fitted, after = play(sqlite_url, instance, ["那座桥后来怎么样了？", "我们再去一次吧。"])
    assert fitted["error"] is None, fitted["error"]
    turns = fitted["debug"]["slow_model"]["recall_turns"]
    assert turns["before"] == 6 and 2 <= turns["after"] < 6
    dialogue = [m["content"] for m in fitted["prompt"] if m["region"] == "middle"]
    assert not any("第3件事" in text for text in dialogue) and any("第8件事" in text for text in dialogue)
    # the next turn keeps the same first turn of dialogue (one more turn, not the regular window) and is not cut
    assert after["error"] is None, after["error"]
    assert "recall_turns" not in after["debug"].get("slow_model", {})
    second = [r for r in openai_stub.slow.log if r.purpose == "reply"][-1]
    assert second.cached >= 0.7 * second.prompt_tokens, "the dialogue's start stayed: its prompt mostly reused"


def test_a_floor_turn_starts_the_recall_window_until_the_regular_start_passes_it() -> None:
    # turns 11 to 20 kept (10, step 5); a fitted turn 21 kept 2 (floor 19): the window starts at 19 until turn 31
    assert recall_window_turns(21, 10, 5) == 10
    kept = [turn - recall_window_turns(turn, 10, 5, floor=19) for turn in range(21, 33)]
    assert kept == [19] * 10 + [21, 21]
    assert recall_window_turns(21, 10, 5, floor=0) == 10 and recall_window_turns(21, 10, 5, floor=25) == 10


def test_a_core_memory_rewrite_that_cannot_end_in_time_is_not_sent_so_the_next_reply_does_not_wait(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama-cpp-python evaluates a given-up prompt to its end: a rewrite sent and given up at the deadline would hold
    # the server's one slot into the next turn. With the speed measured and too little left, it is not sent.
    monkeypatch.setenv("PERSONALAB_QUERY_REWRITE", "rules")
    monkeypatch.setenv("PERSONALAB_MAINTENANCE_EVERY", "3")
    openai_stub.slow = SlowServer(prompt_per_s=300, gen_per_s=100, reports_usage=False, evaluates_abandoned=True)
    instance = create_sample_instance(sqlite_url)
    first, second = play(sqlite_url, instance, MESSAGES[:2])
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "3")
    third, fourth = play(sqlite_url, instance, MESSAGES[2:4])
    assert [s["error"] for s in (first, second, third, fourth)] == [None] * 4
    maintenance = third["debug"]["maintenance"]
    assert maintenance["status"] == "not asked, core memory kept"
    assert (
        maintenance["reason"].startswith("the model is slow: about")
        and "PERSONALAB_MODEL_CORE_MEMORY" in maintenance["reason"]
    )
    assert third["core_memory"] == second["core_memory"]
    assert "core_memory" not in [r.purpose for r in openai_stub.slow.log], "never sent"
    assert fourth["debug"].get("slow_model", {}).get("server_busy_s", 0) == 0, "the next reply found the server free"


def test_a_request_its_client_gave_up_before_any_chunk_counts_as_still_read_by_the_server(
    openai_stub: OpenAIStub,
) -> None:
    # a core-memory rewrite whose prompt outlasts the client's timeout raises openai's timeout, not the deadline's
    # TimeoutError; llama-cpp-python reads that prompt to its end all the same, and the next reply waits for it
    openai_stub.slow = SlowServer(prompt_per_s=300, gen_per_s=100, reports_usage=False, evaluates_abandoned=True)

    def count(text: str) -> int:
        return round(len(text) / openai_stub.chars_per_token)

    stream_answer(get_chat_model(), [{"role": "user", "content": "你好，" * 100}], None, count)  # timed: 300/s
    model = get_chat_model("core_memory", until=time.time() + 0.5)
    long_prompt = [{"role": "user", "content": "我们从头说起吧，" * 120}]  # ~640 new tokens: ~2 s at 300/s
    with pytest.raises(openai.APITimeoutError):
        stream_answer(model, long_prompt, None, count)
    assert busy_seconds(model) > 0.8, "the server is expected to read the given-up prompt for about 1.5 s more"


def test_a_one_shot_cli_turn_knows_the_speed_and_the_cache_an_earlier_process_measured(
    sqlite_url: str, data_dir: Path, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each `personalab turn` is a new process: without what the earlier ones measured (kept in the data dir), its
    # reply would be sent unfitted, as if the server were fast and its cache empty, and cut at the deadline (and
    # its query rewrite asked of the slow model)
    openai_stub.slow = SlowServer(prompt_per_s=150, gen_per_s=100, reports_usage=False)
    instance = instance_with_cat_memories(sqlite_url)
    env = {**os.environ, "PERSONALAB_DATABASE_URL": sqlite_url}
    exe = str(Path(sys.executable).with_name("personalab"))

    def turn(message: str, deadline: str) -> dict[str, Any]:
        done = subprocess.run(
            [exe, "turn", "--instance", str(instance), "--json", message],
            capture_output=True,
            text=True,
            env={**env, "PERSONALAB_TURN_DEADLINE": deadline},
            timeout=120,
        )
        return json.loads(done.stdout)

    first = turn("雷娜，我们从哪里开始？", "30")  # its whole prompt evaluated: the speed is measured
    assert first["error"] is None, first["error"]
    assert (data_dir / "cache" / "model_servers.json").is_file()
    # ~780 new tokens about the cat take ~5 s at 150 tokens/s: over the 4 s, so the memory block gives way
    second = turn("你的黑猫最近抓到什么了吗？", "4")
    assert second["error"] is None, second["error"]
    fitted = second["debug"]["slow_model"]
    assert fitted["retrieved_tokens"]["after"] < fitted["retrieved_tokens"]["before"]
    assert second["debug"]["query_rewrite"]["status"].startswith("rules (the model is slow")
    replies = [r for r in openai_stub.slow.log if r.purpose == "reply"]
    assert len(replies) == 2 and replies[-1].cancelled == "" and replies[-1].cached > 0


def test_a_damaged_kept_state_is_read_as_knowing_nothing_and_replaced(
    data_dir: Path, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = data_dir / "cache" / "model_servers.json"
    kept.parent.mkdir(parents=True)
    kept.write_text('{"speeds": [{"server": "x", "prompt_per_s": -1}]', encoding="utf-8")  # cut off mid-write
    assert read_kept_servers(kept) == KeptServers()
    openai_stub.slow = SlowServer(prompt_per_s=300, gen_per_s=100, reports_usage=False)
    monkeypatch.setattr("personalab.nodes.llm.KEEP_SERVER_STATE", True)
    monkeypatch.setattr("personalab.nodes.llm._kept_loaded", False)
    stream_answer(get_chat_model(), [{"role": "user", "content": "你好，" * 100}], None, lambda text: len(text))
    (speed,) = [s for s in read_kept_servers(kept).speeds if s.server == openai_stub.base_url]
    assert speed.prompt_per_s > 0


def test_a_reply_cut_after_its_first_chunk_still_measures_the_speed_the_next_turns_plan_with(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a speed measured too fast (the server slowed down, or it reused more of its cache than the engine knew) made
    # every later turn plan too much and be cut, and a cut turn measured nothing: the speed was never corrected
    instance = cat_instance_with_speed_measured(sqlite_url, openai_stub, monkeypatch)
    assert measured_speed("reply").prompt_per_s > 200  # type: ignore[union-attr]
    openai_stub.slow.prompt_per_s, openai_stub.slow.gen_per_s = 180, 2  # the machine got busy
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "8")
    (cut,) = play(sqlite_url, instance, ["去据点看看。"])
    assert cut["error"] and "turn deadline" in cut["error"] and cut["debug"]["deadline"]["cut_after_chars"] > 0
    assert measured_speed("reply").prompt_per_s < 240  # type: ignore[union-attr]


def test_a_fitted_turn_cut_at_the_deadline_is_tried_again_on_the_prompt_the_server_read(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a cut keeps the user's line and not the turn: the next line is the same turn, fitted again on a speed the cut
    # lowered. Fitted anew, its dialogue started elsewhere, the server read it all again and it was cut again (five
    # tries of one turn with the 1.5B model); the cut prompt's start is in the server's cache, and the retry keeps it
    instance, _ = long_dialogue_on_slow_server(sqlite_url, openai_stub, monkeypatch)
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "1.6")
    openai_stub.slow.gen_per_s = 8  # the reply streams too slowly to end in time
    (cut,) = play(sqlite_url, instance, ["那座桥后来怎么样了？"])
    assert cut["error"] and "turn deadline" in cut["error"]
    cut_turns = cut["debug"]["slow_model"]["recall_turns"]
    openai_stub.slow.gen_per_s = 100
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "3")  # the cut's slower speed: the retry must be fitted too
    (retry,) = play(sqlite_url, instance, ["你怎么不说话了？"])
    assert retry["error"] is None, retry["error"]
    assert retry["debug"]["slow_model"]["recall_turns"]["after"] == cut_turns["after"]
    retried = [r for r in openai_stub.slow.log if r.purpose == "reply"][-1]
    assert retried.cached >= 0.8 * retried.prompt_tokens, "the retry read its dialogue again"


def test_a_reply_cut_at_the_deadline_raises_the_usual_reply_size_the_next_turns_plan_with(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the usual reply size was the mean of the stored replies only: a long reply cut at the deadline left it short,
    # and the same turn tried again planned for a short reply and was cut again (three times, the 1.5B model)
    instance = cat_instance_with_speed_measured(sqlite_url, openai_stub, monkeypatch)
    before = measured_speed("reply").reply_tokens  # type: ignore[union-attr]
    assert before is not None
    openai_stub.slow.gen_per_s = 20
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "6")
    openai_stub.queue_for("reply", StubReply("【平静】" + "我们沿着河岸一直走，直到看见那座旧灯塔。" * 8, chunk=4))
    (cut,) = play(sqlite_url, instance, ["去据点看看。"])
    assert cut["error"] and "turn deadline" in cut["error"]
    written = cut["debug"]["deadline"]["cut_after_chars"]
    assert written > 2 * before
    raised = measured_speed("reply").reply_tokens  # type: ignore[union-attr]
    assert raised is not None and raised > before


def test_a_reply_longer_than_the_time_left_ends_at_a_cap_and_is_kept_in_whole_sentences(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the 1.5B model: a prompt fitted to the deadline, then a reply twice the usual length, cut at the deadline with
    # ~100 characters streamed — and a cut turn stores nothing, so the user's line stood unanswered (18 of 61 turns)
    instance = cat_instance_with_speed_measured(sqlite_url, openai_stub, monkeypatch)
    usual = measured_speed("reply").reply_tokens  # type: ignore[union-attr]
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "6")
    long_reply = "【平静】" + "我们沿着河岸一直走，直到看见那座旧灯塔。" * 30
    openai_stub.queue_for("reply", StubReply(long_reply, chunk=4))
    (kept,) = play(sqlite_url, instance, ["去据点看看。"])
    assert kept["error"] is None, kept["error"]
    sent = [r for r in openai_stub.requests if "〔PersonaLab任务：reply〕" in r["messages"][0]["content"]][-1]
    cap = sent["max_tokens"]
    assert sent["max_completion_tokens"] == cap and 16 <= cap < 256  # both names, under PERSONALAB_MAX_REPLY_TOKENS
    assert (
        kept["debug"]["finish_reason"] == "length"
        and f"about {cap} reply tokens" in kept["debug"]["reply_cut"]["reason"]
    )
    reply = kept["reply"]
    assert reply.endswith("灯塔。") and len(reply) <= cap  # its whole sentences, none cut in the middle
    # the capped reply was at least that long: the usual size the next fits plan with rises (never falls)
    assert usual is not None and measured_speed("reply").reply_tokens > usual  # type: ignore[union-attr]
    # the next turn's dialogue shows what was stored
    (after,) = play(sqlite_url, instance, ["然后呢？"])
    assert after["error"] is None and any(reply[-8:] in m["content"] for m in after["prompt"])


def test_a_reply_the_time_left_holds_keeps_the_configured_cap() -> None:
    fast = ModelSpeed(prompt_per_s=4500, gen_per_s=500)
    assert reply_tokens_within(fast, 800, 29.9, 256) is None  # nothing changes on a fast server
    slow = ModelSpeed(prompt_per_s=45, gen_per_s=5.2)
    assert reply_tokens_within(slow, 807, 29.9, 256) == 38  # (29.9 × .85 − 807 / 45) s × 5.2 tokens/s
    assert reply_tokens_within(slow, 1500, 29.9, 256) == 16  # never fewer than the floor
    assert whole_sentences("【担心】手有点冻僵了。我随口") == "【担心】手有点冻僵了。"
    assert whole_sentences("【担心】没事吧") == "【担心】没事吧"  # no sentence end: kept as it is
    assert whole_sentences("【平静】“快走！”她说着转") == "【平静】“快走！”"
    assert whole_sentences("I see. The road is long and") == "I see. The road is long and"  # the end too early
