"""SillyTavern character cards through the characters API (issue 15): `PersonaLab(...).cards` (`Cards`). A card
file becomes a character, a character becomes a card file.

- `import_file(path)` / `import_bytes(data)`: the card (V1 / V2 / V3 JSON or a PNG card, `stores.cards`) is checked
  whole first (its name, every entry of its `character_book`), then the character (name, description, persona ←
  personality, greetings ← first_mes + alternate_greetings, example dialogue, system prompt, post-history
  instructions, the PNG's image as avatar), its `character_book` as a world book scoped to that character and the
  card kept for export are stored in one transaction: a bad file leaves nothing behind.
- `export_file(character_id, path, fmt)` / `export_bytes(character_id, fmt)`: V2 JSON, V3 JSON or PNG (avatar +
  `chara` and `ccv3` chunks), from the card the character came from (every field kept) with the character's current
  fields and world book.

The module-level functions are the previous release's API, kept for one release.
"""

from __future__ import annotations

import json
import os

from personalab.graph.api.caller import Caller
from personalab.graph.api.library import Characters, _Area
from personalab.graph.api.schemas.cards import FORMATS, MEDIA_TYPES, CardImported
from personalab.graph.api.schemas.library import CharacterInput, validate_model
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
    import_report,
    parse_card_bytes,
    read_card,
    same_card_character,
    write_card,
)

CHARACTER_FIELDS = (
    "name",
    "description",
    "persona",
    "traits",
    "backstory",
    "motives",
    "greetings",
    "example_dialogue",
    "system_prompt",
    "post_history_instructions",
)


class Cards(_Area):
    """Character cards in and out (issue 15)."""

    def import_file(self, path: str | os.PathLike[str], *, copy: bool = False) -> CardImported:
        """A new character of the caller from the card file `path` (see the module doc); the same card imported
        again reuses its character (`reused`) unless `copy`."""
        return self._import(read_card(path), os.fspath(path), copy)

    def import_bytes(self, data: bytes, name: str = "the card", *, copy: bool = False) -> CardImported:
        """A new character of the caller from a card file's bytes (a PNG card or JSON text; an upload), at most
        `MAX_CARD_BYTES`; `name` is what errors call it. The same card again reuses its character unless `copy`."""
        if len(data) > MAX_CARD_BYTES:
            raise InvalidInput(f"{name}: over the card import limit of {MAX_CARD_BYTES} bytes")
        return self._import(parse_card_bytes(data, name), name, copy)

    def _import(self, card: Card, where: str, copy: bool = False) -> CardImported:
        check_card(card, where)
        fields = character_fields(card)
        data = {name: fields[name] for name in CHARACTER_FIELDS}
        # a card's text over the library's limits is refused naming the field, as a typed-in character is
        character_input = validate_model(CharacterInput, {**data, "avatar": avatar_png(card)}, where)
        with self._session() as session:  # the character, its world book and the card: all or nothing
            # issue 28: the same card again (same definition, the character unchanged) is reported, not duplicated
            same = None if copy else same_card_character(session, card, self.owner, {**data, "name": card.name})
            if same is not None:
                report = import_report(card)
                return CardImported(
                    character_id=same,
                    name=card.name,
                    spec=card.spec,
                    source=card.source,
                    used=report.used,
                    no_effect=report.no_effect,
                    reused=True,
                )
            character_row = Characters(self.caller).add(session, character_input)
            assert character_row.id is not None
            done = attach_card(session, character_row.id, card)
            character_id, name = character_row.id, character_row.name
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
            character_id=character_id,
            name=name,
            spec=card.spec,
            source=card.source,
            used=done.report.used,
            no_effect=done.report.no_effect,
            book=book,
        )

    def _card(self, character_id: int) -> Card:
        Characters(self.caller).get(character_id)  # NotFound naming the id (another user's too)
        with self._session() as session:
            return card_of_character(session, character_id)

    def export_file(self, character_id: int, path: str | os.PathLike[str], fmt: str = "png") -> str:
        """Write character `character_id` as a card file (`fmt` v2, v3 or png; a plain file is replaced) and
        return the character's name."""
        card = self._card(character_id)
        write_card(card, path, fmt, overwrite=True)
        return card.name

    def export_bytes(self, character_id: int, fmt: str = "png") -> tuple[bytes, str]:
        """Character `character_id` (one the caller sees) as a card file's bytes (`fmt` v2, v3 or png) and its
        media type."""
        if fmt not in FORMATS:
            raise InvalidInput(f"card format {fmt!r} is not one of {', '.join(FORMATS)} (field 'format')")
        card = self._card(character_id)
        if fmt == "png":
            return export_png(card), MEDIA_TYPES[fmt]
        document = export_v2(card) if fmt == "v2" else export_v3(card)
        return (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8"), MEDIA_TYPES[fmt]


# ---- the previous release's functions (one release more) ---------------------------------------------------------


def _cards(owner: str | None, database_url: str | None) -> Cards:
    return Cards(Caller(owner=owner, database_url=database_url))


def import_card_file(path: str | os.PathLike[str], *, database_url: str | None = None) -> CardImported:
    return _cards(None, database_url).import_file(path)


def import_card_bytes(
    data: bytes, name: str = "the card", *, owner: str | None = None, database_url: str | None = None
) -> CardImported:
    return _cards(owner, database_url).import_bytes(data, name)


def export_card_file(
    character_id: int, path: str | os.PathLike[str], fmt: str = "png", *, database_url: str | None = None
) -> str:
    return _cards(None, database_url).export_file(character_id, path, fmt)


def export_card_bytes(
    character_id: int, fmt: str = "png", *, owner: str | None = None, database_url: str | None = None
) -> tuple[bytes, str]:
    return _cards(owner, database_url).export_bytes(character_id, fmt)


__all__ = ["FORMATS", "MEDIA_TYPES", "CardImported", "Cards"]
