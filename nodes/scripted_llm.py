"""The offline scripted chat model: deterministic, labelled wherever its output shows (nodes/llm.py says when it runs)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from personalab.nodes.rules import prompts
from personalab.nodes.rules.core_memory import MAX_BINARY, MAX_CHANGES, parse_core_memory, validate_core_memory
from personalab.nodes.rules.memory_layers import extractive_summary
from personalab.nodes.rules.prompt_catalog import CATALOGS, EN, ZH, Catalog, detect_language
from personalab.nodes.rules.request_catalog import RequestTexts, request_texts_of

# the canned reply lines are in the prompt catalogs (nodes/rules/prompt_catalog.py), one per language (issue 28)


SCRIPTED_REVIEW_REASON = {"zh": "脚本模型沿用规则结果", "en": "the scripted model keeps the rule result"}
_TTS = ("うん、わかった", "そうだね", "ちょっと待って", "なるほど")


_TURN_RES = {
    language: re.compile(re.escape(catalog.head_turn).replace(re.escape("{turn}"), r"(\d+)"))
    for language, catalog in CATALOGS.items()
}


def _catalog_of(system: str) -> Catalog:
    """The request's language: the English catalog writes its own purpose marker (issue 28)."""
    return EN if EN.marker.split("{")[0] in system else ZH


_CLAUSE_RE = re.compile(r"[，。！？、；：,.!?;:\s「」“”\"'（）()…~～]+")


_FILLER_RE = re.compile(r"^(你还记得|还记得|你记得|记得|我们|你|我)+|(吗|呢|吧|啊|呀|嘛)+$")


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)


def _topic(text: str, size: int = 16) -> str:
    """The longest clause of `text` without leading pronouns / "还记得" and trailing particles."""
    clauses = [c for c in _CLAUSE_RE.split(text or "") if c]
    trimmed = [_FILLER_RE.sub("", c) or c for c in clauses]
    return max(trimmed, key=len)[:size] if trimmed else "……"


def _json_after(text: str, label: str) -> Any:
    at = text.find(label)
    start = text.find("{", at) if at >= 0 else -1
    if start < 0:
        return None
    try:
        return json.JSONDecoder().raw_decode(text[start:])[0]
    except json.JSONDecodeError:
        return None


def _section(text: str, label: str) -> str:
    at = text.find(label)
    if at < 0:
        return ""
    rest = text[at + len(label) :]
    end = rest.find("\n【")
    return (rest if end < 0 else rest[:end]).strip()


def _scripted_reply(system: str, user_input: str, turn: int, variant: int = 0) -> str:
    lines = _catalog_of(system)
    # `variant` (a regeneration's number) moves every choice: each regeneration reads differently, reproducibly
    seed = turn + sum(map(ord, user_input)) + 7 * variant
    topic = _topic(user_input)
    segments = [
        "【{}】{}{}{}".format(
            lines.emotions[seed % len(lines.emotions)],
            lines.openings[seed % len(lines.openings)].format(topic=topic),
            f"<{_TTS[turn % len(_TTS)]}>" if turn % 2 == 0 and lines is ZH else "",
            f"({lines.actions[seed % len(lines.actions)]})" if turn % 3 else "",
        )
    ]
    plot = _json_after(system, lines.head_plot_state)
    outline: Any = plot.get("story_outline") if isinstance(plot, dict) else None
    current: Any = plot.get("current_plot_index") if isinstance(plot, dict) else None
    has_plot = isinstance(outline, list) and isinstance(current, int) and 1 <= current <= len(outline)
    point = outline[current - 1].get("content", "") if has_plot else ""
    recovering = lines.director_current_title in system
    if recovering:
        events = _section(system, lines.director_current_title).splitlines()
        event = re.sub(r"^\d+\.\s*", "", events[0]) if events else ""
        segments.append(lines.recall_event.format(event=event[:30]) if event else lines.recall_nothing)
    if has_plot:
        segments.append(
            f"【{lines.emotions[(seed + 3) % len(lines.emotions)]}】"
            + lines.plot_lines[seed % len(lines.plot_lines)].format(point=point)
        )
    text = "".join(segments)
    if not has_plot:
        return text
    position = (turn - 1) % 6
    if recovering:
        cut = len(segments[0])
        text = text[:cut] + f"[PROGRESS:{current}:in_progress]" + text[cut:]
    elif position == 0:
        marker = f"[PROGRESS:{current}:in_progress]"
        if turn % 18 == 13:
            marker = f"［PROGRESS：{current}：in_progress］"
        text = marker + text
    elif position == 1:
        text = text + f" [PROGRESS:{current}:completed]"
    if turn % 12 == 10:
        text += f"[PROGRESS:{len(outline) + 1}:completed]"
    return text


