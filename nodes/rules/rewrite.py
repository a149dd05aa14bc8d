"""Conversational RAG query rewrite (seed 002 需求3 检索触发机制), as pure functions.

The request: the rewrite instruction (prompts.QUERY_REWRITE_SYSTEM) and one user message with the last 5–10
messages of the dialogue and the latest input. Only user and character lines go in (system lines are set-up,
not conversation); a character line is shown as its content and action — emotion and tts text are left out
(tts is often another language, noise for retrieval) — and every line is cut to 200 characters.
A trailing user message equal to the input is not repeated (the memory builder's output ends with it).

The answer (`check_rewrite`, `parse_rewrite`): the first non-empty line, without list bullets, a leading label
such as `查询：` / `独立查询:` / `Query:` and surrounding quotes. A line that repeats the request — a sentence of
the instruction (a small model often answers "请输出改写后的独立检索查询（一行）："), or a dialogue line with its
speaker label (`用户：…`), or a section label (`【最近对话】`), or a copy of an earlier dialogue message (12 letters
or more: a weak model answers with the last reply) — is skipped, and so is a short lead-in ending in a colon
(`如下：`). Falls back to the raw input, with the reason, when nothing usable is
left: empty, only punctuation, a refusal/none answer (无, None, N/A…), only echoes of the request, or far longer
than the input (more than 4 × its length and more than 60 characters, or over 200: a model that explains or
rambles instead of answering). Model output is checked, not trusted (issue 17).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from personalab.nodes.rules import prompts
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.reply import parse_reply, render_segments
from personalab.nodes.rules.request_catalog import REQUESTS, RequestTexts, requests_for

HISTORY_MIN = 5
HISTORY_MAX = 10
LINE_LIMIT = 200
QUERY_LIMIT = 200
# the rewrite's answer is one line of at most QUERY_LIMIT characters: the request asks for no more tokens than that
# needs (a tokenizer weak on Chinese spends about 2 tokens a character), so a weak model that rambles on stops
# there instead of holding a one-request-at-a-time local server (llama.cpp) for minutes, the turn's reply queued
# behind it, after the rewrite's own timeout has given up on it
REWRITE_MAX_TOKENS = 2 * QUERY_LIMIT

# a short label that names the answer ("改写后的查询：", "独立查询:", "Rewritten query:", "输出：") before a colon
_LABEL_RE = re.compile(r"^[\w ]{0,12}?(?:查询|query|改写|重写|答案|输出)[\w ]{0,8}?[:：]\s*", re.IGNORECASE)
_BULLET_RE = re.compile(r"^(?:[-*•·]|\d+[.、)）])\s*")
_QUOTES = "\"'“”‘’「」『』《》`"
_NONE_ANSWERS = {"无", "没有", "none", "null", "n/a", "na", "空"}
LONG_RATIO = 4
LONG_FLOOR = 60
ECHO_MIN = 6  # a shorter line may well be a real query that shares words with the instruction
COPY_MIN = 12  # a shorter piece of an earlier message may well be the query's topic
LEAD_IN_MAX = 6  # a line ending in a colon with at most this many letters is a lead-in, not a query
_SPEAKER_RE = re.compile(
    "^(?:"
    + "|".join(re.escape(t.speaker_user) + "|" + re.escape(t.speaker_character) for t in REQUESTS.values())
    + r")\s*[:：]"
)
_PLACEHOLDER_RE = re.compile(r"\{[a-z_]+\}")


def _plain(text: str) -> str:
    """Letters and digits only, lower-cased: how an echo is compared."""
    return "".join(char for char in text.lower() if char.isalnum())


def _instruction_text(texts: RequestTexts) -> str:
    """The fixed text of the rewrite request (instruction and user template without their placeholders)."""
    # the example's answer is a fine query when the input is the example's
    system = "\n".join(
        line for line in _PLACEHOLDER_RE.sub("\n", texts.query_rewrite_system).splitlines() if "→" not in line
    )
    user = _PLACEHOLDER_RE.sub("\n", texts.query_rewrite_user)
    return _plain(system + "\n" + user + texts.marker(prompts.PURPOSE_QUERY_REWRITE))


# the instruction in every language (issue 28): a model that echoes the English instruction is caught too
_INSTRUCTIONS = tuple(_instruction_text(texts) for texts in REQUESTS.values())
# each line of the instruction whole (`要求：` is short, but a copied line all the same)
_INSTRUCTION_LINES = {
    _plain(line)
    for texts in REQUESTS.values()
    for text in (texts.query_rewrite_system, texts.query_rewrite_user)
    for line in _PLACEHOLDER_RE.sub("\n", text).splitlines()
    if _plain(line)
}


def _is_echo(line: str) -> bool:
    plain = _plain(line)
    label = line.startswith("【") and line.rstrip("：:").endswith("】")  # a section label (【最近对话】)
    label = label or (line.startswith("[") and line.rstrip("：:").endswith("]"))  # an English one ([Recent dialogue])
    copied = plain in _INSTRUCTION_LINES or (len(plain) >= ECHO_MIN and any(plain in i for i in _INSTRUCTIONS))
    return label or copied or bool(_SPEAKER_RE.match(line))


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
    user_input: str,
    recent_messages: Sequence[Mapping[str, str]],
    max_messages: int = HISTORY_MAX,
    language: str | None = None,
) -> list[dict[str, str]]:
    """The rewrite request: system instruction + (last `max_messages` dialogue messages, latest input), in the
    instance's `language` (issue 28; None: Chinese)."""
    texts = requests_for(language)
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
        speaker = texts.speaker_user if message["role"] == "user" else texts.speaker_character
        lines.append(f"{speaker}{texts.colon}{_shown(message)}")
    history = "\n".join(lines) or texts.no_history
    system = texts.query_rewrite_system.format(marker=texts.marker(prompts.PURPOSE_QUERY_REWRITE))
    user = texts.query_rewrite_user.format(history=history, user_input=user_input.strip())
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _copies_dialogue(line: str, dialogue: Sequence[str], user_input: str) -> bool:
    """The line is (a long piece of) an earlier dialogue message: a weak model copies the last reply back."""
    plain = _plain(line)
    if len(plain) < COPY_MIN or plain in _plain(user_input):
        return False
    return any(plain in _plain(message) for message in dialogue)


