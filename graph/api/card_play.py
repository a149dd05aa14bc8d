"""A card plays by itself, in its language (issue 28): what `Instances.create` does for an instance made without a
background or a language. Kept apart from the instance's other parts (persona, greeting) so each reads alone.

- No `background_id`: a new background made from the character's card (`scenario`): its one outline point is the
  scenario's opening, and it is open — the director never forces it (nodes/rules/card_play.py).
- No `language`: the language of the card's text (nodes/rules/prompt_catalog.detect_language: the share of CJK
  characters of its description, persona, scenario and first greeting); a given one is checked against the
  supported languages (an `InvalidInput` listing them).
"""

from __future__ import annotations

from typing import Any

from personalab.nodes.rules.card_play import open_outline
from personalab.nodes.rules.character import substitute
from personalab.nodes.rules.prompt_catalog import catalog_for, check_language, detect_language
from personalab.stores.card_play import add_open_background, card_of_role

OPEN_BACKGROUND_NAMES = {"zh": "{name} · 场景", "en": "{name} · scenario"}
OPEN_STORY_POINTS = {"zh": "与{name}的开放故事", "en": "An open story with {name}"}


def instance_language(session: Any, role: Any, language: str | None) -> str:
    """The new instance's language: `language` checked, or the one of the character's text."""
    if language is not None:
        return check_language(language, "instance.language")
    card = card_of_role(session, role.id)
    greetings = list(role.greetings or [])
    texts = [
        role.description or "",
        role.persona or "",
        str(card.get("scenario") or ""),
        greetings[0] if greetings else "",
    ]
    return detect_language(*texts)


def open_background(session: Any, role: Any, owner: str | None, language: str, user_name: str | None = None) -> Any:
    """A background made from the character's card scenario, open (see the module doc); `{{user}}` in its outline
    point is `user_name` (the instance's persona), else the language's default (用户 / User)."""
    scenario = str(card_of_role(session, role.id).get("scenario") or "")
    opening = substitute(scenario, role.name, user_name or catalog_for(language).default_user_name)
    outline = open_outline(opening, OPEN_STORY_POINTS.get(language, OPEN_STORY_POINTS["en"]).format(name=role.name))
    return add_open_background(
        session,
        role,
        owner,
        OPEN_BACKGROUND_NAMES.get(language, OPEN_BACKGROUND_NAMES["en"]).format(name=role.name),
        outline,
    )


def imported_language(value: Any) -> str | None:
    """An exported instance's language as it was (None, from before issue 28, stays None: Chinese); a value this
    version does not support is refused naming the file's field."""
    return None if value is None else check_language(value, "file.instance.language")
