"""Memory files (seed 004 记忆导出和备份; issue 11): an instance's memories as JSON Lines, one memory a line.

- Export: every stored field of every memory of the instance (curated memories and the dialogue record), in id
  order, one JSON object a line (UTF-8, ``ensure_ascii`` off): `EXPORT_FIELDS`. Times are ISO 8601. The derived
  search tokens are not written (they are computed again on import). The file is written in one step through
  `stores.files.write_file` (a new regular file; a plain file is replaced).
- Import: the file is read through `stores.files.read_file` (a regular file, at most `MAX_IMPORT_BYTES`, at most
  `MAX_IMPORT_LINES` memories). Every line is validated before anything is stored: a line that is not a JSON
  object, an unknown field, a field of the wrong type or out of range is `InvalidInput` naming the file, the line
  number and the field, and nothing is stored. Then all memories are stored in one transaction (all or nothing)
  into the target instance, for its character: ``id``, ``instance_id`` and ``character_id`` of the file are where
  they came from and are not kept (new ids). Everything else is kept as it was: layer, activity, mention count,
  pinned / user-edited, timestamps, line id. Blank lines are skipped.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

from personalab.nodes.rules.errors import InvalidInput
from personalab.stores.files import parse_json, read_file, write_file
from personalab.stores.memory import MemoryStore, memory_to_dict, prepare_new_memory

MAX_IMPORT_BYTES = 20 * 1024 * 1024
MAX_IMPORT_LINES = 10_000

# the fields `prepare_new_memory` checks, and the stored columns a file restores
NEW_FIELDS = (
    "content",
    "type",
    "layer",
    "importance",
    "tags",
    "keywords",
    "turn",
    "related_character",
    "location",
    "notes",
    "pinned",
    "line_id",
)
RESTORED_INTS = ("activity_turn", "layer_since_turn", "mention_count")
RESTORED_TIMES = ("created_at", "updated_at")
SOURCE_FIELDS = ("id", "instance_id", "character_id")  # where a memory came from; not kept
EXPORT_FIELDS = (
    *SOURCE_FIELDS,
    *NEW_FIELDS,
    "activity",
    *RESTORED_INTS,
    *RESTORED_TIMES,
    "user_edited",
    "last_mentioned_turn",
    "last_mentioned_at",
)
MAX_INT = 2**31 - 1


def export_lines(store: MemoryStore, instance_id: int) -> str:
    """The instance's memories as JSON Lines (`EXPORT_FIELDS` of each, id order). `InstanceNotFound` for an
    unknown instance."""
    rows = []
    for entry in store.list_memories(instance_id, include_record=True):
        data = memory_to_dict(entry)
        rows.append(json.dumps({name: data.get(name) for name in EXPORT_FIELDS}, ensure_ascii=False))
    return "".join(f"{row}\n" for row in rows)


def export_memories(store: MemoryStore, instance_id: int, path: str | os.PathLike[str]) -> int:
    """Write the instance's memory file to `path`; returns the number of memories written."""
    text = export_lines(store, instance_id)
    write_file(path, text.encode("utf-8"), overwrite=True)
    return text.count("\n")


def _whole(value: object, name: str, *, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise InvalidInput(f"{name} {value!r} is not a whole number from 0 to {MAX_INT}")
    return value


def _time(value: object, name: str, *, allow_none: bool = False) -> datetime | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{name} {value!r} is not an ISO 8601 time")
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"{name} {value!r} is not an ISO 8601 time") from None


def check_line(data: object, where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the new memory's fields, the stored columns to restore) of one parsed line; `InvalidInput` naming
    `where` and the field."""
    if not isinstance(data, dict):
        raise InvalidInput(f"{where}: must be a JSON object of fields, got {type(data).__name__}")
    unknown = set(data) - set(EXPORT_FIELDS)
    if unknown:
        raise InvalidInput(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    item = {name: data[name] for name in NEW_FIELDS if name in data and data[name] is not None}
    prepare_new_memory(item, where)  # checks every new-memory field, names the field
    restore: dict[str, Any] = {}
    try:
        if data.get("activity") is not None:
            activity = data["activity"]
            if isinstance(activity, bool) or not isinstance(activity, int | float) or not 0 <= activity <= 1:
                raise InvalidInput(f"activity {activity!r} is not a number between 0 and 1")
            restore["activity"] = float(activity)
        for name in RESTORED_INTS:
            if data.get(name) is not None:
                restore[name] = _whole(data[name], name)
        for name in RESTORED_TIMES:
            if data.get(name) is not None:
                restore[name] = _time(data[name], name)
        if "user_edited" in data:
            if not isinstance(data["user_edited"], bool):
                raise InvalidInput(f"user_edited {data['user_edited']!r} is not true or false")
            restore["user_edited"] = data["user_edited"]
        restore["last_mentioned_turn"] = _whole(data.get("last_mentioned_turn"), "last_mentioned_turn", allow_none=True)
        restore["last_mentioned_at"] = _time(data.get("last_mentioned_at"), "last_mentioned_at", allow_none=True)
        for name in SOURCE_FIELDS:
            if data.get(name) is not None:
                _whole(data[name], name)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from None
    return item, restore


def read_memory_file(path: str | os.PathLike[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every memory of the file, validated (module docstring); the first bad line is `InvalidInput`."""
    name = os.fspath(path)
    raw = read_file(path, MAX_IMPORT_BYTES, what="memory file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{name}: not UTF-8 text (byte {exc.start})") from None
    checked = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name} line {number}"
        checked.append(check_line(parse_json(line, where), where))
        if len(checked) > MAX_IMPORT_LINES:
            raise InvalidInput(f"{name}: more than {MAX_IMPORT_LINES} memories")
    return checked


def import_memories(store: MemoryStore, instance_id: int, path: str | os.PathLike[str]) -> int:
    """Store every memory of the file in `instance_id`, all or nothing; returns how many."""
    checked = read_memory_file(path)
    store.resolve_character(instance_id)  # InstanceNotFound before anything else
    if not checked:
        return 0
    entries = store.add_memories(instance_id, [item for item, _ in checked], restore=[r for _, r in checked])
    store.index(instance_id)
    return len(entries)
