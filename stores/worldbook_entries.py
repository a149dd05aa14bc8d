"""Single world-book entries changed in place (issue 23): edit any of an entry's own fields, enable / disable,
reorder (their `priority`, SillyTavern's `order`), delete — before, changing one entry meant export, edit the
file, import. An edit is validated as the whole entry it makes (`nodes.rules.worldbook.validate_entry`): a bad
value is `InvalidInput` naming the entry and the field, and nothing is written.

`probability` (SillyTavern's percent chance an entry fires once triggered) is no column: it lives in the entry's
SillyTavern source (where the trigger reads it, `sillytavern_options`); an entry made here gets a world-info
source holding only it, which its export carries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.nodes.rules.worldbook import EXPORTED_FIELDS, WorldbookEntry, validate_entry
from personalab.stores.db import INTEGER_MAX, INTEGER_MIN
from personalab.stores.tables import utcnow
from personalab.stores.worldbook import Scope, add_worldbook_entry, worldbook_entries, worldbook_row
from personalab.stores.worldbook_tables import WorldbookEntryRow, WorldbookEntrySourceRow
from sqlmodel import Session

TIMED_EFFECTS: tuple[str, ...] = ("sticky", "cooldown", "delay")  # SillyTavern's timed effects, in turns
SOURCE_OPTIONS: tuple[str, ...] = ("probability", *TIMED_EFFECTS)  # kept in the entry's SillyTavern source
EDITABLE: tuple[str, ...] = (*EXPORTED_FIELDS, *SOURCE_OPTIONS)
MAX_TIMER = 10_000  # turns: a sticky, cooldown or delay longer than any chat


def entry_row(session: Session, entry_id: Any) -> WorldbookEntryRow:
    """The entry's row; `NotFound` naming it (`InvalidInput` for an id that is no whole number)."""
    if isinstance(entry_id, bool) or not isinstance(entry_id, int) or not 0 <= entry_id <= INTEGER_MAX:
        raise InvalidInput(f"world-book entry id must be a whole number, got {entry_id!r}")
    row = session.get(WorldbookEntryRow, entry_id)
    if row is None:
        raise NotFound(f"world-book entry {entry_id} does not exist")
    return row


def get_entry(session: Session, entry_id: int) -> WorldbookEntry:
    return worldbook_entries(session, [entry_row(session, entry_id)])[0]


def _source_options(entry: WorldbookEntry, changes: Mapping[str, Any], where: str) -> tuple[dict[str, Any], str]:
    """The entry's SillyTavern source with the options of `changes` set (`probability`, used then; the timed
    effects `sticky`, `cooldown`, `delay` in turns, issue 25), and its format. A bad value: `InvalidInput` naming
    the field, before anything is written."""
    options: dict[str, Any] = {}
    if "probability" in changes:
        probability = changes["probability"]
        if (
            isinstance(probability, bool)
            or not isinstance(probability, int | float)
            or not math.isfinite(probability)
            or not 0 <= probability <= 100
        ):
            raise InvalidInput(f"{where}: field 'probability' must be a number from 0 to 100, got {probability!r}")
        options.update(probability=probability, useProbability=True)
    for name in TIMED_EFFECTS:
        if name in changes:
            value = changes[name]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TIMER:
                raise InvalidInput(
                    f"{where}: field '{name}' must be a whole number of turns from 0 to {MAX_TIMER}, got {value!r}"
                )
            options[name] = value
    source = dict(entry.source or {})
    source_format = entry.source_format or "world info"
    if source_format == "character book":
        extensions = dict(source.get("extensions") or {})
        extensions.update(options)
        source["extensions"] = extensions
    else:
        source.update(options)
    return source, source_format


def check_integers(entry: WorldbookEntry, where: str) -> None:
    """A whole number an INTEGER column cannot hold is `InvalidInput` naming the field, not a database error."""
    numbers = {"priority": entry.priority, **{f"temporal.{k}": v for k, v in entry.temporal.as_dict().items()}}
    for name, value in numbers.items():
        if isinstance(value, int) and not INTEGER_MIN <= value <= INTEGER_MAX:
            raise InvalidInput(f"{where}: field '{name}' is {value}, out of range ({INTEGER_MIN} to {INTEGER_MAX})")


def add_entry(session: Session, content: Any, scope: Scope, fields: Mapping[str, Any]) -> WorldbookEntry:
    """A new entry in `scope` (`add_worldbook_entry`), its whole numbers checked for the database's range too."""
    data = {"id": "new", "content": content, "role_id": scope.role_id, "save_id": scope.save_id, **fields}
    check_integers(validate_entry(data, "world-book entry"), "world-book entry")
    return add_worldbook_entry(session, content, scope=scope, **fields)


def update_entry(session: Session, entry_id: int, changes: Mapping[str, Any]) -> WorldbookEntry:
    """Change the entry's fields (`EDITABLE`; `temporal`: the bounds given, None unsets one), validated as the
    entry they make; the changed entry."""
    where = f"world-book entry {entry_id}"
    unknown = sorted(str(name) for name in changes if name not in EDITABLE)
    if unknown:
        raise InvalidInput(f"{where}: cannot change field {unknown[0]!r} (one of {', '.join(EDITABLE)})")
    if not changes:
        raise InvalidInput(f"{where}: nothing to change (fields: {', '.join(EDITABLE)})")
    row = entry_row(session, entry_id)
    entry = worldbook_entries(session, [row])[0]
    data = entry.model_dump(exclude={"created_at"})
    data.update({name: value for name, value in changes.items() if name not in SOURCE_OPTIONS})
    options = [name for name in SOURCE_OPTIONS if name in changes]
    source_change = _source_options(entry, changes, where) if options else None  # checked before any write
    if isinstance(changes.get("temporal"), Mapping):
        # a window's bounds change one by one (None unsets one): the others stay
        data["temporal"] = {**entry.temporal.model_dump(), **changes["temporal"]}
    new = validate_entry(data, where)  # the whole entry, before anything is written
    check_integers(new, where)
    for name, value in worldbook_row(new).model_dump(exclude={"id", "uid", "created_at", "updated_at"}).items():
        setattr(row, name, value)
    row.updated_at = utcnow()
    session.add(row)
    if source_change is not None:
        source, source_format = source_change
        stored = session.get(WorldbookEntrySourceRow, entry_id)
        if stored is None:
            stored = WorldbookEntrySourceRow(entry_id=entry_id, format=source_format, data=source)
        else:
            stored.data = source
        session.add(stored)
    session.flush()
    return get_entry(session, entry_id)


def reorder_entries(session: Session, orders: Mapping[int, Any]) -> list[WorldbookEntry]:
    """Give each entry its order value (`priority`: higher is injected first, SillyTavern's `order`), all or
    nothing; the entries in the order given."""
    if not orders:
        raise InvalidInput("reorder: no entries given")
    rows = {entry_id: entry_row(session, entry_id) for entry_id in orders}  # every id checked before a write
    for entry_id, order in orders.items():
        if isinstance(order, bool) or not isinstance(order, int) or not INTEGER_MIN <= order <= INTEGER_MAX:
            raise InvalidInput(f"world-book entry {entry_id}: field 'priority' must be a whole number, got {order!r}")
    for entry_id, order in orders.items():
        rows[entry_id].priority = order
        rows[entry_id].updated_at = utcnow()
        session.add(rows[entry_id])
    session.flush()
    return worldbook_entries(session, list(rows.values()))