def _scripted_rewrite(user_text: str, texts: RequestTexts) -> str:
    latest = _section(user_text, texts.latest_input)
    latest = latest.split("\n\n")[0].strip()
    history = _section(user_text, texts.recent_dialogue)
    said = texts.speaker_character + texts.colon
    character = [line for line in history.splitlines() if line.startswith(said)]
    query = _topic(latest, 24)
    if texts.language == "en":  # issue 28: an English instance's query stays English
        context = f" (context: {_topic(character[-1][len(said) :], 16)})" if character else ""
        return f"Standalone query: {query}{context}"
    if character:
        query += f"（上下文：{_topic(character[-1].split('：', 1)[1], 16)}）"
    if len(latest) % 2:
        return f"独立查询：{query}"
    return f"改写后的查询：“{query}”"


def _scripted_review(user_text: str, texts: RequestTexts) -> str:
    """The rule baseline the request carries, taken as the verdict, with the four model-judged scores filled."""
    baseline = _json_after(user_text, texts.review_baseline_label) or {}
    delta = baseline.get("relationship_delta") or {}
    answer = {
        "skipped": bool(baseline.get("skipped", False)),
        "should_write_memory": bool(baseline.get("should_write_memory", False)),
        "memory_value": float(baseline.get("memory_value", 0.0)),
        "relationship_delta": {k: int(delta.get(k, 0)) for k in ("trust", "affection", "familiarity")},
        "suggest_plot_node": bool(baseline.get("suggest_plot_node", False)),
        "suggest_worldbook_update": bool(baseline.get("suggest_worldbook_update", False)),
        "quality": {"character_fidelity": 0.8, "immersion": 0.7, "world_consistency": 0.9, "risk": 0.05},
        "reasons": {"memory_value": SCRIPTED_REVIEW_REASON[texts.language]},
    }
    return json.dumps(answer, ensure_ascii=False)


def _scripted_core_memory(user_text: str, texts: RequestTexts) -> str:
    try:
        core = parse_core_memory(_section(user_text, texts.old_core_memory))
    except ValueError:
        return "抱歉，旧核心记忆无法解析。"
    turn_match = _TURN_RES[texts.language].search(user_text)
    turn = int(turn_match.group(1)) if turn_match else 0
    speaker = texts.speaker_user + texts.colon
    said = [
        line[len(speaker) :]
        for line in _section(user_text, texts.recent_dialogue).splitlines()
        if line.startswith(speaker)
    ]
    # the dialogue's language picks the canned words (issue 28: an English instance keeps an English core memory)
    lines = CATALOGS[detect_language(*said)] if said else ZH
    topic = _topic(said[-1]) if said else lines.core_topic
    trait = lines.core_traits[turn % len(lines.core_traits)]
    traits = core.get("traits")
    if isinstance(traits, list) and trait not in traits and len(traits) < 8:
        traits.append(trait)
    oppositions = core.get("binary_oppositions")
    if isinstance(oppositions, list):
        if not oppositions and MAX_BINARY:
            first = lines.core_opposition
            oppositions.append({"a": first["a"], "b": first["b"], "balance": 0.5, "note": first["note"]})
        elif isinstance(oppositions[0], dict) and isinstance(oppositions[0].get("balance"), int | float):
            shift = 0.05 if turn % 20 < 10 else -0.05
            oppositions[0]["balance"] = round(min(1.0, max(0.0, oppositions[0]["balance"] + shift)), 2)
    changes = core.get("recent_changes")
    if isinstance(changes, list):
        changes.append({"turn": turn, "change": lines.core_change.format(topic=topic, trait=trait)})
        del changes[:-MAX_CHANGES]
        while validate_core_memory(core) and len(changes) > 1:
            del changes[0]
    return "```json\n" + json.dumps(core, ensure_ascii=False, indent=2) + "\n```"


