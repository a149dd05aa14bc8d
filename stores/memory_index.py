"""The machinery behind memory search: the keyword (BM25) and tag index, and the kept memory vectors.

Seed 001 记忆检索和匹配算法 (关键词匹配, 标签过滤检索, 向量相似度) and 性能优化策略 (缓存).

- BM25 (rank_bm25's Okapi model over CJK-safe tokens) and the tag index are built once per
  (database, instance, character) and kept in the process (`IndexKey`). Each write that changes what they
  see increments the instance's revision (`MemoryIndexState`, `bump_revision`) in the same transaction; a
  search compares revisions (one primary-key read, `kept_index`) and rebuilds only when they differ, so the
  kept indexes stay right across processes.
- Memory tokens are computed at write time (`search_text`, stored as `MemoryEntry.search_text`), so
  building an index reads one column instead of running jieba over every memory. A memory's `context` (the
  line it came after) is indexed once and its own words twice: they weigh double in BM25 (see
  `stores.memory` for the LoCoMo figures).
- Vectors read from Chroma are kept by (Chroma path, collection, memory id) with the text they were stored
  for (`VectorCache`): a memory whose text changed since is a miss, and this process's writes forget what
  they replace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from personalab.nodes.rules.keywords import MatchText, has_han, tokenize
from personalab.stores.lru import LRU
from personalab.stores.memory_tables import MemoryEntry, MemoryIndexState
from rank_bm25 import BM25Okapi
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, col, select

INDEX_CACHE_SIZE = 64
VECTOR_CACHE_SIZE = 16384  # vectors of 512 floats: 32 MiB at most
# Lucene/Anserini's BM25 parameters rather than rank_bm25's 1.5 / 0.75: memories are short, and on LoCoMo
# (one memory per turn) they raise BM25 recall@10 from .594 to .615.
BM25_K1 = 0.9
BM25_B = 0.4
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
# BM25 over cached postings


class BM25Index:
    """rank_bm25's `BM25Okapi` (its IDF, k1, b and epsilon), scored through postings lists.

    `BM25Okapi.get_scores` loops in Python over every document for every query token; at 10,000 memories
    that is most of a retrieval's time budget. The scores here are the same numbers (tested against
    `get_scores`), computed only for documents that contain a query token."""

    def __init__(
        self, ids: Sequence[int], docs: Sequence[Sequence[str]], k1: float = BM25_K1, b: float = BM25_B
    ) -> None:
        self.ids = np.asarray(ids, dtype=np.int64)
        self.postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.idf: dict[str, float] = {}
        self.k1 = k1
        if not docs or not any(docs):
            return
        model = BM25Okapi([list(doc) for doc in docs], k1=k1, b=b)
        self.idf = dict(model.idf)
        doc_len = np.asarray(model.doc_len, dtype=np.float64)
        self.norm = k1 * (1 - b + b * doc_len / model.avgdl)
        rows: dict[str, tuple[list[int], list[int]]] = {}
        for index, freqs in enumerate(model.doc_freqs):
            for token, tf in freqs.items():
                entry = rows.setdefault(token, ([], []))
                entry[0].append(index)
                entry[1].append(tf)
        self.postings = {
            token: (np.asarray(idx, dtype=np.int64), np.asarray(tf, dtype=np.float64))
            for token, (idx, tf) in rows.items()
        }

    def __len__(self) -> int:
        return len(self.ids)

    def score_array(self, tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(document indexes that contain a query token, their BM25 scores)."""
        scores = np.zeros(len(self.ids), dtype=np.float64)
        touched = np.zeros(len(self.ids), dtype=bool)
        for token, count in _counts(tokens).items():
            posting = self.postings.get(token)
            if posting is None:
                continue
            idx, tf = posting
            scores[idx] += count * self.idf.get(token, 0.0) * (tf * (self.k1 + 1) / (tf + self.norm[idx]))
            touched[idx] = True
        hit = np.flatnonzero(touched)
        return hit, scores[hit]

    def top(self, tokens: Sequence[str], n: int) -> list[tuple[int, float]]:
        """The `n` best (memory id, score), best first; only memories sharing a token with the query."""
        hit, scores = self.score_array(tokens)
        if not len(hit) or n <= 0:
            return []
        if len(hit) > n:
            keep = np.argpartition(-scores, n - 1)[:n]
            hit, scores = hit[keep], scores[keep]
        order = np.lexsort((self.ids[hit], -scores))
        return [(int(self.ids[hit[i]]), float(scores[i])) for i in order]


