"""World-book and knowledge files: SillyTavern world info / lorebooks and our own formats, import and export.

Imports are all-or-nothing: the whole file is parsed and every entry validated before anything is written,
and the caller's transaction (`session_scope`) commits the rows together or not at all. A bad file raises
`ImportFormatError` (a `ValueError`) naming the entry (1-based index in the file, and its uid when it has
one) and the field. Files read:
- PersonaLab exports (`{"format": "personalab.worldbook" | "personalab.knowledge", "version": 1,
  "entries": [...]}`), strict: an unknown field is an error (a typo would otherwise be lost silently);
- SillyTavern world info / lorebook files (`{"entries": {"<uid>": {"uid", "key", "keysecondary", "comment",
  "content", "constant", "vectorized", "selective", "selectiveLogic", "order", "position", "role",
  "disable", ...}}}`; the entries may also be a list);
- character-card lorebooks (`character_book`: `keys`, `secondary_keys`, `content`, `enabled`,
  `insertion_order`, `constant`, `name` / `comment`, `id`), alone or inside a V2 / V3 card (`data`).
SillyTavern fields with no counterpart here (a depth the tail cannot honour, the match-the-character's-fields
options, automation, ...) are kept for export and named in the import report; the trigger reads the rest
(probability, case, whole words, scan depth, groups, sticky / cooldown / delay, recursion). Entries with empty content, and non-constant entries without any key (which
SillyTavern never fires either), are skipped and reported, not errors. Each entry is read by a pydantic
model: ours by `WorldbookEntry` / `KnowledgeEntry` themselves, SillyTavern's and a card's by
`SillyTavernEntry` / `CardEntry` (so an error names the file's own field), then mapped to ours.

Documented limits: file size `MAX_IMPORT_BYTES` (at most that much is read, from a regular file only), entries
per file `MAX_IMPORT_ENTRIES`, content per entry `nodes.rules.worldbook.MAX_CONTENT_CHARS`, keywords per entry
`MAX_KEYWORDS` of at most `MAX_KEYWORD_CHARS`, nesting `stores.files.MAX_JSON_DEPTH`; no NUL character in any
text (PostgreSQL cannot store one). Exports write a new regular file atomically (`stores.files.write_file`).

Knowledge exports leave the keywords out unless asked (seed 001: keywords are "用户手动设置,不导出导入",
set by hand on each installation); imports read them when present.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.knowledge import KnowledgeEntry, validate_knowledge
from personalab.nodes.rules.validation import Flag, Number, Text, Whole, json_type, validated
from personalab.nodes.rules.worldbook import EXPORTED_FIELDS, WorldbookEntry, validate_entry
from personalab.nodes.rules.worldbook_keys import is_regex_key, key_pattern
from personalab.stores.db import INTEGER_MAX, INTEGER_MIN
from personalab.stores.files import check_json_tree, read_json, write_file
from personalab.stores.worldbook import (
    GLOBAL,
    Scope,
    add_worldbook_row,
    check_scope,
    knowledge_row,
    list_knowledge,
    list_worldbook,
    worldbook_entries,
    worldbook_rows,
)
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError
from sqlmodel import Session

E = TypeVar("E")

WORLDBOOK_FORMAT = "personalab.worldbook"
KNOWLEDGE_FORMAT = "personalab.knowledge"
FORMAT_VERSION = 1
MAX_IMPORT_BYTES = 20 * 1024 * 1024
MAX_IMPORT_ENTRIES = 10_000

# SillyTavern world_info_position.atDepth and extension_prompt_roles (0 system, 1 user, 2 assistant).
ST_POSITION_AT_DEPTH = 4
ST_ROLES = {0: "system", 1: "user", 2: "assistant"}
ST_LOGIC = {0: "and_any", 1: "not_all", 2: "not_any", 3: "and_all"}
ST_MAPPED = {
    "uid",
    "key",
    "keysecondary",
    "comment",
    "content",
    "constant",
    "vectorized",
    "selective",
    "selectiveLogic",
    "order",
    "position",
    "role",
    "disable",
}
# Kept with the entry (its source) and read by the trigger (`nodes.rules.worldbook.sillytavern_options`).
ST_READ = {
    "caseSensitive",
    "matchWholeWords",
    "probability",
    "useProbability",
    "scanDepth",
    "group",
    "groupOverride",
    "groupWeight",
    "sticky",
    "cooldown",
    "delay",
    "excludeRecursion",
    "preventRecursion",
    "delayUntilRecursion",
}
# Present in every SillyTavern entry and meaningless here; not worth a note.
ST_SILENT = {"displayIndex", "addMemo", "extensions", "characterFilter", "automationId", "hash", "world"}
# Fields with no counterpart here, with their SillyTavern defaults (newWorldInfoEntryDefinition; older files
# write 0 for the timed effects): only a field set to something else is reported as ignored.
ST_UNMAPPED_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "matchPersonaDescription": (False,),
    "matchCharacterDescription": (False,),
    "matchCharacterPersonality": (False,),
    "matchCharacterDepthPrompt": (False,),
    "matchScenario": (False,),
    "matchCreatorNotes": (False,),
    "depth": (4,),
    "useGroupScoring": (None, False),
    "triggers": ([],),
}
CARD_MAPPED = {
    "id",
    "keys",
    "secondary_keys",
    "content",
    "enabled",
    "insertion_order",
    "constant",
    "name",
    "comment",
    "selective",
    "position",
    "case_sensitive",
}
CARD_SILENT = {"extensions", "use_regex", "priority"}
# A card entry's `extensions` as SillyTavern writes them (convertWorldInfoToCharacterBook): the ones read here,
# and the rest with their defaults (only a value set to something else is named in the report).
CARD_EXT_MAPPED = {
    "position",
    "role",
    "depth",
    "selectiveLogic",
    "probability",
    "useProbability",
    "case_sensitive",
    "match_whole_words",
    "vectorized",
    "display_index",
    "scan_depth",
    "group",
    "group_override",
    "group_weight",
    "sticky",
    "cooldown",
    "delay",
    "exclude_recursion",
    "prevent_recursion",
    "delay_until_recursion",
}
CARD_EXT_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "use_group_scoring": (False, None),
    "automation_id": ("", None),
    "outlet_name": ("", None),
    "match_persona_description": (False, None),
    "match_character_description": (False, None),
    "match_character_personality": (False, None),
    "match_character_depth_prompt": (False, None),
    "match_scenario": (False, None),
    "match_creator_notes": (False, None),
    "triggers": ([], None),
    "ignore_budget": (False, None),
}
# SillyTavern's world_info_position numbers and a card entry's position words
ST_POSITION_NAMES = {
    0: "before_char",
    1: "after_char",
    2: "an_top",
    3: "an_bottom",
    4: "at_depth",
    5: "em_top",
    6: "em_bottom",
    7: "outlet",
}
PERSONALAB_EXTENSION = "personalab"  # our own fields in an exported SillyTavern entry's `extensions`


class ImportFormatError(InvalidInput):
    """A malformed import file; the message names the entry and the field."""


@dataclass(frozen=True)
class ImportReport:
    """`ignored_fields`: SillyTavern fields set to something that has no effect here (they are kept with the
    entry and exported again); `positions`: how the entries' SillyTavern positions map to our regions."""

    format: str
    imported: int
    duplicates: int = 0
    skipped: list[str] = field(default_factory=list)
    ignored_fields: list[str] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        parts = [f"imported {self.imported} entries ({self.format})"]
        if self.duplicates:
            parts.append(f"{self.duplicates} already stored")
        if self.skipped:
            parts.append(
                f"skipped {len(self.skipped)}: "
                + "; ".join(self.skipped[:5])
                + ("; ..." if len(self.skipped) > 5 else "")
            )
        if self.positions:
            parts.append("positions: " + ", ".join(f"{n} {where}" for where, n in self.positions.items()))
        if self.ignored_fields:
            parts.append("no effect here (kept for export): " + ", ".join(self.ignored_fields))
        return "; ".join(parts)


