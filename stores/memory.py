"""The character's long-term memory: CRUD and search of memory entries, and applying maintenance plans.

Seed 001 (记忆条目数据结构, 四层记忆系统, 记忆检索和匹配算法, 性能优化策略) and seed 004 (记忆类型).

- The database (SQLite or PostgreSQL, SQLModel) is the truth. Every memory belongs to one instance (save)
  and one character of it (a role id, 0 for an instance without a role); every read and write is filtered
  by instance, so an instance never sees another's memories.
- Chroma holds one collection per (instance, character), ``memories_<instance>_<character>``, with
  metadata ``instance_id``, ``character_id``, ``memory_id``, ``layer``, ``type``, ``turn``. A collection per
  instance rather than a ``where`` filter on one shared collection: with Chroma's embedded engine a metadata
  filter costs 15–40 ms per query at 10,000 memories, an unfiltered query in its own collection 2–3 ms.
  Vector hits are always checked against the database, so a vector left behind by a failed write is never
  returned. `reindex` rebuilds an instance's collections from the database.
- The keyword/tag index, the instance revisions that keep it current and the kept vectors are
  `stores.memory_index`; every write here that changes what they see bumps the revision in its transaction.
- A new memory may come with `context`: the text it came after in its source (the previous lines of a dialogue,
  see `nodes.rules.dialogue_memory`). It is stored and embedded in front of the content, and its words count
  half as much as the memory's own words in BM25 (`nodes.rules.keywords.memory_search_text`). Measured on LoCoMo
  (one memory per dialog turn with its session date, recall retrieval, recall@10 over categories 1–4, `evals.locomo`): the
  turn alone .645, the previous turn added as plain content .692, added as context .711. A later edit
  re-indexes the whole text evenly.
- Maintenance (seed 001 记忆流转): the store only loads an instance's memories as `LayerMemory` values and
  applies the plans the caller made for them (`MemoryStore.maintenance`); the rule itself is
  `nodes.rules.memory_layers.plan_maintenance`, called by the maintenance node and the CLI.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.keywords import extract_keywords, memory_search_text
from personalab.nodes.rules.memory_layers import (
    RECORD_LAYER,
    Layer,
    LayerMemory,
    MaintenancePlan,
    MemoryType,
    Transition,
    check_importance,
    initial_importance,
    is_record,
    parse_layer,
    parse_type,
)
from personalab.stores.config import data_dir, database_url
from personalab.stores.db import session_scope
from personalab.stores.history import get_path_ids, line_forks, line_parents
from personalab.stores.memory_edits import MemoryNotFoundError as MemoryNotFoundError  # re-exported
from personalab.stores.memory_index import (
    BM25_B,
    BM25_K1,
    PENDING_VECTORS,
    VECTORS,
    IndexedMemory,
    IndexKey,
    MemoryIndex,
    build_index,
    builder_lock,
    bump_revision,
    collection_name,
    index_rows,
    indexed,
    keep_role,
    kept_index,
    kept_role,
    note_written,
    update_index,
)
from personalab.stores.memory_index import BM25Index as BM25Index  # re-exported: callers patch it here
from personalab.stores.memory_tables import MemoryEntry
from personalab.stores.saves import get_save
from personalab.stores.tables import Save, utcnow
from sqlalchemy import case, delete, func, update
from sqlmodel import Session, col, select

CHROMA_BATCH = 1000


# --------------------------------------------------------------------------------------------------
# Input validation (everything is checked before anything is written)


def _clean_tags(tags: Iterable[str] | str | None, what: str = "tag") -> list[str]:
    if tags is None:
        return []
    if isinstance(tags, str):
        tags = tags.replace("，", ",").split(",")
    cleaned: list[str] = []
    for tag in tags:
        if not isinstance(tag, str):
            raise InvalidInput(f"{what} {tag!r} is not text")
        tag = tag.strip()
        if tag and tag not in cleaned:
            cleaned.append(tag)
    return cleaned


def _check_content(content: object) -> str:
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput("memory content is empty")
    return content.strip()


def _check_turn(turn: object) -> int:
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 0:
        raise InvalidInput(f"turn {turn!r} is not a whole number ≥ 0")
    return turn


def _check_line_id(line_id: object) -> int | None:
    if line_id is None:
        return None
    if isinstance(line_id, bool) or not isinstance(line_id, int) or not 0 <= line_id <= 2**31 - 1:
        raise InvalidInput(f"line_id {line_id!r} is not a line id (a whole number ≥ 0)")
    return line_id


def _layer_name(value: object) -> str:
    """A layer name the store accepts: one of the four layers, or ``record`` (the dialogue record)."""
    if str(value).strip().lower() == RECORD_LAYER:
        return RECORD_LAYER
    return parse_layer(str(value)).value


def _check_context(context: object) -> str:
    if context is None:
        return ""
    if not isinstance(context, str):
        raise InvalidInput(f"context {context!r} is not text")
    return context.strip()


def prepare_new_memory(item: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """Validate one new memory's fields (`content` required; `context`, `type`, `layer`, `importance`, `tags`,
    `keywords`, `turn`, `related_character`, `location`, `notes`, `pinned`, `line_id` optional) and fill the
    defaults: type ``event``, layer ``active`` (seed: 新记忆首先进入Active层), importance by type, keywords
    extracted from the content. A record entry (type ``record``) is always in the layer ``record``, and only a
    record entry may be in it. A `context` is stored in front of the content (one line break between) and weighs half
    in BM25 (see the module docstring). `ValueError` naming `where` and the bad field."""
    allowed = {
        "content",
        "context",
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
        "witnesses",
        "valid_from_turn",
    }
    if not isinstance(item, Mapping):
        raise InvalidInput(f"{where or 'memory'}: must be an object of fields, got {type(item).__name__}")
    unknown = set(item) - allowed
    if unknown:
        raise InvalidInput(f"{where or 'memory'}: unknown field(s) {', '.join(sorted(unknown))}")
    try:
        content = _check_content(item.get("content"))
        context = _check_context(item.get("context"))
        memory_type = parse_type(item.get("type") or MemoryType.EVENT)
        layer = _layer_name(item.get("layer") or (RECORD_LAYER if is_record(memory_type) else Layer.ACTIVE))
        if is_record(memory_type) != (layer == RECORD_LAYER):
            raise InvalidInput(f"layer {layer!r}: record entries (type record) and only they are in layer record")
        line_id = _check_line_id(item.get("line_id"))
        importance = item.get("importance")
        importance = initial_importance(memory_type) if importance is None else check_importance(importance)
        tags = _clean_tags(item.get("tags"))
        keywords = item.get("keywords")
        keywords = extract_keywords(content) if keywords is None else _clean_tags(keywords, "keyword")
        turn = item.get("turn")
        if turn is not None:
            turn = _check_turn(turn)
        witnesses = _check_witnesses(item.get("witnesses"))
        valid_from = item.get("valid_from_turn")
        if valid_from is not None:
            valid_from = _check_turn(valid_from)
        texts = {name: item.get(name) or "" for name in ("related_character", "location", "notes")}
        for name, value in texts.items():
            if not isinstance(value, str):
                raise InvalidInput(f"{name} {value!r} is not text")
    except ValueError as exc:
        if not where:
            raise
        raise InvalidInput(f"{where}: {exc}") from None
    return {
        "content": _joined(context, content),
        "type": memory_type.value,
        "layer": layer,
        "importance": importance,
        "tags": tags,
        "keywords": keywords,
        "turn": turn,
        "pinned": bool(item.get("pinned", False)),
        "line_id": line_id,
        "witnesses": witnesses,
        "valid_from_turn": valid_from,
        "search_text": memory_search_text(content, tags, context),
        **texts,
    }


def _check_witnesses(value: object) -> list[str] | None:
    """Who witnessed a memory (issue 26, `nodes.rules.curation.line_identity`): None or a list of identities."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidInput(f"witnesses {value!r} is not a list of identities (user, role:<id>, npc:<id>, narration)")
    out = []
    for who in value:
        if not isinstance(who, str) or not who.strip():
            raise InvalidInput(f"witness {who!r} is not an identity (user, role:<id>, npc:<id>, narration)")
        out.append(who.strip())
    return sorted(set(out))


