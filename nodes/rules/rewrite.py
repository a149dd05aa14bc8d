"""Conversational RAG query rewrite (seed 002 需求3 检索触发机制), as pure functions.

The request: the rewrite instruction (prompts.QUERY_REWRITE_SYSTEM) and one user message with the last 5–10
messages of the dialogue and the latest input. Only user and character lines go in (system lines are set-up,
not conversation); a character line is shown as its content and action — emotion and tts text are left out
(tts is often another language, noise for retrieval) — and every line is cut to 200 characters.
A trailing user message equal to the input is not repeated (the memory builder's output ends with it).

The answer (`parse_rewrite`): the first non-empty line, without list bullets, a leading label such as
`查询：` / `独立查询:` / `Query:` and surrounding quotes. Falls back to the raw input when nothing usable is
left: empty, only punctuation, a refusal/none answer (无, None, N/A…), or longer than 200 characters (a model
that explains instead of answering).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from personalab.nodes.rules import prompts
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.reply import parse_reply, render_segments

HISTORY_MIN = 5
HISTORY_MAX = 10
LINE_LIMIT = 200
QUERY_LIMIT = 200

# a short label that names the answer ("改写后的查询：", "独立查询:", "Rewritten query:", "输出：") before a colon
_LABEL_RE = re.compile(r"^[\w ]{0,12}?(?:查询|query|改写|重写|答案|输出)[\w ]{0,8}?[:：]\s*", re.IGNORECASE)
_BULLET_RE = re.compile(r"^(?:[-*•·]|\d+[.、)）])\s*")
_QUOTES = "\"'“”‘’「」『』《》`"
_NONE_ANSWERS = {"无", "没有", "none", "null", "n/a", "na", "空"}


def needs_rewrite(recent_messages: Sequence[Mapping[str, str]]) -> bool:
    """False when there is no dialogue before the input: the input is its own standalone query."""
    return any(m.get("role") in ("user", "assistant") for m in recent_messages)


def _shown(message: Mapping[str, str]) -> str:
    content = message.get("content", "")
    if message.get("role") == "assistant":
        content = render_segments(parse_reply(content), emotion=False, tts=False)
    content = " ".join(content.split())
    return content if len(content) <= LINE_LIMIT else content[:LINE_LIMIT] + "…"


def rewrite_messages(
    user_input: str, recent_messages: Sequence[Mapping[str, str]], max_messages: int = HISTORY_MAX
) -> list[dict[str, str]]:
    """The rewrite request: system instruction + (last `max_messages` dialogue messages, latest input)."""
    if not isinstance(user_input, str) or not user_input.strip():
        raise InvalidInput("rewrite_messages: user_input is empty")
    if not HISTORY_MIN <= max_messages <= HISTORY_MAX:
        raise InvalidInput(f"rewrite_messages: max_messages must be {HISTORY_MIN}..{HISTORY_MAX}, got {max_messages}")
    dialogue = [m for m in recent_messages if m.get("role") in ("user", "assistant")]
    if (
        dialogue
        and dialogue[-1].get("role") == "user"
        and dialogue[-1].get("content", "").strip() == user_input.strip()
    ):
        dialogue = dialogue[:-1]
    lines = []
    for message in dialogue[-max_messages:]:
        speaker = prompts.SPEAKER_USER if message["role"] == "user" else prompts.SPEAKER_CHARACTER
        lines.append(f"{speaker}：{_shown(message)}")
    history = "\n".join(lines) or prompts.QUERY_REWRITE_NO_HISTORY
    system = prompts.QUERY_REWRITE_SYSTEM.format(marker=prompts.purpose_marker(prompts.PURPOSE_QUERY_REWRITE))
    user = prompts.QUERY_REWRITE_USER.format(history=history, user_input=user_input.strip())
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_rewrite(answer: str | None, fallback: str) -> str:
    """One standalone query line from the model's answer, or `fallback` (the raw input) — rules in the module doc."""
    for line in (answer or "").splitlines():
        line = line.strip()
        if not line:
            continue
        line = _BULLET_RE.sub("", line, count=1)
        line = _LABEL_RE.sub("", line, count=1).strip().strip(_QUOTES).strip()
        usable = (
            line
            and any(char.isalnum() for char in line)
            and line.lower().strip("。.!！") not in _NONE_ANSWERS
            and len(line) <= QUERY_LIMIT
        )
        return line if usable else fallback.strip()
    return fallback.strip()


