"""Real models (issue 17): every prompt fits the model's context window, a turn keeps to its deadline (seed 002:
总响应时间应控制在30秒以内), and the model's output is checked, not trusted. Pure rule tests on the window fit at
2K, 8K, 32K and 128K windows, then turns through the graph with the real ChatOpenAI client against the stub
server (tests/openai_stub.py): a small window with a long history, a long reply, an echoed rewrite, a deadline
hit mid-stream, slow maintenance and review, weak JSON."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.messages.utils import count_tokens_approximately
from openai_stub import OpenAIStub, StubReply, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.runner import create_sample_instance, load_sample, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.llm import get_chat_model
from personalab.nodes.rules import prompts
from personalab.nodes.rules.context_window import ContextWindow, assemble_within_window, fit_budgets
from personalab.nodes.rules.deadline import call_seconds, post_reply_reserve, reply_deadline
from personalab.nodes.rules.prompt_assembly import REGIONS, RegionBudgets, RetrievedBlock
from personalab.nodes.rules.reply import parse_reply
from personalab.nodes.rules.rewrite import REWRITE_MAX_TOKENS, check_rewrite, parse_rewrite, rewrite_messages
from personalab.stores.db import session_scope
from personalab.stores.saves import append_lines
from personalab.stores.tables import Line
from personalab.stores.turn_tables import TurnRecord
from sqlmodel import select

WINDOWS = [2048, 8192, 32768, 131072]
REPLY_CAP = {2048: 256, 8192: 512, 32768: 1024, 131072: 1024}


# --- the window fit, pure ----------------------------------------------------------------------------------------


def sample_head() -> dict[str, Any]:
    """The shipped sample's head: its core memory and its 10-point outline (about 1,200 tokens at 1.5)."""
    sample = load_sample("wasteland.json")
    outline = [
        {"index": i, "content": point, "status": "pending"}
        for i, point in enumerate(sample["background"]["outline"], start=1)
    ]
    return {
        "core_memory": sample["role"].get("core_memory") or {"name": sample["role"]["name"], "identity": "废土猎人"},
        "plot_state": {"story_outline": outline, "current_plot_index": 1, "last_progress_turn": 0},
    }


