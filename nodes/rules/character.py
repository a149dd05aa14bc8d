"""A character's definition as the model sees it (seed 002 角色: 名称、描述、初始人格设定; SillyTavern's card fields).

- `substitute`: `{{char}}` / `{{user}}` (any case, spaces allowed inside the braces) become the character's and
  the user's names, in every field that reaches the model and in the greeting that opens an instance.
- `persona_text`: the initial persona (free text, traits, backstory, core motives) as one labelled text for the
  prompt's head; `definition_parts`: the head's character block, in the order it is cut when over budget
  (the description goes first, the system prompt and persona never).
- `seeded_core_memory`: a new instance's core memory from the persona (seed 002 会话实例: 复制角色定义 → 创建该实例的
  独立角色状态): traits → `traits`, core motives → `goals`, backstory (or the free persona) → `identity`,
  each cut to the core memory's own limits, which the head's persona block does not have.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from personalab.nodes.rules.core_memory import MAX_GOALS, MAX_STRING, MAX_TRAITS, initial_core_memory

DEFAULT_USER_NAME = "用户"  # what the memory builder calls a user line without a display name
_PLACEHOLDER = re.compile(r"\{\{\s*(char|user)\s*\}\}", re.IGNORECASE)
_LIST_SPLIT = re.compile(r"[\n,，、;；]+")

PERSONA_LABEL = "【角色设定】"
DESCRIPTION_LABEL = "【角色描述】"
SYSTEM_PROMPT_LABEL = "【角色专属指令】"
EXAMPLE_DIALOGUE_LABEL = "【示例对话】（仅示范角色的说话方式，不是已经发生的事）"
POST_HISTORY_LABEL = "【回复要求】"
USER_PERSONA_LABEL = "【用户设定】"  # issue 28: who the user plays, SillyTavern's persona description
USER_PERSONA_LABELS = {"zh": USER_PERSONA_LABEL, "en": "[User persona]"}  # by the instance's language
PERSONA_PARTS = (("persona", ""), ("traits", "性格特征："), ("backstory", "背景故事："), ("motives", "核心动机："))


def substitute(text: str | None, char: str, user: str | None = None) -> str:
    """`text` with `{{char}}` replaced by `char` and `{{user}}` by `user` (default 用户)."""
    if not text:
        return ""
    names = {"char": char, "user": user or DEFAULT_USER_NAME}
    return _PLACEHOLDER.sub(lambda match: names[match.group(1).lower()], text)


def persona_text(fields: Mapping[str, Any]) -> str:
    """The initial persona as one text: the free persona, then traits, backstory and core motives, each labelled."""
    parts = []
    for key, label in PERSONA_PARTS:
        value = str(fields.get(key) or "").strip()
        if value:
            parts.append(label + value)
    return "\n".join(parts)


def definition_parts(character: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(name, text) of the head's character block, most important first: system prompt, persona, description.
    Empty fields are left out; texts are already substituted by the caller. `labels`: the headings in the
    instance's language (issue 28, prompt_catalog.Catalog.labels), the Chinese ones by default."""
    parts = []
    for name, label in (
        ("system_prompt", SYSTEM_PROMPT_LABEL),
        ("persona", PERSONA_LABEL),
        ("description", DESCRIPTION_LABEL),
    ):
        value = str(character.get(name) or "").strip()
        if value:
            parts.append((name, (labels or {}).get(name, label) + "\n" + value))
    return parts


def user_persona_parts(
    description: str | None, char: str, user: str | None, language: str | None = None
) -> list[tuple[str, str]]:
    """The head's block of the user's persona (issue 28; SillyTavern puts the persona description in the story
    string beside the character's): `{{char}}` / `{{user}}` replaced; none without a description. Pinned in the
    head like the character's persona (only the card's description is cut when over budget)."""
    text = substitute(description, char, user).strip()
    if not text:
        return []
    if language == "en":
        return [("user_persona", f"{USER_PERSONA_LABELS['en']} ({user or 'User'})\n{text}")]
    return [("user_persona", f"{USER_PERSONA_LABEL}（{user or DEFAULT_USER_NAME}）\n{text}")]


def _items(text: str | None, limit: int) -> list[str]:
    items = [item.strip() for item in _LIST_SPLIT.split(text or "") if item.strip()]
    return [_cut(item) for item in items[:limit]]


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_STRING else text[: MAX_STRING - 1] + "…"


def seeded_core_memory(name: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """A new instance's core memory from the character's persona fields (see the module doc); valid under the
    core memory's schema. The persona reaches the model whole through the head's character block anyway."""

    def text(key: str) -> str:
        return substitute(str(fields.get(key) or ""), name).strip()

    core = initial_core_memory(name, text("backstory") or text("persona"))
    core["traits"] = _items(text("traits"), MAX_TRAITS)
    core["goals"] = _items(text("motives"), MAX_GOALS)
    return core
