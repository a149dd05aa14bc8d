"""World book and knowledge library: scoped CRUD and the queries a turn makes, embeddings for semantic entries.

Scope (both stores): global, one character (`role_id`) or one conversation instance (`save_id`); an instance
sees global + its character's + its own entries (`worldbook_for_instance`, `knowledge_for_instance`). File
formats (import, export) are `stores.worldbook_files`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from personalab.nodes.rules.errors import InstanceNotFound, InvalidInput, NotFound
from personalab.nodes.rules.knowledge import KnowledgeEntry, library_position, validate_knowledge
from personalab.nodes.rules.worldbook import (
    PreparedWorldbook,
    WorldbookContext,
    WorldbookEntry,
    stored_entry,
    validate_entry,
)
from personalab.stores.db import INTEGER_MAX, INTEGER_MIN
from personalab.stores.lru import LRU
from personalab.stores.saves import get_save
from personalab.stores.tables import Role, utcnow
from personalab.stores.worldbook_revision import instance_revisions, revisions, visible_scopes
from personalab.stores.worldbook_tables import KnowledgeEntryRow, WorldbookEntryRow, WorldbookEntrySourceRow
from sqlalchemy import and_, or_
from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

if TYPE_CHECKING:  # numpy and langchain_core load only with the embeddings: not on a listing command's path (issue 29)
    import numpy as np
    from langchain_core.embeddings import Embeddings


@dataclass(frozen=True)
class Scope:
    """Global (both None), one character (`role_id`) or one instance (`save_id`)."""

    role_id: int | None = None
    save_id: int | None = None

    def __post_init__(self) -> None:
        if self.role_id is not None and self.save_id is not None:
            raise InvalidInput("a scope is a character or an instance, not both")

    @property
    def label(self) -> str:
        if self.save_id is not None:
            return f"instance {self.save_id}"
        if self.role_id is not None:
            return f"character {self.role_id}"
        return "global"


GLOBAL = Scope()


def check_scope(session: Session, scope: Scope) -> None:
    """LookupError when the scope's character or instance does not exist."""
    if scope.role_id is not None and session.get(Role, scope.role_id) is None:
        raise NotFound(f"character {scope.role_id} does not exist")
    if scope.save_id is not None:
        get_save(session, scope.save_id)


def _visible_filter(model: Any, session: Session, scope: Scope, visible: bool) -> Any:
    """Rows of exactly `scope`, or with `visible` everything that scope sees (global + character + own)."""
    is_global = and_(col(model.role_id).is_(None), col(model.save_id).is_(None))
    if not visible:
        if scope.save_id is not None:
            return col(model.save_id) == scope.save_id
        if scope.role_id is not None:
            return and_(col(model.role_id) == scope.role_id, col(model.save_id).is_(None))
        return is_global
    role_id = scope.role_id
    clauses = [is_global]
    if scope.save_id is not None:
        role_id = get_save(session, scope.save_id).role_id
        clauses.append(col(model.save_id) == scope.save_id)
    if role_id is not None:
        clauses.append(and_(col(model.role_id) == role_id, col(model.save_id).is_(None)))
    return or_(*clauses)


# --- knowledge ------------------------------------------------------------------------------------


def add_knowledge(
    session: Session,
    tag: str,
    content: str,
    *,
    importance: float = 0.5,
    keywords: Sequence[str] = (),
    enabled: bool = True,
    user_edited: bool = True,
    scope: Scope = GLOBAL,
    created_turn: int | None = None,
) -> KnowledgeEntry:
    """A new knowledge entry (seed 001 添加知识); `user_edited` defaults to True: someone typed it in.
    `created_turn`: the turn an entry made from an event was made at (injected with a time prefix); None for
    permanent knowledge."""
    fields = {
        "tag": tag,
        "content": content,
        "importance": importance,
        "keywords": keywords,
        "enabled": enabled,
        "created_turn": created_turn,
    }
    entry = validate_knowledge(
        {"id": "new", **fields, "user_edited": user_edited, "role_id": scope.role_id, "save_id": scope.save_id},
        "knowledge entry",
    )
    check_scope(session, scope)
    row = knowledge_row(entry)
    session.add(row)
    session.flush()
    if row.order is None:  # a new entry goes last (issue 25): its id is past every order the library gave out
        row.order = row.id
        session.add(row)
        session.flush()
    return KnowledgeEntry.model_validate(row)


