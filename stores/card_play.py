"""What a card brings to its play (issue 28), read at the start of every turn: the instance's language, whether its
background is open (made from the card's scenario), and the scenario and depth prompt of the card the character
was imported from (the `character_card` row keeps the card whole). The rules are in nodes/rules/card_play.py.
"""

from __future__ import annotations

from typing import Any

from personalab.nodes.rules.card_play import depth_prompt_of
from personalab.stores.card_tables import CardRow
from personalab.stores.tables import Background, Save


def card_of_role(session: Any, role_id: int | None) -> dict[str, Any]:
    """The stored card's `data` of the character `role_id`, {} for a character not imported from a card."""
    row = session.get(CardRow, role_id) if role_id is not None else None
    return dict(row.data or {}) if row is not None else {}


def card_play_fields(session: Any, save: Save, background: Background | None) -> dict[str, Any]:
    """The turn character's issue-28 fields: scenario, depth_prompt (plain data), language, open_story."""
    data = card_of_role(session, save.role_id)
    depth = depth_prompt_of(data.get("extensions"))
    scenario = data.get("scenario")
    return {
        "scenario": scenario if isinstance(scenario, str) else "",
        "depth_prompt": {"text": depth.text, "depth": depth.depth, "role": depth.role} if depth else None,
        "language": save.language,
        "open_story": bool(background is not None and background.open_outline),
    }


def add_open_background(session: Any, role: Any, owner: str | None, name: str, outline: list[str]) -> Background:
    """A new background of `owner` for `role`'s card: no world setting (the scenario reaches the prompt with the
    character, where SillyTavern puts it), `outline` (card_play.open_outline) and `open_outline` set."""
    from personalab.stores.library_rows import add_background

    return add_background(session, name, "", outline, owner=owner, open_outline=True)