# --- knowledge ------------------------------------------------------------------------------------


def export_knowledge(session: Session, scope: Scope = GLOBAL, *, with_keywords: bool = False) -> dict[str, Any]:
    """The entries of exactly `scope` as a PersonaLab knowledge file (keywords only with `with_keywords`)."""
    entries = []
    for k in list_knowledge(session, scope):
        item: dict[str, Any] = {
            "tag": k.tag,
            "content": k.content,
            "importance": k.importance,
            "enabled": k.enabled,
            "user_edited": k.user_edited,
        }
        if k.created_turn is not None:  # made from an event (seed creationTick); permanent knowledge has none
            item["created_turn"] = k.created_turn
        if with_keywords:
            item["keywords"] = list(k.keywords)
        entries.append(item)
    return {"format": KNOWLEDGE_FORMAT, "version": FORMAT_VERSION, "entries": entries}


KNOWLEDGE_FIELDS = {"tag", "content", "importance", "keywords", "enabled", "user_edited", "created_turn"}


def parse_knowledge(data: Any) -> list[KnowledgeEntry]:
    """Validated entries of a knowledge file (a PersonaLab export, `{"entries": [...]}` or a bare list).
    Raises ImportFormatError naming the entry and the field."""
    _file_error(check_json_tree, data, "import")
    if isinstance(data, dict):
        fmt = data.get("format")
        if fmt is not None and fmt != KNOWLEDGE_FORMAT:
            raise ImportFormatError(f"file format is {fmt!r}, not {KNOWLEDGE_FORMAT!r}")
        _check_version(data)
        if "entries" not in data:
            raise ImportFormatError("not a knowledge file: no 'entries' list")
        raw_entries = data["entries"]
    elif isinstance(data, list):
        raw_entries = data
    else:
        raise ImportFormatError(f"top level must be an object or a list, got {json_type(data)}")
    if not isinstance(raw_entries, list):
        raise ImportFormatError(f"'entries' must be a list, got {json_type(raw_entries)}")
    _check_count(raw_entries)
    out: list[KnowledgeEntry] = []
    for index, raw in enumerate(raw_entries, start=1):
        where = f"entry {index}"
        if not isinstance(raw, dict):
            raise ImportFormatError(f"{where}: must be an object, got {json_type(raw)}")
        unknown = set(raw) - KNOWLEDGE_FIELDS  # the model has more fields (id, scope), none of them a file's
        if unknown:
            raise ImportFormatError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        out.append(_file_error(validate_knowledge, {**raw, "id": str(index)}, where))
    return out