def check_rewrite(answer: str | None, fallback: str, dialogue: Sequence[str] = ()) -> tuple[str, str | None]:
    """(query, None) from the model's answer, or (`fallback` — the raw input —, why) — rules in the module doc.
    `dialogue`: the earlier messages the request showed, so that a copy of one is not taken for a query."""
    echoed = False
    limit = min(QUERY_LIMIT, max(LONG_FLOOR, LONG_RATIO * len(fallback.strip())))
    for raw in (answer or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        if _is_echo(line):
            echoed = True
            continue
        line = _BULLET_RE.sub("", line, count=1)
        line = _LABEL_RE.sub("", line, count=1).strip().strip(_QUOTES).strip()
        if _is_echo(line) or _copies_dialogue(line, dialogue, fallback):
            echoed = True
            continue
        if raw.strip().endswith((":", "：")) and len(_plain(line)) <= LEAD_IN_MAX:
            continue  # a lead-in (如下：, 好的，查询是：): the query, if any, is on the next line
        if not line or not any(char.isalnum() for char in line):
            return fallback.strip(), "no query in the answer"
        if line.lower().strip("。.!！") in _NONE_ANSWERS:
            return fallback.strip(), "the model answered none"
        if len(line) > limit:
            return fallback.strip(), f"answer far longer than the input ({len(line)} characters, limit {limit})"
        return line, None
    return fallback.strip(), "the answer only repeats the request" if echoed else "empty answer"


def parse_rewrite(answer: str | None, fallback: str) -> str:
    """One standalone query line from the model's answer, or `fallback` (the raw input) — rules in the module doc."""
    return check_rewrite(answer, fallback)[0]


RULE_CONTEXT_CHARS = 60  # of the previous user line put before a short input
RULE_SHORT_INPUT = 20  # an input this short leans on the dialogue before it ("那里安全吗？")
REWRITE_ANSWER_TOKENS = 40  # what a rewrite's one-line answer is expected to take, for its time estimate


def rule_rewrite(user_input: str, recent_messages: Sequence[Mapping[str, str]]) -> str:
    """The query without a model (issue 30: a model too slow for the rewrite's share): a short input, which leans on
    what was said before it, gets the previous user line in front of it; a longer one is its own query."""
    query = user_input.strip()
    if len(query) > RULE_SHORT_INPUT:
        return query
    earlier = [m.get("content", "").strip() for m in recent_messages if m.get("role") == "user"]
    earlier = [line for line in earlier if line and line != query]
    if not earlier:
        return query
    return " ".join(earlier[-1].split())[:RULE_CONTEXT_CHARS] + " " + query
