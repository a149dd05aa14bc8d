"""The reply format kept by a small model (issue 30): a character's line stored without its 【emotion】 is shown
without one (seed 000), and a small model imitates its own recent lines more than the head's format, so after such a
line the next prompt says the format again, at the end of the tail's turn message, before the user's input. With the
real ChatOpenAI client against the stub server (tests/openai_stub.py)."""

from __future__ import annotations

from typing import Any

import pytest
from openai_stub import OpenAIStub, StubReply, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.prompt_assembly import assemble_prompt
from personalab.nodes.rules.prompt_catalog import catalog_for
from personalab.nodes.rules.reply import format_lost

PLOT = {"story_outline": [{"index": 1, "content": "出发", "status": "in_progress"}], "current_plot_index": 1}


@pytest.mark.parametrize(
    ("messages", "lost"),
    [
        ([], False),  # nothing said yet: nothing to imitate
        ([{"role": "user", "content": "你好"}], False),
        ([{"role": "assistant", "content": "【平静】你来了。"}, {"role": "user", "content": "嗯"}], False),
        ([{"role": "assistant", "content": "你来了。(点头)"}, {"role": "user", "content": "嗯"}], True),
        # the last of the character's lines counts, not an earlier one
        ([{"role": "assistant", "content": "你来了。"}, {"role": "assistant", "content": "【开心】走吧！"}], False),
        ([{"role": "assistant", "content": "【开心】走吧！"}, {"role": "assistant", "content": "Fine."}], True),
        ([{"role": "assistant", "content": "(nods)【calm】Let's go."}], False),
        ([{"role": "assistant", "content": "【 】Let's go."}], True),  # a blank 【 】 is plain text
    ],
)
def test_a_line_without_its_emotion_is_a_lost_format(messages: list[dict[str, Any]], lost: bool) -> None:
    assert format_lost(messages) is lost


@pytest.mark.parametrize("language", ["zh", "en"])
def test_the_format_note_ends_the_turn_message_right_before_the_input(language: str) -> None:
    catalog = catalog_for(language)
    common: dict[str, Any] = dict(
        system_instruction=catalog.role_play_instruction("Mara"),
        core_memory={},
        plot_state=PLOT,
        relationship=None,
        world_setting="",
        recent_messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."}],
        retrieved_blocks=[],
        user_input="Where now?",
        turn=2,
        catalog=catalog,
    )
    plain = assemble_prompt(**common)
    noted = assemble_prompt(**common, format_note=catalog.format_note)
    assert noted.messages[-1] == {"role": "user", "content": "Where now?"}
    assert noted.messages[-2]["role"] == "system" and noted.messages[-2]["content"].endswith(catalog.format_note)
    assert "【" in catalog.format_note and ("emotion" in catalog.format_note) == (language == "en")
    # everything before the tail is the same: a local server's prompt cache still holds it
    assert noted.messages[:-2] == plain.messages[:-2]
    assert noted.debug["tail"]["format_note"] is True and "format_note" not in plain.debug["tail"]


def test_after_a_reply_without_its_emotion_the_next_prompt_says_the_format_again(
    sqlite_url: str, openai_stub: OpenAIStub
) -> None:
    note = catalog_for("zh").format_note
    openai_stub.queue_for(
        "reply",
        StubReply("【平静】天快黑了，先找个地方歇脚。", chunk=4),
        StubReply("好吧，我们往北走。(收起地图)", chunk=4),
        StubReply("【坚定】跟紧我。", chunk=4),
        StubReply("【好奇】那是什么声音？", chunk=4),
    )
    instance = create_sample_instance(sqlite_url)

    def reply_prompt() -> list[dict[str, Any]]:
        return [r for r in openai_stub.requests if "〔PersonaLab任务：reply〕" in r["messages"][0]["content"]][-1][
            "messages"
        ]

    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        noted = []
        for text in ("我们该走了。", "往哪边？", "好，出发。", "你听到了吗？"):
            state = run_turn(graph, ctx, instance, text)
            assert state["error"] is None
            sent = reply_prompt()
            assert sent[-1]["content"].endswith(text)  # the input stays the last message
            noted.append(note in sent[-2]["content"])
            assert bool(state["debug"]["prompt"]["tail"].get("format_note")) == noted[-1]
    # the second reply had no 【emotion】: only the third turn's prompt says the format again (the sample has no greeting)
    assert noted == [False, False, True, False]
    assert state["reply"] == "【好奇】那是什么声音？"


@pytest.mark.parametrize(
    ("reply", "stored", "heading"),
    [
        # the 1.5B model's probe reply in the English memory play (session 23)
        (
            "【curious】I wonder if you've found it yet. (pauses) Did …  [Related memories] (no specific memories "
            'mentioned)  [Core memory] (the character\'s whole current personality) {  "name": "Mara"',
            "【curious】I wonder if you've found it yet. (pauses) Did …",
            "[Related memories]",
        ),
        ("【开心】好呀！【核心记忆】（角色当前完整的人格画像）{}", "【开心】好呀！", "【核心记忆】"),
        ("【平静】走吧。\n=== 相关记忆 ===\n第3轮：…", "【平静】走吧。", "=== 相关记忆 ==="),
        ("【calm】Let's go. [plot state] {}", "【calm】Let's go.", "[plot state]"),
        # the format's own example emotions and a character's brackets are not headings
        ("【开心】好呀！【担心】可是天要黑了。(看天)", "【开心】好呀！【担心】可是天要黑了。(看天)", None),
        ("【calm】The sign said [closed]. (shrugs)", "【calm】The sign said [closed]. (shrugs)", None),
    ],
)
def test_a_reply_is_stored_up_to_the_prompts_own_sections_it_ran_on_into(
    reply: str, stored: str, heading: str | None, sqlite_url: str, openai_stub: OpenAIStub
) -> None:
    from personalab.nodes.rules.reply import format_reply, parse_reply

    openai_stub.queue_for("reply", StubReply(reply, chunk=6))
    instance = create_sample_instance(sqlite_url)
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, "我们走吧。")
    assert state["error"] is None
    assert state["reply"] == format_reply(parse_reply(stored))
    assert state["debug"]["progress"].get("cut_at_heading") == heading