def import_knowledge(session: Session, data: Any, scope: Scope = GLOBAL) -> ImportReport:
    """Add every entry of `data` to `scope`, or none (see the module doc). Entries already stored in that
    scope with the same tag and content are not added twice."""
    entries = parse_knowledge(data)
    check_scope(session, scope)
    seen = {(k.tag, k.content) for k in list_knowledge(session, scope)}
    duplicates = 0
    for entry in entries:
        if (entry.tag, entry.content) in seen:
            duplicates += 1
            continue
        seen.add((entry.tag, entry.content))
        session.add(knowledge_row(entry.model_copy(update={"role_id": scope.role_id, "save_id": scope.save_id})))
    session.flush()
    return ImportReport(KNOWLEDGE_FORMAT, len(entries) - duplicates, duplicates)


# --- world book -----------------------------------------------------------------------------------


def export_worldbook(session: Session, scope: Scope = GLOBAL) -> dict[str, Any]:
    """The entries of exactly `scope` as a PersonaLab world-book file (with the SillyTavern entry each imported
    one came from, so nothing of it is lost)."""
    rows = worldbook_rows(session, scope)
    entries = []
    for row, entry in zip(rows, worldbook_entries(session, rows), strict=True):
        item = {"uid": row.uid if row.uid is not None else str(row.id), **entry.fields_dict()}
        if entry.source is not None:
            item.update(source=entry.source, source_format=entry.source_format)
        entries.append(item)
    return {"format": WORLDBOOK_FORMAT, "version": FORMAT_VERSION, "entries": entries}


@dataclass(frozen=True)
class ParsedWorldbook:
    format: str
    entries: list[tuple[WorldbookEntry, str | None]]  # (entry, source uid)
    skipped: list[str] = field(default_factory=list)
    ignored_fields: list[str] = field(default_factory=list)
    positions: dict[str, int] = field(default_factory=dict)


# our own file format: the exported fields, the entry's uid and the SillyTavern entry it came from
OUR_FIELDS = {"uid", *EXPORTED_FIELDS, "source", "source_format"}


def parse_worldbook(data: Any) -> ParsedWorldbook:
    """Validated entries of a world-book file: a PersonaLab export, a SillyTavern world info file (entries
    keyed by uid, or a list) or a character-card lorebook. Raises ImportFormatError naming entry and field."""
    _file_error(check_json_tree, data, "import")
    ours = False
    fmt_name = "SillyTavern world info"
    if isinstance(data, dict):
        fmt = data.get("format")
        if fmt is not None:
            if fmt != WORLDBOOK_FORMAT:
                raise ImportFormatError(f"file format is {fmt!r}, not {WORLDBOOK_FORMAT!r}")
            _check_version(data)
            ours, fmt_name = True, WORLDBOOK_FORMAT
        container = data
        card = data.get("data")
        if isinstance(card, dict) and "character_book" in card:
            container, fmt_name = card["character_book"], "character card lorebook"
            if not isinstance(container, dict):
                raise ImportFormatError(f"'data.character_book' must be an object, got {json_type(container)}")
        if "entries" not in container:
            raise ImportFormatError(
                "not a world book: no 'entries' (expected a PersonaLab export, a SillyTavern world info file "
                "or a character book)"
            )
        raw_entries = container["entries"]
    elif isinstance(data, list):
        raw_entries = data
    else:
        raise ImportFormatError(f"top level must be an object or a list, got {json_type(data)}")
    if isinstance(raw_entries, dict):
        items: list[tuple[Any, Any]] = list(raw_entries.items())
    elif isinstance(raw_entries, list):
        items = [(None, raw) for raw in raw_entries]
    else:
        raise ImportFormatError(f"'entries' must be an object keyed by uid or a list, got {json_type(raw_entries)}")
    _check_count(items)

    entries: list[tuple[WorldbookEntry, str | None]] = []
    skipped: list[str] = []
    ignored: set[str] = set()
    positions: dict[str, int] = {}
    card_entries = 0
    for index, (key, raw) in enumerate(items, start=1):
        if not isinstance(raw, dict):
            raise ImportFormatError(f"entry {index}{_uid_note(key)}: must be an object, got {json_type(raw)}")
        uid = raw.get("uid", raw.get("id", key))
        if uid is not None and (isinstance(uid, bool) or not isinstance(uid, int | str)):
            raise ImportFormatError(f"entry {index}: field 'uid' must be a number or a string, got {json_type(uid)}")
        uid_text = None if uid is None else str(uid)
        where = f"entry {index}{_uid_note(uid_text)}"
        entry: WorldbookEntry | None
        note: str | None
        if ours or (not {"key", "keys"} & set(raw) and {"keywords", "trigger_type"} & set(raw)):
            entry, note = _from_ours(raw, where), None
        elif "keys" in raw or "insertion_order" in raw or "secondary_keys" in raw:
            card_entries += 1
            entry, note = _from_card(raw, where, ignored, positions)
        else:
            entry, note = _from_sillytavern(raw, where, ignored, positions)
        if entry is None:
            skipped.append(f"{where} {note}")
            continue
        _check_integers(entry, where)
        entries.append((entry, uid_text))
    if not ours and card_entries == len(items) and items and fmt_name != "character card lorebook":
        fmt_name = "character book"
    return ParsedWorldbook(fmt_name, entries, skipped, sorted(ignored), positions)