def _joined(context: str, content: str) -> str:
    return f"{context}\n{content}" if context else content


def stored_text(item: Mapping[str, Any]) -> str:
    """The text a new memory item (`prepare_new_memory`'s input) is stored and embedded as: its context, one line
    break, its content (both trimmed). For an item `prepare_new_memory` refuses, whatever text it has."""
    content, context = item.get("content"), item.get("context")
    return _joined(context.strip() if isinstance(context, str) else "", str(content or "").strip())


def _check_embeddings(embeddings: Sequence[Sequence[float]] | np.ndarray, count: int) -> list[list[float]]:
    try:
        matrix = np.asarray(embeddings, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidInput("embeddings are not a list of equally long number vectors") from None
    if matrix.ndim != 2 or matrix.shape[0] != count or matrix.shape[1] == 0:
        raise InvalidInput(f"embeddings: expected {count} vector(s), one per memory, got shape {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise InvalidInput("embeddings contain a value that is not a finite number")
    return matrix.tolist()


# --------------------------------------------------------------------------------------------------
# Results


class MemoryRow(NamedTuple):
    """The columns of a memory that retrieval scores and shows."""

    id: int
    character_id: int
    content: str
    type: str
    layer: str
    turn: int
    importance: float
    tags: list[str]
    keywords: list[str]
    search_text: str
    mention_count: int
    pinned: bool
    user_edited: bool
    line_id: int | None
    related_character: str  # who said it, for a dialogue line (recall favours the speaker a question names)
    witnesses: list[str] | None  # who was present (issue 26), None: everyone
    valid_to_turn: int | None  # the turn a fact stopped being true (issue 26), None: still true
    superseded_by: int | None


@dataclass(frozen=True)
class MaintenanceReport:
    """What one maintenance step did to an instance."""

    instance_id: int
    turn: int
    transitions: tuple[Transition, ...] = ()
    deleted: tuple[int, ...] = ()
    counts: Mapping[int, Mapping[str, int]] = field(default_factory=dict)  # character → layer → count
    off_branch: int = 0  # memories of other branches, left as they are (see `MemoryStore.maintenance`)


# What the layer flow reads of a memory, in `LayerMemory`'s order (+ the type, for Chroma's metadata).
_LAYER_COLUMNS: tuple[Any, ...] = (
    MemoryEntry.id,
    MemoryEntry.character_id,
    MemoryEntry.layer,
    MemoryEntry.importance,
    MemoryEntry.activity,
    MemoryEntry.activity_turn,
    MemoryEntry.layer_since_turn,
    MemoryEntry.turn,
    MemoryEntry.pinned,
    MemoryEntry.user_edited,
    MemoryEntry.last_mentioned_turn,
    MemoryEntry.type,
    MemoryEntry.line_id,
)


@dataclass
class MaintenanceBatch:
    """An instance's memories during one maintenance step (`MemoryStore.maintenance`), and what the plans
    applied to them so far. Pinned and user-edited memories are never changed, whatever a plan says (seed:
    isPinned 不会被删除, isUserEdited 保护用户修改的内容)."""

    instance_id: int
    turn: int
    memories: Mapping[int, Sequence[LayerMemory]]  # character → its memories
    types: Mapping[int, str]  # memory id → type
    session: Session
    off_branch: int = 0  # memories of branches the user left: not loaded, left as they are
    transitions: list[Transition] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    counts: dict[int, Mapping[str, int]] = field(default_factory=dict)
    # (character, updated memories, deleted ids, ids that changed layer), for Chroma once the rows are written
    chroma_work: list[tuple[int, list[LayerMemory], list[int], set[int]]] = field(default_factory=list)

    def apply(self, character_id: int, plan: MaintenancePlan) -> None:
        """Write `plan` for the memories of `character_id` (new layers, activities, deletions)."""
        if character_id in self.counts:  # a caller's bug, not input: two plans for one character
            raise ValueError(f"a maintenance plan for character {character_id} was applied already")
        # only memories of this character that the system may change
        open_ids = {m.id for m in self.memories.get(character_id, ()) if not m.protected}
        updated = [m for m in plan.updated if m.id in open_ids]
        deleted = [i for i in plan.deleted if i in open_ids]
        transitions = [t for t in plan.transitions if t.id in open_ids]
        self.counts[character_id] = dict(plan.counts)
        self.transitions.extend(transitions)
        self.deleted.extend(deleted)
        if updated:
            self.session.exec(
                update(MemoryEntry),
                params=[
                    {
                        "id": m.id,
                        "layer": m.layer.value,
                        "activity": m.activity,
                        "activity_turn": m.activity_turn,
                        "layer_since_turn": m.layer_since_turn,
                    }
                    for m in updated
                ],
            )
        moved = {t.id for t in transitions if t.to_layer is not None}
        self.chroma_work.append((character_id, updated, deleted, moved))

    def contents(self, memory_ids: Sequence[int]) -> dict[int, tuple[str, int, int | None]]:
        """(content, turn, line) of these memories of the instance, read in this step's transaction (for the
        event-log summary written before they fade)."""
        if not memory_ids:
            return {}
        stmt = select(MemoryEntry.id, MemoryEntry.content, MemoryEntry.turn, MemoryEntry.line_id).where(
            col(MemoryEntry.id).in_(list(memory_ids)), MemoryEntry.instance_id == self.instance_id
        )
        rows = self.session.exec(stmt).all()
        return {memory_id: (content, turn, line) for memory_id, content, turn, line in rows if memory_id is not None}

    def line_parents(self, line_ids: Iterable[int]) -> dict[int, int | None]:
        """line → parent for the instance's lines on the paths from `line_ids` to the root (the dialogue tree the
        event-log summaries are grouped by), in this step's transaction."""
        return line_parents(self.session, self.instance_id, sorted(set(line_ids)))

    def forks(self, line_ids: Iterable[int]) -> set[int]:
        """Which of the instance's lines `line_ids` have more than one child (where the dialogue tree branches), in
        this step's transaction."""
        return line_forks(self.session, self.instance_id, sorted(set(line_ids)))

    def report(self) -> MaintenanceReport:
        return MaintenanceReport(
            self.instance_id,
            self.turn,
            tuple(self.transitions),
            tuple(self.deleted),
            dict(self.counts),
            self.off_branch,
        )


def _indexed(entry: MemoryEntry) -> IndexedMemory:
    return indexed((entry.id, entry.search_text, entry.tags, entry.turn))


def memory_to_dict(entry: MemoryEntry) -> dict[str, Any]:
    """A memory as JSON-ready plain data (no `search_text`)."""
    data = entry.model_dump(exclude={"search_text"})
    for key, value in data.items():
        if isinstance(value, datetime):
            data[key] = value.isoformat()
    return data


def mark_mentioned_in(
    session: Session, instance_id: int, memory_ids: Sequence[int], turn: int, *, once_per_turn: bool = False
) -> None:
    """`MemoryStore.mark_mentioned` in the caller's transaction (the outbox applies several writes in one)."""
    ids = [int(i) for i in memory_ids]
    turn = _check_turn(turn)
    if not ids:
        return
    again = [col(MemoryEntry.last_mentioned_turn).is_(None) | (col(MemoryEntry.last_mentioned_turn) != turn)]
    session.exec(
        update(MemoryEntry)
        .where(
            col(MemoryEntry.id).in_(ids),
            col(MemoryEntry.instance_id) == instance_id,
            *(again if once_per_turn else []),
        )
        .values(
            mention_count=MemoryEntry.mention_count + 1,
            last_mentioned_turn=turn,
            last_mentioned_at=utcnow(),
            activity=1.0,
            activity_turn=case((col(MemoryEntry.activity_turn) > turn, MemoryEntry.activity_turn), else_=turn),
        )
    )


# --------------------------------------------------------------------------------------------------
# The store


@dataclass
class MemoryStore:
    """A handle on the memory store: a database URL (default `PERSONALAB_DATABASE_URL` / the embedded
    SQLite file) and a Chroma path (default ``<data dir>/chroma``). Cheap to create; caches are per process."""

    db_url: str | None = None
    chroma_path: str | None = None
    bm25_k1: float = BM25_K1
    bm25_b: float = BM25_B

    # ---- plumbing ------------------------------------------------------------------------------

    def _url(self) -> str:
        return self.db_url or database_url()

    def _chroma_path(self) -> str:
        return str(self.chroma_path or (data_dir() / "chroma"))

    def _collection(self, instance_id: int, character_id: int) -> Any:
        """The raw chromadb collection of one character of one instance (the langchain wrapper hides the
        stored embeddings, which diversity scoring needs)."""
        from personalab.stores.vectors import get_collection

        # get_collection keeps one wrapper per (collection, store): no cache of our own
        return get_collection(collection_name(instance_id, character_id), path=self._chroma_path())._collection

    def _forget_vectors(self, instance_id: int, character_id: int, memory_ids: Iterable[int] | None = None) -> None:
        VECTORS.forget(self._chroma_path(), collection_name(instance_id, character_id), memory_ids)

    @staticmethod
    def _check_character(character_id: object) -> int:
        if isinstance(character_id, bool) or not isinstance(character_id, int) or character_id < 0:
            raise InvalidInput(f"character id {character_id!r} is not a whole number ≥ 0")
        return character_id

    @classmethod
    def _character(cls, session: Session, instance_id: int, character_id: int | None) -> int:
        save: Save = get_save(session, instance_id)
        if character_id is None:
            return int(save.role_id or 0)
        return cls._check_character(character_id)

    @staticmethod
    def _entry(session: Session, instance_id: int, memory_id: int) -> MemoryEntry:
        entry = session.get(MemoryEntry, memory_id) if isinstance(memory_id, int) else None
        if entry is None or entry.instance_id != instance_id:
            raise MemoryNotFoundError(f"memory {memory_id} does not exist in instance {instance_id}")
        return entry

    @staticmethod
    def _metadata(entry: MemoryEntry) -> dict[str, Any]:
        return {
            "instance_id": entry.instance_id,
            "character_id": entry.character_id,
            "memory_id": entry.id,
            "layer": entry.layer,
            "type": entry.type,
            "turn": entry.turn,
        }

    @staticmethod
    def _latest_turn(session: Session, instance_id: int, character_id: int) -> int:
        stmt = select(func.max(MemoryEntry.turn)).where(
            MemoryEntry.instance_id == instance_id, MemoryEntry.character_id == character_id
        )
        return int(session.exec(stmt).one() or 0)

    # ---- writing -------------------------------------------------------------------------------

    def add_memory(
        self,
        instance_id: int,
        content: str,
        *,
        type: str = MemoryType.EVENT,
        layer: str = Layer.ACTIVE,
        importance: float | None = None,
        tags: Sequence[str] | str | None = None,
        keywords: Sequence[str] | None = None,
        turn: int | None = None,
        related_character: str = "",
        location: str = "",
        notes: str = "",
        pinned: bool = False,
        character_id: int | None = None,
        context: str = "",
    ) -> MemoryEntry:
        """Store one memory and index it; returns it with its id. Defaults: see `prepare_new_memory`;
        `turn` defaults to the latest turn of the character's memories, `character_id` to the instance's role."""
        item = {
            "content": content,
            "context": context,
            "type": type,
            "layer": layer,
            "importance": importance,
            "tags": tags,
            "keywords": keywords,
            "turn": turn,
            "related_character": related_character,
            "location": location,
            "notes": notes,
            "pinned": pinned,
        }
        return self.add_memories(instance_id, [item], character_id=character_id)[0]

    def add_memories(
        self,
        instance_id: int,
        items: Sequence[Mapping[str, Any]],
        *,
        character_id: int | None = None,
        embeddings: Sequence[Sequence[float]] | np.ndarray | None = None,
        restore: Sequence[Mapping[str, Any]] | None = None,
        before_commit: Callable[[Session], None] | None = None,
        embedded_by_store: bool = False,
        vectors_later: bool = False,
    ) -> list[MemoryEntry]:
        """Store many memories of one character in one transaction (all or nothing).

        `restore`: per item, stored columns to keep as they were (a memory file's activity, mention count,
        timestamps…, already checked by `stores.memory_files`) instead of a new memory's defaults.

        `embeddings`: the vectors of the memories' stored texts, one per item, when the caller has them
        already (a bulk import or benchmark that embedded its texts once); they must come from the store's
        embedding model (same dimension as the collection). Without them the texts are embedded here
        (`embed_stored_texts`: one call, a text embedded before by this process not again). `embedded_by_store`: the
        vectors are `embed_stored_texts`' of the items' `stored_text` (the outbox's writes), so their dimension
        is not checked against the collection's.

        `before_commit(session)` runs in the transaction once the rows are written, before their vectors (the outbox
        marks its row applied there, only while its claim holds, so the memories are stored exactly once; if it
        raises, nothing is stored and no vector written).

        `vectors_later` (the outbox, issue 29): only the rows and the keyword index now, no vector; the caller
        writes them with `put_vectors` after, and until then this process's retrievals score them themselves
        (`PENDING_VECTORS`)."""
        prepared = [
            prepare_new_memory(item, "" if len(items) == 1 else f"memory {index + 1} of {len(items)}")
            for index, item in enumerate(items)
        ]
        if not prepared:
            return []
        if vectors_later:
            from personalab.stores.embeddings import embed_stored_texts_soon

            vectors: Sequence[Any] = []
            embed_stored_texts_soon([p["content"] for p in prepared])  # the vectors while the rows are written
        elif embeddings is None:
            from personalab.stores.embeddings import embed_stored_texts

            vectors = embed_stored_texts([p["content"] for p in prepared])
        else:
            vectors = _check_embeddings(embeddings, len(prepared))
        url = self._url()
        with session_scope(url) as session:
            character = self._character(session, instance_id, character_id)
            collection = self._collection(instance_id, character)
            if embeddings is not None and not embedded_by_store and not vectors_later:
                # Chroma would take the first batch and refuse the next: check the dimension before writing.
                stored = collection.get(limit=1, include=["embeddings"])["embeddings"]
                if stored is not None and len(stored) and len(stored[0]) != len(vectors[0]):
                    raise InvalidInput(
                        f"embeddings have {len(vectors[0])} dimensions, the instance's memories {len(stored[0])}"
                    )
            default_turn = None
            entries = []
            for position, fields in enumerate(prepared):
                if fields["turn"] is None:
                    if default_turn is None:
                        default_turn = self._latest_turn(session, instance_id, character)
                    fields["turn"] = default_turn
                turn = fields["turn"]
                columns = {"activity": 1.0, "activity_turn": turn, "layer_since_turn": turn, **fields}
                if restore is not None:
                    columns.update(restore[position])
                entries.append(MemoryEntry(instance_id=instance_id, character_id=character, **columns))
            session.add_all(entries)
            session.flush()
            revision = bump_revision(session, instance_id)
            place = (self._chroma_path(), collection_name(instance_id, character))
            # before the vectors (issue 27): a `before_commit` that refuses (the outbox's claim lost to another
            # drain) rolls the rows back with no vector written for them; on SQLite a rolled-back id is given to
            # the next memory, which would inherit that vector
            if before_commit is not None:
                before_commit(session)
            if vectors_later:
                pending = {int(e.id): e.content for e in entries if e.id is not None}
            else:
                self._upsert_vectors(collection, entries, vectors)
                # the next turns' retrievals will want the new memories' vectors: keep them now
                for entry, vector in zip(entries, vectors, strict=True):
                    VECTORS.keep(place, entry.id, entry.content, vector)  # type: ignore[arg-type]
        if vectors_later:  # committed: the next retrieval may find them (by keyword at once, by vector itself)
            PENDING_VECTORS.add(place, pending)
        note_written(url, instance_id, revision, changed={character: [_indexed(e) for e in entries]})
        return entries

    def _upsert_vectors(self, collection: Any, entries: Sequence[MemoryEntry], vectors: Sequence[Any]) -> None:
        for start in range(0, len(entries), CHROMA_BATCH):
            chunk = entries[start : start + CHROMA_BATCH]
            collection.upsert(
                ids=[str(e.id) for e in chunk],
                embeddings=[list(map(float, v)) for v in vectors[start : start + CHROMA_BATCH]],
                metadatas=[self._metadata(e) for e in chunk],
                documents=[e.content for e in chunk],
            )

    def put_vectors(self, instance_id: int, entries: Sequence[MemoryEntry], vectors: Sequence[Any]) -> None:
        """The vectors of memories stored with `add_memories(vectors_later=True)` (or left without them by a process
        that died between the two), one upsert per character's collection; each vector is of the entry's
        `content`. Upserts by id: writing one twice leaves one."""
        by_character: dict[int, list[tuple[MemoryEntry, Any]]] = {}
        for entry, vector in zip(entries, vectors, strict=True):
            by_character.setdefault(entry.character_id, []).append((entry, vector))
        for character, pairs in by_character.items():
            place = (self._chroma_path(), collection_name(instance_id, character))
            self._upsert_vectors(self._collection(instance_id, character), [e for e, _ in pairs], [v for _, v in pairs])
            for entry, vector in pairs:
                VECTORS.keep(place, entry.id, entry.content, vector)  # type: ignore[arg-type]
            PENDING_VECTORS.forget(place, [e.id for e, _ in pairs if e.id is not None])

    def vectorless(self, instance_id: int, line_ids: Sequence[int | None]) -> list[MemoryEntry]:
        """The instance's memories made from the lines `line_ids` whose vectors are not in Chroma: what a process
        that died between a write's rows and its vectors left (the outbox writes them)."""
        known = sorted({line for line in line_ids if line is not None})
        if not known:
            return []
        with session_scope(self._url()) as session:
            stmt = select(MemoryEntry).where(
                MemoryEntry.instance_id == instance_id, col(MemoryEntry.line_id).in_(known)
            )
            entries = list(session.exec(stmt).all())
        missing: list[MemoryEntry] = []
        for character in {e.character_id for e in entries}:
            mine = [e for e in entries if e.character_id == character]
            have = set(self._collection(instance_id, character).get(ids=[str(e.id) for e in mine], include=[])["ids"])
            missing.extend(e for e in mine if str(e.id) not in have)
        return missing

    def edit_memory(
        self,
        instance_id: int,
        memory_id: int,
        *,
        content: str | None = None,
        type: str | None = None,
        layer: str | None = None,
        importance: float | None = None,
        tags: Sequence[str] | str | None = None,
        keywords: Sequence[str] | None = None,
        notes: str | None = None,
        location: str | None = None,
        related_character: str | None = None,
        before_change: Callable[[Session, MemoryEntry], None] | None = None,
    ) -> MemoryEntry:
        """A user edit: change the given fields and set `user_edited`, which keeps the layer flow off this
        memory for good (seed: isUserEdited 保护用户修改的内容). New content gets new keywords (unless
        given), tokens and embedding. `before_change(session, entry)` runs in the edit's transaction before the
        fields change (the memory console keeps the old text as a version there, or refuses the edit)."""
        changes: dict[str, Any] = {}
        if content is not None:
            changes["content"] = _check_content(content)
        if type is not None:
            changes["type"] = parse_type(type).value
        if layer is not None:
            changes["layer"] = _layer_name(layer)
        if importance is not None:
            changes["importance"] = check_importance(importance)
        if tags is not None:
            changes["tags"] = _clean_tags(tags)
        if keywords is not None:
            changes["keywords"] = _clean_tags(keywords, "keyword")
        for name, value in (("notes", notes), ("location", location), ("related_character", related_character)):
            if value is not None:
                if not isinstance(value, str):
                    raise InvalidInput(f"{name} {value!r} is not text")
                changes[name] = value
        if not changes:
            raise InvalidInput(f"nothing to change in memory {memory_id}")
        vector = None
        if "content" in changes:
            from personalab.stores.embeddings import get_embeddings

            vector = get_embeddings().embed_query(changes["content"])
            if "keywords" not in changes:
                changes["keywords"] = extract_keywords(changes["content"])
        url = self._url()
        revision = None
        with session_scope(url) as session:
            entry = self._entry(session, instance_id, memory_id)
            if before_change is not None:
                before_change(session, entry)
            text_changed = "content" in changes or "tags" in changes
            if "layer" in changes and changes["layer"] != entry.layer:
                entry.layer_since_turn = self._latest_turn(session, instance_id, entry.character_id)
            for name, value in changes.items():
                setattr(entry, name, value)
            if is_record(entry.type) != (entry.layer == RECORD_LAYER):
                raise InvalidInput(
                    f"memory {memory_id}: record entries (type record) and only they are in layer record"
                )
            if text_changed:
                entry.search_text = memory_search_text(entry.content, entry.tags)
                revision = bump_revision(session, instance_id)
            entry.user_edited = True
            entry.updated_at = utcnow()
            session.add(entry)
            session.flush()
            collection = self._collection(instance_id, entry.character_id)
            if vector is not None:
                self._forget_vectors(instance_id, entry.character_id, [entry.id])  # type: ignore[list-item]
                collection.upsert(
                    ids=[str(entry.id)],
                    embeddings=[list(map(float, vector))],
                    metadatas=[self._metadata(entry)],
                    documents=[entry.content],
                )
            else:
                collection.update(ids=[str(entry.id)], metadatas=[self._metadata(entry)])
        if revision is not None:
            note_written(url, instance_id, revision, changed={entry.character_id: [_indexed(entry)]})
        return entry

    def set_pinned(self, instance_id: int, memory_id: int, pinned: bool = True) -> MemoryEntry:
        """Pin (seed: isPinned, 不会被删除) or unpin a memory."""
        with session_scope(self._url()) as session:
            entry = self._entry(session, instance_id, memory_id)
            entry.pinned = bool(pinned)
            entry.updated_at = utcnow()
            session.add(entry)
            return entry

    def delete_memory(
        self, instance_id: int, memory_id: int, before_commit: Callable[[Session], None] | None = None
    ) -> None:
        """Delete a memory (by the user) from the database and its vector from Chroma; `before_commit(session)`
        runs in the transaction (the memory console deletes the memory's earlier versions with it)."""
        url = self._url()
        with session_scope(url) as session:
            entry = self._entry(session, instance_id, memory_id)
            if before_commit is not None:
                before_commit(session)
            character = entry.character_id
            session.delete(entry)
            session.flush()
            revision = bump_revision(session, instance_id)
            self._forget_vectors(instance_id, character, [memory_id])
            self._collection(instance_id, character).delete(ids=[str(memory_id)])
        note_written(url, instance_id, revision, removed={character: [memory_id]})

    def mark_mentioned(
        self,
        instance_id: int,
        memory_ids: Sequence[int],
        turn: int,
        before_commit: Callable[[Session], None] | None = None,
        once_per_turn: bool = False,
    ) -> None:
        """Seed 001 `MarkMemoryAsMentioned`: one more mention at `turn`; the recall also refreshes the
        memory's activity (see `nodes.rules.memory_layers`). One UPDATE for all ids; `before_commit(session)`
        runs in its transaction (see `add_memories`). `once_per_turn`: a memory already mentioned at `turn` is
        left alone (the outbox's marks, applied at least once)."""
        with session_scope(self._url()) as session:
            if before_commit is not None:
                before_commit(session)
            mark_mentioned_in(session, instance_id, memory_ids, turn, once_per_turn=once_per_turn)

    # ---- reading -------------------------------------------------------------------------------

    def get_memory(self, instance_id: int, memory_id: int) -> MemoryEntry:
        with session_scope(self._url()) as session:
            get_save(session, instance_id)
            return self._entry(session, instance_id, memory_id)

    def list_memories(
        self,
        instance_id: int,
        *,
        character_id: int | None = None,
        layer: str | None = None,
        type: str | None = None,
        limit: int | None = None,
        include_record: bool = False,
    ) -> list[MemoryEntry]:
        """An instance's memories in id order; all characters unless `character_id` is given. The dialogue
        record's entries (type and layer ``record``) only when asked for: by that layer or type, or with
        `include_record` (an export); otherwise the curated memories."""
        layer_value = _layer_name(layer) if layer is not None else None
        type_value = parse_type(type).value if type is not None else None
        with session_scope(self._url()) as session:
            get_save(session, instance_id)
            stmt = select(MemoryEntry).where(MemoryEntry.instance_id == instance_id)
            if character_id is not None:
                stmt = stmt.where(MemoryEntry.character_id == character_id)
            if layer_value is not None:
                stmt = stmt.where(MemoryEntry.layer == layer_value)
            if type_value is not None:
                stmt = stmt.where(MemoryEntry.type == type_value)
            if not include_record and RECORD_LAYER not in (layer_value, type_value):
                stmt = stmt.where(MemoryEntry.type != MemoryType.RECORD.value)
            stmt = stmt.order_by(col(MemoryEntry.id))
            if limit is not None:
                stmt = stmt.limit(limit)
            return list(session.exec(stmt).all())

    def count(self, instance_id: int) -> int:
        with session_scope(self._url()) as session:
            stmt = select(func.count()).select_from(MemoryEntry).where(MemoryEntry.instance_id == instance_id)
            return int(session.exec(stmt).one())

    def created_times(self, instance_id: int, memory_ids: Sequence[int]) -> dict[int, datetime]:
        """When the memories `memory_ids` of the instance were stored (UTC), for "2 天前" in the prompt."""
        if not memory_ids:
            return {}
        with session_scope(self._url()) as session:
            stmt = select(MemoryEntry.id, MemoryEntry.created_at).where(
                col(MemoryEntry.id).in_(list(memory_ids)), MemoryEntry.instance_id == instance_id
            )
            return {int(memory_id): created for memory_id, created in session.exec(stmt).all() if memory_id is not None}

    def recorded_line_ids(self, instance_id: int, line_ids: Sequence[int]) -> set[int]:
        """Which of the lines `line_ids` already have a dialogue-record entry of the instance (a regenerated
        reply answers a user line that was recorded with the first reply)."""
        if not line_ids:
            return set()
        with session_scope(self._url()) as session:
            stmt = select(MemoryEntry.line_id).where(
                MemoryEntry.instance_id == instance_id,
                MemoryEntry.type == MemoryType.RECORD.value,
                col(MemoryEntry.line_id).in_(list(line_ids)),
            )
            return {int(line_id) for line_id in session.exec(stmt).all() if line_id is not None}

    def stored_contents(self, instance_id: int, line_ids: Sequence[int]) -> set[tuple[int | None, str]]:
        """(line id, content) of the instance's memories made from the lines `line_ids` (the outbox's check that a
        turn's memories are stored once)."""
        if not line_ids:
            return set()
        with session_scope(self._url()) as session:
            stmt = select(MemoryEntry.line_id, MemoryEntry.content).where(
                MemoryEntry.instance_id == instance_id, col(MemoryEntry.line_id).in_(list(line_ids))
            )
            return {(line_id, content) for line_id, content in session.exec(stmt).all()}

    # ---- retrieval support (used by nodes.rules.retrieval) ------------------------------------------------

    def resolve_character(self, instance_id: int, character_id: int | None = None) -> int:
        """The character whose memories are meant: `character_id`, else the instance's role (0 if none).
        `InstanceNotFound` for an unknown instance."""
        with session_scope(self._url()) as session:
            return self._character(session, instance_id, character_id)

    def index(self, instance_id: int, character_id: int | None = None) -> MemoryIndex:
        """The current keyword/tag index of a character's memories (`character_id` default: the instance's
        role), kept by the process: this process's writes update it as they commit (`note_written`); when the
        instance's revision moved on without it (another process wrote), the memories that differ are re-indexed.
        `InstanceNotFound` for an unknown instance."""
        url = self._url()
        with session_scope(url) as session:
            role = kept_role(url, instance_id)
            if role is None:
                role = keep_role(url, instance_id, self._character(session, instance_id, None))
            character_id = role if character_id is None else self._check_character(character_id)
            key = IndexKey(url, instance_id, character_id, self.bm25_k1, self.bm25_b)
            revision, kept = kept_index(session, key)
            if kept is not None and kept.revision == revision:
                return kept
        with builder_lock(key):  # one builder at a time; the others find its index when it is done
            with session_scope(url) as session:
                revision, kept = kept_index(session, key)
                if kept is not None and kept.revision == revision:
                    return kept
                rows = index_rows(session, instance_id, character_id)
            # outside the transaction: no connection held while indexing
            if kept is not None:
                return update_index(kept, revision, rows)  # another process wrote: re-index what differs
            return build_index(key, revision, rows)

    def embed_query(self, text: str) -> np.ndarray:
        from personalab.stores.embeddings import embed_query_once

        return embed_query_once(text)  # the knowledge and world-book searches of the turn reuse it

    def embed_queries(self, texts: Sequence[str]) -> list[np.ndarray]:
        from personalab.stores.embeddings import embed_queries_once

        return embed_queries_once(texts)  # one batch of the model for the texts not kept

    def vector_search(
        self, instance_id: int, character_id: int, embedding: np.ndarray, n: int
    ) -> list[tuple[int, float]]:
        """Vector path: the `n` nearest memories in Chroma, (id, cosine similarity) best first (their vectors:
        `embeddings`)."""
        if n <= 0:
            return []
        collection = self._collection(instance_id, character_id)
        found = collection.query(
            query_embeddings=[np.asarray(embedding, dtype=np.float32).tolist()], n_results=n, include=["distances"]
        )
        ids = found["ids"][0] if found["ids"] else []
        hits = [(int(i), 1.0 - float(d)) for i, d in zip(ids, found["distances"][0], strict=True)] if ids else []
        return self._with_pending(instance_id, character_id, embedding, hits, n)

    def embed_pending(self) -> float:
        """The vectors of the memories whose vectors are being written (`PENDING_VECTORS`), computed now or taken
        from the writer (`embed_stored_texts`): a retrieval calls this before its time cap, which is for the search
        (the vectors are the writes it reads, as the wait for the rows before it). Returns the milliseconds."""
        started = time.perf_counter()
        texts = PENDING_VECTORS.texts(self._chroma_path())
        if texts:
            from personalab.stores.embeddings import embed_stored_texts

            embed_stored_texts(texts)
        return round((time.perf_counter() - started) * 1000, 2)

    def _with_pending(
        self, instance_id: int, character_id: int, embedding: np.ndarray, hits: list[tuple[int, float]], n: int
    ) -> list[tuple[int, float]]:
        """Read your writes without waiting for the vectors (issue 29): the memories this process stored whose
        vectors are still being written, scored against the query here (cosine, as Chroma's collections) — their
        vectors are the writer's (`embed_stored_texts`: computed once, by whichever asks first) — and merged with
        Chroma's hits."""
        place = (self._chroma_path(), collection_name(instance_id, character_id))
        pending = PENDING_VECTORS.of(place)
        if not pending:
            return hits
        from personalab.stores.embeddings import embed_stored_texts

        ids = list(pending)
        vectors = embed_stored_texts([pending[i] for i in ids])
        for memory_id, vector in zip(ids, vectors, strict=True):
            # the scoring's vectors of these candidates: the writer's arrays themselves, not rows of a copy
            VECTORS.keep(place, memory_id, pending[memory_id], vector)
        matrix = np.stack(vectors)
        query = np.asarray(embedding, dtype=np.float32)
        norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(query) or 1.0)
        scores = (matrix @ query) / np.where(norms == 0, 1.0, norms)
        best = dict(hits)
        for memory_id, score in zip(ids, scores.tolist(), strict=True):
            best[memory_id] = max(best.get(memory_id, -1.0), float(score))
        return sorted(best.items(), key=lambda hit: -hit[1])[:n]

    def embeddings(
        self,
        instance_id: int,
        character_id: int,
        memory_ids: Sequence[int],
        documents: Mapping[int, str] | None = None,
    ) -> dict[int, np.ndarray]:
        """Stored embeddings of `memory_ids` (those Chroma has). With `documents` (each memory's current text),
        a vector this process read before for the same memory and text is used without asking Chroma: every
        turn's retrieval needs the vectors of its candidates, and most were candidates before. The vectors read
        are kept with those texts (a memory's text and vector are written together, in the database and Chroma);
        only without `documents` are Chroma's own documents read to keep them with (reading them takes several
        times longer than the vectors: ~15 against ~2.5 ms for 70 memories)."""
        if not memory_ids:
            return {}
        place = (self._chroma_path(), collection_name(instance_id, character_id))
        found, missing = VECTORS.split(place, memory_ids, documents)
        if missing:
            collection = self._collection(instance_id, character_id)
            ids = [str(i) for i in missing]
            if documents is not None and all(i in documents for i in missing):
                got = collection.get(ids=ids, include=["embeddings"])
                texts = [documents[int(key)] for key in got["ids"]]
            else:
                got = collection.get(ids=ids, include=["embeddings", "documents"])
                texts = got["documents"]
            for key, vector, text in zip(got["ids"], got["embeddings"], texts, strict=True):
                found[int(key)] = VECTORS.keep(place, int(key), text, vector)
        return found

    def load(self, instance_id: int, memory_ids: Sequence[int]) -> dict[int, MemoryRow]:
        """What scoring needs of the memories `memory_ids` that exist in the instance, in one query of plain
        columns (no ORM objects: this is on the path of every retrieval)."""
        if not memory_ids:
            return {}
        columns = [getattr(MemoryEntry, name) for name in MemoryRow._fields]
        with session_scope(self._url()) as session:
            stmt = select(*columns).where(
                col(MemoryEntry.id).in_(list(memory_ids)), MemoryEntry.instance_id == instance_id
            )
            return {row[0]: MemoryRow(*row) for row in session.exec(stmt).all()}

    # ---- maintenance ---------------------------------------------------------------------------------

    @contextmanager
    def maintenance(self, instance_id: int, turn: int | None = None) -> Iterator[MaintenanceBatch]:
        """One maintenance step of the instance, the store's half (seed 001 记忆流转): its memories by
        character as `LayerMemory` values (`batch.memories`), as of `batch.turn` (default: the latest memory
        turn of the instance). The caller gives each character's `MaintenancePlan` to `batch.apply`; the
        plans are written to the database and Chroma in this one transaction when the block ends (an
        exception in it writes nothing). `InstanceNotFound` / `InvalidInput` before anything is read.

        Only the memories of the current branch (seed 000's tree: a line on the path from the root to the
        instance's leaf) and those without a line are loaded: the turn counter follows the branch, and a branch
        the user left neither takes room in this branch's layers nor decays, moves or fades with it. Its
        memories stay as they are until it is current again (`batch.off_branch` counts them); their activity
        turns are of their own branch's turns, so the flow picks them up from there."""
        if turn is not None:
            turn = _check_turn(turn)
        url = self._url()
        with session_scope(url) as session:
            get_save(session, instance_id)
            # the dialogue record is outside the layer flow: never loaded, so never decayed, moved or deleted
            rows = session.exec(
                select(*_LAYER_COLUMNS).where(
                    MemoryEntry.instance_id == instance_id, MemoryEntry.type != MemoryType.RECORD.value
                )
            ).all()
            branch = set(get_path_ids(session, instance_id))
            here = [row for row in rows if row[-1] is None or row[-1] in branch]
            memories: dict[int, list[LayerMemory]] = {}
            types: dict[int, str] = {}
            for row in here:
                memory_id, character, layer, importance, activity, a_turn, since, m_turn, pin, edited, last, kind = row[
                    :-1
                ]
                types[memory_id] = kind
                memories.setdefault(character, []).append(
                    LayerMemory(
                        id=memory_id,
                        layer=Layer(layer),
                        importance=importance,
                        activity=activity,
                        activity_turn=a_turn,
                        layer_since_turn=since,
                        turn=m_turn,
                        pinned=pin,
                        user_edited=edited,
                        last_mentioned_turn=last,
                    )
                )
            now = turn if turn is not None else max((row[7] for row in here), default=0)
            batch = MaintenanceBatch(instance_id, now, memories, types, session, off_branch=len(rows) - len(here))
            yield batch
            revision = self._write_maintenance(session, batch)
        if revision is not None:
            note_written(url, instance_id, revision, removed={c: gone for c, _, gone, _ in batch.chroma_work})

    def _write_maintenance(self, session: Session, batch: MaintenanceBatch) -> int | None:
        """Delete what the plans faded, then tell Chroma (deletions, and the new layer of moved memories).
        Returns the instance's new revision when memories were deleted."""
        instance_id = batch.instance_id
        revision = None
        if batch.deleted:
            session.exec(delete(MemoryEntry).where(col(MemoryEntry.id).in_(batch.deleted)))
            revision = bump_revision(session, instance_id)
        session.flush()
        for character, updated, gone, moved in batch.chroma_work:
            collection = self._collection(instance_id, character)
            if gone:
                self._forget_vectors(instance_id, character, gone)
                collection.delete(ids=[str(i) for i in gone])
            relayered = [m for m in updated if m.id in moved]
            if relayered:
                collection.update(
                    ids=[str(m.id) for m in relayered],
                    metadatas=[
                        {
                            "instance_id": instance_id,
                            "character_id": character,
                            "memory_id": m.id,
                            "layer": m.layer.value,
                            "type": batch.types[m.id],
                            "turn": m.turn,
                        }
                        for m in relayered
                    ],
                )
        return revision

    def reindex(self, instance_id: int) -> int:
        """Rebuild the instance's Chroma collections from the database (repair after a crash between the
        two); returns the number of memories indexed."""
        entries = self.list_memories(instance_id, include_record=True)
        from personalab.stores.embeddings import get_embeddings

        vectors = get_embeddings().embed_documents([e.content for e in entries]) if entries else []
        by_character: dict[int, list[int]] = {}
        for position, entry in enumerate(entries):
            by_character.setdefault(entry.character_id, []).append(position)
        existing = self._characters_in_chroma(instance_id)
        for character in existing | set(by_character):
            collection = self._collection(instance_id, character)
            self._forget_vectors(instance_id, character)
            stale = collection.get(include=[])["ids"]
            if stale:
                collection.delete(ids=stale)
            positions = by_character.get(character, [])
            for start in range(0, len(positions), CHROMA_BATCH):
                chunk = positions[start : start + CHROMA_BATCH]
                collection.upsert(
                    ids=[str(entries[p].id) for p in chunk],
                    embeddings=[list(map(float, vectors[p])) for p in chunk],
                    metadatas=[self._metadata(entries[p]) for p in chunk],
                    documents=[entries[p].content for p in chunk],
                )
        return len(entries)

    def _characters_in_chroma(self, instance_id: int) -> set[int]:
        from personalab.stores.vectors import chroma_client

        prefix = f"memories_{instance_id}_"
        names = [getattr(c, "name", c) for c in chroma_client(self.chroma_path).list_collections()]
        return {int(n[len(prefix) :]) for n in names if n.startswith(prefix) and n[len(prefix) :].isdigit()}


def instance_identities(database_url: str | None, instance_id: int) -> set[str]:
    """Issue 26: the identities (`nodes.rules.curation.line_identity`) that spoke in an instance's dialogue, and
    its character's: who can have witnessed anything in it. `NotFound` for an unknown instance."""
    from personalab.nodes.rules.curation import USER, character_identity, line_identity
    from personalab.stores.tables import Line

    with session_scope(database_url) as session:
        save = get_save(session, instance_id)
        rows = session.exec(
            select(Line.attribute, Line.role_id, Line.script_role_id).where(Line.save_id == instance_id).distinct()
        ).all()
    found = {character_identity(save.role_id), USER}
    for attribute, role_id, script_role_id in rows:
        who = line_identity({"attribute": attribute, "role_id": role_id, "script_role_id": script_role_id})
        if who is not None:
            found.add(who)
    return found