def knowledge_row(entry: KnowledgeEntry) -> KnowledgeEntryRow:
    """A new row of `entry` (its id is the database's)."""
    return KnowledgeEntryRow(**entry.model_dump(mode="json", exclude={"id"}))


KNOWLEDGE_EDITABLE = ("tag", "content", "importance", "keywords", "enabled")


def update_knowledge(session: Session, entry_id: int, *, by_user: bool = True, **changes: Any) -> KnowledgeEntry:
    """Edit an entry (seed 001 编辑知识). A user's edit marks it `user_edited`; an automatic update
    (`by_user=False`, e.g. from a review suggestion) of a user-edited entry is refused (seed: isUserEdited
    用于保护手动修改)."""
    row = session.get(KnowledgeEntryRow, entry_id)
    if row is None:
        raise NotFound(f"knowledge entry {entry_id} does not exist")
    unknown = set(changes) - set(KNOWLEDGE_EDITABLE)
    if unknown:
        raise InvalidInput(f"knowledge entry {entry_id}: cannot change {', '.join(sorted(unknown))}")
    if not by_user and row.user_edited:
        raise InvalidInput(f"knowledge entry {entry_id} was edited by the user; automatic updates may not change it")
    current = KnowledgeEntry.model_validate(row).model_dump()
    entry = validate_knowledge({**current, **changes}, f"knowledge entry {entry_id}")
    stored = entry.model_dump(mode="json")
    for name in changes:
        setattr(row, name, stored[name])
    row.user_edited = row.user_edited or by_user
    row.updated_at = utcnow()
    session.add(row)
    session.flush()
    return KnowledgeEntry.model_validate(row)


def get_knowledge(session: Session, entry_id: int) -> KnowledgeEntry:
    """One knowledge entry; `NotFound` when there is none."""
    row = session.get(KnowledgeEntryRow, entry_id)
    if row is None:
        raise NotFound(f"knowledge entry {entry_id} does not exist")
    return KnowledgeEntry.model_validate(row)


def delete_knowledge(session: Session, entry_id: int) -> None:
    row = session.get(KnowledgeEntryRow, entry_id)
    if row is None:
        raise NotFound(f"knowledge entry {entry_id} does not exist")
    session.delete(row)
    session.flush()


def list_knowledge(session: Session, scope: Scope = GLOBAL, *, visible: bool = False) -> list[KnowledgeEntry]:
    """Entries of exactly `scope`, or with `visible=True` every entry that scope sees, in the library's order
    (issue 25: `order`, lower first; an entry without one by its id)."""
    check_scope(session, scope)
    stmt = select(KnowledgeEntryRow).where(_visible_filter(KnowledgeEntryRow, session, scope, visible))
    entries = [KnowledgeEntry.model_validate(row) for row in session.exec(stmt.order_by(col(KnowledgeEntryRow.id)))]
    return sorted(entries, key=library_position)


def reorder_knowledge(session: Session, orders: Mapping[int, Any]) -> list[KnowledgeEntry]:
    """Give each entry its order value (issue 25: lower is injected first), all or nothing: every id and value is
    checked before a write. Not a user edit of the entry's content: `user_edited` stays as it was."""
    if not orders:
        raise InvalidInput("reorder: no knowledge entries given")
    rows = {}
    for entry_id, order in orders.items():
        row = session.get(KnowledgeEntryRow, entry_id)
        if row is None:
            raise NotFound(f"knowledge entry {entry_id} does not exist")
        if isinstance(order, bool) or not isinstance(order, int) or not INTEGER_MIN <= order <= INTEGER_MAX:
            raise InvalidInput(f"knowledge entry {entry_id}: field 'order' must be a whole number, got {order!r}")
        rows[entry_id] = row
    for entry_id, order in orders.items():
        rows[entry_id].order = order
        rows[entry_id].updated_at = utcnow()
        session.add(rows[entry_id])
    session.flush()
    return [KnowledgeEntry.model_validate(rows[entry_id]) for entry_id in orders]


def knowledge_for_instance(session: Session, save_id: int) -> list[KnowledgeEntry]:
    """What instance `save_id` sees: global + its character's + its own entries (disabled ones included;
    `nodes.rules.knowledge.select_knowledge` drops them)."""
    return list_knowledge(session, Scope(save_id=save_id), visible=True)


# --- world book -----------------------------------------------------------------------------------


