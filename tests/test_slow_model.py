"""Turns that fit a slow local model (issue 30), with the real ChatOpenAI client against the stub's slow CPU server
(tests/openai_stub.py `SlowServer`: one request at a time, a prompt cache reusing the longest common prefix with
the previous request, a request cancelled when its client closes the connection). The speeds are the test's, far
above a real CPU model's: what is checked is what the server had to evaluate and what it cancelled, not time."""

from __future__ import annotations

import pytest
from openai_stub import OpenAIStub, SlowServer, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context

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
