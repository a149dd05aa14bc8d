"""What a card import reports (issue 15: SillyTavern character cards in and out)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

FORMATS = ("v2", "v3", "png")
MEDIA_TYPES = {"png": "image/png", "v2": "application/json", "v3": "application/json"}


class CardImported(BaseModel):
    """What a card import did: the character's id and name, the card's spec and where it was read from, the
    fields that took effect, those that did not (kept for export, with why), and the world book's import."""

    character_id: int
    name: str
    spec: str
    source: str
    used: list[str]
    no_effect: dict[str, str]
    book: dict[str, Any] | None = None
    reused: bool = False
    """The same card (same definition) was imported before: its character is returned, nothing new is stored
    (issue 28; `copy` imports it again as a new character)."""

    def summary(self) -> str:
        if self.reused:
            return (
                f"already imported: character {self.character_id} {self.name!r} has this card's definition "
                "(reused; import with copy for a new character)"
            )
        parts = [f"character {self.character_id} {self.name!r} from a {self.spec} card ({self.source})"]
        if self.book is not None:
            parts.append(f"world book: {self.book['summary']}")
        if self.no_effect:
            parts.append("no effect here (kept for export): " + ", ".join(self.no_effect))
        return "; ".join(parts)