def worldbook_row(entry: WorldbookEntry, uid: str | None = None) -> WorldbookEntryRow:
    """A new row of `entry` (its id and creation time are the database's); `uid`: its id in an imported file.
    The entry's SillyTavern source is a row of its own (`add_worldbook_row`)."""
    fields = entry.model_dump(mode="json", exclude={"id", "temporal", "created_at", "source", "source_format"})
    return WorldbookEntryRow(uid=uid, **fields, **entry.temporal.model_dump())


def add_worldbook_row(session: Session, entry: WorldbookEntry, uid: str | None = None) -> WorldbookEntryRow:
    """Store `entry` (and the SillyTavern entry it came from, when it has one) in the session; flushed."""
    row = worldbook_row(entry, uid)
    session.add(row)
    session.flush()
    if entry.source is not None and row.id is not None:
        session.add(
            WorldbookEntrySourceRow(entry_id=row.id, format=entry.source_format or "world info", data=entry.source)
        )
        session.flush()
    return row


def worldbook_entries(session: Session, rows: Sequence[WorldbookEntryRow]) -> list[WorldbookEntry]:
    """The rows as entries, each with the SillyTavern entry it was imported from (one query for all)."""
    ids = [row.id for row in rows if row.id is not None]
    sources: dict[int, WorldbookEntrySourceRow] = {}
    for start in range(0, len(ids), 500):  # bound the IN list
        stmt = select(WorldbookEntrySourceRow).where(
            col(WorldbookEntrySourceRow.entry_id).in_(ids[start : start + 500])
        )
        sources.update({source.entry_id: source for source in session.exec(stmt).all()})
    out = []
    for row in rows:
        entry = WorldbookEntry.model_validate(row)
        source = sources.get(row.id) if row.id is not None else None
        if source is not None:
            entry = entry.model_copy(update={"source": dict(source.data), "source_format": source.format})
        out.append(entry)
    return out


def add_worldbook_entry(session: Session, content: str, *, scope: Scope = GLOBAL, **fields: Any) -> WorldbookEntry:
    """A new world-book entry in `scope`; `fields` are `WorldbookEntry` fields (keywords, trigger_type, ...)."""
    for name in ("id", "role_id", "save_id", "created_at", "content"):
        if name in fields:
            raise InvalidInput(f"world-book entry: field '{name}' is set by the store")
    data = {"id": "new", "content": content, "role_id": scope.role_id, "save_id": scope.save_id, **fields}
    entry = validate_entry(data, "world-book entry")
    check_scope(session, scope)
    return worldbook_entries(session, [add_worldbook_row(session, entry)])[0]


def delete_worldbook_entry(session: Session, entry_id: int) -> None:
    row = session.get(WorldbookEntryRow, entry_id)
    if row is None:
        raise NotFound(f"world-book entry {entry_id} does not exist")
    source = session.get(WorldbookEntrySourceRow, entry_id)
    if source is not None:
        session.delete(source)
        session.flush()  # the source row points at the entry: it goes first
    session.delete(row)
    session.flush()


def worldbook_rows(session: Session, scope: Scope = GLOBAL, *, visible: bool = False) -> list[WorldbookEntryRow]:
    """Rows of exactly `scope`, or with `visible=True` every row that scope sees, oldest first."""
    check_scope(session, scope)
    stmt = select(WorldbookEntryRow).where(_visible_filter(WorldbookEntryRow, session, scope, visible))
    return list(session.exec(stmt.order_by(col(WorldbookEntryRow.id))).all())


def list_worldbook(session: Session, scope: Scope = GLOBAL, *, visible: bool = False) -> list[WorldbookEntry]:
    """Entries of exactly `scope`, or with `visible=True` every entry that scope sees, oldest first."""
    return worldbook_entries(session, worldbook_rows(session, scope, visible=visible))


def worldbook_for_instance(session: Session, save_id: int) -> list[WorldbookEntry]:
    """What instance `save_id` sees: global + its character's + its own entries (the trigger skips
    disabled ones)."""
    return list_worldbook(session, Scope(save_id=save_id), visible=True)


# --- the prepared book, once per book version (issue 28) --------------------------------------------


@dataclass
class _Cached:
    version: tuple[Any, ...]
    book: PreparedWorldbook


_PREPARED: OrderedDict[tuple[str, int | None, int], _Cached] = OrderedDict()
_PREPARED_MAX = 8  # books kept per process (a 20,000-entry book is some tens of MB)
_PREPARED_LOCK = threading.Lock()


