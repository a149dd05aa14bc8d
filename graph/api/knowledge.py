"""The knowledge library and the world book's settings through the Python API (issue 15; seed 001 常识知识库 知识管理功能:
add, edit, delete, enable / disable, tags, importance).

An entry's `tag` is its tags, comma-separated (shown as `[tag]` when injected): `tag_knowledge` adds and removes
single tags. Scope: `character_id` (a character's entries), `instance_id` (an instance's), neither (global).
Errors are the project's: `NotFound` for an unknown entry, character or instance, `InvalidInput` naming the field.
Every function takes `owner` (issue 14; None: the operator, who reaches every scope): see `check_scope_owner`.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.library import owned_save, owns, visible_to
from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.nodes.rules.knowledge import KnowledgeEntry, library_position
from personalab.stores.db import session_scope
from personalab.stores.tables import Role
from personalab.stores.worldbook import (
    KNOWLEDGE_EDITABLE,
    Scope,
    add_knowledge,
    delete_knowledge,
    get_knowledge,
    list_knowledge,
    reorder_knowledge,
    update_knowledge,
)
from personalab.stores.worldbook_files import export_knowledge, import_knowledge, read_json_file
from personalab.stores.worldbook_settings import (
    effective_worldbook_settings,
    get_worldbook_settings,
    set_worldbook_settings,
    worldbook_settings_sources,
)
from personalab.stores.worldbook_tables import KnowledgeEntryRow

TAG_SEPARATOR = ","


# --- ownership (issue 14) -------------------------------------------------------------------------------------


def check_scope_owner(
    owner: str | None,
    *,
    character_id: int | None = None,
    instance_id: int | None = None,
    change: bool = False,
    database_url: str | None = None,
) -> None:
    """Whether the user `owner` may read (or `change`) the world book and knowledge of a scope: their own
    instance's; their own character's, or a shared one's to read. The global scope is the server operator's:
    a user names a character or an instance (`InvalidInput`). Another user's id is `NotFound` naming it. The
    operator (None) may do anything."""
    if owner is None:
        return
    if character_id is None and instance_id is None:
        raise InvalidInput(
            "character_id or instance_id: a signed-in user names one (the global scope is the server operator's)"
        )
    with session_scope(database_url) as session:
        if instance_id is not None:
            owned_save(session, instance_id, owner)
        if character_id is not None:
            role = session.get(Role, character_id)
            if role is None or not visible_to(role, owner):
                raise NotFound(f"character {character_id} does not exist")
            if change and not owns(role, owner):
                raise NotFound(f"character {character_id} is shared by another user: only its owner can change it")


def check_entry_owner(
    entry_id: int, owner: str | None, *, change: bool = False, database_url: str | None = None
) -> None:
    """`NotFound` naming the entry unless the user `owner` may read (or `change`) knowledge entry `entry_id`: one
    of their instance's or character's (or a shared character's, to read). Global entries are the operator's."""
    if owner is None:
        return
    with session_scope(database_url) as session:
        row = session.get(KnowledgeEntryRow, _entry_id(entry_id))
        scope = (row.role_id, row.save_id) if row is not None else (None, None)
    if scope == (None, None):
        raise NotFound(f"knowledge entry {entry_id} does not exist")
    try:
        check_scope_owner(owner, character_id=scope[0], instance_id=scope[1], change=change, database_url=database_url)
    except NotFound:
        raise NotFound(f"knowledge entry {entry_id} does not exist") from None


def scope_of(character_id: int | None = None, instance_id: int | None = None) -> Scope:
    return Scope(role_id=character_id, save_id=instance_id)


def knowledge_view(entry: KnowledgeEntry) -> dict[str, Any]:
    """An entry as JSON data: id, tag, tags, content, importance, keywords, enabled, user_edited, scope, order."""
    data = entry.model_dump(mode="json")
    data["id"] = int(entry.id)
    data["order"] = library_position(entry)[0]  # issue 25: an older row without one stands at its id
    data["tags"] = split_tags(entry.tag)
    data["scope"] = entry.scope
    return data


def split_tags(tag: str) -> list[str]:
    return [part.strip() for part in tag.split(TAG_SEPARATOR) if part.strip()]


def _entry_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"knowledge entry id must be a whole number, got {value!r}")
    return value


def add_knowledge_entry(
    tag: str,
    content: str,
    *,
    importance: float = 0.5,
    keywords: Sequence[str] = (),
    enabled: bool = True,
    character_id: int | None = None,
    instance_id: int | None = None,
    owner: str | None = None,
    database_url: str | None = None,
) -> dict[str, Any]:
    """A new entry (seed 001 添加知识), in a scope `owner` may change (`check_scope_owner`)."""
    check_scope_owner(owner, character_id=character_id, instance_id=instance_id, change=True, database_url=database_url)
    with session_scope(database_url) as session:
        entry = add_knowledge(
            session,
            tag,
            content,
            importance=importance,
            keywords=keywords,
            enabled=enabled,
            scope=scope_of(character_id, instance_id),
        )
        return knowledge_view(entry)


def list_knowledge_entries(
    *,
    character_id: int | None = None,
    instance_id: int | None = None,
    visible: bool = False,
    tag: str | None = None,
    owner: str | None = None,
    database_url: str | None = None,
) -> list[dict[str, Any]]:
    """The entries of one scope (or, `visible`, all it sees) in the library's order (`order`, lower first: the order
    they are injected in, issue 25); `tag`: only those with that tag."""
    check_scope_owner(owner, character_id=character_id, instance_id=instance_id, database_url=database_url)
    with session_scope(database_url) as session:
        entries = list_knowledge(session, scope_of(character_id, instance_id), visible=visible)
    views = [knowledge_view(entry) for entry in entries]
    return [view for view in views if tag is None or tag.strip() in view["tags"]]


def get_knowledge_entry(entry_id: int, *, owner: str | None = None, database_url: str | None = None) -> dict[str, Any]:
    """One entry; `NotFound` when there is none (or it is not one `owner` may read)."""
    check_entry_owner(entry_id, owner, database_url=database_url)
    with session_scope(database_url) as session:
        return knowledge_view(get_knowledge(session, _entry_id(entry_id)))


def edit_knowledge(
    entry_id: int, *, owner: str | None = None, database_url: str | None = None, **changes: Any
) -> dict[str, Any]:
    """Change the entry's fields (tag, content, importance, keywords, enabled; seed 001 编辑知识): it is marked
    edited by the user, so automatic updates leave it alone. Nothing changes on bad input."""
    unknown = sorted(set(changes) - set(KNOWLEDGE_EDITABLE))
    if unknown:
        raise InvalidInput(
            f"cannot change {unknown[0]!r} of a knowledge entry (one of {', '.join(KNOWLEDGE_EDITABLE)})"
        )
    if not changes:
        raise InvalidInput(f"nothing to change (fields: {', '.join(KNOWLEDGE_EDITABLE)})")
    check_entry_owner(entry_id, owner, change=True, database_url=database_url)
    with session_scope(database_url) as session:
        return knowledge_view(update_knowledge(session, _entry_id(entry_id), **changes))


def set_knowledge_enabled(
    entry_id: int, enabled: bool, *, owner: str | None = None, database_url: str | None = None
) -> dict[str, Any]:
    """Enable or disable an entry (seed 001 启用/禁用): a disabled entry is kept and never injected."""
    if not isinstance(enabled, bool):
        raise InvalidInput(f"enabled must be true or false, got {enabled!r}")
    return edit_knowledge(entry_id, enabled=enabled, owner=owner, database_url=database_url)


def tag_knowledge(
    entry_id: int,
    *,
    add: Iterable[str] = (),
    remove: Iterable[str] = (),
    owner: str | None = None,
    database_url: str | None = None,
) -> dict[str, Any]:
    """Add and remove tags of an entry (seed 001 标签管理); an entry keeps at least one tag."""
    adding = [tag.strip() for tag in add if tag.strip()]
    for tag in adding:
        if TAG_SEPARATOR in tag:
            raise InvalidInput(f"tag {tag!r} contains {TAG_SEPARATOR!r} (one tag at a time)")
    dropping = {tag.strip() for tag in remove}
    check_entry_owner(entry_id, owner, change=True, database_url=database_url)
    with session_scope(database_url) as session:
        current = split_tags(get_knowledge(session, _entry_id(entry_id)).tag)
    tags = [tag for tag in dict.fromkeys([*current, *adding]) if tag not in dropping]
    if not tags:
        raise InvalidInput(f"knowledge entry {entry_id} would have no tag left (field 'tag')")
    return edit_knowledge(entry_id, tag=TAG_SEPARATOR.join(tags), owner=owner, database_url=database_url)


def delete_knowledge_entry(
    entry_id: int, *, owner: str | None = None, database_url: str | None = None
) -> dict[str, Any]:
    """Delete an entry (seed 001 删除知识); `NotFound` when there is none (or it is not `owner`'s to change)."""
    check_entry_owner(entry_id, owner, change=True, database_url=database_url)
    with session_scope(database_url) as session:
        delete_knowledge(session, _entry_id(entry_id))
    return {"deleted": "knowledge entry", "id": entry_id}


def reorder_knowledge_entries(
    orders: Mapping[int, int], *, owner: str | None = None, database_url: str | None = None
) -> list[dict[str, Any]]:
    """Give entries their order values (issue 25: lower is injected first), all or nothing: an unknown id, another
    user's entry or a value that is not a whole number changes nothing (`NotFound` / `InvalidInput` naming it)."""
    if not isinstance(orders, Mapping) or not orders:
        raise InvalidInput("orders: give at least one knowledge entry id and its order value")
    for entry_id in orders:
        check_entry_owner(_entry_id(entry_id), owner, change=True, database_url=database_url)
    with session_scope(database_url) as session:
        return [knowledge_view(entry) for entry in reorder_knowledge(session, dict(orders))]


MOVES = ("up", "down")


def move_knowledge_entry(
    entry_id: int, direction: str, *, owner: str | None = None, database_url: str | None = None
) -> list[dict[str, Any]]:
    """Move an entry one place up or down among its own scope's entries (the editor's arrows, issue 25): the scope's
    order values are dealt out again in the new sequence, kept strictly increasing so that equal values cannot undo
    the move. At either end nothing changes. Returns the scope's entries in their new order."""
    if direction not in MOVES:
        raise InvalidInput(f"direction must be one of {', '.join(MOVES)}, got {direction!r}")
    entry = get_knowledge_entry(entry_id, owner=owner, database_url=database_url)
    check_entry_owner(entry_id, owner, change=True, database_url=database_url)
    scope = {"character_id": entry["role_id"], "instance_id": entry["save_id"]}
    with session_scope(database_url) as session:
        entries = [knowledge_view(e) for e in list_knowledge(session, scope_of(**scope))]
        ids = [e["id"] for e in entries]
        here = ids.index(entry_id)
        there = here - 1 if direction == "up" else here + 1
        if not 0 <= there < len(ids):
            return entries
        ids[here], ids[there] = ids[there], ids[here]
        values: list[int] = []
        for value in sorted(e["order"] for e in entries):
            values.append(value if not values or value > values[-1] else values[-1] + 1)
        reorder_knowledge(session, dict(zip(ids, values, strict=True)))
        return [knowledge_view(e) for e in list_knowledge(session, scope_of(**scope))]


# --- world-book settings ------------------------------------------------------------------------------------


def worldbook_settings(
    *,
    character_id: int | None = None,
    instance_id: int | None = None,
    owner: str | None = None,
    database_url: str | None = None,
) -> dict[str, Any]:
    """The world book's settings of one scope: those set there and those in effect (issue 15)."""
    check_scope_owner(owner, character_id=character_id, instance_id=instance_id, database_url=database_url)
    scope = scope_of(character_id, instance_id)
    with session_scope(database_url) as session:
        own = get_worldbook_settings(session, scope)
        effective = effective_worldbook_settings(session, scope)
        sources = worldbook_settings_sources(session, scope)
    return {"scope": scope.label, "set": own.as_dict(), "effective": effective.as_dict(), "sources": sources}


def update_worldbook_settings(
    changes: dict[str, Any],
    *,
    character_id: int | None = None,
    instance_id: int | None = None,
    clear: bool = False,
    owner: str | None = None,
    database_url: str | None = None,
) -> dict[str, Any]:
    """Set (a value) or unset (None) settings of one scope, after `clear` unsets them all; returns them as
    `worldbook_settings` does. A bad value is `InvalidInput` naming it, and nothing changes."""
    check_scope_owner(owner, character_id=character_id, instance_id=instance_id, change=True, database_url=database_url)
    scope = scope_of(character_id, instance_id)
    with session_scope(database_url) as session:
        set_worldbook_settings(session, scope, changes, clear=clear)
    return worldbook_settings(character_id=character_id, instance_id=instance_id, database_url=database_url)


# --- the façade's area (issue 23) -----------------------------------------------------------------------------


class KnowledgeApi:
    """`api.knowledge`: the functions above bound to the caller, plus import and export of the scope's entries."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def _kw(self) -> dict[str, Any]:
        return {"owner": self.caller.owner, "database_url": self.caller.database_url}

    def add(self, tag: str, content: str, **fields: Any) -> dict[str, Any]:
        """`add_knowledge_entry`: importance, keywords, enabled, character_id / instance_id."""
        return add_knowledge_entry(tag, content, **fields, **self._kw())

    def list(
        self,
        *,
        character_id: int | None = None,
        instance_id: int | None = None,
        visible: bool = False,
        tag: str | None = None,
    ) -> list[dict[str, Any]]:
        return list_knowledge_entries(
            character_id=character_id, instance_id=instance_id, visible=visible, tag=tag, **self._kw()
        )

    def get(self, entry_id: int) -> dict[str, Any]:
        return get_knowledge_entry(entry_id, **self._kw())

    def edit(self, entry_id: int, **changes: Any) -> dict[str, Any]:
        return edit_knowledge(entry_id, **changes, **self._kw())

    def enable(self, entry_id: int) -> dict[str, Any]:
        return set_knowledge_enabled(entry_id, True, **self._kw())

    def disable(self, entry_id: int) -> dict[str, Any]:
        return set_knowledge_enabled(entry_id, False, **self._kw())

    def tag(self, entry_id: int, *, add: Iterable[str] = (), remove: Iterable[str] = ()) -> dict[str, Any]:
        return tag_knowledge(entry_id, add=add, remove=remove, **self._kw())

    def delete(self, entry_id: int) -> dict[str, Any]:
        return delete_knowledge_entry(entry_id, **self._kw())

    def reorder(self, orders: Mapping[int, int]) -> builtins.list[dict[str, Any]]:
        """`reorder_knowledge_entries`: order values (lower first), all or nothing."""
        return reorder_knowledge_entries(orders, **self._kw())

    def move(self, entry_id: int, direction: str) -> builtins.list[dict[str, Any]]:
        """`move_knowledge_entry`: one place up or down in its scope; the scope's entries in their new order."""
        return move_knowledge_entry(entry_id, direction, **self._kw())

    def import_data(
        self, data: Any, *, character_id: int | None = None, instance_id: int | None = None
    ) -> dict[str, Any]:
        """A knowledge file's JSON data into the scope, all or nothing; the import report."""
        self.caller.check_scope(character_id, instance_id, change=True)
        scope = scope_of(character_id, instance_id)
        with session_scope(self.caller.database_url) as session:
            report = import_knowledge(session, data, scope)
        return {"scope": scope.label, **asdict(report), "summary": report.summary()}

    def import_file(
        self, path: str | os.PathLike[str], *, character_id: int | None = None, instance_id: int | None = None
    ) -> dict[str, Any]:
        self.caller.check_scope(character_id, instance_id, change=True)
        return self.import_data(read_json_file(path), character_id=character_id, instance_id=instance_id)

    def export(
        self, *, character_id: int | None = None, instance_id: int | None = None, with_keywords: bool = False
    ) -> dict[str, Any]:
        self.caller.check_scope(character_id, instance_id)
        with session_scope(self.caller.database_url) as session:
            return export_knowledge(session, scope_of(character_id, instance_id), with_keywords=with_keywords)
