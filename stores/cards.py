"""SillyTavern character cards in and out (issue 15): V1, V2 and V3 cards as JSON and as PNG.

Formats read (the `Card` model holds any of them as V3-shaped data):
- V1: the flat object `{"name", "description", "personality", "scenario", "first_mes", "mes_example", ...}`;
- V2: `{"spec": "chara_card_v2", "spec_version": "2.0", "data": {... + creator_notes, system_prompt,
  post_history_instructions, alternate_greetings, character_book, tags, creator, character_version, extensions}}`;
- V3: `{"spec": "chara_card_v3", "spec_version": "3.0", "data": {... + assets, nickname,
  creator_notes_multilingual, source, group_only_greetings, creation_date, modification_date}}`;
- PNG: the avatar image with base64 JSON in `tEXt` chunks `chara` (V2) and `ccv3` (V3); V3 wins when both are
  there (read with Pillow; `zTXt` / `iTXt` chunks of those names are read too).

Nothing is lost: fields this module does not know (in `data` or at the top level, such as the V1 fields
SillyTavern repeats above `data`, or `create_date`) and every `extensions` entry are kept and written back on
export. `import_report` names each field with no effect in PersonaLab (kept for export only).

Exports: V2 JSON, V3 JSON, and PNG (the avatar, or a plain placeholder image for a card without one, with both
chunks). `parse_card_bytes(export_*(card))` gives the same card back (tests/test_cards.py).

Bad input is one `InvalidInput` naming the file and the problem: not a card, a PNG without card chunks, base64
or JSON that does not decode, a field of the wrong kind, a file over `MAX_CARD_BYTES`.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
import warnings
import zlib
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from personalab.nodes.rules.card_play import depth_prompt_of
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.validation import describe
from personalab.stores.files import check_json_tree, parse_json, read_file, write_file
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError

MAX_CARD_BYTES = 20 * 1024 * 1024  # the same limit as every other import
MAX_CARD_PIXELS = 64_000_000  # a bigger "avatar" is a decompression bomb, not a portrait
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
V1, V2, V3 = "chara_card_v1", "chara_card_v2", "chara_card_v3"
Spec = Literal["chara_card_v1", "chara_card_v2", "chara_card_v3"]
PLACEHOLDER_SIZE = (400, 600)  # SillyTavern's avatar shape

# The V1 fields: also what SillyTavern repeats at the top level of a V2 card for V1 readers.
V1_FIELDS = ("name", "description", "personality", "scenario", "first_mes", "mes_example")
V2_FIELDS = (
    *V1_FIELDS,
    "creator_notes",
    "system_prompt",
    "post_history_instructions",
    "alternate_greetings",
    "character_book",
    "tags",
    "creator",
    "character_version",
    "extensions",
)
V3_ONLY_FIELDS = (
    "assets",
    "nickname",
    "creator_notes_multilingual",
    "source",
    "group_only_greetings",
    "creation_date",
    "modification_date",
)

# What PersonaLab does with each card field (the characters issue's fields); every other field, known or
# not, is kept for export and named in the import report as having no effect here.
USED_FIELDS: dict[str, str] = {
    "name": "the character's name",
    "description": "the character's description",
    "personality": "the character's persona",
    "first_mes": "the first greeting",
    "alternate_greetings": "more greetings",
    "mes_example": "the example dialogue",
    "system_prompt": "the character's system prompt",
    "post_history_instructions": "the post-history instructions",
    "character_book": "a world book scoped to the character",
    # issue 28: the card plays by itself — the scenario closes the prompt's character block (and makes the open
    # background of an instance created without one); the depth prompt stands at its depth in the dialogue
    "scenario": "the scenario, in the prompt's character block (and the background of an instance made without one)",
}
# Why a known field has no effect (shown in the report next to its name).
UNUSED_REASONS: dict[str, str] = {
    "creator_notes": "notes for people, never sent to the model",
    "creator_notes_multilingual": "notes for people, never sent to the model",
    "tags": "no tags on characters",
    "creator": "kept for export",
    "character_version": "kept for export",
    "nickname": "{{char}} is the character's name",
    "group_only_greetings": "no group chats",
    "assets": "only the PNG image is the avatar",
    "source": "kept for export",
    "creation_date": "kept for export",
    "modification_date": "kept for export",
}


def _null_text(value: Any) -> Any:
    return "" if value is None else value  # cards write null for an unset text field


def _null_list(value: Any) -> Any:
    return [] if value is None else value


def _null_dict(value: Any) -> Any:
    return {} if value is None else value


def _tag_list(value: Any) -> Any:
    # some editors write the tags as one comma-separated string
    if value is None:
        return []
    if isinstance(value, str):
        return [t.strip() for t in value.split(",") if t.strip()]
    return value


CardText = Annotated[str, BeforeValidator(_null_text), Strict()]
CardTexts = Annotated[list[Annotated[str, Strict()]], BeforeValidator(_null_list)]
CardObject = Annotated[dict[str, Any], BeforeValidator(_null_dict)]


class CardData(BaseModel):
    """A card's `data` in V3's shape (V1 and V2 cards fill what they have). Unknown fields are kept
    (`model_extra`) and exported as they were."""

    model_config = ConfigDict(extra="allow")

    name: CardText
    description: CardText = ""
    personality: CardText = ""
    scenario: CardText = ""
    first_mes: CardText = ""
    mes_example: CardText = ""
    creator_notes: CardText = ""
    system_prompt: CardText = ""
    post_history_instructions: CardText = ""
    alternate_greetings: CardTexts = Field(default_factory=list)
    character_book: Annotated[dict[str, Any] | None, Strict()] = None
    tags: Annotated[list[Annotated[str, Strict()]], BeforeValidator(_tag_list)] = Field(default_factory=list)
    creator: CardText = ""
    character_version: CardText = ""
    extensions: CardObject = Field(default_factory=dict)
    # V3
    assets: Annotated[list[dict[str, Any]] | None, Strict()] = None
    nickname: CardText = ""
    creator_notes_multilingual: Annotated[dict[str, str] | None, Strict()] = None
    source: Annotated[list[str] | None, Strict()] = None
    group_only_greetings: CardTexts = Field(default_factory=list)
    creation_date: Annotated[int | None, Strict()] = None
    modification_date: Annotated[int | None, Strict()] = None


class Card(BaseModel):
    """One character card: `data` (V3-shaped), `spec` it was read as, `top_level` (fields beside `spec`,
    `spec_version` and `data` in the file, kept for export), the PNG avatar's bytes when it came as a PNG,
    and where it was read from (`source`: "JSON" or the PNG chunk)."""

    spec: Spec
    data: CardData
    top_level: dict[str, Any] = Field(default_factory=dict)
    avatar: bytes | None = None
    source: str = "JSON"

    @property
    def name(self) -> str:
        return self.data.name

    def data_dict(self) -> dict[str, Any]:
        """`data` as JSON values, unknown fields included (the V3 fields only when the card has them)."""
        out = self.data.model_dump(mode="json")
        for name in V3_ONLY_FIELDS:
            if out.get(name) in (None, "", []) and name not in self.data.model_fields_set:
                out.pop(name, None)
        if out.get("character_book") is None and "character_book" not in self.data.model_fields_set:
            out.pop("character_book", None)
        return out


@dataclass(frozen=True)
class CardReport:
    """What an import did with the card: the spec and where it came from, the fields that took effect and
    the fields with no effect here (kept for export), each with why."""

    name: str
    spec: str
    source: str
    used: list[str] = field(default_factory=list)
    no_effect: dict[str, str] = field(default_factory=dict)
    book_entries: int = 0

    def summary(self) -> str:
        parts = [f"card {self.name!r} ({self.spec}, from {self.source})"]
        if self.used:
            parts.append("used: " + ", ".join(self.used))
        if self.no_effect:
            parts.append("no effect here (kept for export): " + ", ".join(self.no_effect))
        return "; ".join(parts)


def import_report(card: Card) -> CardReport:
    """The fields of `card` that take effect in PersonaLab and those that do not (non-empty ones only), each
    extension and each unknown field named."""
    data = card.data_dict()
    used: list[str] = []
    no_effect: dict[str, str] = {}
    for name, value in data.items():
        if value in (None, "", [], {}):
            continue
        if name in USED_FIELDS:
            used.append(name)
        elif name == "extensions":
            for ext in value:
                if ext == PERSONALAB_EXTENSION:
                    used.append(f"extensions.{ext}")  # our own fields: traits, backstory, motives
                elif ext == "depth_prompt" and depth_prompt_of(value) is not None:
                    used.append(f"extensions.{ext}")  # issue 28: inserted at its depth (nodes/rules/card_play.py)
                else:
                    no_effect[f"extensions.{ext}"] = _extension_note(ext, value[ext])
        else:
            no_effect[name] = UNUSED_REASONS.get(name, "not a card field PersonaLab knows; kept for export")
    for name in card.top_level:
        if name not in V1_FIELDS:
            no_effect[f"(top level) {name}"] = "kept for export"
    book = data.get("character_book") or {}
    if isinstance(book, dict):  # the book's own settings: those we have become the character's world-book settings
        applied = book_settings(book)
        for name, value in book.items():
            if name in BOOK_SETTINGS and BOOK_SETTINGS[name] in applied:
                used.append(f"character_book.{name}")
            elif name not in ("name", "entries") and value not in (None, "", [], {}, False):
                no_effect[f"character_book.{name}"] = BOOK_NOTES.get(name, "kept for export")
    entries = book.get("entries") if isinstance(book, dict) else None
    return CardReport(
        card.name, card.spec, card.source, used, no_effect, len(entries) if isinstance(entries, list) else 0
    )


BOOK_NOTES = {
    "scan_depth": "not a whole number from 0 to 100; kept for export",
    "token_budget": "not a whole number of tokens; kept for export",
    "recursive_scanning": "not true or false; kept for export",
    "description": "kept for export",
}
# A card book's own settings → the character's world-book settings (`personalab worldbook settings --character ID`)
BOOK_SETTINGS = {"scan_depth": "scan_depth", "token_budget": "max_tokens", "recursive_scanning": "recursive"}


def book_settings(book: dict[str, Any]) -> dict[str, Any]:
    """The world-book settings a card's `character_book` states (scan depth, token budget, recursive scanning), those
    of them that are valid settings (`nodes.rules.worldbook.WorldbookSettings`)."""
    from personalab.nodes.rules.worldbook import WorldbookSettings

    found: dict[str, Any] = {}
    for name, setting in BOOK_SETTINGS.items():
        value = book.get(name)
        if value is None:
            continue
        try:
            WorldbookSettings(**{setting: value})
        except InvalidInput:
            continue
        found[setting] = value
    return found


def _extension_note(name: str, value: Any) -> str:
    if name == "world":
        return f"SillyTavern's linked world info {value!r}: import that file with `personalab worldbook import`"
    if name == "depth_prompt":
        return "the character's note at a depth, empty: nothing to insert"
    return "an extension of another program; kept for export"


# --- parsing --------------------------------------------------------------------------------------


def parse_card_json(value: Any, where: str, *, avatar: bytes | None = None, source: str = "JSON") -> Card:
    """A card from its JSON value (V1, V2 or V3); `InvalidInput` naming `where` when it is not one."""
    check_json_tree(value, where)
    if not isinstance(value, dict):
        raise InvalidInput(f"{where} is not a character card: the top level is not an object")
    spec = value.get("spec")
    if spec in (V2, V3):
        data = value.get("data")
        if not isinstance(data, dict):
            raise InvalidInput(f"{where}: a {spec} card needs a 'data' object")
        # the V1 fields SillyTavern repeats above `data` are copies, written again from `data` on a V2 export
        top = {k: v for k, v in value.items() if k not in ("spec", "spec_version", "data", *V1_FIELDS)}
    elif spec is None:
        if "entries" in value and "name" not in value:
            raise InvalidInput(f"{where} is a world book, not a character card: use `personalab worldbook import`")
        if not isinstance(value.get("name"), str) or not any(k in value for k in V1_FIELDS[1:]):
            raise InvalidInput(
                f"{where} is not a character card: no 'spec' (chara_card_v2 / chara_card_v3) and no V1 fields "
                "(name with description, personality, scenario, first_mes or mes_example)"
            )
        data, top, spec = value, {}, V1
    else:
        raise InvalidInput(f"{where}: unknown card spec {spec!r} (expected {V2} or {V3}, or a V1 card without one)")
    try:
        card_data = CardData.model_validate(data)
    except ValidationError as exc:
        problem = describe(exc, CardData)
        if spec != V1:  # name the field as the file has it
            problem = problem.replace("field '", "field 'data.", 1)
        raise InvalidInput(f"{where}: {problem}") from None
    return Card.model_validate({"spec": spec, "data": card_data, "top_level": top, "avatar": avatar, "source": source})


def _chunk_json(text: str | bytes, where: str, chunk: str) -> Any:
    raw = text.encode("latin-1") if isinstance(text, str) else text
    try:
        decoded = base64.b64decode(raw.strip(), validate=False)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput(f"{where}: the PNG chunk {chunk!r} is not base64 ({exc})") from None
    try:
        payload = decoded.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInput(f"{where}: the PNG chunk {chunk!r} does not decode to UTF-8 text") from None
    if not payload.strip():
        raise InvalidInput(f"{where}: the PNG chunk {chunk!r} is empty once decoded")
    return parse_json(payload, f"{where} (PNG chunk {chunk!r})")


def _png_texts(data: bytes, where: str) -> tuple[dict[str, str | bytes], bytes]:
    """The card chunks of a PNG (`chara`, `ccv3`, any case) and the image re-encoded without them."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            if image.format != "PNG":
                raise InvalidInput(f"{where} is not a PNG image")
            width, height = image.size
            if width * height > MAX_CARD_PIXELS:
                raise InvalidInput(f"{where}: a {width}x{height} image is over {MAX_CARD_PIXELS} pixels")
            image.load()
    except InvalidInput:
        raise
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, zlib.error, Warning) as exc:
        raise InvalidInput(f"{where} is not a readable PNG image ({exc})") from None
    texts = {key.lower(): value for key, value in getattr(image, "text", {}).items()}
    return {k: v for k, v in texts.items() if k in ("chara", "ccv3")}, data