def instance_scope_filter(model: Any, save_id: int, role_id: int | None) -> Any:
    """`_visible_filter(..., Scope(save_id=save_id), True)` for an instance whose character (`role_id`) is known:
    no read of the instance again."""
    clauses = [and_(col(model.role_id).is_(None), col(model.save_id).is_(None)), col(model.save_id) == save_id]
    if role_id is not None:
        clauses.append(and_(col(model.role_id) == role_id, col(model.save_id).is_(None)))
    return or_(*clauses)


def worldbook_version(session: Session, save_id: int, role_id: int | None = None) -> tuple[Any, ...]:
    """What changes whenever an entry instance `save_id` (of character `role_id`) sees, or its SillyTavern source, is
    added, deleted or edited, in any process and by any path: the revisions of its three scopes
    (`stores.worldbook_revision`, kept by the database's triggers), read by primary key — not an aggregate over
    every entry the instance sees (~9 ms a turn with 5,000 entries, issue 28)."""
    if role_id is None:
        role_id = get_save(session, save_id).role_id
    return revisions(session, visible_scopes(save_id, role_id))


def _stored_entries(session: Session, save_id: int, role_id: int | None) -> list[WorldbookEntry]:
    """`worldbook_for_instance`'s entries, read as plain rows (no ORM objects) and built without validating again
    (`stored_entry`): a 5,000-entry book loads several times faster."""
    table: Any = WorldbookEntryRow.__table__  # type: ignore[attr-defined]
    sources_table: Any = WorldbookEntrySourceRow.__table__  # type: ignore[attr-defined]
    where = instance_scope_filter(WorldbookEntryRow, save_id, role_id)
    rows = session.execute(sa_select(table).where(where).order_by(table.c.id)).mappings().all()
    found: Any = session.execute(
        sa_select(sources_table.c.entry_id, sources_table.c.format, sources_table.c.data)
        .join(table, table.c.id == sources_table.c.entry_id)
        .where(where)
    ).all()
    sources: dict[int, tuple[str, dict[str, Any]]] = {entry_id: (fmt, data) for entry_id, fmt, data in found}
    return [stored_entry(dict(row), sources.get(row["id"])) for row in rows]


def _cached_book(session: Session, save_id: int) -> _Cached:
    found = instance_revisions(session, save_id)  # the character and the version in one read (`worldbook_version`)
    if found is None:  # as every other read of a missing instance (`get_save`)
        raise InstanceNotFound(f"instance {save_id} does not exist")
    role_id, version = found
    key = (str(session.get_bind().engine.url), role_id, save_id)
    with _PREPARED_LOCK:
        cached = _PREPARED.get(key)
        if cached is not None and cached.version == version:
            _PREPARED.move_to_end(key)
            return cached
    cached = _Cached(version, PreparedWorldbook(_stored_entries(session, save_id, role_id)))
    with _PREPARED_LOCK:
        _PREPARED[key] = cached
        _PREPARED.move_to_end(key)
        while len(_PREPARED) > _PREPARED_MAX:
            _PREPARED.popitem(last=False)
    return cached


def prepared_worldbook_for_instance(session: Session, save_id: int) -> PreparedWorldbook:
    """What instance `save_id` sees (`worldbook_for_instance`) ready to scan: built once per book version and
    reused across turns; a change to any entry it sees, made by any process, builds it again (`worldbook_version`)."""
    return _cached_book(session, save_id).book


# --- embeddings for semantic entries --------------------------------------------------------------

# Entry vectors by (model, text), float32 (a list of Python floats took 8 times the room: ~16 KiB a USE vector, 64 MiB
# for a full cache); least recently used first out, so a book larger than the cache keeps what its turns reuse.
_VECTOR_CACHE_MAX = 4096
_VECTOR_CACHE: LRU[tuple[str, str], np.ndarray] = LRU(_VECTOR_CACHE_MAX)


def _entry_vectors(texts: Sequence[str], embeddings: Embeddings) -> list[np.ndarray]:
    """The vectors of `texts` (entries' texts, not queries) by `embeddings`: the kept ones, the others embedded in
    one call and kept. Taken from this call's own results, not read back: a call with more texts than the cache
    holds pushes its own first ones out."""
    import numpy as np
    model = type(embeddings).__name__
    found: dict[str, np.ndarray] = {}
    for text in texts:
        kept = _VECTOR_CACHE.get((model, text))
        if kept is not None:
            found[text] = kept
    missing = list(dict.fromkeys(text for text in texts if text not in found))
    if missing:
        for text, vector in zip(missing, embeddings.embed_documents(missing), strict=True):
            found[text] = _VECTOR_CACHE.put((model, text), np.asarray(vector, dtype=np.float32))
    return [found[text] for text in texts]


