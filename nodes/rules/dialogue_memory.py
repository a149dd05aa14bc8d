"""Dialogue lines as long-term memories: one memory per line, the lines before it as its context.

Seed 001 记忆条目数据结构 (type ``conversation``: 对话记忆, 记录与角色的对话内容) and 数据流设计 (对话 → 记忆).
Pure: plain data in, memory items for `stores.memory.MemoryStore.add_memories` out.

Why a window: a line alone often does not say what it is about ("Yes! Last Sunday, with the kids." answers
the question before it). Each memory holds its line — who said it, the text, what they shared beside it (an
image's caption), and when, if the caller knows — and, as `context`, the line(s) said just before it: the
store keeps and embeds the context with the memory and weighs its words half in keyword search. Measured on
LoCoMo with the product's retrieval and the recall weights (`evals.locomo`, recall@10, categories 1–4, all
10 conversations): the line alone .629, with the previous line as context .693, plus the session date as
`when` .711 (the date alone adds .016 to the line alone: 13 % of the questions name a date or month). On the
first five conversations (where these choices are made): one line of context .736, two .755, three .699 —
three lines bury the memory's own words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.memory_layers import MemoryType

CONTEXT_LINES = 2  # lines before a line that are stored as its context (see the module docstring)


@dataclass(frozen=True)
class DialogueLine:
    """One line of a dialogue. `when`: when it was said, as the caller writes times ("8 May, 2023", "第三天
    傍晚"), so that a question naming that time finds it; `attachment`: what the speaker shared with the line
    (e.g. an image's caption), "" for none."""

    speaker: str
    text: str
    when: str = ""
    attachment: str = ""


def line_text(line: DialogueLine) -> str:
    """``Speaker: text [shares attachment]`` (the speaker left out when unknown)."""
    text = line.text.strip()
    if line.attachment.strip():
        text = f"{text} [shares {line.attachment.strip()}]".strip()
    speaker = line.speaker.strip()
    return f"{speaker}: {text}" if speaker else text


def _check_line(line: object, position: int) -> DialogueLine:
    if not isinstance(line, DialogueLine):
        raise InvalidInput(f"dialogue line {position}: {line!r} is not a DialogueLine")
    for name in ("speaker", "text", "when", "attachment"):
        if not isinstance(getattr(line, name), str):
            raise InvalidInput(f"dialogue line {position}: {name} {getattr(line, name)!r} is not text")
    if not line.text.strip() and not line.attachment.strip():
        raise InvalidInput(f"dialogue line {position} says nothing (no text, no attachment)")
    return line


def dialogue_memories(
    lines: Sequence[DialogueLine], *, context_lines: int = CONTEXT_LINES, first_turn: int = 0
) -> list[dict[str, Any]]:
    """Memory items (type ``conversation``) for `lines`, in order: line ``i`` becomes a memory whose content is
    ``[when] Speaker: text`` and whose context is the `context_lines` lines before it (0: no context), at turn
    ``first_turn + i``, `related_character` its speaker. `ValueError` naming the first bad line; nothing is
    returned for a dialogue with a bad line."""
    if isinstance(context_lines, bool) or not isinstance(context_lines, int) or context_lines < 0:
        raise InvalidInput(f"context_lines {context_lines!r} is not a whole number ≥ 0")
    if isinstance(first_turn, bool) or not isinstance(first_turn, int) or first_turn < 0:
        raise InvalidInput(f"first_turn {first_turn!r} is not a whole number ≥ 0")
    checked = [_check_line(line, position) for position, line in enumerate(lines, start=1)]
    texts = [line_text(line) for line in checked]
    items: list[dict[str, Any]] = []
    for index, line in enumerate(checked):
        when = line.when.strip()
        before = texts[max(0, index - context_lines) : index] if context_lines else []
        items.append(
            {
                "content": f"[{when}] {texts[index]}" if when else texts[index],
                "context": "\n".join(before),
                "type": MemoryType.CONVERSATION.value,
                "turn": first_turn + index,
                "related_character": line.speaker.strip(),
            }
        )
    return items