def parse_card_bytes(data: bytes, where: str) -> Card:
    """A card from a file's bytes: a PNG with its chunks (V3's `ccv3` before V2's `chara`) or JSON text."""
    if data.startswith(PNG_SIGNATURE):
        chunks, _ = _png_texts(data, where)
        if not chunks:
            raise InvalidInput(f"{where}: a PNG without a character card (no 'chara' or 'ccv3' text chunk)")
        chunk = "ccv3" if "ccv3" in chunks else "chara"
        value = _chunk_json(chunks[chunk], where, chunk)
        return parse_card_json(value, where, avatar=data, source=f"PNG chunk {chunk}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInput(f"{where} is neither a PNG card nor UTF-8 JSON text") from None
    return parse_card_json(parse_json(text, where), where)


def read_card(path: str | os.PathLike[str]) -> Card:
    """The card in the regular file `path` (PNG or JSON), at most `MAX_CARD_BYTES` read."""
    name = os.fspath(path)
    return parse_card_bytes(read_file(path, MAX_CARD_BYTES, what="card import"), name)


# --- export ---------------------------------------------------------------------------------------


def _document(card: Card, spec: str, version: str) -> dict[str, Any]:
    data = card.data_dict()
    top = dict(card.top_level)
    if spec == V2:  # SillyTavern repeats the V1 fields above `data` for V1 readers
        top.update({name: data.get(name, "") for name in V1_FIELDS})
    return {**top, "spec": spec, "spec_version": version, "data": data}


def export_v2(card: Card) -> dict[str, Any]:
    """The card as a V2 document (every field of `data` kept, V3's too: V2 readers ignore them)."""
    return _document(card, V2, "2.0")


def export_v3(card: Card) -> dict[str, Any]:
    """The card as a V3 document; `group_only_greetings`, required by the V3 spec, is there even when empty
    (a V2 card had none)."""
    document = _document(card, V3, "3.0")
    document["data"].setdefault("group_only_greetings", [])
    return document


def _b64(document: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(document, ensure_ascii=False).encode("utf-8")).decode("ascii")


def export_png(card: Card) -> bytes:
    """The avatar (a placeholder for a card without one) as PNG with `chara` (V2) and `ccv3` (V3) chunks; the
    avatar's own card chunks are replaced, its pixels kept."""
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    image: Image.Image
    if card.avatar is not None:
        image = Image.open(io.BytesIO(card.avatar))
        image.load()
    else:
        image = Image.new("RGB", PLACEHOLDER_SIZE, (200, 200, 200))
    info = PngInfo()
    info.add_text("chara", _b64(export_v2(card)))
    info.add_text("ccv3", _b64(export_v3(card)))
    out = io.BytesIO()
    image.save(out, format="PNG", pnginfo=info)
    return out.getvalue()


def write_card(card: Card, path: str | os.PathLike[str], fmt: str, *, overwrite: bool = True) -> None:
    """Write `card` as `fmt` (v2, v3, png) to a new regular file, all or nothing (`stores.files.write_file`)."""
    if fmt == "png":
        payload = export_png(card)
    elif fmt in ("v2", "v3"):
        document = export_v2(card) if fmt == "v2" else export_v3(card)
        payload = (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode("utf-8")
    else:
        raise InvalidInput(f"card format {fmt!r} is not one of v2, v3, png")
    write_file(path, payload, overwrite=overwrite)


# --- a card as a character ------------------------------------------------------------------------

# The character's fields a card has no place for: written to (and read from) `data.extensions.personalab`.
PERSONALAB_EXTENSION = "personalab"
OWN_FIELDS = ("traits", "backstory", "motives")
# Card field → the character's field (issue 13's names); `greetings` is first_mes + alternate_greetings.
CHARACTER_FIELDS = {
    "name": "name",
    "description": "description",
    "personality": "persona",
    "mes_example": "example_dialogue",
    "system_prompt": "system_prompt",
    "post_history_instructions": "post_history_instructions",
}


def character_fields(card: Card) -> dict[str, Any]:
    """The character the card describes, in the characters issue's fields (name, description, persona,
    greetings, example dialogue, system prompt, post-history instructions, avatar bytes)."""
    data = card.data
    fields: dict[str, Any] = {ours: getattr(data, theirs) for theirs, ours in CHARACTER_FIELDS.items()}
    greetings = [data.first_mes, *data.alternate_greetings]
    fields["greetings"] = greetings if any(g.strip() for g in greetings) else []
    fields["avatar"] = card.avatar
    own = data.extensions.get(PERSONALAB_EXTENSION)
    for name in OWN_FIELDS:  # ours, from a card PersonaLab exported
        value = own.get(name) if isinstance(own, dict) else None
        fields[name] = value if isinstance(value, str) else ""
    return fields


@dataclass(frozen=True)
class CardImport:
    role_id: int
    report: CardReport
    book: Any = None  # the world book's ImportReport, when the card has a character_book


def avatar_png(card: Card) -> bytes | None:
    """The card's image alone (PNG without its card chunks): what the character keeps as its avatar."""
    if card.avatar is None:
        return None
    from PIL import Image

    image = Image.open(io.BytesIO(card.avatar))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def check_card(card: Card, where: str = "the card") -> None:
    """Everything that can be wrong with a card before anything is stored: a name, and a character_book whose
    entries all validate (`InvalidInput` naming the entry and field)."""
    from personalab.stores.worldbook_files import ImportFormatError, parse_worldbook

    if not card.name.strip():
        raise InvalidInput(f"{where}: no name (field 'data.name')")
    if card.data.character_book is not None:
        try:
            parse_worldbook({"data": {"character_book": card.data.character_book}})
        except ImportFormatError as exc:
            raise InvalidInput(f"{where}: character_book: {exc}") from None


def attach_card(session: Any, role_id: int, card: Card, *, keep_avatar: bool = False) -> CardImport:
    """Character `role_id`'s card: its `character_book` as a world book scoped to the character, and the card
    itself for export (`keep_avatar`: its image too, for a role table without an avatar column)."""
    from personalab.stores.card_tables import CardRow
    from personalab.stores.worldbook import Scope
    from personalab.stores.worldbook_files import ImportFormatError, import_worldbook

    book_report = None
    if card.data.character_book is not None:
        try:
            book = {"data": {"character_book": card.data.character_book}}
            book_report = import_worldbook(session, book, Scope(role_id=role_id))
        except ImportFormatError as exc:
            raise InvalidInput(f"the card's character_book: {exc}") from None
        settings = book_settings(card.data.character_book) if isinstance(card.data.character_book, dict) else {}
        if settings:  # the book's scan depth, token budget and recursion, as the character's world-book settings
            from personalab.stores.worldbook_settings import set_worldbook_settings

            set_worldbook_settings(session, Scope(role_id=role_id), settings)
    session.add(
        CardRow(
            role_id=role_id,
            spec=card.spec,
            source=card.source,
            data=card.data_dict(),
            top_level=card.top_level,
            avatar=avatar_png(card) if keep_avatar else None,
        )
    )
    session.flush()
    return CardImport(role_id, import_report(card), book_report)


def import_card(session: Any, card: Card, where: str = "the card") -> CardImport:
    """Store `card` as a new character row (the columns this role table has), its book and the card, in the
    caller's transaction (`session_scope`): a bad book stores nothing. The characters API's path is
    `personalab.graph.api.cards.import_card_file`."""
    from personalab.stores.saves import create_role
    from personalab.stores.tables import Role

    check_card(card, where)
    fields = character_fields(card)
    role = create_role(session, fields["name"], description=fields["description"], persona=fields["persona"])
    columns = set(Role.model_fields)
    avatar = avatar_png(card)
    extra = {
        "greetings": fields["greetings"],
        "example_dialogue": fields["example_dialogue"],
        "system_prompt": fields["system_prompt"],
        "post_history_instructions": fields["post_history_instructions"],
        **{name: fields[name] for name in OWN_FIELDS},
        "avatar_image": avatar,
        "avatar_mime": "image/png" if avatar is not None else None,
    }
    for name, value in extra.items():
        if name in columns:
            setattr(role, name, value)
    session.add(role)
    session.flush()
    assert role.id is not None
    return attach_card(session, role.id, card, keep_avatar="avatar_image" not in columns)


def same_card_character(session: Any, card: Card, owner: str | None, fields: dict[str, Any]) -> int | None:
    """The id of a character of `owner` (the operator: any) imported from a card with the same definition as
    `card` and unchanged since (its stored card's data, its fields `fields` and its avatar are `card`'s), or None
    (issue 28: a second import of the same card is reported, not a silent duplicate)."""
    from personalab.stores.card_tables import CardRow
    from personalab.stores.tables import Role
    from sqlmodel import col, select

    query = select(Role, CardRow).where(col(CardRow.role_id) == col(Role.id), col(Role.name) == card.name)
    if owner is not None:
        query = query.where(col(Role.owner) == owner)
    wanted = json.loads(json.dumps(card.data_dict()))  # as the JSON column gives it back
    avatar = avatar_png(card)
    for role, row in session.exec(query.order_by(col(Role.id))).all():
        if row.data != wanted or bytes(role.avatar_image or b"") != (avatar or b""):
            continue
        if all((getattr(role, name, None) or type(value)()) == value for name, value in fields.items()):
            return int(role.id)
    return None


def card_of_character(session: Any, role_id: int) -> Card:
    """Character `role_id` as a card: the card it was imported from (every field kept) with the character's
    current fields and world book (its own scope) written over it; a character made here as a new V3 card."""
    from personalab.nodes.rules.errors import NotFound
    from personalab.stores.card_tables import CardRow
    from personalab.stores.tables import Role
    from personalab.stores.worldbook import Scope
    from personalab.stores.worldbook_files import export_character_book

    role = session.get(Role, role_id)
    if role is None:
        raise NotFound(f"character {role_id} does not exist")
    row = session.get(CardRow, role_id)
    data: dict[str, Any] = dict(row.data) if row is not None else {"name": role.name}
    current = {
        "name": role.name,
        "description": role.description,
        "personality": role.persona,
        "mes_example": getattr(role, "example_dialogue", None),
        "system_prompt": getattr(role, "system_prompt", None),
        "post_history_instructions": getattr(role, "post_history_instructions", None),
    }
    data.update({name: value for name, value in current.items() if value is not None})
    greetings = getattr(role, "greetings", None)
    if greetings is not None:
        data["first_mes"] = greetings[0] if greetings else ""
        data["alternate_greetings"] = list(greetings[1:])
    own = {name: getattr(role, name, None) for name in OWN_FIELDS}
    extensions = dict(data.get("extensions") or {})
    kept = {**(extensions.get(PERSONALAB_EXTENSION) or {}), **{k: v for k, v in own.items() if v is not None}}
    kept = {k: v for k, v in kept.items() if v}
    if kept:
        extensions[PERSONALAB_EXTENSION] = kept
    else:
        extensions.pop(PERSONALAB_EXTENSION, None)
    data["extensions"] = extensions
    stored_book = data.get("character_book")
    old_book: dict[str, Any] = stored_book if isinstance(stored_book, dict) else {}
    book = export_character_book(session, Scope(role_id=role_id), str(old_book.get("name") or ""))
    if book is not None:  # the book's own settings (scan depth, budget, ...) kept, its entries the world book's
        data["character_book"] = {**old_book, **book}
    elif "character_book" in data:
        data["character_book"] = None
    avatar = getattr(role, "avatar_image", None) or (row.avatar if row is not None else None)
    card = parse_card_json(
        {"spec": V3, "data": data, **(row.top_level if row is not None else {})}, f"character {role_id}"
    )
    return card.model_copy(
        update={"spec": row.spec if row is not None else V3, "avatar": avatar, "source": f"character {role_id}"}
    )