def embedding_text(entry: WorldbookEntry) -> str:
    """What a semantic entry is compared on: its title, keywords and content."""
    return "\n".join(part for part in (entry.title, " ".join(entry.keywords), entry.content) if part.strip())


def semantic_vectors(
    entries: Iterable[WorldbookEntry], text: str, embeddings: Embeddings | None = None
) -> tuple[list[float] | None, dict[str, list[float]]]:
    """(query vector of `text`, vectors of the enabled non-constant semantic entries by id), with the
    default `stores.embeddings.get_embeddings()`; entry vectors are cached per process by their text.
    (None, {}) when there is no semantic entry or no text, so no model is loaded for nothing."""
    semantic = [e for e in entries if e.trigger_type == "semantic" and e.enabled and not e.constant]
    if not semantic or not text.strip():
        return None, {}
    if embeddings is None:
        from personalab.stores.embeddings import get_embeddings

        embeddings = get_embeddings()
    kept = _entry_vectors([embedding_text(e) for e in semantic], embeddings)
    vectors = {e.id: vector.tolist() for e, vector in zip(semantic, kept, strict=True)}
    return list(embeddings.embed_query(text)), vectors


def knowledge_similarities(
    entries: Iterable[KnowledgeEntry], text: str, embeddings: Embeddings | None = None
) -> dict[str, float]:
    """The knowledge library's vector search (seed 001 CommonKnowledgeLibrary 向量检索): entry id → cosine similarity
    of `text` and the enabled entry's tag and content, with the default embeddings; entry vectors are cached per
    process by their text. {} without entries or text (no model is loaded for nothing)."""
    enabled = [e for e in entries if e.enabled and e.content.strip()]
    if not enabled or not text.strip():
        return {}
    if embeddings is None:
        from personalab.stores.embeddings import get_embeddings

        embeddings = get_embeddings()
    kept = _entry_vectors([f"{e.tag}\n{e.content}" for e in enabled], embeddings)
    from personalab.nodes.rules.retrieval import cosine
    from personalab.stores.embeddings import embed_query_once

    query = embed_query_once(text, embeddings).astype(float)
    return {e.id: cosine(query, vector.astype(float)) for e, vector in zip(enabled, kept, strict=True)}


def with_semantic_vectors(
    entries: Sequence[WorldbookEntry] | PreparedWorldbook,
    context: WorldbookContext,
    embeddings: Embeddings | None = None,
) -> WorldbookContext:
    """`context` with the query and entry vectors `trigger_worldbook` needs for semantic entries. For a prepared
    book the entries' vectors are one matrix, made once per book version, and the similarities of the turn one
    product (seed 004 语义相似度 by precomputed vectors)."""
    import numpy as np

    if not isinstance(entries, PreparedWorldbook):
        query, vectors = semantic_vectors(entries, context.text, embeddings)
        return replace(context, query_vector=query, entry_vectors=vectors)
    book = entries
    semantic = [book.entries[position] for position in book.semantic]
    if not semantic or not context.text.strip():
        return context
    if embeddings is None:
        from personalab.stores.embeddings import get_embeddings

        embeddings = get_embeddings()
    model = type(embeddings).__name__
    matrix = book.vectors.get(model)
    if matrix is None:
        _query, vectors = semantic_vectors(semantic, "-", embeddings)
        ids = [entry.id for entry in semantic]
        stacked = np.asarray([vectors[entry_id] for entry_id in ids], dtype=np.float32)
        norms = np.linalg.norm(stacked, axis=1, keepdims=True)
        matrix = book.vectors[model] = (ids, stacked / np.where(norms == 0, 1, norms))
    ids, unit = matrix
    from personalab.stores.embeddings import embed_query_once

    asked = embed_query_once(context.text, embeddings)
    norm = float(np.linalg.norm(asked))
    scores = unit @ (asked / norm) if norm else np.zeros(len(ids), dtype=np.float32)
    similarities = dict(zip(ids, (float(score) for score in scores), strict=True))
    return replace(context, similarity=lambda entry: similarities.get(entry.id))
