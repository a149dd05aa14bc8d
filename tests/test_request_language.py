"""Every model request in the instance's language (issue 28): with the real ChatOpenAI client against the OpenAI
stub, an English card's instance sends no Chinese scaffolding in any request — the reply, the query rewrite, the
core-memory maintenance, the LLM review, the event-log summary — only the card's own text could be CJK; a Chinese
instance sends exactly the requests it sent before (tests/fixtures/request_language_zh.json, recorded with main
before this change; re-recorded after issue 30 moved the turn number and relationship behind the stable head: every
request holds the same lines as before, only that block moved; and after issue 26 showed the LLM review the scene's
participants: two rule lines and an optional answer field, every other line the same; and after issue 30's format
note: the first turn's reply request says the format again after the card's greeting, which has no 【emotion】).
Rules-based texts a user
reads (relationship events, review reasons, recap lines) follow the instance's language too."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph import api
from personalab.graph.runner import run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.review.pipeline import _SHARED_CACHE
from personalab.stores.background import flush_event_writes

FIXTURES = Path(__file__).parent / "fixtures"
EN_CARD = FIXTURES / "card_v2_lighthouse_en.json"
ZH_CARD = FIXTURES / "card_v2_lantern.json"
ZH_SNAPSHOT = FIXTURES / "request_language_zh.json"
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\u3000-\u303f\uff00-\uffef]")
# the reply format's emotion brackets are part of the reply syntax in both languages (【emotion】line)
FORMAT_BRACKETS = re.compile(r"[【】]")

EN_REPLIES = (
    "【calm】You're safe now. Drink your tea.(hands over a cup)",
    "【watchful】The rocks, the fog, and the tide. Nothing else, tonight.",
    "【warm】You're welcome. Rest now.",
    "【calm】Good night. The lamp will keep watch.",
)
EN_MESSAGES = (
    "Where am I? What happened to my boat?",
    "Is there anything dangerous out there? I trust you, thank you.",
    "Thank you, Mira. I really trust you.",
    "Good night, Mira.",
)
ZH_MESSAGES = ("这是哪里？", "外面有什么危险吗？我相信你，谢谢你。", "谢谢你，灯守。", "晚安。")
ZH_REPLIES = ("【平静】你安全了。喝口茶吧。", "【警惕】礁石、雾和潮水。", "【温和】不客气。", "【平静】晚安。")


def _play(url: str, card: Path, messages: tuple[str, ...], stub: OpenAIStub, replies: tuple[str, ...]) -> Any:
    _SHARED_CACHE.clear()  # the review's assessments are kept per conversation id, across the tests of a process
    lab = api.PersonaLab(database_url=url)
    imported = lab.cards.import_bytes(card.read_bytes(), card.name)
    instance = lab.instances.create({"character_id": imported.character_id})
    for reply in replies:
        stub.queue_for("reply", reply)
    with turn_graph(Context(database_url=url, maintenance_every=2, review_mode="llm")) as (graph, ctx):
        states = [run_turn(graph, ctx, instance.id, message, user_name="Ash") for message in messages]
    flush_event_writes()
    return instance, states


def _card_texts(card: Path) -> list[str]:
    data = json.loads(card.read_text(encoding="utf-8"))["data"]
    return [v for v in data.values() if isinstance(v, str) and v]


def _scaffolding(content: str, own: list[str]) -> str:
    """`content` without the texts the card, the user and the model wrote (they may be in any language)."""
    for text in sorted(own, key=len, reverse=True):
        content = content.replace(text, "")
    content = re.sub(r"〔PersonaLab task: [a-z_]+〕", "", content)  # the purpose marker: a machine tag
    return FORMAT_BRACKETS.sub("", content)


REVIEW_ANSWER = {
    "skipped": False,
    "should_write_memory": True,
    "memory_value": 0.8,
    "relationship_delta": {"trust": 2, "affection": 1, "familiarity": 1},
    "suggest_plot_node": False,
    "suggest_worldbook_update": False,
    "quality": {"character_fidelity": 0.9, "immersion": 0.8, "world_consistency": 0.9, "risk": 0.0},
    "reasons": {"relationship": "Ash thanked Mira and trusts her."},
}


def test_an_english_instance_sends_every_request_in_english(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    openai_stub.queue_for("query_rewrite", *(f"lighthouse question {n}" for n in range(10)))
    openai_stub.queue_for("review", *(json.dumps(REVIEW_ANSWER) for _ in range(10)))
    instance, states = _play(sqlite_url, EN_CARD, EN_MESSAGES, openai_stub, EN_REPLIES)
    assert instance.language == "en"
    for state in states:
        assert not state.get("error"), state.get("error")
    purposes = set()
    for request in openai_stub.requests:
        system = " ".join(m["content"] for m in request["messages"] if m["role"] == "system")
        marker = re.search(r"〔PersonaLab task: ([a-z_]+)〕", system)
        assert marker, system[:200]  # the English marker, never 〔PersonaLab任务：…〕
        purposes.add(marker.group(1))
        for message in request["messages"]:
            left = _scaffolding(message["content"], [*EN_REPLIES, *EN_MESSAGES])
            found = CJK.findall(left)
            assert not found, (marker.group(1), found[:10], left[:400])
    assert {"reply", "query_rewrite", "core_memory", "review"} <= purposes, purposes
    # the rules' own texts a user reads: the relationship's state events and the review's reasons
    assert not CJK.search(json.dumps([s.get("review") for s in states], ensure_ascii=False))
    assert not CJK.search(json.dumps([s.get("state_events") for s in states], ensure_ascii=False))
    assert any("relationship change trust +2" in str(e) for s in states for e in s.get("state_events") or [])
    # the memories the review wrote (the turn's event, the relationship's change) are English, and were retrieved
    memories = [m.content for m in api.PersonaLab(database_url=sqlite_url).memories.list(instance.id).items]
    assert any(m.startswith("Turn 2: Ash said") for m in memories), memories
    assert any("The relationship between Mira and Ash changed" in m for m in memories), memories
    assert not CJK.search(FORMAT_BRACKETS.sub("", json.dumps(memories, ensure_ascii=False))), memories


def test_an_english_event_summary_request_is_english(openai_stub: OpenAIStub) -> None:
    from personalab.nodes.maintenance import model_summariser

    openai_stub.queue_for("event_summary", "Ash's boat ran aground; Mira carried Ash up to the lamp room.")
    summary = model_summariser("en")(["Ash's boat ran aground.", "Mira carried Ash up the stairs."])
    assert summary.startswith("Ash's boat")
    (request,) = openai_stub.requests
    text = json.dumps(request["messages"], ensure_ascii=False)
    assert "〔PersonaLab task: event_summary〕" in text and not CJK.search(text.replace("〔", "").replace("〕", ""))


def _recorded(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"messages": r["messages"], "max_tokens": r.get("max_tokens")} for r in requests]


def test_a_chinese_instance_sends_exactly_the_requests_it_sent_before(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    openai_stub.queue_for("query_rewrite", *(f"灯塔的问题{n}" for n in range(10)))
    instance, states = _play(sqlite_url, ZH_CARD, ZH_MESSAGES, openai_stub, ZH_REPLIES)
    assert instance.language == "zh"
    got = _recorded(openai_stub.requests)
    if os.environ.get("PERSONALAB_RECORD_REQUESTS"):  # how the snapshot was made (with main, before issue 28's change)
        ZH_SNAPSHOT.write_text(json.dumps(got, ensure_ascii=False, indent=1), encoding="utf-8")
    assert got == json.loads(ZH_SNAPSHOT.read_text(encoding="utf-8"))


def test_an_english_event_summary_memory_and_its_offline_fallback_are_english() -> None:
    from langchain_core.messages import HumanMessage, SystemMessage
    from personalab.nodes.rules.memory_layers import extractive_summary, summary_memory
    from personalab.nodes.rules.request_catalog import event_summary_messages
    from personalab.nodes.scripted_llm import ScriptedChatModel

    memories = ["Ash's boat ran aground.", "Mira carried Ash up the stairs."]
    fallback = extractive_summary(memories, language="en")
    assert fallback.startswith("(extract, offline scripted model) Ash's boat") and not CJK.search(fallback)
    item = summary_memory("Ash was rescued.", [2, 3], [7, 8], language="en")
    assert item["content"] == "[Event summary] turns 2–3: Ash was rescued."
    request = event_summary_messages(memories, 300, "en")
    scripted = ScriptedChatModel().answer(
        [SystemMessage(content=request[0]["content"]), HumanMessage(content=request[1]["content"])]
    )
    assert scripted == fallback
    # the Chinese ones as they were
    assert summary_memory("救下了莱姆。", [2, 3], [7])["content"] == "【事件摘要】第2–3轮：救下了莱姆。"