def _scripted_event_summary(request: str, texts: RequestTexts) -> str:
    """The event-log summary: the labelled extractive summary of the numbered memories in the request."""
    listed = request.split(texts.event_summary_memories, 1)[-1]
    memories = [re.sub(r"^\d+\.\s*", "", line).strip() for line in listed.splitlines() if line.strip()]
    return extractive_summary(memories, language=texts.language)


class ScriptedChatModel(BaseChatModel):
    """Offline, deterministic stand-in for the chat model (module doc): every graph path runs without a key."""

    reason: str = "no OPENAI_API_KEY"
    chunk_size: int = 5
    # like a real server's max_tokens: the answer is cut after this many characters (one token each, the most a
    # character can cost) and ends with finish_reason "length"
    max_tokens: int | None = None
    variant: int = 0
    """A regeneration's number under its user line (0: the first reply): another reply for each (issue 28)."""

    @property
    def _llm_type(self) -> str:
        return "personalab-scripted"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": "scripted", "reason": self.reason}

    def answer(self, messages: Sequence[BaseMessage]) -> str:
        """The scripted answer to a request."""
        system = "\n".join(_text(m) for m in messages if m.type == "system")
        users = [_text(m) for m in messages if m.type == "human"]
        last_user = users[-1] if users else ""
        purpose = prompts.detect_purpose(system) or prompts.PURPOSE_REPLY
        texts = request_texts_of(system)  # the request's language (issue 28)
        if purpose == prompts.PURPOSE_QUERY_REWRITE:
            return _scripted_rewrite(last_user, texts)
        if purpose == prompts.PURPOSE_CORE_MEMORY:
            return _scripted_core_memory(last_user, texts)
        if purpose == prompts.PURPOSE_REVIEW:
            return _scripted_review(last_user, texts)
        if purpose == prompts.PURPOSE_EVENT_SUMMARY:
            return _scripted_event_summary(last_user, texts)
        turn_match = _TURN_RES[_catalog_of(system).language].search(system)
        turn = int(turn_match.group(1)) if turn_match else len(users)
        return _scripted_reply(system, last_user, max(turn, 1), self.variant)

    def _metadata(self) -> dict[str, Any]:
        return {"model_name": "scripted", "model_provider": "personalab-scripted", "scripted": True}

    def _capped(self, text: str) -> tuple[str, str]:
        """(the answer within max_tokens, its finish_reason)."""
        if self.max_tokens is not None and len(text) > self.max_tokens:
            return text[: self.max_tokens], "length"
        return text, "stop"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        text, finish = self._capped(self.answer(messages))
        message = AIMessage(content=text, response_metadata={**self._metadata(), "finish_reason": finish})
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        text, finish = self._capped(self.answer(messages))
        pieces = [text[i : i + self.chunk_size] for i in range(0, len(text), self.chunk_size)]
        for number, piece in enumerate(pieces):
            last = number == len(pieces) - 1
            metadata = {**self._metadata(), "finish_reason": finish} if last else {}
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece, response_metadata=metadata))
            if run_manager:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk
