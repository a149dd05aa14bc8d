"""The knowledge library (seed 001 常识知识库): which entries apply, how relevant they are, how they read.

Rules of the seed, as implemented:
- an entry is global (seed: targetPawnId = -1) or belongs to one character; only enabled entries that are
  global or the character's own apply (RetrieveKnowledge steps 1-2). Entries may also belong to one
  conversation instance: an instance sees global + its character's + its own.
- relevance (CalculateKnowledgeRelevance): +0.5 for every keyword found in the context, + importance x 0.5.
  Keywords containing CJK match as substrings, ASCII keywords as whole words, case-insensitively
  (`nodes.rules.worldbook.contains_keyword`); the seed's `Contains` would fire "cat" inside "concatenate".
- vector search (seed 001 CommonKnowledgeLibrary 向量检索): with the cosine similarity of the context and an
  entry (the store embeds them), + similarity x `SIMILARITY_WEIGHT` when it is at least `SIMILARITY_FLOOR`, so an
  entry that says what the dialogue is about ranks high without sharing a keyword with it.
- the top `max_knowledge` (seed default 5) by score, ties in the given order (the seed's stable
  OrderByDescending); the store gives the library's order (issue 25: `order`, lower first, the editor's), and the
  selected entries are injected in that order (`in_library_order`), not by score: the order is the user's.
- injected as the seed's InjectKnowledge block: a `=== 世界知识 ===` line, then `[tag] content` per entry;
  nothing at all when no entry applies.
- an entry is a pydantic model (`KnowledgeEntry`, `nodes.rules.validation`): tag and content non-empty after
  stripping, importance in [0, 1], the world book's content and keyword limits; rows and files alike.
- time (seed 001 creationTick): an entry made from an event keeps the turn it was made at (`created_turn` ≥ 0)
  and is injected with the time prefix (`nodes.rules.injection.time_prefixed`: "3 轮前，content"); permanent
  knowledge (seed creationTick -1: `created_turn` None) has none. The turn counts on the instance the event
  happened in; a turn later than the injecting one gives no prefix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Self

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.validation import Entry, EntryId, Flag, Number, check_storable
from personalab.nodes.rules.worldbook import Content, Keywords, check_one_scope, contains_keyword, scope_label
from pydantic import Field, StringConstraints, model_validator

KNOWLEDGE_HEADER = "=== 世界知识 ==="
KEYWORD_HIT_SCORE = 0.5
IMPORTANCE_FACTOR = 0.5
DEFAULT_MAX_KNOWLEDGE = 5
MAX_TAG_CHARS = 200
SIMILARITY_WEIGHT = 1.0  # as much as two keyword hits at similarity 1
# below it no relation is assumed: the default embeddings (USE) give unrelated Chinese sentences under 0.13 and a
# question and the entry it is about 0.19-0.41 (tests/test_knowledge_manage.py)
SIMILARITY_FLOOR = 0.15


Tag = Annotated[str, StringConstraints(strict=True, strip_whitespace=True, min_length=1, max_length=MAX_TAG_CHARS)]


class KnowledgeEntry(Entry):
    """Seed 001 CommonKnowledgeEntry. `role_id` None and `save_id` None = global."""

    label: ClassVar[str] = "knowledge entry"

    id: EntryId
    tag: Tag
    content: Content
    importance: Number = Field(0.5, ge=0, le=1)
    keywords: Keywords = ()
    enabled: Flag = True
    user_edited: Flag = False
    role_id: int | None = None
    save_id: int | None = None
    created_turn: int | None = Field(None, ge=0)  # seed creationTick: made from an event at this turn; None: permanent
    order: int | None = None  # the editor's order (issue 25), lower first; None: its id (`library_position`)

    @model_validator(mode="after")
    def _one_scope(self) -> Self:
        check_one_scope(self.role_id, self.save_id)
        return self

    @property
    def scope(self) -> str:
        return scope_label(self.role_id, self.save_id)


@dataclass(frozen=True)
class ScoredKnowledge:
    entry: KnowledgeEntry
    score: float
    matched: tuple[str, ...] = ()
    breakdown: Mapping[str, float] = field(default_factory=dict)


def applies_to(entry: KnowledgeEntry, role_id: int | None, save_id: int | None) -> bool:
    """Seed RetrieveKnowledge step 2, plus instance scope: global, the character's own, the instance's own."""
    if entry.save_id is not None:
        return save_id is not None and entry.save_id == save_id
    if entry.role_id is not None:
        return role_id is not None and entry.role_id == role_id
    return True


def knowledge_relevance(entry: KnowledgeEntry, context: str, similarity: float | None = None) -> ScoredKnowledge:
    """Seed CalculateKnowledgeRelevance: 0.5 per keyword in the context + importance x 0.5, + the vector search's
    similarity x `SIMILARITY_WEIGHT` when it is known and at least `SIMILARITY_FLOOR`."""
    hits = tuple(k for k in entry.keywords if k.strip() and contains_keyword(context, k))
    keyword_part = KEYWORD_HIT_SCORE * len(hits)
    importance_part = entry.importance * IMPORTANCE_FACTOR
    breakdown = {"keywords": keyword_part, "importance": importance_part}
    similar_part = 0.0
    if similarity is not None:
        similar_part = SIMILARITY_WEIGHT * similarity if similarity >= SIMILARITY_FLOOR else 0.0
        breakdown["similarity"] = similar_part
    return ScoredKnowledge(entry, keyword_part + importance_part + similar_part, hits, breakdown)


def select_knowledge(
    entries: Iterable[KnowledgeEntry],
    context: str,
    *,
    role_id: int | None = None,
    save_id: int | None = None,
    max_knowledge: int = DEFAULT_MAX_KNOWLEDGE,
    similarity: Mapping[str, float] | None = None,
) -> list[ScoredKnowledge]:
    """Seed RetrieveKnowledge: enabled entries that apply to (role_id, save_id), by relevance, top N.

    Pass the entries the store returns for an instance (they already apply) with that instance's ids, or
    any list of entries with the ids to filter by. `similarity`: entry id → cosine similarity of the context and
    the entry (the vector search), when known."""
    if max_knowledge < 0:
        raise InvalidInput("max_knowledge is negative")
    scored = [
        knowledge_relevance(entry, context, (similarity or {}).get(entry.id))
        for entry in entries
        if entry.enabled and entry.content.strip() and applies_to(entry, role_id, save_id)
    ]
    scored.sort(key=lambda s: -s.score)  # stable: equal scores keep the given order
    return scored[:max_knowledge]


def library_position(entry: KnowledgeEntry) -> tuple[int, int]:
    """Where an entry stands in the library's order (issue 25): its `order`, or its id when it has none (rows older
    than the order), then its id for equal orders."""
    ident = int(entry.id) if entry.id.isdigit() else 0
    return (entry.order if entry.order is not None else ident, ident)


def in_library_order(selected: Iterable[ScoredKnowledge]) -> list[ScoredKnowledge]:
    """The selected entries as they are injected: in the library's order (issue 25), whatever their scores; which
    entries are selected is `select_knowledge`'s business."""
    return sorted(selected, key=lambda s: library_position(s.entry))


def format_knowledge_line(entry: KnowledgeEntry) -> str:
    """Seed InjectKnowledge / FormatKnowledgeForInjection: `[tag] content`."""
    return f"[{entry.tag}] {entry.content.strip()}"


def format_knowledge_block(knowledge: Iterable[ScoredKnowledge | KnowledgeEntry]) -> str:
    """Seed InjectKnowledge: the `=== 世界知识 ===` block, or "" when there is nothing to inject."""
    lines = [format_knowledge_line(k.entry if isinstance(k, ScoredKnowledge) else k) for k in knowledge]
    if not lines:
        return ""
    return "\n".join([KNOWLEDGE_HEADER, *lines]) + "\n"


def validate_knowledge(entry: KnowledgeEntry | Mapping[str, Any], where: str) -> KnowledgeEntry:
    """The entry as it can be stored (a mapping is validated here); `InvalidInput` naming `where` and the
    field. Every rule of a knowledge entry is its model's."""
    checked = entry if isinstance(entry, KnowledgeEntry) else KnowledgeEntry.parse(entry, where)
    check_storable(checked, where)
    return checked