def long_history(turns: int, size: int = 300) -> list[dict[str, str]]:
    messages = []
    for n in range(turns):
        messages.append({"role": "user", "content": f"第{n}轮：" + "我们沿着废墟往北走。" * (size // 10)})
        messages.append(
            {"role": "assistant", "content": f"【平静】第{n}轮回答：" + "风沙很大，小心脚下。" * (size // 10)}
        )
    return messages


def assemble(window: ContextWindow, **overrides: Any) -> Any:
    blocks = [
        RetrievedBlock("【历史事件】", [f"第{n}件事：" + "雷娜在据点里找到了线索。" * 8 for n in range(40)]),
        RetrievedBlock("【世界知识】", [f"知识{n}：" + "废土上的水源很珍贵。" * 8 for n in range(20)]),
    ]
    arguments: dict[str, Any] = {
        "system_instruction": prompts.role_play_instruction("雷娜"),
        "relationship": {"trust": 0.4, "affection": 0.3},
        "world_setting": "核战后的废土世界，城市成了废墟，幸存者聚居在据点里。",
        "recent_messages": long_history(60),
        "retrieved_blocks": blocks,
        "user_input": "我们接下来去哪里？",
        "turn": 61,
        **sample_head(),
        **overrides,
    }
    return assemble_within_window(window, **arguments)


def counted(messages: list[dict[str, str]], chars_per_token: float = 1.5) -> int:
    return count_tokens_approximately(messages, chars_per_token=chars_per_token)


@pytest.mark.parametrize("size", WINDOWS)
def test_prompt_plus_reply_cap_plus_margin_always_fits_the_window(size: int) -> None:
    window = ContextWindow(context_tokens=size, reply_tokens=REPLY_CAP[size])
    prompt = assemble(window)
    fit = prompt.debug["window"]
    assert fit["fits"], fit["notes"]
    # counted with the same counter the budgets use, on what is actually sent
    assert counted(prompt.messages) + window.reply_tokens + window.margin <= size
    assert fit["prompt_tokens"] == counted(prompt.messages)
    # the regions keep their order; head and tail are whole (the outline, the user's words)
    assert prompt.regions == sorted(prompt.regions, key=REGIONS.index)
    assert prompt.regions[0] == "head" and "【剧情状态】" in prompt.messages[0]["content"]
    assert prompt.messages[-1] == {"role": "user", "content": "我们接下来去哪里？"}


def test_small_windows_name_what_was_cut_to_fit_and_the_largest_keeps_the_seed_budgets() -> None:
    small = assemble(ContextWindow(2048, 256)).debug
    assert small["middle"]["dropped"] and small["retrieved"]["dropped"]
    assert all("budget of" in d["reason"] for d in small["middle"]["dropped"][1:])
    assert small["window"]["notes"] and "fitted to a 2048-token window" in small["window"]["notes"][-1]
    large = assemble(ContextWindow(131072, 1024)).debug
    assert large["window"]["budgets"] == {"head": 4000, "middle": 28000, "retrieved": 8000, "tail": 4000}
    assert large["window"]["notes"] == []
    # only the turns older than the last 20 went, the seed's rule, not the window
    assert [d["reason"] for d in large["middle"]["dropped"]] == ["older than the last 20 turns"]
    assert large["retrieved"]["dropped"] == []


@pytest.mark.parametrize("size", [8192, 32768])
def test_scaled_budgets_keep_the_seed_proportions(size: int) -> None:
    budgets = RegionBudgets()
    window = ContextWindow(size, REPLY_CAP[size])
    fitted = fit_budgets(budgets, window)
    assert sum(getattr(fitted, name) for name in REGIONS) <= window.room
    for name in REGIONS:
        assert getattr(fitted, name) / window.room == pytest.approx(getattr(budgets, name) / 44000, abs=0.002)
    assert fit_budgets(RegionBudgets(head=10, middle=10, retrieved=10, tail=10), window) == RegionBudgets(
        head=10, middle=10, retrieved=10, tail=10
    ), "budgets are never scaled up"


def test_a_head_over_its_scaled_budget_takes_its_room_from_middle_and_retrieved() -> None:
    window = ContextWindow(2048, 256)
    debug = assemble(window).debug
    assert debug["head"]["tokens"] > debug["window"]["budgets"]["head"]  # sent whole, flagged
    assert debug["head"]["over_budget"]
    assert debug["total_tokens"] <= window.room


def test_an_8k_window_keeps_the_characters_description_while_the_window_has_room() -> None:
    # issue 30: the head's budget scaled to an 8K window (16 % of the room) dropped the description while the
    # prompt used a sixth of the window
    description = "雷娜，二十六岁，前帮派的二把手。" + "她左臂有一道旧伤，是替老大挡下的一刀，从不提起。" * 12
    parts = [("persona", "表面冷酷，内心重情义。"), ("description", description)]
    window = ContextWindow(8192, 400)
    prompt = assemble(window, character_parts=parts, recent_messages=long_history(4), retrieved_blocks=[])
    debug = prompt.debug
    assert description in prompt.messages[0]["content"] and debug["head"]["dropped"] == []
    assert debug["window"]["fits"] and debug["total_tokens"] < window.room / 2
    assert any("the character's description is kept" in note for note in debug["window"]["notes"])
    # where head and tail would take most of the window, the description still goes first, named
    small = assemble(ContextWindow(2048, 256), character_parts=parts).debug
    assert [d["item"] for d in small["head"]["dropped"]] == ["character description"]


def test_a_world_setting_too_long_for_the_window_is_cut_and_named() -> None:
    window = ContextWindow(2048, 256)
    prompt = assemble(window, world_setting="废土的规则很多。" * 400)
    cut = prompt.debug["window"]["cut"]
    assert cut and cut[0]["item"] == "world setting" and cut[0]["kept"] < cut[0]["chars"]
    assert prompt.debug["window"]["fits"] and prompt.debug["total_tokens"] <= window.room


def test_head_and_tail_that_cannot_fit_are_reported_not_sent() -> None:
    window = ContextWindow(1024, 512)
    prompt = assemble(window, user_input="说" * 1500)
    fit = prompt.debug["window"]
    assert not fit["fits"] and "PERSONALAB_CONTEXT_TOKENS" in fit["notes"][0]


# --- the deadline's shares, pure ---------------------------------------------------------------------------------


def test_the_reply_gets_what_the_calls_after_it_leave() -> None:
    assert post_reply_reserve(30, 0) == 0
    assert reply_deadline(100.0, 30, 2) == pytest.approx(100.0 - 12.0)
    assert call_seconds(10.0, 4.0, 30) == 6.0
    assert call_seconds(10.0, 4.0, 2) == 2.0, "never more than the request timeout"
    assert call_seconds(10.0, 10.0, 30) is None, "nothing left: no call"


# --- the query rewrite's answer is checked ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("请输出改写后的独立检索查询（一行）：", "repeats the request"),
        ("【用户最新输入】", "repeats the request"),
        ("用户：我们去哪里？", "repeats the request"),
        ("只输出一行查询语句本身，不要解释", "repeats the request"),
        ("", "empty answer"),
        ("   \n  ", "empty answer"),
        ("。。。", "no query in the answer"),
        ("无", "answered none"),
        ("我认为" + "这个问题需要结合上下文仔细考虑" * 10, "far longer than the input"),
    ],
)
def test_an_unusable_rewrite_falls_back_to_the_users_message_and_says_why(answer: str, reason: str) -> None:
    query, problem = check_rewrite(answer, "他在哪？")
    assert query == "他在哪？" and problem is not None and reason in problem


def test_a_usable_line_after_an_echo_is_the_query() -> None:
    answer = "请输出改写后的独立检索查询（一行）：\n雷娜的枪藏在据点的哪里"
    assert check_rewrite(answer, "它在哪？") == ("雷娜的枪藏在据点的哪里", None)
    assert parse_rewrite("查询：据点里的冲突", "那次呢？") == "据点里的冲突"


def test_the_whole_request_echoed_back_is_refused() -> None:
    request = rewrite_messages(
        "他去哪了？", [{"role": "user", "content": "你好"}, {"role": "assistant", "content": "嗯"}]
    )
    # labels, dialogue lines and the instruction are skipped; what is left is the input itself
    assert check_rewrite(request[1]["content"], "他去哪了？")[0] == "他去哪了？"
    assert check_rewrite(request[0]["content"], "他去哪了？") == ("他去哪了？", "the answer only repeats the request")


def test_a_lead_in_and_a_copy_of_the_last_reply_are_not_queries() -> None:
    """Seen from SmolLM2-135M against llama.cpp: "如下：" alone, and the character's previous reply copied back."""
    last_reply = "我们在第一城到第七城的主航线中进行了漫长的巡逻，什么也没发现。"
    dialogue = ["我们去哪了？", last_reply]
    assert check_rewrite("如下：", "他在哪？", dialogue) == ("他在哪？", "empty answer")
    assert check_rewrite("如下：\n第七城的巡逻路线", "那条路呢？", dialogue) == ("第七城的巡逻路线", None)
    query, problem = check_rewrite(last_reply, "他在哪？", dialogue)
    assert query == "他在哪？" and problem == "the answer only repeats the request"
    # a short piece of a message is a fine topic, and so is the user's own input
    assert check_rewrite("第七城", "那里呢？", dialogue) == ("第七城", None)
    assert check_rewrite("我们去哪了", "我们去哪了？", dialogue) == ("我们去哪了", None)


def test_every_json_and_summary_answer_asks_for_a_capped_number_of_tokens(openai_stub: OpenAIStub) -> None:
    """A small local model writes until its window is full when nothing caps it (issue 17)."""
    for purpose in (prompts.PURPOSE_CORE_MEMORY, prompts.PURPOSE_REVIEW, prompts.PURPOSE_EVENT_SUMMARY):
        model = get_chat_model(purpose)
        model.invoke([SystemMessage(prompts.purpose_marker(purpose)), HumanMessage("…")])
    caps = [request.get("max_tokens") or request.get("max_completion_tokens") for request in openai_stub.requests]
    assert len(caps) == 3 and all(isinstance(cap, int) and 0 < cap <= 5000 for cap in caps)


# --- a reply without the format -----------------------------------------------------------------------------------


def test_a_reply_without_the_emotion_format_is_plain_content() -> None:
    segments = parse_reply("我们走吧，天快黑了。\n\n路上小心。")
    assert segments == [
        {
            "original_emotion": None,
            "content": "我们走吧，天快黑了。\n\n路上小心。",
            "tts_content": None,
            "action_content": None,
        }
    ]


# --- through the graph with the real client ---------------------------------------------------------------------


def lines_of(url: str, instance_id: int) -> list[Line]:
    with session_scope(url) as s:
        return list(s.exec(select(Line).where(Line.save_id == instance_id).order_by(Line.id)).all())  # type: ignore[arg-type]


def records_of(url: str, instance_id: int) -> list[tuple[str, int]]:
    with session_scope(url) as s:
        rows = s.exec(select(TurnRecord).where(TurnRecord.save_id == instance_id).order_by(TurnRecord.id)).all()  # type: ignore[arg-type]
        return [(r.status, r.turn) for r in rows]


def with_history(url: str, turns: int) -> int:
    """A sample instance with `turns` long exchanges already in its dialogue."""
    instance = create_sample_instance(url)
    with session_scope(url) as s:
        append_lines(
            s,
            instance,
            [
                {
                    "attribute": m["role"],
                    "content": m["content"],
                    "display_name": "雷娜" if m["role"] == "assistant" else None,
                }
                for m in long_history(turns)
            ],
        )
    return instance


def test_a_2k_window_with_a_long_history_fits_where_the_seed_budgets_overflow(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = with_history(sqlite_url, 30)
    openai_stub.context_window = 2048  # the server refuses what does not fit, as llama.cpp's does
    # the seed's budgets alone (44K) overflow a 2K window: the server refuses and the turn fails cleanly
    openai_stub.queue("我们接下来去哪里", "【平静】往北。")
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        refused = run_turn(graph, ctx, instance, "我们接下来去哪里？")
    assert refused["error"] and "exceed context window of 2048" in refused["error"]
    monkeypatch.setenv("PERSONALAB_CONTEXT_TOKENS", "2048")
    monkeypatch.setenv("PERSONALAB_MAX_REPLY_TOKENS", "256")
    openai_stub.queue("我们接下来去哪里", "【平静】往北，去据点。[PROGRESS:1:in_progress]")
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, "我们接下来去哪里？")
    assert state["error"] is None and state["reply"] == "【平静】往北，去据点。"
    request = openai_stub.requests[-1]
    assert request["max_tokens"] == 256 and request["max_completion_tokens"] == 256
    fit = state["debug"]["prompt"]["window"]
    assert fit["fits"] and fit["context_tokens"] == 2048 and fit["reply_tokens"] == 256
    assert state["debug"]["prompt"]["middle"]["dropped"], "the oldest dialogue went, and is named"
    assert counted([{"role": m["role"], "content": m["content"]} for m in request["messages"]]) + 256 <= 2048


def test_a_long_reply_is_cut_at_the_cap(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_MAX_REPLY_TOKENS", "120")
    instance = create_sample_instance(sqlite_url)
    openai_stub.queue(StubReply("【平静】" + "风沙越来越大了，" * 200, chunk=7))
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, "说说外面的情况。")
    assert state["error"] is None and len(state["reply"]) == 120
    assert state["debug"]["finish_reason"] == "length" and "max_tokens (120)" in state["debug"]["reply_cut"]["reason"]
    assert [line.attribute for line in lines_of(sqlite_url, instance)] == ["user", "assistant"]
    # over PERSONALAB_MAX_REPLY_CHARS the stored reply is cut there (issue 16's limit, unchanged)
    monkeypatch.setenv("PERSONALAB_MAX_REPLY_TOKENS", "1024")
    monkeypatch.setenv("PERSONALAB_MAX_REPLY_CHARS", "50")
    openai_stub.queue("好的", StubReply("【平静】" + "继续说，" * 100))
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, "还有呢？")
    assert state["error"] is None and state["debug"]["reply_cut"] == {"chars": 404, "kept": 50}


def test_a_reply_without_the_format_is_stored_as_plain_content(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    instance = create_sample_instance(sqlite_url)
    openai_stub.queue("我们走吧，天快黑了。\n路上小心。")
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, "走吗？")
    assert state["error"] is None and state["reply"] == "我们走吧，天快黑了。\n路上小心。"
    reply = lines_of(sqlite_url, instance)[-1]
    assert (reply.attribute, reply.content, reply.original_emotion) == ("assistant", state["reply"], None)


def test_an_echoed_rewrite_is_not_the_retrieval_query(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    instance = create_sample_instance(sqlite_url)
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        openai_stub.queue("【平静】我在据点等你。")
        run_turn(graph, ctx, instance, "你在哪？")
        openai_stub.queue("请输出改写后的独立检索查询（一行）：", "【平静】就在北边。")
        state = run_turn(graph, ctx, instance, "那里安全吗？")
    assert state["error"] is None and state["query"] == "那里安全吗？"
    rewrite = state["debug"]["query_rewrite"]
    assert rewrite["status"].startswith("fallback to the input") and "repeats the request" in rewrite["status"]
    assert rewrite["answer"] == "请输出改写后的独立检索查询（一行）："
    # the one-line query asks for few tokens: a rambling weak model must not hold a local server for minutes
    asked = [r for r in openai_stub.requests if "〔PersonaLab任务：query_rewrite〕" in r["messages"][0]["content"]]
    assert len(asked) == 1 and asked[0]["max_tokens"] == REWRITE_MAX_TOKENS <= 400


def test_a_deadline_hit_mid_stream_ends_the_turn_as_cut_and_the_instance_plays_on(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "1.5")
    instance, warm = create_sample_instance(sqlite_url), create_sample_instance(sqlite_url)
    # 200 chunks a tenth of a second apart: the stream would take 20 s
    tokens: list[str] = []
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        # a turn on another instance first: the model client's first import takes seconds on a busy machine, and
        # the slow stream must start before the 1.5 s deadline for it to be cut mid-stream
        # (that turn may miss the deadline itself: only its warming matters)
        openai_stub.queue("【平静】嗯。")
        run_turn(graph, ctx, warm, "在吗？")
        openai_stub.queue(StubReply("【平静】" + "慢" * 400, chunk=2, chunk_delay=0.1))
        cut = run_turn(graph, ctx, instance, "你慢慢说。", on_token=tokens.append)
        assert cut["error"] and "turn deadline (1.5 s) reached while the reply streamed" in cut["error"]
        assert 0 < cut["debug"]["deadline"]["cut_after_chars"] < 404 and tokens
        assert [line.attribute for line in lines_of(sqlite_url, instance)] == ["user"], "no reply stored"
        assert records_of(sqlite_url, instance) == [("error", 1)]
        openai_stub.queue("【开心】这次快了。")
        ok = run_turn(graph, ctx, instance, "好吧，快点说。")
    assert ok["error"] is None and ok["turn"] == 1, "the instance is free and the cut turn did not count"
    assert [line.attribute for line in lines_of(sqlite_url, instance)] == ["user", "user", "assistant"]


def test_the_deadline_holds_while_the_server_pings_before_its_first_chunk(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama-cpp-python's server pings the stream every 15 s while it evaluates a long prompt (minutes for a small
    # model on a busy CPU): the per-read timeout never fires, so the turn must end at its deadline with no chunk
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "1.5")
    instance = create_sample_instance(sqlite_url)
    openai_stub.queue(StubReply("【平静】终于想好了。", ping_for=60.0))
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        cut = run_turn(graph, ctx, instance, "你在想什么？")
        assert cut["error"] and "turn deadline (1.5 s) reached while the reply streamed" in cut["error"]
        assert openai_stub.pinging == 1, "the turn ended while the server was still pinging, not after"
        assert cut["debug"]["deadline"]["cut_after_chars"] == 0
        assert [line.attribute for line in lines_of(sqlite_url, instance)] == ["user"], "no reply stored"
        openai_stub.queue("【开心】这次快了。")
        ok = run_turn(graph, ctx, instance, "好吧，快点说。")
    assert ok["error"] is None and ok["reply_lines"][0]["content"] == "这次快了。"


def test_slow_maintenance_and_llm_review_get_only_what_is_left_of_the_deadline(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "6")
    monkeypatch.setenv("PERSONALAB_MAINTENANCE_EVERY", "1")
    monkeypatch.setenv("PERSONALAB_REVIEW_MODE", "llm")
    instance = create_sample_instance(sqlite_url)
    # the reply at once; the review and the core-memory rewrite would each take a minute
    openai_stub.queue("【平静】好。", StubReply("{}", delay=60), StubReply("{}", delay=60))
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, "出发吧。")
        assert state["error"] is None and state["reply"] == "【平静】好。"
        assert state["review"]["fallback_reason"] and "Timeout" in state["review"]["fallback_reason"]
        assert state["debug"]["maintenance"]["status"] == "model error, core memory kept"
        assert openai_stub.answered == 1, "neither slow call was waited for"
        assert [line.attribute for line in lines_of(sqlite_url, instance)] == ["user", "assistant"]
        openai_stub.queue("出发", "【平静】走。", "{}", "{}")
        assert run_turn(graph, ctx, instance, "走吧。")["error"] is None, "the lock was released"


def test_weak_json_from_the_model_keeps_the_core_memory_and_the_rule_review(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_MAINTENANCE_EVERY", "2")
    monkeypatch.setenv("PERSONALAB_REVIEW_MODE", "llm")
    instance = create_sample_instance(sqlite_url)
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        openai_stub.queue("【平静】好。", "好的，我来评估一下这轮对话。")
        first = run_turn(graph, ctx, instance, "出发吧。")
        openai_stub.queue("出发去据点", "【平静】走。", "评估：不错", "核心记忆：雷娜很勇敢。")
        second = run_turn(graph, ctx, instance, "走吧。")
    for state in (first, second):
        assert state["error"] is None and state["review"]["fallback_reason"], "the rules answered"
    assert second["debug"]["maintenance"]["status"] == "rejected, core memory kept"
    assert second["core_memory"] == first["core_memory"]


def test_head_and_tail_too_big_for_the_window_fail_the_turn_before_the_model(
    sqlite_url: str, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_CONTEXT_TOKENS", "1024")
    monkeypatch.setenv("PERSONALAB_MAX_REPLY_TOKENS", "512")
    instance = create_sample_instance(sqlite_url)
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, "你好。")
        assert state["error"] and "does not fit the model's context window" in state["error"]
        assert openai_stub.requests == [], "the model was not called"
        assert records_of(sqlite_url, instance) == [("error", 1)]
