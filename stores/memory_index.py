"""The machinery behind memory search: the keyword (BM25) and tag index, and the kept memory vectors.

Seed 001 记忆检索和匹配算法 (关键词匹配, 标签过滤检索, 向量相似度) and 性能优化策略 (缓存).

- The BM25 and tag index of one (database, instance, character) is built once per process (`IndexKey`) and
  then changed memory by memory (`BM25Index`, `MemoryIndex.apply`), never rebuilt: each write that changes what
  it sees increments the instance's revision (`MemoryIndexState`, `bump_revision`) in the same transaction, and
  once committed applies what it wrote to the kept indexes that were at the revision just before
  (`note_written`). A search compares revisions (one primary-key read, `kept_index`); when the database's moved
  on without this process (another process wrote), it reads the rows and re-indexes only those that differ
  (`update_index`), so the kept indexes stay right across processes.
- Memory tokens are computed at write time (`search_text`, stored as `MemoryEntry.search_text`), so
  building an index reads one column instead of running jieba over every memory. A memory's `context` (the
  line it came after) is indexed once and its own words twice: they weigh double in BM25 (see
  `stores.memory` for the LoCoMo figures).
- Vectors read from Chroma are kept by (Chroma path, collection, memory id) with a digest of the text they were
  stored for (`VectorCache`): a memory whose text changed since is a miss, and this process's writes forget what
  they replace. The digest, not the text: the text was about a third of an entry's bytes (issue 26's memory
  growth, docs/benchmarks/2026-12-05-lead.md).
"""

from __future__ import annotations

import hashlib
import math
import sys
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
from personalab.nodes.rules.keywords import MatchText, has_han, tokenize
from personalab.stores.lru import LRU
from personalab.stores.memory_tables import MemoryEntry, MemoryIndexState
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, col, select

INDEX_CACHE_SIZE = 64
VECTOR_CACHE_SIZE = 16384  # vectors of 512 floats: 32 MiB at most
# Lucene/Anserini's BM25 parameters rather than rank_bm25's 1.5 / 0.75: memories are short, and on LoCoMo
# (one memory per turn) they raise BM25 recall@10 from .594 to .615.
BM25_K1 = 0.9
BM25_B = 0.4
BM25_EPSILON = 0.25  # rank_bm25's: a token in more than half of the memories weighs a quarter of the mean IDF
OWN_TEXT_REPEAT = 2  # a memory with context: its own words are indexed this many times, the context's once


def search_text(content: str, tags: Sequence[str], context: str = "") -> str:
    """The space-separated search tokens of a memory (content + tags, after its context if any)."""
    if not context:
        return " ".join(tokenize(" ".join([content, *tags])))
    own = tokenize(" ".join([content, *tags]))
    return " ".join([*tokenize(context), *own * OWN_TEXT_REPEAT])


def collection_name(instance_id: int, character_id: int) -> str:
    """The Chroma collection of one character's memories in one instance (see `stores.memory`)."""
    return f"memories_{instance_id}_{character_id}"


# --------------------------------------------------------------------------------------------------
# BM25 kept up to date entry by entry