def _counts(tokens: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for token in tokens:
        counts[token] = counts.get(token, 0) + 1
    return counts


@dataclass
class MemoryIndex:
    """A snapshot of one character's keyword and tag indexes in one instance, as of `revision`."""

    instance_id: int
    character_id: int
    revision: int
    bm25: BM25Index
    tags: dict[str, list[int]]  # tag (lower case) → memory ids, newest first
    tag_forms: list[tuple[str, bool, frozenset[str]]]  # (tag, is Chinese, tokens) for matching
    latest_turn: int  # the latest turn among the memories (the default "now" of a retrieval)

    def __len__(self) -> int:
        return len(self.bm25)

    def bm25_search(self, tokens: Sequence[str], n: int) -> list[tuple[int, float]]:
        """Keyword path: the `n` best memories by BM25 over CJK-safe tokens, (id, score) best first."""
        return self.bm25.top(tokens, n)

    def tag_search(self, context: MatchText, tags: Sequence[str], n: int) -> list[tuple[int, float]]:
        """Tag path (seed 001 标签过滤检索): memories with a tag that occurs in the context or is one of
        `tags`, (id, number of matched tags) most matched first, then newest."""
        wanted = {t.strip().lower() for t in tags if t.strip()}
        counts: dict[int, int] = {}
        for tag, han, words in self.tag_forms:
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
_ROLES: dict[tuple[str, int], int] = {}  # (database, instance) → the instance's role: it never changes


def bump_revision(session: Session, instance_id: int) -> None:
    """One more revision of the instance's searchable text (in the caller's transaction)."""
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(MemoryIndexState).values(instance_id=instance_id, revision=1)
    stmt = stmt.on_conflict_do_update(index_elements=["instance_id"], set_={"revision": MemoryIndexState.revision + 1})
    session.exec(stmt)


def read_revision(session: Session, instance_id: int) -> int:
    state = session.get(MemoryIndexState, instance_id)
    return state.revision if state else 0


def kept_role(url: str, instance_id: int) -> int | None:
    """The instance's role as read before by this process (None: not read yet)."""
    return _ROLES.get((url, instance_id))


def keep_role(url: str, instance_id: int, role: int) -> int:
    _ROLES[(url, instance_id)] = role
    return role


def kept_index(session: Session, key: IndexKey) -> tuple[int, MemoryIndex | None]:
    """(the instance's current revision, the kept index when it is of that revision)."""
    revision = read_revision(session, key.instance_id)
    kept = _INDEXES.get(key)
    return revision, kept if kept is not None and kept.revision == revision else None


def index_rows(session: Session, instance_id: int, character_id: int) -> Sequence[Any]:
    """(id, search text, tags, turn) of the character's memories, in id order: what an index is built from."""
    stmt = (
        select(MemoryEntry.id, MemoryEntry.search_text, MemoryEntry.tags, MemoryEntry.turn)
        .where(MemoryEntry.instance_id == instance_id, MemoryEntry.character_id == character_id)
        .order_by(col(MemoryEntry.id))
    )
    return session.exec(stmt).all()


def build_index(key: IndexKey, revision: int, rows: Sequence[Any]) -> MemoryIndex:
    """The index of `rows` (from `index_rows`) as of `revision`, kept for the next searches."""
    bm25 = BM25Index([row[0] for row in rows], [row[1].split() for row in rows], key.k1, key.b)
    tags: dict[str, list[int]] = {}
    for memory_id, _text, memory_tags, _turn in reversed(rows):
        for tag in memory_tags or []:
            tags.setdefault(tag.lower(), []).append(memory_id)
    forms = [(tag, has_han(tag), frozenset(tokenize(tag))) for tag in tags]
    latest = max((row[3] for row in rows), default=0)
    index = MemoryIndex(key.instance_id, key.character_id, revision, bm25, tags, forms, latest)
    return _INDEXES.put(key, index)


def clear_index_cache() -> None:
    _INDEXES.clear()
    _ROLES.clear()


# --------------------------------------------------------------------------------------------------
# Kept vectors


class VectorCache(LRU[tuple[str, str, int], tuple[str, np.ndarray]]):
    """Memory vectors read from Chroma, by (Chroma path, collection, memory id), each with the text it was
    stored for: a memory whose text changed since is a miss. Writes of this process forget what they replace."""

    def vector(self, key: tuple[str, str, int], text: str) -> np.ndarray | None:
        kept = self.get(key)
        return kept[1] if kept is not None and kept[0] == text else None

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
        self.put((*place, memory_id), (text, array))
        return array

    def forget(self, path: str, collection: str, memory_ids: Iterable[int] | None = None) -> None:
        """Drop the kept vectors of `memory_ids` (all of the collection when None)."""
        if memory_ids is None:
            self.discard(lambda key: key[:2] == (path, collection))
        else:
            for memory_id in memory_ids:
                self.pop((path, collection, memory_id))


VECTORS = VectorCache(VECTOR_CACHE_SIZE)
