"""The library's storage (issue 13, seed 002 角色/背景/会话实例 and seed 004 记忆导出和备份): what belongs to an
instance in every store, deleting all of it, and an instance as one JSON document and back.

What belongs to an instance is found from the schema, not listed by hand: every table with a column that is a
foreign key to `save.id` (lines, sessions, turn records, story states, memories, plot nodes, suggestions, the
instance's own knowledge and world-book entries, and any table added later the same way); plus its vectors in
Chroma (`memories_<instance>_<character>` collections, its events in its story's `events_<character>_<background>`
collection) and its checkpoint thread. Rows are exported column by column (bytes as base64, times as ISO text)
and imported with new ids: ids that point at another exported row (a line's parent, a record's reply line, a
memory's line, an entry a suggestion created) are mapped to the new rows.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from personalab.nodes.rules.errors import InvalidInput
from personalab.stores.checkpoints import open_checkpointer, thread_id_for
from personalab.stores.events import NO_ID, event_id, story_collection
from personalab.stores.memory_index import VECTORS, clear_index_cache
from personalab.stores.tables import Background, Role, Save
from sqlalchemy import DateTime, LargeBinary, Table, TypeDecorator, delete, select
from sqlalchemy.exc import DBAPIError, StatementError
from sqlmodel import Session, SQLModel

NOT_EXPORTED = {"save", "turn_lock"}  # the instance itself travels apart; a lock belongs to a running process
LINE_REFERENCES = {"last_message_id"}  # line ids without a foreign key (besides columns named `*line_id`)


def instance_tables() -> list[tuple[Table, str]]:
    """(table, column) of every table with a foreign key to `save.id`, parents before children (the order to
    insert in; reversed, the order to delete in)."""
    found = []
    for table in SQLModel.metadata.sorted_tables:
        if table.name == "save":
            continue
        for column in table.columns:
            if any(fk.column.table.name == "save" for fk in column.foreign_keys):
                found.append((table, column.name))
                break
    return found


def instance_row_counts(session: Session, save_id: int) -> dict[str, int]:
    """How many rows of each instance table belong to `save_id` (the deletion test's witness)."""
    counts = {}
    for table, column in instance_tables():
        rows = session.execute(select(table).where(table.c[column] == save_id)).all()
        counts[table.name] = len(rows)
    counts["save"] = 1 if session.get(Save, save_id) is not None else 0
    return counts


def delete_instance_rows(session: Session, save_id: int) -> dict[str, int]:
    """Delete every row of `save_id` in every instance table and the save itself, in the caller's transaction;
    returns the rows deleted per table."""
    deleted: dict[str, int] = {}
    for table, column in reversed(instance_tables()):
        if table.name == "line":
            # a line's parent is a line of the same instance: clear the links first, so the order rows go in
            # one statement never matters to a database that checks foreign keys per row
            session.execute(table.update().where(table.c[column] == save_id).values(parent_line_id=None))
        result = session.execute(delete(table).where(table.c[column] == save_id))
        deleted[table.name] = int(getattr(result, "rowcount", 0) or 0)
    save = session.get(Save, save_id)
    if save is not None:
        session.delete(save)
        deleted["save"] = 1
    session.flush()
    return deleted


def delete_library_rows(session: Session, target: str, target_id: int) -> dict[str, int]:
    """Before deleting the character (`target` "role") or background ("background") `target_id`: delete the rows
    of every table that belongs to it (a column with a foreign key to it: its outline points, its own knowledge and
    world-book entries, its card), found from the schema; lines that name the character as a speaker keep their
    text and display name and lose the link. Instances (`save`) are not touched: the caller deletes them first."""
    deleted: dict[str, int] = {}
    for table in reversed(SQLModel.metadata.sorted_tables):
        if table.name in (target, "save"):
            continue
        for column in table.columns:
            if not any(fk.column.table.name == target for fk in column.foreign_keys):
                continue
            if table.name == "line":
                session.execute(table.update().where(column == target_id).values({column.name: None}))
                continue
            result = session.execute(delete(table).where(column == target_id))
            count = int(getattr(result, "rowcount", 0) or 0)
            if count:
                deleted[table.name] = deleted.get(table.name, 0) + count
    session.flush()
    return deleted


def instance_vector_collections(save_id: int, chroma_path: str | None = None) -> list[str]:
    """The names of the instance's own memory collections in Chroma."""
    from personalab.stores.vectors import chroma_client

    prefix = f"memories_{save_id}_"
    names = [getattr(c, "name", c) for c in chroma_client(chroma_path).list_collections()]
    return [name for name in names if name.startswith(prefix) and name[len(prefix) :].isdigit()]


def delete_instance_vectors(
    save_id: int, role_id: int | None, background_id: int | None, chroma_path: str | None = None
) -> None:
    """Empty the instance's memory collections and take its events out of its story's collection. Collections
    are emptied, not dropped: the process keeps wrappers on them (`stores.vectors`), which a drop would break."""
    from personalab.stores.vectors import chroma_path as default_path
    from personalab.stores.vectors import get_collection

    path = chroma_path or default_path()
    for name in instance_vector_collections(save_id, chroma_path):
        collection = get_collection(name, path)._collection
        ids = collection.get(include=[])["ids"]
        if ids:
            collection.delete(ids=ids)
        VECTORS.forget(path, name)
    events = get_collection(story_collection(role_id, background_id), path)._collection
    ids = events.get(where={"instance_id": save_id}, include=[])["ids"]
    if ids:
        events.delete(ids=ids)
    clear_index_cache()  # a reused id (SQLite) must not find the deleted instance's kept keyword index


def delete_checkpoints(save_id: int, database_url: str | None = None) -> None:
    """Delete the instance's checkpoint thread (every checkpoint and pending write of it)."""
    with open_checkpointer(database_url) as saver:
        saver.delete_thread(thread_id_for(save_id))


def has_checkpoints(save_id: int, database_url: str | None = None) -> bool:
    with open_checkpointer(database_url) as saver:
        config = {"configurable": {"thread_id": thread_id_for(save_id)}}
        return next(iter(saver.list(config, limit=1)), None) is not None  # type: ignore[arg-type]


def instance_events(save_id: int, role_id: int | None, background_id: int | None) -> list[dict[str, Any]]:
    """The instance's archived events (seed 002 需求3) as {id, text, metadata}, oldest turn first."""
    from personalab.stores.vectors import get_collection

    collection = get_collection(story_collection(role_id, background_id))._collection
    got = collection.get(where={"instance_id": save_id}, include=["documents", "metadatas"])
    documents, metadatas = got["documents"] or [], got["metadatas"] or []
    events = [
        {"id": event_id, "text": text, "metadata": dict(metadata or {})}
        for event_id, text, metadata in zip(got["ids"], documents, metadatas, strict=True)
    ]
    return sorted(events, key=lambda event: (event["metadata"].get("turn", 0), event["id"]))


def write_events(
    save_id: int,
    role_id: int | None,
    background_id: int | None,
    events: Iterable[Mapping[str, Any]],
    lines: Mapping[int, int] | None = None,
) -> int:
    """Write `events` (as `instance_events` gives them) for instance `save_id` in its story's collection. `lines`
    maps the file's line ids to this instance's: an event keeps its reply's line, so it stays on its branch
    (a line not in the map is dropped, and the event is read as on every branch, like an event from before
    line ids)."""
    from personalab.stores.vectors import get_collection

    items = list(events)
    if not items:
        return 0
    texts: list[str] = []
    metadatas: list[dict[str, Any]] = []
    ids: list[str] = []
    taken: set[str] = set()
    for event in items:
        metadata = dict(event.get("metadata") or {})
        metadata.update(
            instance_id=save_id,
            character_id=NO_ID if role_id is None else role_id,
            background_id=NO_ID if background_id is None else background_id,
        )
        line = metadata.pop("line_id", None)
        if isinstance(line, int) and not isinstance(line, bool) and lines is not None and line in lines:
            metadata["line_id"] = lines[line]
        turn = metadata.get("turn", len(ids))
        new_id = event_id(save_id, turn if isinstance(turn, int) else len(ids), metadata.get("line_id"))
        if new_id in taken:  # two branches' events of one turn whose lines did not come along
            new_id = f"{new_id}-{len(ids)}"
        taken.add(new_id)
        texts.append(str(event["text"]))
        metadatas.append(metadata)
        ids.append(new_id)
    get_collection(story_collection(role_id, background_id)).add_texts(texts, metadatas=metadatas, ids=ids)
    return len(items)


# ---- rows as JSON ----------------------------------------------------------------------------------------


def _to_json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def _from_json(table: Table, name: str, value: Any) -> Any:
    if value is None:
        return None
    kind = table.c[name].type
    if isinstance(kind, TypeDecorator):  # SQLModel's UTCDateTime, AutoString: what they store
        kind = kind.impl_instance
    try:
        if isinstance(kind, DateTime):
            return datetime.fromisoformat(value)
        if isinstance(kind, LargeBinary):
            return base64.b64decode(value, validate=True)
    except (TypeError, ValueError):
        raise InvalidInput(f"table {table.name}: column {name} holds {value!r}, not its type") from None
    return value


def export_rows(session: Session, save_id: int) -> dict[str, list[dict[str, Any]]]:
    """Every row of the instance in every instance table (but its lock), as JSON-ready dicts, by table."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for table, column in instance_tables():
        if table.name in NOT_EXPORTED:
            continue
        query = select(table).where(table.c[column] == save_id)
        if "id" in table.c:
            query = query.order_by(table.c["id"])
        rows[table.name] = [
            {key: _to_json(value) for key, value in row.items()} for row in session.execute(query).mappings()
        ]
    return rows


def row_to_json(row: SQLModel) -> dict[str, Any]:
    table: Table = row.__table__  # type: ignore[attr-defined]
    return {column.name: _to_json(getattr(row, column.name)) for column in table.columns}


def import_rows(
    session: Session,
    save_id: int,
    rows: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    roles: Mapping[int, int],
    backgrounds: Mapping[int, int],
    owner: str | None = None,
) -> dict[str, dict[int, int]]:
    """Insert exported `rows` as instance `save_id`'s, with new ids (see the module doc); `roles` and
    `backgrounds` map the file's character and background ids to this database's. Returns old → new id maps
    per table. `InvalidInput` naming the table for an unknown table or column. With `owner` (a user's import, issue
    14), a link to a character or background of this database is kept only when that user owns it or it is shared:
    a file cannot tie the user's rows to another user's library."""
    tables = {table.name: (table, column) for table, column in instance_tables() if table.name not in NOT_EXPORTED}
    unknown = set(rows) - set(tables)
    if unknown:
        raise InvalidInput(f"unknown table(s) {', '.join(sorted(unknown))} in the file")
    maps: dict[str, dict[int, int]] = {}
    for name, (table, save_column) in tables.items():  # parents first
        items = rows.get(name) or []
        maps[name] = {}
        for number, item in enumerate(sorted(items, key=lambda row: row.get("id") or 0), start=1):
            if not isinstance(item, Mapping):
                raise InvalidInput(f"table {name}: row {number} is not an object")
            extra = set(item) - set(table.c.keys())
            if extra:
                raise InvalidInput(f"table {name}: row {number} has unknown column(s) {', '.join(sorted(extra))}")
            values = {key: _from_json(table, key, value) for key, value in item.items()}
            old_id = values.pop("id", None) if "id" in table.primary_key.columns else None
            for key in list(values):
                values[key] = _mapped(
                    session, table, key, values[key], save_column, save_id, maps, roles, backgrounds, owner
                )
            try:
                result = session.execute(table.insert().values(**values))
            except (DBAPIError, StatementError) as exc:
                raise InvalidInput(
                    f"table {name}: row {number} cannot be stored ({str(exc).splitlines()[0]})"
                ) from None
            new_key = getattr(result, "inserted_primary_key", None)  # a CursorResult's
            if old_id is not None and new_key:
                maps[name][int(old_id)] = int(new_key[0])
    return maps


def _seen(row: Role | Background | None, owner: str | None) -> bool:
    """Whether the character or background `row` exists and the user `owner` may use it (None: anyone may)."""
    return row is not None and (owner is None or row.owner == owner or bool(row.shared))


def _mapped(
    session: Session,
    table: Table,
    key: str,
    value: Any,
    save_column: str,
    save_id: int,
    maps: Mapping[str, Mapping[int, int]],
    roles: Mapping[int, int],
    backgrounds: Mapping[int, int],
    owner: str | None = None,
) -> Any:
    """The value of column `key` in this database: ids of the instance's own rows mapped to their new ids."""
    if key == save_column or key == "instance_id":
        return save_id
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        return value
    targets = {fk.column.table.name for fk in table.c[key].foreign_keys}
    if key.endswith("line_id") or key in LINE_REFERENCES:
        targets.add("line")
    if key == "character_id":
        targets.add("role")
    if "role" in targets:
        if value in roles:
            return roles[value]
        return value if value == 0 or _seen(session.get(Role, value), owner) else None
    if "background" in targets:
        if value in backgrounds:
            return backgrounds[value]
        return value if _seen(session.get(Background, value), owner) else None
    for target in targets:
        if target in maps:
            return maps[target].get(value)  # a row of the instance not in the file: the link is dropped
        if target in {t.name for t, _ in instance_tables()}:
            return None  # a later table of the instance: not inserted yet (none today)
        # a row outside the instance (a global world-book entry): kept when it exists here
        found = session.execute(
            select(SQLModel.metadata.tables[target]).where(SQLModel.metadata.tables[target].c["id"] == value)
        ).first()
        return value if found is not None else None
    return value