class _Posting:
    """The documents (slots) that contain one token and the token's count in each, in growable arrays.
    Order is of no meaning: a removal moves the last entry into the freed place."""

    __slots__ = ("slots", "tf", "n")

    def __init__(self, slots: Sequence[int] = (), tf: Sequence[int] = ()) -> None:
        self.slots = np.asarray(slots, dtype=np.int64) if len(slots) else np.zeros(4, dtype=np.int64)
        self.tf = np.asarray(tf, dtype=np.float64) if len(tf) else np.zeros(4, dtype=np.float64)
        self.n = len(slots)

    def add(self, slot: int, tf: int) -> None:
        if self.n == len(self.slots):
            # an eighth more, not double: postings are built exactly full, so doubling made the first write into
            # an instance copy every posting of its tokens at twice their size (~8 MiB kept per 10,000-memory
            # instance, the bulk of `bench retrieval`'s insert growth, issue 26); still amortised O(1) a document
            grow = max(4, self.n // 8)
            self.slots = np.concatenate([self.slots, np.zeros(grow, dtype=np.int64)])
            self.tf = np.concatenate([self.tf, np.zeros(grow, dtype=np.float64)])
        self.slots[self.n] = slot
        self.tf[self.n] = tf
        self.n += 1

    def remove(self, slot: int) -> None:
        place = int(np.flatnonzero(self.slots[: self.n] == slot)[0])
        last = self.n - 1
        self.slots[place], self.tf[place] = self.slots[last], self.tf[last]
        self.n = last


class BM25Index:
    """Okapi BM25 with rank_bm25's `BM25Okapi` semantics (its IDF log((N − n + 0.5) / (n + 0.5)), negative IDFs
    replaced by epsilon × the mean IDF of the vocabulary, k1, b), as an inverted index that is changed one
    document at a time.

    Why not rank_bm25: it has no way to add or remove a document, so every write meant rebuilding the whole
    corpus (~0.3 s at 10,000 memories; back-to-back turns waited ~160 ms for it at 1,000 turns of history), and its
    `get_scores` loops in Python over every document. Here `add` / `remove` cost the document's own tokens
    (its postings, document frequencies and length; a removal also finds the document in each of its tokens'
    postings, one NumPy comparison each); what depends on the whole corpus is computed when a query
    asks: the average length from a running total, the mean IDF from a histogram of document frequencies (few
    distinct values), the length norms only for the documents a query token reaches. The scores are
    `BM25Okapi.get_scores`'s numbers for the same documents, whatever the order of adds and removes (tested,
    `tests/test_memory_index.py`). Documents are kept by memory id in slots; a removed document's slot is reused.
    Tokens never contain whitespace (they are `search_text`'s, split on it)."""

    def __init__(
        self,
        ids: Sequence[int] = (),
        docs: Sequence[Sequence[str] | str] = (),
        k1: float = BM25_K1,
        b: float = BM25_B,
        epsilon: float = BM25_EPSILON,
    ) -> None:
        self.k1, self.b, self.epsilon = k1, b, epsilon
        count = len(ids)
        self.ids = np.asarray(ids, dtype=np.int64) if count else np.zeros(0, dtype=np.int64)  # slot → memory id
        self.slot_of: dict[int, int] = {}
        # slot → the document's tokens, space-separated (None: a free slot); one string per document, not its
        # counts: a removal recounts them, and a `MemoryIndex` shares the string with its own record of the memory
        self.texts: list[str | None] = []
        self.free: list[int] = []
        self.total_length = 0
        self.lengths = np.zeros(count, dtype=np.float64)
        self.df: dict[str, int] = {}
        self.df_histogram: dict[int, int] = {}  # document frequency → how many tokens have it (the mean IDF)
        rows: dict[str, tuple[list[int], list[int]]] = {}
        for slot, (memory_id, doc) in enumerate(zip(ids, docs, strict=True)):
            text, tokens = _text_and_tokens(doc)
            freqs = _counts(tokens)
            self.slot_of[int(memory_id)] = slot
            self.texts.append(text)
            self.lengths[slot] = len(tokens)
            self.total_length += len(tokens)
            for token, tf in freqs.items():
                entry = rows.setdefault(token, ([], []))
                entry[0].append(slot)
                entry[1].append(tf)
        self.postings = {token: _Posting(slots, tf) for token, (slots, tf) in rows.items()}
        for token, posting in self.postings.items():
            self.df[token] = posting.n
            self.df_histogram[posting.n] = self.df_histogram.get(posting.n, 0) + 1

    def __len__(self) -> int:
        return len(self.slot_of)

    def __contains__(self, memory_id: int) -> bool:
        return memory_id in self.slot_of

    # ---- changes -----------------------------------------------------------------------------------

    def add(self, memory_id: int, doc: Sequence[str] | str) -> None:
        """Index document `doc` (its tokens, or them space-separated) as memory `memory_id`, replacing the
        memory's earlier document, if any."""
        if memory_id in self.slot_of:
            self.remove(memory_id)
        text, tokens = _text_and_tokens(doc)
        freqs = _counts(tokens)
        if self.free:
            slot = self.free.pop()
            self.texts[slot] = text
        else:
            slot = len(self.texts)
            self.texts.append(text)
            if slot >= len(self.ids):
                grow = max(16, len(self.ids))
                self.ids = np.concatenate([self.ids, np.full(grow, -1, dtype=np.int64)])
                self.lengths = np.concatenate([self.lengths, np.zeros(grow, dtype=np.float64)])
        self.ids[slot] = memory_id
        self.lengths[slot] = len(tokens)
        self.total_length += len(tokens)
        self.slot_of[memory_id] = slot
        for token, tf in freqs.items():
            posting = self.postings.get(token)
            if posting is None:
                posting = self.postings[token] = _Posting()
            posting.add(slot, tf)
            self._move_df(token, posting.n - 1, posting.n)

    def remove(self, memory_id: int) -> None:
        """Forget memory `memory_id`'s document (nothing happens when it is not indexed)."""
        slot = self.slot_of.pop(memory_id, None)
        if slot is None:
            return
        for token in _counts((self.texts[slot] or "").split()):
            posting = self.postings[token]
            posting.remove(slot)
            self._move_df(token, posting.n + 1, posting.n)
            if not posting.n:
                del self.postings[token]
        self.total_length -= int(self.lengths[slot])
        self.lengths[slot] = 0.0
        self.ids[slot] = -1
        self.texts[slot] = None
        self.free.append(slot)

    def _move_df(self, token: str, before: int, after: int) -> None:
        if before:
            left = self.df_histogram[before] - 1
            if left:
                self.df_histogram[before] = left
            else:
                del self.df_histogram[before]
        if after:
            self.df[token] = after
            self.df_histogram[after] = self.df_histogram.get(after, 0) + 1
        else:
            self.df.pop(token, None)

    # ---- scoring -----------------------------------------------------------------------------------

    def idf(self, token: str) -> float:
        """The token's IDF as `BM25Okapi` computes it over the documents indexed now (0 for an unknown token)."""
        n = self.df.get(token)
        if not n:
            return 0.0
        size = len(self.slot_of)
        value = math.log(size - n + 0.5) - math.log(n + 0.5)
        if value >= 0:
            return value
        total = sum(count * (math.log(size - k + 0.5) - math.log(k + 0.5)) for k, count in self.df_histogram.items())
        return self.epsilon * total / len(self.df)

    def score_array(self, tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(slots of the documents that contain a query token, their BM25 scores)."""
        if not self.df or not self.total_length:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        avgdl = self.total_length / len(self.slot_of)
        k1, b = self.k1, self.b
        scores = np.zeros(len(self.ids), dtype=np.float64)
        touched = np.zeros(len(self.ids), dtype=bool)
        for token, count in _counts(tokens).items():
            posting = self.postings.get(token)
            if posting is None:
                continue
            slots, tf = posting.slots[: posting.n], posting.tf[: posting.n]
            norm = k1 * (1 - b + b * self.lengths[slots] / avgdl)
            scores[slots] += count * self.idf(token) * (tf * (k1 + 1) / (tf + norm))
            touched[slots] = True
        hit = np.flatnonzero(touched)
        return hit, scores[hit]

    def top(self, tokens: Sequence[str], n: int) -> list[tuple[int, float]]:
        """The `n` best (memory id, score), best first, ties by id; only memories sharing a token with the query."""
        hit, scores = self.score_array(tokens)
        if not len(hit) or n <= 0:
            return []
        if len(hit) > n:  # the n best and every one tied with the last of them: ties go by id, not by slot
            keep = scores >= np.partition(scores, len(scores) - n)[len(scores) - n]
            hit, scores = hit[keep], scores[keep]
        order = np.lexsort((self.ids[hit], -scores))[:n]
        return [(int(self.ids[hit[i]]), float(scores[i])) for i in order]

    def scores(self, tokens: Sequence[str]) -> dict[int, float]:
        """Every matching memory's score, by memory id (for tests and comparisons)."""
        hit, scores = self.score_array(tokens)
        return {int(self.ids[slot]): float(score) for slot, score in zip(hit, scores, strict=True)}


def _text_and_tokens(doc: Sequence[str] | str) -> tuple[str, list[str]]:
    if isinstance(doc, str):
        return doc, doc.split()
    return " ".join(doc), list(doc)


def _counts(tokens: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for token in tokens:
        counts[token] = counts.get(token, 0) + 1
    return counts


class IndexedMemory(NamedTuple):
    """What the keyword and tag indexes know of one memory (a row of `index_rows`)."""

    id: int
    search_text: str
    tags: tuple[str, ...]
    turn: int


def indexed(row: Sequence[Any]) -> IndexedMemory:
    """An `index_rows` row (or a written entry's same columns) as an `IndexedMemory`."""
    memory_id, text, tags, turn = row
    return IndexedMemory(int(memory_id), text or "", tuple(tags or ()), int(turn or 0))


class MemoryIndex:
    """One character's keyword and tag indexes in one instance, as of `revision`; changed in place, one memory
    at a time (`apply`), under its lock: the process's own writes apply what they wrote, and a search that finds
    the database's revision moved on (another process wrote) applies the differences it reads (`stores.memory`)."""

    def __init__(
        self,
        instance_id: int,
        character_id: int,
        revision: int,
        rows: Sequence[IndexedMemory],
        k1: float = BM25_K1,
        b: float = BM25_B,
    ) -> None:
        self.instance_id = instance_id
        self.character_id = character_id
        self.revision = revision
        self.lock = threading.RLock()
        self.memories: dict[int, IndexedMemory] = {row.id: row for row in rows}
        self.bm25 = BM25Index([row.id for row in rows], [row.search_text for row in rows], k1, b)
        self.tags: dict[str, set[int]] = {}  # tag (lower case) → memory ids
        self.tag_forms: dict[str, tuple[bool, frozenset[str]]] = {}  # tag → (is Chinese, tokens) for matching
        self.turns: dict[int, int] = {}  # turn → how many memories have it (the latest turn when one goes)
        self.latest_turn = 0  # the latest turn among the memories (the default "now" of a retrieval)
        for row in rows:
            self._add_tags_and_turn(row)

    def __len__(self) -> int:
        return len(self.bm25)

    # ---- changes -----------------------------------------------------------------------------------

    def apply(self, changed: Iterable[IndexedMemory], removed: Iterable[int], revision: int) -> None:
        """Index `changed` (new memories, or new text / tags / turn of indexed ones), forget `removed`, and
        call the result `revision`. Idempotent: a memory already indexed as it is now is left alone."""
        with self.lock:
            for memory_id in removed:
                self._remove(memory_id)
            for row in changed:
                if self.memories.get(row.id) != row:
                    self._remove(row.id)
                    self.memories[row.id] = row
                    self.bm25.add(row.id, row.search_text)
                    self._add_tags_and_turn(row)
            self.revision = revision

    def differences(self, rows: Sequence[IndexedMemory]) -> tuple[list[IndexedMemory], list[int]]:
        """(rows that are new or changed, ids indexed here that are not in `rows`): what `apply` needs to
        make this index the index of `rows`."""
        with self.lock:
            changed = [row for row in rows if self.memories.get(row.id) != row]
            present = {row.id for row in rows}
            return changed, [memory_id for memory_id in self.memories if memory_id not in present]

    def _add_tags_and_turn(self, row: IndexedMemory) -> None:
        for tag in {tag.lower() for tag in row.tags}:
            ids = self.tags.get(tag)
            if ids is None:
                ids = self.tags[tag] = set()
                self.tag_forms[tag] = (has_han(tag), frozenset(tokenize(tag)))
            ids.add(row.id)
        self.turns[row.turn] = self.turns.get(row.turn, 0) + 1
        self.latest_turn = max(self.latest_turn, row.turn)

    def _remove(self, memory_id: int) -> None:
        row = self.memories.pop(memory_id, None)
        if row is None:
            return
        self.bm25.remove(memory_id)
        for tag in {tag.lower() for tag in row.tags}:
            ids = self.tags[tag]
            ids.discard(memory_id)
            if not ids:
                del self.tags[tag], self.tag_forms[tag]
        left = self.turns[row.turn] - 1
        if left:
            self.turns[row.turn] = left
        else:
            del self.turns[row.turn]
            if row.turn == self.latest_turn:
                self.latest_turn = max(self.turns, default=0)

    # ---- searching ---------------------------------------------------------------------------------

    def bm25_search(self, tokens: Sequence[str], n: int) -> list[tuple[int, float]]:
        """Keyword path: the `n` best memories by BM25 over CJK-safe tokens, (id, score) best first."""
        with self.lock:
            return self.bm25.top(tokens, n)

    def idf(self, tokens: Iterable[str]) -> dict[str, float]:
        """Each token's BM25 IDF over the memories indexed now (0 for a token none has): how telling it is here."""
        with self.lock:
            return {token: self.bm25.idf(token) for token in set(tokens)}

    def tag_search(self, context: MatchText, tags: Sequence[str], n: int) -> list[tuple[int, float]]:
        """Tag path (seed 001 标签过滤检索): memories with a tag that occurs in the context or is one of
        `tags`, (id, number of matched tags) most matched first, then newest."""
        wanted = {t.strip().lower() for t in tags if t.strip()}
        counts: dict[int, int] = {}
        with self.lock:
            for tag, (han, words) in self.tag_forms.items():
                if tag in wanted or (han and tag in context.lower) or (not han and words and words <= context.tokens):
                    for memory_id in self.tags[tag]:
                        counts[memory_id] = counts.get(memory_id, 0) + 1
        ranked = sorted(counts.items(), key=lambda item: (-item[1], -item[0]))
        return [(memory_id, float(count)) for memory_id, count in ranked[:n]]


# --------------------------------------------------------------------------------------------------
# Revisions and the kept indexes


class IndexKey(NamedTuple):
    """What a kept index is for: one character of one instance in one database, with its BM25 parameters."""

    url: str
    instance_id: int
    character_id: int
    k1: float
    b: float


_INDEXES: LRU[IndexKey, MemoryIndex] = LRU(INDEX_CACHE_SIZE)
ROLES_KEPT = 4096  # instances whose role the process keeps (a long-lived server sees instances come and go)
_ROLES: LRU[tuple[str, int], int] = LRU(ROLES_KEPT)  # (database, instance) → the instance's role: it never changes


def bump_revision(session: Session, instance_id: int) -> int:
    """One more revision of the instance's searchable text (in the caller's transaction); returns it. The row
    stays locked until the transaction ends, so revisions of one instance are written one after the other."""
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(MemoryIndexState).values(instance_id=instance_id, revision=1)
    stmt = stmt.on_conflict_do_update(index_elements=["instance_id"], set_={"revision": MemoryIndexState.revision + 1})
    return int(session.exec(stmt.returning(MemoryIndexState.revision)).scalar_one())  # type: ignore[call-overload]


def read_revision(session: Session, instance_id: int) -> int:
    state = session.get(MemoryIndexState, instance_id)
    return state.revision if state else 0


def kept_role(url: str, instance_id: int) -> int | None:
    """The instance's role as read before by this process (None: not read yet)."""
    return _ROLES.get((url, instance_id))


def keep_role(url: str, instance_id: int, role: int) -> int:
    return _ROLES.put((url, instance_id), role)


_BUILDERS: weakref.WeakValueDictionary[IndexKey, threading.Lock] = weakref.WeakValueDictionary()
_BUILDERS_LOCK = threading.Lock()


def builder_lock(key: IndexKey) -> threading.Lock:
    """The lock one builder of `key`'s index holds while it reads the rows and builds: the turn's retrieval and the
    writer thread of the previous turn both want the index of a process's first turn, and reading and indexing
    10,000 memories twice (or three times) at once made that turn run past the retrieval's cap. The caller keeps
    the lock object while it holds it (they are dropped when nobody holds them)."""
    with _BUILDERS_LOCK:
        lock = _BUILDERS.get(key)
        if lock is None:
            lock = _BUILDERS[key] = threading.Lock()
        return lock


def kept_index(session: Session, key: IndexKey) -> tuple[int, MemoryIndex | None]:
    """(the instance's current revision, the kept index, whatever its revision: `index_for` brings it up to date)."""
    return read_revision(session, key.instance_id), _INDEXES.get(key)


def index_rows(session: Session, instance_id: int, character_id: int) -> list[IndexedMemory]:
    """(id, search text, tags, turn) of the character's memories, in id order: what an index is built from."""
    stmt = (
        select(MemoryEntry.id, MemoryEntry.search_text, MemoryEntry.tags, MemoryEntry.turn)
        .where(MemoryEntry.instance_id == instance_id, MemoryEntry.character_id == character_id)
        .order_by(col(MemoryEntry.id))
    )
    return [indexed(row) for row in session.exec(stmt).all()]


def build_index(key: IndexKey, revision: int, rows: Sequence[IndexedMemory]) -> MemoryIndex:
    """The index of `rows` (from `index_rows`) as of `revision`, kept for the next searches."""
    return _INDEXES.put(key, MemoryIndex(key.instance_id, key.character_id, revision, rows, key.k1, key.b))


def update_index(kept: MemoryIndex, revision: int, rows: Sequence[IndexedMemory]) -> MemoryIndex:
    """Bring a kept index to `revision`, whose memories are `rows` (another process wrote since it was built):
    only the memories that differ are re-indexed."""
    with kept.lock:
        changed, removed = kept.differences(rows)
        kept.apply(changed, removed, revision)
    return kept


def note_written(
    url: str,
    instance_id: int,
    revision: int,
    changed: Mapping[int, Sequence[IndexedMemory]] | None = None,
    removed: Mapping[int, Sequence[int]] | None = None,
) -> None:
    """After a transaction of this process that moved the instance to `revision` has committed: apply what it
    wrote (by character: new or changed memories, removed ids) to the kept indexes that were at the revision
    just before, so the next search needs no rebuild. An index at any other revision missed another process's
    write: it is left as it is, and the next search reads the differences (`update_index`). The other
    characters' indexes of the instance move on to `revision` unchanged."""
    for key, kept in _INDEXES.items():
        if key.url != url or key.instance_id != instance_id:
            continue
        with kept.lock:
            if kept.revision == revision - 1:
                kept.apply(
                    (changed or {}).get(key.character_id, ()), (removed or {}).get(key.character_id, ()), revision
                )


def clear_index_cache() -> None:
    _INDEXES.clear()
    _ROLES.clear()


# --------------------------------------------------------------------------------------------------
# Kept vectors


def text_digest(text: str) -> bytes:
    """16 bytes standing for `text` in the vector cache (BLAKE2b: a changed text never passes for the old one)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


class VectorCache(LRU[tuple[str, str, int], tuple[bytes, np.ndarray]]):
    """Memory vectors read from Chroma, by (Chroma path, collection, memory id), each with the digest of the text
    it was stored for: a memory whose text changed since is a miss. Writes of this process forget what they
    replace."""

    def vector(self, key: tuple[str, str, int], text: str) -> np.ndarray | None:
        kept = self.get(key)
        return kept[1] if kept is not None and kept[0] == text_digest(text) else None

    def split(
        self, place: tuple[str, str], memory_ids: Sequence[int], documents: Mapping[int, str] | None
    ) -> tuple[dict[int, np.ndarray], list[int]]:
        """(the kept vectors of `memory_ids` whose text is still `documents[id]`, the ids to ask Chroma for)."""
        found: dict[int, np.ndarray] = {}
        missing: list[int] = []
        for memory_id in memory_ids:
            text = documents.get(memory_id) if documents else None
            vector = self.vector((*place, memory_id), text) if text is not None else None
            if vector is None:
                missing.append(memory_id)
            else:
                found[memory_id] = vector
        return found, missing

    def keep(self, place: tuple[str, str], memory_id: int, text: str, vector: Any) -> np.ndarray:
        """Keep `vector` as the one of memory `memory_id` with `text`; returns it as float32."""
        array = np.asarray(vector, dtype=np.float32)
        # the place's two strings shared by every entry of it, not a copy per key
        self.put((sys.intern(place[0]), sys.intern(place[1]), memory_id), (text_digest(text), array))
        return array

    def forget(self, path: str, collection: str, memory_ids: Iterable[int] | None = None) -> None:
        """Drop the kept vectors of `memory_ids` (all of the collection when None)."""
        if memory_ids is None:
            self.discard(lambda key: key[:2] == (path, collection))
        else:
            for memory_id in memory_ids:
                self.pop((path, collection, memory_id))


VECTORS = VectorCache(VECTOR_CACHE_SIZE)


class PendingVectors:
    """Memories this process stored whose vectors are not in Chroma yet (issue 29: the outbox commits a turn's rows
    and keyword index first, the vectors after), by (Chroma path, collection): id → stored text. The instance's next
    retrieval stops waiting once the rows are in, so its vector path scores these itself (`MemoryStore.vector_search`)
    until their vectors are written; then they are forgotten here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_place: dict[tuple[str, str], dict[int, str]] = {}

    def add(self, place: tuple[str, str], texts: Mapping[int, str]) -> None:
        with self._lock:
            self._by_place.setdefault(place, {}).update(texts)

    def of(self, place: tuple[str, str]) -> dict[int, str]:
        with self._lock:
            return dict(self._by_place.get(place, {}))

    def texts(self, path: str) -> list[str]:
        """Every pending text of the Chroma store at `path` (a few: a turn's writes)."""
        with self._lock:
            return [text for place, kept in self._by_place.items() if place[0] == path for text in kept.values()]

    def forget(self, place: tuple[str, str], memory_ids: Iterable[int]) -> None:
        with self._lock:
            kept = self._by_place.get(place)
            if kept is None:
                return
            for memory_id in memory_ids:
                kept.pop(memory_id, None)
            if not kept:
                del self._by_place[place]


PENDING_VECTORS = PendingVectors()
