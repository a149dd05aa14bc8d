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
SillyTavern fields with no counterpart here (probability, depth, sticky, groups, ...) are ignored and
named in the import report. Entries with empty content, and non-constant entries without any key (which
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
from personalab.stores.db import INTEGER_MAX, INTEGER_MIN
from personalab.stores.files import check_json_tree, read_json, write_file
from personalab.stores.worldbook import (
    GLOBAL,
    Scope,
    check_scope,
    knowledge_row,
    list_knowledge,
    list_worldbook,
    worldbook_row,
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
# Present in every SillyTavern entry and meaningless here; not worth a note.
ST_SILENT = {"displayIndex", "addMemo", "extensions", "characterFilter", "automationId", "hash", "world"}
# Fields with no counterpart here, with their SillyTavern defaults (newWorldInfoEntryDefinition; older files
# write 0 for the timed effects): only a field set to something else is reported as ignored.
ST_UNMAPPED_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "excludeRecursion": (False,),
    "preventRecursion": (False,),
    "delayUntilRecursion": (0, False),
    "matchPersonaDescription": (False,),
    "matchCharacterDescription": (False,),
    "matchCharacterPersonality": (False,),
    "matchCharacterDepthPrompt": (False,),
    "matchScenario": (False,),
    "matchCreatorNotes": (False,),
    "probability": (100,),
    "useProbability": (True, False),
    "depth": (4,),
    "group": ("",),
    "groupOverride": (False,),
    "groupWeight": (100,),
    "scanDepth": (None,),
    "caseSensitive": (None, False),
    "matchWholeWords": (None,),
    "useGroupScoring": (None, False),
    "sticky": (None, 0),
    "cooldown": (None, 0),
    "delay": (None, 0),
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
}
CARD_SILENT = {"extensions"}


class ImportFormatError(InvalidInput):
    """A malformed import file; the message names the entry and the field."""


@dataclass(frozen=True)
class ImportReport:
    format: str
    imported: int
    duplicates: int = 0
    skipped: list[str] = field(default_factory=list)
    ignored_fields: list[str] = field(default_factory=list)

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
        if self.ignored_fields:
            parts.append("ignored fields: " + ", ".join(self.ignored_fields))
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
        if with_keywords:
            item["keywords"] = list(k.keywords)
        entries.append(item)
    return {"format": KNOWLEDGE_FORMAT, "version": FORMAT_VERSION, "entries": entries}


KNOWLEDGE_FIELDS = {"tag", "content", "importance", "keywords", "enabled", "user_edited"}


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
    """The entries of exactly `scope` as a PersonaLab world-book file."""
    entries = [
        {"uid": row.uid if row.uid is not None else str(row.id), **WorldbookEntry.model_validate(row).fields_dict()}
        for row in worldbook_rows(session, scope)
    ]
    return {"format": WORLDBOOK_FORMAT, "version": FORMAT_VERSION, "entries": entries}


@dataclass(frozen=True)
class ParsedWorldbook:
    format: str
    entries: list[tuple[WorldbookEntry, str | None]]  # (entry, source uid)
    skipped: list[str] = field(default_factory=list)
    ignored_fields: list[str] = field(default_factory=list)


OUR_FIELDS = {"uid", *EXPORTED_FIELDS}  # our own file format: the exported fields and the entry's uid


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
            entry, note = _from_card(raw, where, ignored)
        else:
            entry, note = _from_sillytavern(raw, where, ignored)
        if entry is None:
            skipped.append(f"{where} {note}")
            continue
        _check_integers(entry, where)
        entries.append((entry, uid_text))
    if not ours and card_entries == len(items) and items and fmt_name != "character card lorebook":
        fmt_name = "character book"
    return ParsedWorldbook(fmt_name, entries, skipped, sorted(ignored))


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

    def entry(self) -> dict[str, Any] | str:
        """Our entry's fields, or why SillyTavern would never inject it (then it is skipped)."""
        if not self.content.strip():
            return "has empty content"
        if not self.constant and not self.vectorized and not any(k.strip() for k in self.key):
            return "has no key and is not constant (SillyTavern never fires it)"
        at_depth = self.position == ST_POSITION_AT_DEPTH
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
            "position": ST_ROLES.get(self.role if self.role is not None else 0) if at_depth else None,
            "title": self.comment,
        }


class CardEntry(BaseModel):
    """A character-card lorebook entry as the card has it (Character Card V2 `character_book.entries[]`)."""

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

    def entry(self) -> dict[str, Any] | str:
        """Our entry's fields, or why it is skipped."""
        if not self.content.strip():
            return "has empty content"
        if not self.constant and not any(k.strip() for k in self.keys):
            return "has no key and is not constant"
        return {
            "id": "import",
            "content": self.content,
            "keywords": self.keys,
            "secondary_keywords": self.secondary_keys if self.selective is not False else (),
            "priority": round(self.insertion_order) if self.insertion_order is not None else 100,
            "constant": bool(self.constant),
            "enabled": self.enabled is not False,
            "title": self.comment or self.name,
        }


def _from_sillytavern(raw: dict[str, Any], where: str, ignored: set[str]) -> tuple[WorldbookEntry | None, str]:
    """A SillyTavern world-info entry (newWorldInfoEntryDefinition field names)."""
    for name in set(raw) - ST_MAPPED - ST_SILENT:
        defaults = ST_UNMAPPED_DEFAULTS.get(name)
        value = raw[name]
        if defaults is None or not any(value == d and isinstance(value, bool) == isinstance(d, bool) for d in defaults):
            ignored.add(name)
    return _mapped(validated(SillyTavernEntry, raw, where, ImportFormatError), where)


def _from_card(raw: dict[str, Any], where: str, ignored: set[str]) -> tuple[WorldbookEntry | None, str]:
    """A character-card lorebook entry (Character Card V2 `character_book.entries[]`)."""
    ignored.update(set(raw) - CARD_MAPPED - CARD_SILENT)
    return _mapped(validated(CardEntry, raw, where, ImportFormatError), where)


def _mapped(source: SillyTavernEntry | CardEntry, where: str) -> tuple[WorldbookEntry | None, str]:
    fields = source.entry()
    if isinstance(fields, str):
        return None, fields
    return _file_error(validate_entry, fields, where), ""


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
        session.add(worldbook_row(entry.model_copy(update={"role_id": scope.role_id, "save_id": scope.save_id}), uid))
    session.flush()
    return ImportReport(
        parsed.format, len(parsed.entries) - duplicates, duplicates, parsed.skipped, parsed.ignored_fields
    )


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
