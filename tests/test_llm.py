"""The chat model layer: the real ChatOpenAI client over HTTP against the stub server, its configuration from
the environment, and the offline scripted model for every purpose of the turn graph."""

from __future__ import annotations

import json

import openai
import pytest
from openai_stub import LLM_ENV, OpenAIStub, StubReply, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.nodes.llm import get_chat_model, model_label
from personalab.nodes.rules import prompts
from personalab.nodes.rules.core_memory import (
    MAX_BINARY,
    MAX_CHANGES,
    accept_core_memory,
    initial_core_memory,
    maintenance_messages,
    validate_core_memory,
)
from personalab.nodes.rules.director import director_blocks, is_stalled
from personalab.nodes.rules.plot import apply_progress, extract_progress, new_plot_state
from personalab.nodes.rules.prompt_assembly import assemble_prompt
from personalab.nodes.rules.reply import parse_reply
from personalab.nodes.rules.rewrite import parse_rewrite, rewrite_messages
from personalab.nodes.scripted_llm import ScriptedChatModel

OUTLINE = [f"大纲第{i}点的剧情" for i in range(1, 11)]
HELLO = [{"role": "user", "content": "你好"}]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*LLM_ENV, "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


# --- the real client against the stub ------------------------------------------------------------------------


def test_invoke_sends_the_configured_request_and_returns_the_reply(
    openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_MODEL", "qwen2.5-7b-instruct")
    monkeypatch.setenv("PERSONALAB_TEMPERATURE", "0.3")
    openai_stub.queue("【开心】你好呀<こんにちは>(摇了摇尾巴)")
    model = get_chat_model()
    answer = model.invoke([{"role": "system", "content": "系统"}, *HELLO])
    assert answer.content == "【开心】你好呀<こんにちは>(摇了摇尾巴)"
    request = openai_stub.requests[-1]
    assert request["model"] == "qwen2.5-7b-instruct"
    assert request["temperature"] == 0.3
    assert request["messages"] == [{"role": "system", "content": "系统"}, {"role": "user", "content": "你好"}]
    assert model_label(model) == f"openai-compatible: qwen2.5-7b-instruct @ {openai_stub.base_url}"


def test_stream_yields_the_chunks_in_order(openai_stub: OpenAIStub) -> None:
    reply = "【担心】新的老师可严格了听说……<新しい先生は厳しいです>(皱了皱眉)"
    openai_stub.queue(StubReply(reply, chunk=4))
    pieces = [chunk.content for chunk in get_chat_model().stream(HELLO)]
    texts = [piece for piece in pieces if piece]
    assert texts == [reply[i : i + 4] for i in range(0, len(reply), 4)]
    assert "".join(pieces) == reply
    assert openai_stub.requests[-1]["stream"] is True


def test_a_purpose_can_use_its_own_model(openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONALAB_MODEL", "big")
    monkeypatch.setenv("PERSONALAB_MODEL_QUERY_REWRITE", "small")
    openai_stub.queue("a", "b")
    get_chat_model("query_rewrite").invoke(HELLO)
    get_chat_model("reply").invoke(HELLO)
    assert [r["model"] for r in openai_stub.requests] == ["small", "big"]


def test_a_slow_server_raises_a_timeout_without_waiting_for_the_answer(
    openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_LLM_TIMEOUT", "0.5")
    openai_stub.queue(StubReply(delay=60))
    with pytest.raises(openai.APITimeoutError):
        get_chat_model().invoke(HELLO)
    # the stub holds its answer for 60 s: none was written, so the client gave up on its own timeout
    assert openai_stub.answered == 0
    assert len(openai_stub.requests) == 1  # no retry by default


def test_a_slow_stream_raises_a_timeout(openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONALAB_LLM_TIMEOUT", "0.5")
    openai_stub.queue(StubReply(delay=60))
    with pytest.raises(openai.APITimeoutError):
        list(get_chat_model().stream(HELLO))
    assert openai_stub.answered == 0


def test_http_500_raises_a_server_error(openai_stub: OpenAIStub) -> None:
    openai_stub.queue(StubReply(status=500))
    with pytest.raises(openai.InternalServerError, match="500"):
        get_chat_model().invoke(HELLO)
    assert len(openai_stub.requests) == 1


def test_retries_are_opt_in(openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONALAB_LLM_MAX_RETRIES", "1")
    openai_stub.queue(StubReply(status=500), "【平静】第二次成功了。")
    assert get_chat_model().invoke(HELLO).content == "【平静】第二次成功了。"
    assert len(openai_stub.requests) == 2


@pytest.mark.parametrize("streamed", [False, True])
def test_a_malformed_body_raises(openai_stub: OpenAIStub, streamed: bool) -> None:
    openai_stub.queue(StubReply(malformed=True))
    model = get_chat_model()
    with pytest.raises(ValueError):
        list(model.stream(HELLO)) if streamed else model.invoke(HELLO)


# --- configuration --------------------------------------------------------------------------------------------


def test_the_defaults_bound_a_turn(openai_stub: OpenAIStub) -> None:
    model = get_chat_model()
    assert (model.model_name, model.request_timeout, model.max_retries) == ("gpt-4o-mini", 30.0, 0)
    assert model.temperature is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PERSONALAB_TEMPERATURE", "hot"),
        ("PERSONALAB_TEMPERATURE", "2.5"),
        ("PERSONALAB_TEMPERATURE", "nan"),
        ("PERSONALAB_LLM_TIMEOUT", "soon"),
        ("PERSONALAB_LLM_TIMEOUT", "0"),
        ("PERSONALAB_LLM_TIMEOUT", "-3"),
        ("PERSONALAB_LLM_MAX_RETRIES", "-1"),
        ("PERSONALAB_LLM_MAX_RETRIES", "1.5"),
        ("OPENAI_BASE_URL", "localhost:8000/v1"),
        ("OPENAI_BASE_URL", "ftp://example.com/v1"),
        ("PERSONALAB_LLM", "magic"),
    ],
)
def test_a_bad_setting_is_a_value_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        get_chat_model()


def test_an_unknown_purpose_is_a_value_error(offline: None) -> None:
    with pytest.raises(ValueError, match="purpose 'chat'"):
        get_chat_model("chat")


def test_without_a_key_the_model_is_the_labelled_scripted_one(offline: None) -> None:
    model = get_chat_model()
    assert isinstance(model, ScriptedChatModel)
    assert model_label(model) == "scripted (offline, no OPENAI_API_KEY)"


def test_scripted_can_be_forced_and_openai_can_be_required(monkeypatch: pytest.MonkeyPatch, offline: None) -> None:
    monkeypatch.setenv("PERSONALAB_LLM", "openai")
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        get_chat_model()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("PERSONALAB_LLM", "scripted")
    assert model_label(get_chat_model()) == "scripted (offline, PERSONALAB_LLM=scripted)"


# --- the scripted model ---------------------------------------------------------------------------------------


def _reply_prompt(plot: dict, turn: int, user_input: str, blocks: list | None = None) -> list[dict[str, str]]:
    return assemble_prompt(
        system_instruction=prompts.role_play_instruction("钦灵"),
        core_memory=initial_core_memory("钦灵", "一只爱撒娇的狐狸少女"),
        plot_state=plot,
        relationship=None,
        world_setting="核战后的废土世界。",
        recent_messages=[],
        retrieved_blocks=blocks or [],
        user_input=user_input,
        turn=turn,
    ).messages


def test_scripted_reply_is_in_the_reply_format_and_varies(offline: None) -> None:
    model = get_chat_model()
    plot = new_plot_state(OUTLINE)
    texts = [str(model.invoke(_reply_prompt(plot, turn, "我们去据点看看吧")).content) for turn in (3, 4)]
    texts.append(str(model.invoke(_reply_prompt(plot, 3, "你还记得那次冲突吗？")).content))
    assert len(set(texts)) == 3
    for text in texts:
        clean, _, _ = extract_progress(text, len(OUTLINE))
        segments = parse_reply(clean)
        assert segments and all(s["original_emotion"] for s in segments)
        assert all("\u4e00" <= s["content"][0] <= "\u9fff" or s["content"][0] in "「" for s in segments)
    assert "据点" in texts[0] and "那次冲突" in texts[2]


def test_scripted_markers_let_the_story_advance_and_the_director_fire(offline: None) -> None:
    """24 turns through the pure pieces, as the graph runs them: check stall → (director) → reply → markers."""
    model = get_chat_model()
    plot = new_plot_state(OUTLINE)
    fired, ignored_seen, marked_turns = [], [], []
    for turn in range(1, 25):
        blocks = []
        if is_stalled(turn, plot["last_progress_turn"]):
            fired.append(turn)
            blocks = director_blocks(["主角在据点外发现了叛徒留下的记号"], ["另一次故事里，主角潜入了据点"])
        text = str(model.invoke(_reply_prompt(plot, turn, f"第{turn}轮，我们继续。", blocks)).content)
        clean, markers, ignored = extract_progress(text, len(OUTLINE))
        assert "PROGRESS" not in clean
        ignored_seen += ignored
        if markers:
            marked_turns.append(turn)
        plot = apply_progress(plot, markers, turn)
    assert fired == [5, 11, 17, 23]
    assert marked_turns == [1, 2, 5, 7, 8, 11, 13, 14, 17, 19, 20, 23]
    assert plot["current_plot_index"] == 5  # four points completed in 24 turns
    assert [p["status"] for p in plot["story_outline"][:5]] == ["completed"] * 4 + ["in_progress"]
    assert ignored_seen and all("outside the outline" in item["reason"] for item in ignored_seen)


def test_scripted_stream_joins_to_the_invoked_reply(offline: None) -> None:
    model = get_chat_model()
    messages = _reply_prompt(new_plot_state(OUTLINE), 7, "今晚行动吗？")
    chunks = [chunk.content for chunk in model.stream(messages)]
    assert len(chunks) > 3
    assert "".join(chunks) == model.invoke(messages).content


def test_scripted_rewrite_is_a_standalone_query(offline: None) -> None:
    history = [
        {"role": "user", "content": "我们在据点和铁狼帮打了一架"},
        {"role": "assistant", "content": "【愤怒】铁狼帮的老大亲自出手了<くそっ>(咬紧牙关)"},
    ]
    model = get_chat_model("query_rewrite")
    answer = str(model.invoke(rewrite_messages("你还记得那次冲突吗？", history)).content)
    query = parse_rewrite(answer, "你还记得那次冲突吗？")
    assert query != "你还记得那次冲突吗？"
    assert "冲突" in query and "铁狼帮" in query
    assert "查询" not in query and "“" not in query


def test_scripted_maintenance_answers_valid_core_memory_every_time(offline: None) -> None:
    model = get_chat_model("core_memory")
    core = initial_core_memory("钦灵", "一只爱撒娇的狐狸少女")
    for turn in range(10, 110, 10):
        turns = [
            {"role": "user", "content": f"第{turn}轮我们一起去了集市"},
            {"role": "assistant", "content": "【开心】好呀"},
        ]
        answer = str(model.invoke(maintenance_messages(core, turns, ["好感度上升"], turn=turn)).content)
        assert answer.startswith("```json")
        core, problems = accept_core_memory(core, answer)
        assert problems == []
    assert validate_core_memory(core) == []
    assert len(core["recent_changes"]) == MAX_CHANGES and core["recent_changes"][-1]["turn"] == 100
    assert "集市" in core["recent_changes"][-1]["change"]
    assert 1 <= len(core["binary_oppositions"]) <= MAX_BINARY


def test_scripted_output_is_marked_in_its_metadata(offline: None) -> None:
    model = get_chat_model()
    message = model.invoke(HELLO)
    assert message.response_metadata["scripted"] is True
    json.dumps(message.response_metadata)
