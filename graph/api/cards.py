"""SillyTavern character cards through the characters API (issue 15): a card file becomes a character, a character
becomes a card file.

- `import_card_file(path)`: the card (V1 / V2 / V3 JSON or a PNG card, `stores.cards`) is checked whole first (its
  name, every entry of its `character_book`), then created with `graph.api.library.create_character` (name,
  description, persona ← personality, greetings ← first_mes + alternate_greetings, example dialogue, system
  prompt, post-history instructions, the PNG's image as avatar); its `character_book` becomes a world book scoped
  to that character and the card is kept for export. Should that last step fail, the character is deleted
  again: a bad file leaves nothing behind.
- `export_card_file(character_id, path, fmt)`: V2 JSON, V3 JSON or PNG (avatar + `chara` and `ccv3` chunks), from
  the card the character came from (every field kept) with the character's current fields and world book.
"""

from __future__ import annotations

import json
import os
from typing import Any

from personalab.graph.api.library import (
    CharacterInput,
    create_character,
    delete_character,
    get_character,
    validate_model,
)
from personalab.nodes.rules.errors import InvalidInput
from personalab.stores.cards import (
    MAX_CARD_BYTES,
    Card,
    attach_card,
    avatar_png,
    card_of_character,
    character_fields,
    check_card,
    export_png,
    export_v2,
    export_v3,
    parse_card_bytes,
    read_card,
    write_card,
)
from personalab.stores.db import session_scope
from pydantic import BaseModel

FORMATS = ("v2", "v3", "png")


class CardImported(BaseModel):
    """What `import_card_file` did: the character's id and name, the card's spec and where it was read from,
    the fields that took effect, those that did not (kept for export, with why), and the world book's import."""

    character_id: int
    name: str
    spec: str
    source: str
    used: list[str]
    no_effect: dict[str, str]
    book: dict[str, Any] | None = None

    def summary(self) -> str:
        parts = [f"character {self.character_id} {self.name!r} from a {self.spec} card ({self.source})"]
        if self.book is not None:
            parts.append(f"world book: {self.book['summary']}")
        if self.no_effect:
            parts.append("no effect here (kept for export): " + ", ".join(self.no_effect))
        return "; ".join(parts)


def import_card_file(path: str | os.PathLike[str], *, database_url: str | None = None) -> CardImported:
    """A new character from the card file `path` (see the module doc)."""
    return _import(read_card(path), os.fspath(path), database_url)


def import_card_bytes(
    data: bytes, name: str = "the card", *, owner: str | None = None, database_url: str | None = None
) -> CardImported:
    """A new character from a card file's bytes (a PNG card or JSON text; an upload), at most `MAX_CARD_BYTES`;
    `name` is what errors call it. The character is `owner`'s (issue 14; None: the operator's)."""
    if len(data) > MAX_CARD_BYTES:
        raise InvalidInput(f"{name}: over the card import limit of {MAX_CARD_BYTES} bytes")
    return _import(parse_card_bytes(data, name), name, database_url, owner)


def _import(card: Card, where: str, database_url: str | None, owner: str | None = None) -> CardImported:
    check_card(card, where)
    fields = character_fields(card)
    names = ("name", "description", "persona", "traits", "backstory", "motives", "greetings", "example_dialogue")
    data = {name: fields[name] for name in (*names, "system_prompt", "post_history_instructions")}
    # a card's text over the library's limits is refused naming the field, as a typed-in character is
    character_input = validate_model(CharacterInput, {**data, "avatar": avatar_png(card)}, where)
    character = create_character(character_input, owner=owner, database_url=database_url)
    try:
        with session_scope(database_url) as session:
            done = attach_card(session, character.id, card)
    except BaseException:
        delete_character(character.id, cascade=True, database_url=database_url)
        raise
    book = None
    if done.book is not None:
        book = {
            "format": done.book.format,
            "imported": done.book.imported,
            "duplicates": done.book.duplicates,
            "skipped": done.book.skipped,
            "positions": done.book.positions,
            "no_effect": done.book.ignored_fields,
            "summary": done.book.summary(),
        }
    return CardImported(
        character_id=character.id,
        name=character.name,
        spec=card.spec,
        source=card.source,
        used=done.report.used,
        no_effect=done.report.no_effect,
        book=book,
    )


def export_card_file(
    character_id: int, path: str | os.PathLike[str], fmt: str = "png", *, database_url: str | None = None
) -> str:
    """Write character `character_id` as a card file (`fmt` v2, v3 or png; a plain file is replaced) and return
    the character's name."""
    get_character(character_id, database_url=database_url)  # NotFound naming the id
    with session_scope(database_url) as session:
        card = card_of_character(session, character_id)
    write_card(card, path, fmt, overwrite=True)
    return card.name


MEDIA_TYPES = {"png": "image/png", "v2": "application/json", "v3": "application/json"}


def export_card_bytes(
    character_id: int, fmt: str = "png", *, owner: str | None = None, database_url: str | None = None
) -> tuple[bytes, str]:
    """Character `character_id` (one `owner` sees) as a card file's bytes (`fmt` v2, v3 or png) and its media
    type."""
    if fmt not in FORMATS:
        raise InvalidInput(f"card format {fmt!r} is not one of {', '.join(FORMATS)} (field 'format')")
    get_character(character_id, owner=owner, database_url=database_url)  # NotFound naming the id
    with session_scope(database_url) as session:
        card = card_of_character(session, character_id)
    if fmt == "png":
        return export_png(card), MEDIA_TYPES[fmt]
    document = export_v2(card) if fmt == "v2" else export_v3(card)
    return (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8"), MEDIA_TYPES[fmt]