def _from_ours(raw: dict[str, Any], where: str) -> WorldbookEntry:
    unknown = set(raw) - OUR_FIELDS  # the model has more fields (id, scope, creation time), none of them a file's
    if unknown:
        raise ImportFormatError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    fields = {name: value for name, value in raw.items() if name != "uid"}
    return _file_error(validate_entry, {**fields, "id": "import"}, where)


def _no_flag(value: Any) -> Any:
    if isinstance(value, bool):  # Literal[0, 1, 2, 3] alone would take true for 1
        raise PydanticCustomError("literal_error", "Input should be 0, 1, 2 or 3", {"expected": "0, 1, 2 or 3"})
    return value


# SillyTavern and the cards write null, "" or [] for an unset comment, name or secondary key list.
def _no_words(value: Any) -> Any:
    return value or ()


def _no_text(value: Any) -> Any:
    # some generators write the title as a list of strings (["全局·世界底层核心规则"]): its words, joined
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return " ".join(value)
    return value or ""


Words = Annotated[tuple[Text, ...], BeforeValidator(_no_words)]
Title = Annotated[Text, BeforeValidator(_no_text)]


class SillyTavernEntry(BaseModel):
    """A SillyTavern world-info entry as the file has it (newWorldInfoEntryDefinition names); errors name
    its fields. Fields with no counterpart here are left to `ST_UNMAPPED_DEFAULTS`."""

    model_config = ConfigDict(extra="ignore")

    key: tuple[Text, ...]
    content: Text
    keysecondary: Words = ()
    comment: Title = ""
    constant: Flag | None = None
    vectorized: Flag | None = None
    selective: Flag | None = None
    disable: Flag | None = None
    selective_logic: Annotated[Literal[0, 1, 2, 3] | None, BeforeValidator(_no_flag)] = Field(
        None, alias="selectiveLogic"
    )
    order: Number | None = None
    position: Whole | None = None
    role: Whole | None = None

    def entry(self, keyless: bool = False) -> dict[str, Any] | str:
        """Our entry's fields, or why SillyTavern would never inject it (then it is skipped); `keyless`: our own
        temporal or emotional entry, which fires without a key."""
        if not self.content.strip():
            return "has empty content"
        if not keyless and not self.constant and not self.vectorized and not any(k.strip() for k in self.key):
            return "has no key and is not constant (SillyTavern never fires it)"
        return {
            "id": "import",
            "content": self.content,
            "keywords": self.key,
            "secondary_keywords": self.keysecondary if self.selective is not False else (),
            "selective_logic": ST_LOGIC[self.selective_logic or 0],
            "trigger_type": "semantic" if self.vectorized else "keyword",
            "priority": round(self.order) if self.order is not None else 100,
            "constant": bool(self.constant),
            "enabled": not self.disable,
            "position": placement(self.position, self.role)[0],
            "title": self.comment,
        }


class CardEntryExtensions(BaseModel):
    """The `extensions` SillyTavern writes into a card's lorebook entry (convertWorldInfoToCharacterBook)."""

    model_config = ConfigDict(extra="ignore")

    position: Whole | None = None
    role: Whole | None = None
    depth: Whole | None = None
    selective_logic: Annotated[Literal[0, 1, 2, 3] | None, BeforeValidator(_no_flag)] = Field(
        None, alias="selectiveLogic"
    )
    vectorized: Flag | None = None


class CardEntry(BaseModel):
    """A character-card lorebook entry as the card has it (Character Card V2 `character_book.entries[]`):
    `keys` (not `key`), `secondary_keys`, `insertion_order`, `enabled`, `position` 'before_char' /
    'after_char', and SillyTavern's own settings in `extensions` (position number, depth, role, logic, ...)."""

    model_config = ConfigDict(extra="ignore")

    keys: tuple[Text, ...]
    content: Text
    constant: Flag | None = None
    selective: Flag | None = None
    enabled: Flag | None = None
    insertion_order: Number | None = None
    secondary_keys: Words = ()
    comment: Title = ""  # the title: `comment`, else `name`
    name: Title = ""
    # V2's words; some editors write SillyTavern's position number here instead
    position: Literal["before_char", "after_char", ""] | Whole | None = None
    extensions: Annotated[CardEntryExtensions, BeforeValidator(lambda v: {} if v is None else v)] = Field(
        default_factory=lambda: CardEntryExtensions.model_validate({})
    )

    def st_position(self) -> int:
        """SillyTavern's position number: the extension's when set (it has the depth and note positions),
        else the card's word."""
        if self.extensions.position is not None:
            return self.extensions.position
        if isinstance(self.position, int):
            return self.position
        return 1 if self.position == "after_char" else 0

    def entry(self, keyless: bool = False) -> dict[str, Any] | str:
        """Our entry's fields, or why it is skipped (`keyless`: as for `SillyTavernEntry.entry`)."""
        if not self.content.strip():
            return "has empty content"
        if (
            not keyless
            and not self.constant
            and not self.extensions.vectorized
            and not any(k.strip() for k in self.keys)
        ):
            return "has no key and is not constant"
        return {
            "id": "import",
            "content": self.content,
            "keywords": self.keys,
            "secondary_keywords": self.secondary_keys if self.selective is not False else (),
            "selective_logic": ST_LOGIC[self.extensions.selective_logic or 0],
            "trigger_type": "semantic" if self.extensions.vectorized else "keyword",
            "priority": round(self.insertion_order) if self.insertion_order is not None else 100,
            "constant": bool(self.constant),
            "enabled": self.enabled is not False,
            "position": placement(self.st_position(), self.extensions.role)[0],
            "title": self.comment or self.name,
        }


