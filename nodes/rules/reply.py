"""The reply format of seed 000 (台词格式): `【emotion】content<tts>(action)` segments, parsed and written back."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from personalab.nodes.rules.memory_builder import format_own_line
from personalab.nodes.rules.types import ReplySegment

_EMOTION_RE = re.compile(r"【([^【】\n]*[^【】\s][^【】\n]*)】")  # a blank 【 】 is plain text


def _split_tail(body: str, closers: str, openers: str) -> tuple[str, str | None]:
    """`body` ending in a balanced `(...)`-like group → (before, inside); else (body, None)."""
    if not body or body[-1] not in closers:
        return body, None
    depth = 0
    for pos in range(len(body) - 1, -1, -1):
        char = body[pos]
        if char in "【】":
            return body, None  # tts / action text never holds the emotion brackets
        if char in closers:
            depth += 1
        elif char in openers:
            depth -= 1
            if depth == 0:
                return body[:pos], body[pos + 1 : -1]
    return body, None


def _take_tail(body: str, closers: str, openers: str) -> tuple[str, str | None]:
    """Like `_split_tail`, but an empty group at the end is dropped and the one before it looked at."""
    while True:
        before, inside = _split_tail(body, closers, openers)
        if inside is None:
            return body, None
        body = before.rstrip()
        if inside.strip():
            return body, inside.strip()


_EMPTY_TAIL_RE = re.compile(r"(?:[(（]\s*[)）]|<\s*>|\s)+$")

# The format's own field names, as the system prompt's template writes them (【情绪】台词<语音文本>(动作)): a small model
# copies them into its reply; they are the template, not the character's words, and never reach a stored line (issue 30)
PLACEHOLDERS = frozenset({"情绪", "台词", "语音文本", "动作", "emotion", "tts text", "speech text", "action"})
_PLACEHOLDER_GROUP_RE = re.compile(
    r"[<‹〈＜]\s*(?:语音文本|tts text|speech text)\s*[>›〉＞]|[(（]\s*(?:动作|action)\s*[)）]", re.IGNORECASE
)


# The time a memory of the prompt's memory block carries (`injection.time_ago`, seed 001 FormatMemoriesForInjection:
# `- content（3 轮前，2 天前）`): a small model copies it after its own words, where the format puts the action (the
# 1.5B model, session 14: "【疑惑】我最害怕的是深水。(57 轮前，18 分钟前)"). It is the block's annotation, not an action
# of the character, and never reaches a stored line (issue 30). Mirrors `time_ago`'s Chinese and English texts.
_AGO_UNIT_ZH = r"\d+\s*(?:年|个月|天|小时|分钟)前"
_AGO_UNIT_EN = r"\d+\s+(?:year|month|day|hour|minute)s?\s+ago"
_TIME_AGO_RE = re.compile(
    rf"(?:(?:本轮|\d+\s*轮前)(?:\s*[，,]\s*{_AGO_UNIT_ZH})?|{_AGO_UNIT_ZH}"
    rf"|(?:this turn|\d+\s+turns?\s+ago)(?:\s*,\s*{_AGO_UNIT_EN})?|{_AGO_UNIT_EN})",
    re.IGNORECASE,
)


def _placeholder(text: str | None) -> bool:
    return text is not None and text.strip().lower() in PLACEHOLDERS


def _memory_time(text: str | None) -> bool:
    """A memory's time as the memory block writes it (`_TIME_AGO_RE`), not an action of the character."""
    return text is not None and _TIME_AGO_RE.fullmatch(text.strip()) is not None


def _segment(emotion: str | None, body: str) -> ReplySegment | None:
    body = _PLACEHOLDER_GROUP_RE.sub("", body).strip()
    if _placeholder(body):
        body = ""
    if not body:
        return None
    content, action = _split_tail(_EMPTY_TAIL_RE.sub("", body), ")）", "(（")
    if _memory_time(action):  # the memory block's time copied after the words: dropped, the action before it read
        body = _EMPTY_TAIL_RE.sub("", content).strip()
        if not body:
            return None
        content, action = _split_tail(body, ")）", "(（")
    content, tts = _take_tail(content.rstrip(), ">", "<")
    content = content.strip()
    if not content:
        # a segment that is only `<...>` / `(...)` keeps it as its content: a line always has content
        content, tts, action = body, None, None
    return {
        "original_emotion": None if _placeholder(emotion) else (emotion.strip() if emotion else None),
        "content": content,
        "tts_content": tts,
        "action_content": (action.strip() or None) if action else None,
    }


