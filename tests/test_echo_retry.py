"""A reply that only repeats the user's words (issue 30): held back while it streams, asked once more with a note after
the input, never shown nor stored (nodes/rules/echo.py, nodes/generate.py). With the real ChatOpenAI client against
the stub server (tests/openai_stub.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from openai_stub import OpenAIStub, SlowServer, StubReply, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.echo import REASON_OWN_LINE, EchoGuard, compared_text
from personalab.nodes.rules.prompt_catalog import catalog_for


def shown_by(guard: EchoGuard, chunks: list[str]) -> str:
    return "".join(guard.feed(chunk) for chunk in chunks) + guard.finish()


@pytest.mark.parametrize(
    ("said", "chunks"),
    [
        ("唉，风停了，安静得有点吓人。", ["【平", "静】唉，风停", "了，安静得有点吓人。"]),
        ("唉，风停了，安静得有点吓人。", ["【平静】唉，风停了，", "安静得有点吓人！(看向远方)<唉>"]),
        ("Where did I hide the spare fuel can?", ["【calm】Where did I", " hide the spare", " fuel can?"]),
        ("我妹妹叫什么名字？", ["【困惑】我妹妹叫什么名字？", "(停顿)"]),
        # the 1.5B model's habit: the input's opening filler dropped, its tail changed
        (
            "对了，天色暗下来了，我们歇一会儿吧。没什么别的意思。",
            ["【安心】天色暗下来了，", "我们歇一会儿吧。你呢？(低语)"],
        ),
        ("话说，我数了数，一共三十二级。我随口说说。", ["【紧张】我数了数，一共三十二级。你呢？(低语)"]),
        ("我以前在帮派里的代号是什么？", ["【疑惑】你以前在帮派里的代号是什么？"]),  # its question words kept
    ],
)
def test_a_reply_that_only_says_the_input_back_is_an_echo_and_never_shown(said: str, chunks: list[str]) -> None:
    guard = EchoGuard(said)
    assert shown_by(guard, chunks) == ""
    assert guard.echoed and not guard.kept


@pytest.mark.parametrize(
    ("said", "chunks"),
    [
        # the question quoted, then answered
        ("我妹妹叫什么名字？", ["【平静】我妹妹叫什么名字？", "你妹妹叫林小满，今年十二岁，最爱吃糖葫芦。"]),
        ("我妹妹叫什么名字？", ["【平静】她叫林小满。"]),
        ("Where did I hide the spare fuel can?", ["【calm】Where did you hide it? Under the blue tarp."]),
        ("好的", ["【平静】好的"]),  # too short to tell: many good replies say it back
        ("I love you", ["【happy】I love you too"]),  # most of the input, but a reply of its own
        ("跟你说件事，我妹妹叫林小满，今年十二岁。", ["【紧张】林小满？（停顿）你妹妹叫林小满，今年十二岁。"]),
        ("话说，要不要先把东西放下？", ["【担心】你小心点，把东西放下吧。"]),
        # the question's frame, its question word replaced by the answer (the 1.5B model's answer to a probe)
        ("我最害怕的是什么？", ["【紧张】我最害怕的是深水。"]),
        ("Who is my sister?", ["【calm】Your sister is Lily."]),
    ],
)
def test_a_reply_of_its_own_is_shown_whole(said: str, chunks: list[str]) -> None:
    guard = EchoGuard(said)
    assert shown_by(guard, chunks) == "".join(chunks)
    assert not guard.echoed


def test_a_reply_that_leaves_the_input_is_let_through_at_once_not_at_its_end() -> None:
    guard = EchoGuard("唉，风停了，安静得有点吓人。")
    assert guard.feed("【平静】唉，") == ""  # could still be an echo
    assert guard.feed("是啊，太安静了") == "【平静】唉，是啊，太安静了"
    assert guard.feed("。") == "。"


def test_a_long_input_is_not_watched_and_streams_at_once() -> None:
    guard = EchoGuard("这是一段很长的背景设定。" * 30)
    assert guard.feed("【平静】这是一段") == "【平静】这是一段"
    assert not guard.watching


def test_a_reply_is_held_only_until_it_has_a_third_of_the_inputs_length_of_its_own() -> None:
    guard = EchoGuard("我妹妹叫什么名字？")  # 8 compared characters: released past 2.67 of its own
    assert guard.feed("【平静】我妹妹叫什么名字？") == ""
    assert guard.feed("你妹") == ""
    assert guard.feed("妹叫林小满。") == "【平静】我妹妹叫什么名字？你妹妹叫林小满。"
    assert guard.finish() == "" and not guard.echoed


def test_with_no_time_for_a_second_reply_the_echo_is_kept_and_shown() -> None:
    guard = EchoGuard("唉，风停了，安静得有点吓人。", afford_retry=lambda _first: False)
    assert shown_by(guard, ["【平静】唉，风停了，安静得有点吓人。"]) == "【平静】唉，风停了，安静得有点吓人。"
    assert guard.echoed and guard.kept


def test_compared_text_is_the_line_without_its_groups_punctuation_or_case() -> None:
    assert compared_text("【平静】Hi, Lin!<hi>(waves)（笑）‹x› 好。") == "hilin好"
    assert compared_text("【平静】走吧(回头") == "走吧"  # an open group may still close


def test_the_note_is_in_the_instances_language() -> None:
    assert "不要复述" in catalog_for("zh").echo_note.format(role_name="雷娜")
    assert "do not repeat" in catalog_for("en").echo_note.format(role_name="Mara")
    # the second reply keeps the reply format: asked with a bare note, the 1.5B model dropped it in 7 of 12 (session 23)
    assert "【情绪】" in catalog_for("zh").echo_note and "【emotion】" in catalog_for("en").echo_note


ECHOED = "唉，风停了，安静得有点吓人。"
ANSWER = "【担心】别怕，我在这儿。据点就在前面了。"


def test_an_echoed_reply_is_asked_again_and_only_the_second_is_shown_and_stored(
    sqlite_url: str, openai_stub: OpenAIStub
) -> None:
    openai_stub.queue_for("reply", StubReply("【平静】" + ECHOED, chunk=2), StubReply(ANSWER, chunk=2))
    instance = create_sample_instance(sqlite_url)
    tokens: list[str] = []
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, ECHOED, on_token=tokens.append)
        assert state["error"] is None
        assert state["reply"] == ANSWER
        assert "".join(tokens) == ANSWER, "the echo never reached the reader"
        echo = state["debug"]["echo"]
        assert echo["status"] == "asked once more with the note after the input"
        assert echo["first_reply"] == "【平静】" + ECHOED
        replies = [r for r in openai_stub.requests if "〔PersonaLab任务：reply〕" in r["messages"][0]["content"]]
        assert len(replies) == 2
        first, second = replies
        # the same prompt, then the note after the input: the server's prompt cache holds all but the note
        assert second["messages"][:-1] == first["messages"]
        assert second["messages"][-1]["role"] == "system" and "不要复述" in second["messages"][-1]["content"]
        assert state["prompt"][-1]["content"] == second["messages"][-1]["content"]
        # the next turn's dialogue has the second reply, not the echo
        openai_stub.queue_for("reply", StubReply("【平静】走吧。", chunk=2))
        later = run_turn(graph, ctx, instance, "那我们出发吧，趁天还没黑。")
        dialogue = "\n".join(str(m["content"]) for m in openai_stub.requests[-1]["messages"])
        assert later["error"] is None and ANSWER.removeprefix("【担心】")[:6] in dialogue
        assert "【平静】" + ECHOED not in dialogue


def test_with_the_setting_off_the_echo_is_the_reply(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_ECHO_RETRY", "false")
    openai_stub.queue_for("reply", StubReply("【平静】" + ECHOED, chunk=2), StubReply(ANSWER, chunk=2))
    instance = create_sample_instance(sqlite_url)
    tokens: list[str] = []
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, ECHOED, on_token=tokens.append)
    assert state["reply"] == "【平静】" + ECHOED and "".join(tokens) == state["reply"]
    assert "echo" not in state["debug"]
    assert len([r for r in openai_stub.requests if "〔PersonaLab任务：reply〕" in r["messages"][0]["content"]]) == 1


def test_a_second_echo_is_kept_rather_than_asking_for_ever(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    openai_stub.queue_for("reply", StubReply("【平静】" + ECHOED, chunk=2), StubReply("【平静】" + ECHOED, chunk=3))
    instance = create_sample_instance(sqlite_url)
    tokens: list[str] = []
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, ECHOED, on_token=tokens.append)
    assert state["error"] is None and state["reply"] == "【平静】" + ECHOED and "".join(tokens) == state["reply"]
    assert len([r for r in openai_stub.requests if "〔PersonaLab任务：reply〕" in r["messages"][0]["content"]]) == 2


def test_the_offline_scripted_model_is_never_asked_again(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONALAB_LLM", "scripted")
    instance = create_sample_instance(sqlite_url)
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, ECHOED)
    assert state["error"] is None and "echo" not in state["debug"]


def test_the_speed_the_next_turns_plan_with_is_the_first_requests_not_the_notes(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the second request reads only the note: its few tokens time the server's overhead, not its reading speed, and
    # a speed measured on them made the next turns give up their dialogue for nothing (seen with the 1.5B model)
    from personalab.nodes import generate

    recorded: list[tuple[int | None, int | None]] = []
    record = generate.record_speed

    def spy(model, timing, **kwargs):  # type: ignore[no-untyped-def]
        recorded.append((timing.evaluated, timing.written))
        return record(model, timing, **kwargs)

    monkeypatch.setattr(generate, "record_speed", spy)
    openai_stub.slow = SlowServer(prompt_per_s=3000, gen_per_s=500)
    openai_stub.slow.reports_usage = False  # llama-cpp-python's server: the engine counts the tokens
    openai_stub.queue_for("reply", StubReply("【平静】" + ECHOED, chunk=2), StubReply(ANSWER, chunk=2))
    instance = create_sample_instance(sqlite_url)
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, ECHOED)
    assert state["debug"]["echo"]["status"].startswith("asked once more")
    first, second = [r for r in openai_stub.slow.log if r.purpose == "reply"]
    assert second.evaluated < 60 < first.evaluated  # the note alone, then the whole prompt
    [(evaluated, written)] = recorded
    assert evaluated is not None and evaluated > 200, "the speed was measured on the note's request"
    assert written is not None and written > 0  # the first answer's tokens, counted by the engine


# the 1.5B model's loop in the English memory scenario (session 17): one line of its own, again and again
LOOP = "【calm】I see you're looking for a place to rest. Did Theo find anything interesting there? Just saying."


@pytest.mark.parametrize(
    ("earlier", "chunks"),
    [
        (
            [LOOP],
            ["【calm】I see you're looking", " for a place to rest. Did Theo find anything", " interesting there?"],
        ),
        (
            ["【calm】Hello.", LOOP, "【happy】Sure!"],
            ["【curious】Did Theo find anything ", "interesting there? Just saying."],
        ),
        (["【平静】据点就在河对岸，天黑前我们能赶到。"], ["【平静】据点就在河对岸，", "天黑前我们能赶到！(点头)"]),
    ],
)
def test_a_reply_that_says_one_of_the_characters_last_lines_again_is_never_shown(
    earlier: list[str], chunks: list[str]
) -> None:
    guard = EchoGuard("What should we do about the storm tonight?", own_lines=earlier)
    assert shown_by(guard, chunks) == ""
    assert guard.echoed and guard.reason == REASON_OWN_LINE and not guard.kept


@pytest.mark.parametrize(
    "chunks",
    [
        # a phrase of the earlier line inside a reply of its own
        ["【calm】Theo? He found a rusted key by the well, and he thinks it opens the old chapel door."],
        ["【calm】Just saying, ", "the storm will hit before midnight, so we bar the windows now."],
        ["【calm】Rest."],  # too short to tell
    ],
)
def test_a_reply_of_its_own_beside_the_characters_last_lines_is_shown_whole(chunks: list[str]) -> None:
    guard = EchoGuard("What should we do about the storm tonight?", own_lines=[LOOP])
    assert shown_by(guard, chunks) == "".join(chunks)
    assert not guard.echoed


def test_beside_long_last_lines_a_new_reply_streams_after_a_few_characters_of_its_own() -> None:
    # a third of a 300-character line would hold every reply's first hundred characters back
    guard = EchoGuard("好", own_lines=["【平静】" + "我们沿着河岸一直走，直到看见那座旧灯塔为止。" * 14])
    assert guard.feed("【担心】风") == ""
    assert guard.feed("越来越大了，你先进屋") == ""  # 10 of its own: could still turn into the line
    assert guard.feed("，我去把马牵回来，再关好门。") == "【担心】风越来越大了，你先进屋，我去把马牵回来，再关好门。"
    assert guard.finish() == "" and not guard.echoed


def test_the_repeat_note_is_in_the_instances_language() -> None:
    assert "不要重复你之前说过的话" in catalog_for("zh").repeat_note.format(role_name="雷娜")
    assert "do not repeat what you said before" in catalog_for("en").repeat_note.format(role_name="Mara")
    assert "【情绪】" in catalog_for("zh").repeat_note and "【emotion】" in catalog_for("en").repeat_note


def test_a_reply_that_repeats_the_characters_last_line_is_asked_again_with_the_repeat_note(
    sqlite_url: str, openai_stub: OpenAIStub
) -> None:
    said_before = "【平静】据点就在河对岸，天黑前我们能赶到。"
    openai_stub.queue_for("reply", StubReply(said_before, chunk=2))
    openai_stub.queue_for("reply", StubReply(said_before + "(点头)", chunk=3), StubReply(ANSWER, chunk=2))
    instance = create_sample_instance(sqlite_url)
    tokens: list[str] = []
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        assert run_turn(graph, ctx, instance, "我们还要走多久？")["reply"] == said_before
        state = run_turn(graph, ctx, instance, "桥断了，我们得换条路。", on_token=tokens.append)
    assert state["error"] is None and state["reply"] == ANSWER
    assert "".join(tokens) == ANSWER, "the repeat never reached the reader"
    echo = state["debug"]["echo"]
    assert echo["of"] == REASON_OWN_LINE and echo["status"].startswith("asked once more")
    second = [r for r in openai_stub.requests if "〔PersonaLab任务：reply〕" in r["messages"][0]["content"]][-1]
    assert second["messages"][-1]["role"] == "system"
    assert "不要重复你之前说过的话" in second["messages"][-1]["content"]


def test_a_one_shot_cli_turn_in_a_new_process_streams_and_stores_only_the_second_reply(
    sqlite_url: str, openai_stub: OpenAIStub
) -> None:
    # `personalab turn` as a user runs it: a new process, nothing measured yet, the reply streamed to the terminal
    openai_stub.queue_for("reply", StubReply("【平静】" + ECHOED, chunk=2), StubReply(ANSWER, chunk=2))
    instance = create_sample_instance(sqlite_url)
    exe = str(Path(sys.executable).with_name("personalab"))
    env = {**os.environ, "PERSONALAB_DATABASE_URL": sqlite_url}
    done = subprocess.run(
        [exe, "turn", "--instance", str(instance), ECHOED], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "别怕，我在这儿" in done.stdout and "安静得有点吓人" not in done.stdout, done.stdout
    history = subprocess.run(
        [exe, "history", "--instance", str(instance), "--json"], capture_output=True, text=True, env=env, timeout=300
    )
    assert history.returncode == 0, history.stderr
    said = json.dumps(json.loads(history.stdout), ensure_ascii=False)
    assert "别怕，我在这儿" in said
    assert said.count("安静得有点吓人") == 1, "only the user's line holds it: the echo was never stored"


def test_a_second_reply_is_afforded_for_a_reply_as_long_as_the_first_not_a_usual_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # session 18's Chinese run: repeats twice a usual reply's length were asked again on time for a usual reply, and
    # 12 of its 15 cut turns were those second replies cut at the deadline — where the first had been a whole reply
    import time

    from personalab.nodes import generate
    from personalab.nodes.rules.deadline import ModelSpeed

    speed = ModelSpeed(prompt_per_s=50, gen_per_s=5, reply_tokens=20)  # a usual reply: 4 s of writing
    monkeypatch.setattr(generate, "measured_speed", lambda _purpose: speed)
    ctx = Context()
    state = {"message": "唉，风停了，安静得有点吓人。", "messages": []}
    guard = generate.echo_guard(state, ctx, object(), until=time.time() + 8)  # type: ignore[arg-type]
    assert guard is not None and guard.afford_retry is not None
    assert guard.afford_retry("【平静】唉，风停了。")  # short: 4.8 s of 6.8
    long_first = "【平静】" + "风停了，安静得有点吓人，我们歇一会儿吧。" * 4  # ~60 tokens: 12 s
    assert not guard.afford_retry(long_first)