def placement(st_position: int | None, role: int | None, depth: int | None = None) -> tuple[str | None, str]:
    """(our position, where that is in the prompt, in words) for a SillyTavern position and role.

    Before / after the character, the author's note and example-message positions all become the world
    knowledge section of the retrieved region (our default position, None); "at depth N" with a role goes to
    the tail at that role's position (system, user, assistant), right before the user's input: depth itself
    is kept with the entry for export, not applied (the tail has one place)."""
    name = ST_POSITION_NAMES.get(st_position if st_position is not None else 0, f"position {st_position}")
    if st_position == ST_POSITION_AT_DEPTH:
        role_name = ST_ROLES.get(role if role is not None else 0, "system")
        at = f"at depth {depth}" if depth is not None else "at depth"
        if role_name == "system":
            return "system", f"{at} as system → world knowledge (retrieved region)"
        return role_name, f"{at} as {role_name} → tail ({role_name} position)"
    return None, f"{name} → world knowledge (retrieved region)"


def _own_fields(raw: dict[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(our fields an exported entry carries in `extensions.personalab`, the entry without them)."""
    extensions = raw.get("extensions")
    if not isinstance(extensions, dict) or PERSONALAB_EXTENSION not in extensions:
        return {}, raw
    own = extensions[PERSONALAB_EXTENSION]
    if not isinstance(own, dict):
        raise ImportFormatError(f"{where}: field 'extensions.{PERSONALAB_EXTENSION}' must be an object")
    unknown = set(own) - set(EXPORTED_FIELDS)
    if unknown:
        raise ImportFormatError(
            f"{where}: unknown field(s) in extensions.{PERSONALAB_EXTENSION}: {', '.join(sorted(unknown))}"
        )
    rest = {k: v for k, v in extensions.items() if k != PERSONALAB_EXTENSION}
    return own, {**raw, "extensions": rest}


def _from_sillytavern(
    raw: dict[str, Any], where: str, ignored: set[str], positions: dict[str, int]
) -> tuple[WorldbookEntry | None, str]:
    """A SillyTavern world-info entry (newWorldInfoEntryDefinition field names), kept whole as its source."""
    own, raw = _own_fields(raw, where)
    for name in set(raw) - ST_MAPPED - ST_SILENT - ST_READ:
        if name == "depth" and raw.get("position") != ST_POSITION_AT_DEPTH:
            continue  # a depth only means something at depth
        defaults = ST_UNMAPPED_DEFAULTS.get(name)
        value = raw[name]
        if defaults is None or not any(value == d and isinstance(value, bool) == isinstance(d, bool) for d in defaults):
            ignored.add(name)
    source = validated(SillyTavernEntry, raw, where, ImportFormatError)
    depth = raw.get("depth") if isinstance(raw.get("depth"), int) else None
    return _mapped(source, raw, "world info", own, where, placement(source.position, source.role, depth)[1], positions)


def _from_card(
    raw: dict[str, Any], where: str, ignored: set[str], positions: dict[str, int]
) -> tuple[WorldbookEntry | None, str]:
    """A character-card lorebook entry (Character Card V2 `character_book.entries[]`), kept whole as its source."""
    own, raw = _own_fields(raw, where)
    ignored.update(set(raw) - CARD_MAPPED - CARD_SILENT)
    extensions = raw.get("extensions")
    if isinstance(extensions, dict):
        for name, value in extensions.items():
            defaults = CARD_EXT_DEFAULTS.get(name)
            if name in CARD_EXT_MAPPED:
                continue
            if defaults is None or not any(
                value == d and isinstance(value, bool) == isinstance(d, bool) for d in defaults
            ):
                ignored.add(f"extensions.{name}")
    source = validated(CardEntry, raw, where, ImportFormatError)
    if source.st_position() == ST_POSITION_AT_DEPTH and source.extensions.depth not in (None, 0):
        ignored.add("extensions.depth")  # at depth N goes to the tail, which has one place
    where_to = placement(source.st_position(), source.extensions.role, source.extensions.depth)[1]
    return _mapped(source, raw, "character book", own, where, where_to, positions)


def _bad_regex_key(keys: Sequence[str]) -> str | None:
    """Why an entry is skipped when one of its `/regex/` keys does not compile, else None."""
    for key in keys:
        if isinstance(key, str) and is_regex_key(key):
            try:
                key_pattern(key)
            except InvalidInput as exc:
                return f"skipped: {exc}"
    return None


def _mapped(
    source: SillyTavernEntry | CardEntry,
    raw: dict[str, Any],
    fmt: str,
    own: dict[str, Any],
    where: str,
    where_to: str,
    positions: dict[str, int],
) -> tuple[WorldbookEntry | None, str]:
    fields = source.entry(keyless=own.get("trigger_type") in ("temporal", "emotional"))
    if isinstance(fields, str):
        return None, fields
    bad_key = _bad_regex_key((*fields["keywords"], *fields["secondary_keywords"]))
    if bad_key is not None:
        return None, bad_key  # issue 28: one entry's bad pattern skips that entry, named; the rest are imported
    entry = _file_error(validate_entry, {**fields, **own, "source": raw, "source_format": fmt}, where)
    positions[where_to] = positions.get(where_to, 0) + 1
    return entry, ""


def import_worldbook(session: Session, data: Any, scope: Scope = GLOBAL) -> ImportReport:
    """Add every entry of `data` to `scope`, or none (see the module doc). Entries already stored in that
    scope with the same content and keywords are not added twice."""
    parsed = parse_worldbook(data)
    check_scope(session, scope)
    seen = {(e.content, e.keywords) for e in list_worldbook(session, scope)}
    duplicates = 0
    for entry, uid in parsed.entries:
        if (entry.content, entry.keywords) in seen:
            duplicates += 1
            continue
        seen.add((entry.content, entry.keywords))
        add_worldbook_row(session, entry.model_copy(update={"role_id": scope.role_id, "save_id": scope.save_id}), uid)
    return ImportReport(
        parsed.format,
        len(parsed.entries) - duplicates,
        duplicates,
        parsed.skipped,
        parsed.ignored_fields,
        parsed.positions,
    )


# --- SillyTavern export ---------------------------------------------------------------------------

# newWorldInfoEntryDefinition's defaults: an entry made here starts from them.
ST_ENTRY_DEFAULTS: dict[str, Any] = {
    "key": [],
    "keysecondary": [],
    "comment": "",
    "content": "",
    "constant": False,
    "vectorized": False,
    "selective": True,
    "selectiveLogic": 0,
    "addMemo": False,
    "order": 100,
    "position": 0,
    "disable": False,
    "excludeRecursion": False,
    "preventRecursion": False,
    "delayUntilRecursion": False,
    "probability": 100,
    "useProbability": True,
    "depth": 4,
    "group": "",
    "groupOverride": False,
    "groupWeight": 100,
    "scanDepth": None,
    "caseSensitive": None,
    "matchWholeWords": None,
    "useGroupScoring": None,
    "automationId": "",
    "role": None,
    "sticky": 0,
    "cooldown": 0,
    "delay": 0,
}
ST_LOGIC_NUMBER = {name: number for number, name in ST_LOGIC.items()}
ST_ROLE_NUMBER = {name: number for number, name in ST_ROLES.items()}
# A card entry's extension names for SillyTavern's world-info fields (convertWorldInfoToCharacterBook).
CARD_EXT_TO_ST = {
    "exclude_recursion": "excludeRecursion",
    "prevent_recursion": "preventRecursion",
    "delay_until_recursion": "delayUntilRecursion",
    "display_index": "displayIndex",
    "probability": "probability",
    "useProbability": "useProbability",
    "depth": "depth",
    "selectiveLogic": "selectiveLogic",
    "outlet_name": "outletName",
    "group": "group",
    "group_override": "groupOverride",
    "group_weight": "groupWeight",
    "scan_depth": "scanDepth",
    "match_whole_words": "matchWholeWords",
    "use_group_scoring": "useGroupScoring",
    "case_sensitive": "caseSensitive",
    "automation_id": "automationId",
    "role": "role",
    "vectorized": "vectorized",
    "sticky": "sticky",
    "cooldown": "cooldown",
    "delay": "delay",
    "match_persona_description": "matchPersonaDescription",
    "match_character_description": "matchCharacterDescription",
    "match_character_personality": "matchCharacterPersonality",
    "match_character_depth_prompt": "matchCharacterDepthPrompt",
    "match_scenario": "matchScenario",
    "match_creator_notes": "matchCreatorNotes",
    "triggers": "triggers",
    "ignore_budget": "ignoreBudget",
}
ST_TO_CARD_EXT = {st: card for card, st in CARD_EXT_TO_ST.items()}


def _own_extension(entry: WorldbookEntry) -> dict[str, Any]:
    """Our fields SillyTavern has no place for (kind, weights, emotions, time window, a temporal or emotional
    trigger), when not at their defaults: written to `extensions.personalab`."""
    defaults = WorldbookEntry(id="x", content="x").fields_dict()
    ours = entry.fields_dict()
    names = ("kind", "relevance_weight", "emotional_weight", "time_decay_factor", "emotions", "temporal")
    own = {name: ours[name] for name in names if ours[name] != defaults[name]}
    if entry.trigger_type in ("temporal", "emotional"):
        own["trigger_type"] = entry.trigger_type
    if entry.position == "system":  # "system" at depth is SillyTavern's position 4 with role 0; None is ours
        own["position"] = "system"
    return own


def _st_fields(entry: WorldbookEntry) -> dict[str, Any]:
    """The world-info fields our entry's own fields say (every field of `SillyTavernEntry`)."""
    fields: dict[str, Any] = {
        "key": list(entry.keywords),
        "keysecondary": list(entry.secondary_keywords),
        "comment": entry.title,
        "content": entry.content,
        "constant": entry.constant,
        "vectorized": entry.trigger_type == "semantic",
        "selectiveLogic": ST_LOGIC_NUMBER[entry.selective_logic],
        "order": entry.priority,
        "disable": not entry.enabled,
    }
    if entry.position in ("user", "assistant"):
        fields.update(position=ST_POSITION_AT_DEPTH, role=ST_ROLE_NUMBER[entry.position])
    return fields


def _card_as_world_info(raw: dict[str, Any]) -> dict[str, Any]:
    """A card's lorebook entry in world-info names (SillyTavern's convertCharacterBook)."""
    ext = dict(raw.get("extensions") or {})
    out: dict[str, Any] = {
        "key": raw.get("keys") or [],
        "keysecondary": raw.get("secondary_keys") or [],
        "comment": raw.get("comment") or raw.get("name") or "",
        "content": raw.get("content", ""),
        "constant": bool(raw.get("constant")),
        "selective": bool(raw.get("selective", True)),
        "order": raw.get("insertion_order", 100),
        "position": ext.pop("position", _card_position(raw.get("position"))),
        "disable": raw.get("enabled") is False,
        "addMemo": bool(raw.get("comment")),
    }
    if "case_sensitive" in raw and "case_sensitive" not in ext:
        ext["case_sensitive"] = raw["case_sensitive"]
    for card_name, st_name in CARD_EXT_TO_ST.items():
        if card_name in ext:
            out[st_name] = ext.pop(card_name)
    out["extensions"] = ext
    return out


def _card_position(word: Any) -> int:
    """A card entry's `position` as SillyTavern's number (some editors write the number itself)."""
    if isinstance(word, int) and not isinstance(word, bool):
        return word
    return 1 if word == "after_char" else 0


def sillytavern_entry(entry: WorldbookEntry, uid: int) -> dict[str, Any]:
    """`entry` as a SillyTavern world-info entry: the entry it was imported from (a card's converted to
    world-info names) with what was changed here written over it; one made here from SillyTavern's defaults.
    Our fields SillyTavern has no place for go to `extensions.personalab` (read back on import)."""
    if entry.source is None:
        base: dict[str, Any] = {**ST_ENTRY_DEFAULTS, "uid": uid, "displayIndex": uid}
        base.update(_st_fields(entry))
        base["selective"] = True
        base["extensions"] = {}
    else:
        base = dict(entry.source) if entry.source_format == "world info" else _card_as_world_info(entry.source)
        base.setdefault("uid", uid)
        try:
            before = SillyTavernEntry.model_validate(base).entry()
        except ValueError:
            before = {}
        now = {**_st_fields(entry), "position": placement_of(entry)}
        was = {} if isinstance(before, str) else before
        changed = {
            "keywords": ("key",),
            "secondary_keywords": ("keysecondary",),
            "title": ("comment",),
            "content": ("content",),
            "constant": ("constant",),
            "selective_logic": ("selectiveLogic",),
            "priority": ("order",),
            "enabled": ("disable",),
        }
        for ours, st_names in changed.items():
            if was.get(ours) != getattr(entry, ours):
                for name in st_names:
                    base[name] = now[name]
        if (was.get("trigger_type") == "semantic") != (entry.trigger_type == "semantic"):
            base["vectorized"] = entry.trigger_type == "semantic"
        if was.get("position") != entry.position:
            fields = _st_fields(entry)
            base["position"] = fields.get("position", 0)
            if "role" in fields:
                base["role"] = fields["role"]
    own = _own_extension(entry)
    if own:
        base["extensions"] = {**(base.get("extensions") or {}), PERSONALAB_EXTENSION: own}
    return base


def placement_of(entry: WorldbookEntry) -> int:
    return ST_POSITION_AT_DEPTH if entry.position in ("user", "assistant") else 0


def _uids(session: Session, scope: Scope) -> list[tuple[WorldbookEntry, int]]:
    """The entries of `scope` with a SillyTavern uid each: the one they were imported with when it is a whole
    number not taken yet, else the next free one."""
    rows = worldbook_rows(session, scope)
    entries = worldbook_entries(session, rows)
    taken: set[int] = set()
    wanted: list[int | None] = []
    for row in rows:
        uid = int(row.uid) if row.uid is not None and row.uid.isdigit() and len(row.uid) < 10 else None
        if uid is not None and uid in taken:
            uid = None
        if uid is not None:
            taken.add(uid)
        wanted.append(uid)
    out = []
    free = 0
    for entry, uid in zip(entries, wanted, strict=True):
        if uid is None:
            while free in taken:
                free += 1
            uid = free
            taken.add(uid)
        out.append((entry, uid))
    return out


def export_sillytavern(session: Session, scope: Scope = GLOBAL) -> dict[str, Any]:
    """The entries of exactly `scope` as a SillyTavern world-info file (`{"entries": {"<uid>": {...}}}`);
    importing it gives the same entries back (tests/test_lorebook_fidelity.py)."""
    return {"entries": {str(uid): sillytavern_entry(entry, uid) for entry, uid in _uids(session, scope)}}


def character_book_entry(entry: WorldbookEntry, uid: int) -> dict[str, Any]:
    """`entry` as a card's lorebook entry (SillyTavern's convertWorldInfoToCharacterBook over our
    world-info form); an entry imported from a card gives back the card's entry as it was, with only what was
    changed here written over it."""
    out = _as_card_entry(entry, uid)
    if entry.source_format != "character book" or entry.source is None:
        return out
    try:
        pristine = _mapped(
            validated(CardEntry, entry.source, "source", ImportFormatError),
            entry.source,
            "character book",
            {},
            "source",
            "",
            {},
        )[0]
    except InvalidInput:
        pristine = None
    if pristine is None:
        return out
    before = _as_card_entry(pristine, uid)
    result = dict(entry.source)
    extensions = dict(result.get("extensions") or {})
    for name in set(out) | set(before):
        if name == "extensions":
            new, old = out.get(name) or {}, before.get(name) or {}
            extensions.update({k: new[k] for k in set(new) | set(old) if new.get(k) != old.get(k) and k in new})
        elif out.get(name) != before.get(name):
            result[name] = out.get(name)
    if extensions or "extensions" in result:
        result["extensions"] = extensions
    return result


def _as_card_entry(entry: WorldbookEntry, uid: int) -> dict[str, Any]:
    st = sillytavern_entry(entry, uid)
    extensions = dict(st.get("extensions") or {})
    for st_name, card_name in ST_TO_CARD_EXT.items():
        if st_name in st:
            extensions[card_name] = st[st_name]
    extensions["position"] = st.get("position", 0)
    out: dict[str, Any] = {
        "id": st.get("uid", uid),
        "keys": st.get("key", []),
        "secondary_keys": st.get("keysecondary", []),
        "comment": st.get("comment", ""),
        "content": st.get("content", ""),
        "constant": bool(st.get("constant")),
        "selective": bool(st.get("selective", True)),
        "insertion_order": st.get("order", 100),
        "enabled": not st.get("disable", False),
        "position": "before_char" if st.get("position", 0) == 0 else "after_char",
        "extensions": extensions,
    }
    return out


def export_character_book(session: Session, scope: Scope, name: str = "") -> dict[str, Any] | None:
    """The entries of `scope` as a card's `character_book` (None when there are none)."""
    pairs = _uids(session, scope)
    if not pairs:
        return None
    return {"name": name, "entries": [character_book_entry(entry, uid) for entry, uid in pairs]}


# --- files ----------------------------------------------------------------------------------------


def read_json_file(path: str | os.PathLike[str]) -> Any:
    """The JSON in `path`, read by `stores.files.read_json`: ImportFormatError (one line naming the path) for a
    missing file, one that is not a regular file (a device, a FIFO, a directory), one over `MAX_IMPORT_BYTES`
    (at most that much is read), not UTF-8, malformed, nested too deeply or holding a NUL character."""
    try:
        return read_json(path, MAX_IMPORT_BYTES, what="import")
    except ImportFormatError:
        raise
    except InvalidInput as exc:
        raise ImportFormatError(str(exc)) from None


def write_json_file(
    path: str | os.PathLike[str], data: Any, *, overwrite: bool = False, follow_symlinks: bool = False
) -> None:
    """Write `data` as UTF-8 JSON to a new regular file, all or nothing (`stores.files.write_file`): an existing
    regular file only with `overwrite`; never a device, a directory, a FIFO or a symlink (its target only with
    `follow_symlinks`). InvalidInput naming the path otherwise."""
    text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    write_file(path, text.encode("utf-8"), overwrite=overwrite, follow_symlinks=follow_symlinks)


# --- checks ---------------------------------------------------------------------------------------


def _uid_note(uid: Any) -> str:
    return "" if uid is None else f" (uid {uid})"


def _check_version(data: Mapping[str, Any]) -> None:
    version = data.get("version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise ImportFormatError(f"file version {version!r} is not supported (expected {FORMAT_VERSION})")


def _check_integers(entry: WorldbookEntry, where: str) -> None:
    """A whole number the database's INTEGER columns cannot hold is the file's error, not a database error."""
    numbers = {"priority": entry.priority, **{f"temporal.{k}": v for k, v in entry.temporal.as_dict().items()}}
    for name, value in numbers.items():
        if isinstance(value, int) and not INTEGER_MIN <= value <= INTEGER_MAX:
            raise ImportFormatError(
                f"{where}: field '{name}' is {value}, out of range ({INTEGER_MIN} to {INTEGER_MAX})"
            )


def _check_count(items: Sequence[Any]) -> None:
    if len(items) > MAX_IMPORT_ENTRIES:
        raise ImportFormatError(f"{len(items)} entries, over the import limit of {MAX_IMPORT_ENTRIES}")


def _file_error(check: Callable[[Any, str], E], data: Any, where: str) -> E:
    """`check(data, where)`, its `InvalidInput` raised as the file's `ImportFormatError`."""
    try:
        return check(data, where)
    except ImportFormatError:
        raise
    except InvalidInput as exc:
        raise ImportFormatError(str(exc)) from None