def parse_reply(text: str) -> list[ReplySegment]:
    """A reply `【emotion】content<tts>(action)...` → one `ReplySegment` per segment (seed 000, inverse of
    format_own_line).

    Each segment has original_emotion, content, tts_content, action_content (None when absent).
    - a segment starts at each `【...】` (one line, not blank); text before the first one is a segment without
      emotion, and text with no `【...】` at all is one segment;
    - at the end of a segment, a balanced `(...)` (or full-width `（...）`) is the action, and before it a
      balanced `<...>` is the tts text (neither may contain `【` or `】`); anything else stays in the content;
    - normalisation: each field is stripped of surrounding whitespace (so whitespace/newlines between segments
      vanish), a segment with no text at all (`【开心】` followed directly by another `【` or the end) is dropped,
      empty `<>`/`()` groups at the end of a segment are dropped, a segment that would have empty content keeps
      its whole text as content (a stored line always has content), and `format_own_line` writes the action with
      ASCII parentheses. A blank `【 】` is plain text, not a segment start.
    So `"".join(format_own_line(...) for each segment)` gives back the reply up to that normalisation, and parsing
    that again gives the same segments (tests/test_progress_parse.py, random texts). Segments whose content
    itself contains `【x】`, or ends with `<...>` / `(...)`, cannot be recovered from the text.
    """
    text = text or ""
    segments: list[ReplySegment] = []
    matches = list(_EMOTION_RE.finditer(text))
    head_end = matches[0].start() if matches else len(text)
    first = _segment(None, text[:head_end])
    if first:
        segments.append(first)
    for number, match in enumerate(matches):
        end = matches[number + 1].start() if number + 1 < len(matches) else len(text)
        segment = _segment(match.group(1), text[match.end() : end])
        if segment:
            segments.append(segment)
    return segments


def render_segments(segments: Sequence[Mapping[str, Any]], *, emotion: bool = True, tts: bool = True) -> str:
    """Segments as the seed-000 text `【emotion】content<tts>(action)`, each empty field left out with its brackets;
    `emotion=False` / `tts=False` leave those out too (the query rewrite shows content and action only, the
    core-memory request leaves out the tts text, often another language)."""
    return "".join(
        format_own_line(
            s.get("original_emotion") if emotion else None,
            s["content"],
            s.get("tts_content") if tts else None,
            s.get("action_content"),
        )
        for s in segments
    )


def format_reply(segments: Sequence[Mapping[str, Any]]) -> str:
    """The reply text of parsed segments (seed 000 format), the inverse of `parse_reply`."""
    return render_segments(segments)


def format_lost(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the character's last line among `messages` (seed 000's list: its own lines are `assistant`) has no
    【emotion】 (issue 30): stored without one, it is shown without one, and a small model imitates it."""
    last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    return last is not None and not _EMOTION_RE.search(str(last.get("content") or ""))


@lru_cache(maxsize=4)
def _heading_re(names: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(name) for name in names)
    return re.compile(
        rf"\[\s*(?:{alternatives})\s*\]|【\s*(?:{alternatives})\s*】|===\s*(?:{alternatives})\s*===", re.IGNORECASE
    )


def cut_at_heading(text: str, names: tuple[str, ...]) -> tuple[str, str | None]:
    """`text` up to the first section heading of the prompt's scaffolding it holds (`names`, as
    `prompt_catalog.scaffolding_headings` gives them, in any of the prompt's forms `[name]`, `【name】`,
    `=== name ===`), and that heading (None: nothing cut). A small model that runs on past its answer writes the
    prompt's next sections (issue 30: "… Did …  [Related memories] (no specific memories mentioned)  [Core memory]
    {json}"); none of that is the character's line."""
    if not names:
        return text, None
    match = _heading_re(names).search(text)
    if match is None:
        return text, None
    return text[: match.start()].rstrip(), match.group(0)
