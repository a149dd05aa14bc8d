"""Memory retrieval (seed 001 记忆检索和匹配算法, 高级评分系统, 避免重复对话的机制; seed 004 多维度触发策略).

The rules are pure functions over plain data; `retrieve` is the one orchestration that talks to a store.

Flow of `retrieve` (seed 001 检索流程):

1. Scene analysis (`analyse_scene`, seed 场景识别算法): the query (+ the recent context) is matched against
   the keywords of the seed's six scenes (Chinese as in the seed, plus English equivalents); the scene with
   the most hits wins, ties go to the earlier scene of the seed's list, no hit at all means ``casual`` (the
   seed's `OrderByDescending(...).First()`). Its weight set (`SCENE_WEIGHTS`) is the seed's table.
2. Candidate paths, all at once (seed 多路检索): ``bm25`` (rank_bm25 over CJK-safe tokens: the query's words
   and the characters of its Chinese words, without question words, `keywords.query_tokens`; plus the user's own
   words when the query is a rewrite of them; for recall, plus the best match's most telling words,
   `expansion_terms`; in turns and `memory search`, plus those of the best vector match of the user's own words
   when it stands out of the vector path's hits, `stands_out`, issue 26), ``vector``
   (Chroma, cosine), ``tags`` (memories with a tag occurring in the context), plus any extra path passed in
   `extra_paths` (the hook for world-book triggers: a callable `PathQuery -> [PathHit]`; a hit names a memory
   id, or carries a ready `Candidate` of its own kind, e.g. a world-book entry).
3. Fusion (seed 结果融合): reciprocal-rank fusion of the paths' rankings, the best `pool` go on.
4. Dedupe (seed `DeduplicateMemories`): candidates whose token overlap (Jaccard on jieba tokens) with a line
   the character said recently exceeds `dedupe_threshold` (0.8) are dropped; so is a candidate too similar
   to one already selected (the seed adds each kept memory to `seenContent`).
5. Scoring (seed `CalculateMemoryScore`) and greedy MMR selection of the top `k`:

       score = ( context_relevance · w_relevance + recency · w_recency + importance · w_importance
               + diversity · w_diversity + layer_priority · w_layer ) · mention_penalty

   - context_relevance = 0.6 · keyword + 0.4 · vector (seed `CalculateContextRelevance`). ``keyword`` is,
     by default (`keyword_mode="bm25"`), the candidate's BM25 score divided by the best BM25 score of the
     pool. The seed's own keyword score — the share of the memory's keywords found in the query — is
     `keyword_mode="seed"` (``"max"``: the higher of the two). Measured on LoCoMo (one memory per turn,
     questions as queries, relevance-only weights, R@10 over categories 1–4): seed share alone .33, max of
     both .616, BM25 alone .629 — the share is 0 for almost every memory when the query is a short question.
     ``vector`` is the cosine similarity of query and memory embeddings, floored at 0. With the gate
     (issue 29, `character_evidence`): a memory sharing only single characters with a Chinese query keeps a
     quarter of the keyword weight, the rest goes to the vector part.
   - recency = exp(−recency_rate · age in turns) (seed `CalculateRecencyScore`; default rate 0.01/turn).
   - importance = the memory's importance.
   - diversity = 1 − the highest cosine similarity to the memories already selected (MMR; 1 for the first).
     The seed's sample code takes the lowest similarity, which contradicts its own comment (相似度越低,
     多样性得分越高) and would reward a near-duplicate; the highest is what MMR uses.
   - layer_priority: active 1.0, situational 0.8, event log 0.6, archive 0.4, anything else 0.5.
   - mention_penalty = max(0.2, 1 − 0.2 · mention_count) (seed `AdjustScoreForMentionedMemory`).
   Issue 29 (a deviation, docs/retrieval.md): in turns and `memory search` every factor but relevance counts in
   proportion to `relevance_gate` (how far the candidate's relevance falls short of the pool's best); recall
   (`RetrievalConfig.for_recall`) weighs relevance alone.
   Before selection, a candidate that only the vector path found and whose relevance (the seed's blend) is below
   `min_relevance` (0.05) is dropped (seed 注入优化策略: 相关性过滤): without it, every retrieval fills its
   `k` places with unrelated memories that recency, importance and layer alone score at ~0.45.
6. The selected memories are marked as mentioned (seed `MarkMemoryAsMentioned`): their mention count goes
   up, so the next retrieval penalises them.

Every selected item carries its score breakdown (`Breakdown`).
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from functools import lru_cache
from typing import Any, Protocol

import numpy as np
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.keywords import (
    MatchText,
    count_hits,
    has_han,
    jaccard,
    keyword_in,
    keyword_match_score,
    query_tokens,
    tokenize,
)

# --------------------------------------------------------------------------------------------------
# Scenes and weights (seed 001 场景分析器, 动态权重调整)


class Scene(StrEnum):
    """Seed 001 `SceneType`, in the seed's order (which breaks ties)."""

    CASUAL = "casual"
    EMOTIONAL_TALK = "emotional_talk"
    WORK_DISCUSSION = "work_discussion"
    HISTORY_RECALL = "history_recall"
    EMERGENCY = "emergency"
    INTRODUCTION = "introduction"


@dataclass(frozen=True)
class ScoringWeights:
    """Seed 001 `ScoringWeights`; the defaults are the seed's general ones (40/20/20/10/10)."""

    context_relevance: float = 0.40
    recency: float = 0.20
    importance: float = 0.20
    diversity: float = 0.10
    layer_priority: float = 0.10


SCENE_WEIGHTS: Mapping[Scene, ScoringWeights] = {
    Scene.CASUAL: ScoringWeights(0.35, 0.25, 0.15, 0.15, 0.10),
    Scene.EMOTIONAL_TALK: ScoringWeights(0.30, 0.15, 0.30, 0.10, 0.15),
    Scene.WORK_DISCUSSION: ScoringWeights(0.45, 0.20, 0.20, 0.10, 0.05),
    Scene.HISTORY_RECALL: ScoringWeights(0.40, 0.10, 0.25, 0.15, 0.10),
    Scene.EMERGENCY: ScoringWeights(0.50, 0.30, 0.15, 0.05, 0.00),
    Scene.INTRODUCTION: ScoringWeights(0.35, 0.20, 0.20, 0.15, 0.10),
}

# The seed's Chinese keywords first, then English equivalents (matched as whole, stemmed words).
SCENE_KEYWORDS: Mapping[Scene, tuple[str, ...]] = {
    Scene.CASUAL: ("天气", "食物", "娱乐", "聊天", "weather", "food", "fun", "chat"),
    Scene.EMOTIONAL_TALK: ("爱", "恨", "悲伤", "快乐", "担心", "love", "hate", "sad", "happy", "worry"),
    Scene.WORK_DISCUSSION: ("工作", "任务", "计划", "建造", "种植", "work", "task", "plan", "build", "plant"),
    Scene.HISTORY_RECALL: ("记得", "以前", "那时候", "过去", "remember", "before", "back then", "past"),
    Scene.EMERGENCY: ("危险", "紧急", "帮助", "逃跑", "danger", "emergency", "urgent", "help", "escape"),
    Scene.INTRODUCTION: ("你好", "我是", "认识", "hello", "introduce", "meet"),
}

# Retrieval for recall — answering a question about the past (a memory search, a question over the whole
# conversation) rather than bringing memories into the next reply: only relevance counts. Recency would favour
# what was said last whatever was asked; importance and layer do not tell which memory answers a question.
# Recall@10 on LoCoMo (`evals.locomo`, one memory per turn with context): relevance only .711; with 0.1 of
# diversity (MMR) .710; the seed's general weights .632, its history_recall scene's .670, the scene analysis
# of each question (as a turn does) .563.
RECALL_WEIGHTS = ScoringWeights(context_relevance=1.0, recency=0.0, importance=0.0, diversity=0.0, layer_priority=0.0)

LAYER_PRIORITY: Mapping[str, float] = {"active": 1.0, "situational": 0.8, "event_log": 0.6, "archive": 0.4}
DEFAULT_LAYER_PRIORITY = 0.5


@dataclass(frozen=True)
class SceneAnalysis:
    scene: Scene
    weights: ScoringWeights
    hits: Mapping[str, int]  # scene → number of its keywords found


def analyse_scene(text: str) -> SceneAnalysis:
    """Seed 001 `IdentifyScene` + `GetWeightsForScene` (see the module docstring for ties)."""
    context = MatchText.of(text)
    hits = {scene.value: count_hits(words, context) for scene, words in SCENE_KEYWORDS.items()}
    best = max(Scene, key=lambda s: (hits[s.value], -list(Scene).index(s)))
    return SceneAnalysis(best, SCENE_WEIGHTS[best], hits)


# --------------------------------------------------------------------------------------------------
# Factors (seed 001 各评分因子详解)


def recency_score(age_turns: float, rate: float) -> float:
    """Seed `CalculateRecencyScore`: exp(−rate · age); a memory from the future counts as age 0."""
    return math.exp(-rate * max(0.0, age_turns))


def layer_priority(layer: str | None) -> float:
    """Seed `CalculateLayerPriorityScore`."""
    return LAYER_PRIORITY.get(layer or "", DEFAULT_LAYER_PRIORITY)


def mention_penalty(mention_count: int, step: float = 0.2, floor: float = 0.2) -> float:
    """Seed `AdjustScoreForMentionedMemory`: the factor on the score, 1 for a memory never mentioned."""
    if mention_count <= 0:
        return 1.0
    return max(floor, 1.0 - step * mention_count)


def context_relevance(keyword: float, vector: float, keyword_share: float = 0.6, vector_share: float = 0.4) -> float:
    """Seed `CalculateContextRelevance`: keyword · 0.6 + vector · 0.4."""
    return keyword * keyword_share + vector * vector_share


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0 or a.shape != b.shape:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def cosines_to(query: np.ndarray, vectors: Sequence[np.ndarray | None]) -> list[float]:
    """`cosine(query, v)` for each of `vectors` (0 for None, a zero or a differently shaped vector), in one
    matrix product: a retrieval scores about a hundred candidates."""
    result = [0.0] * len(vectors)
    usable = [i for i, v in enumerate(vectors) if v is not None and v.shape == query.shape]
    query_norm = float(np.linalg.norm(query))
    if not usable or query_norm == 0.0:
        return result
    matrix = np.stack([vectors[i] for i in usable]).astype(np.float64)  # type: ignore[misc]
    norms = np.linalg.norm(matrix, axis=1)
    dots = matrix @ np.asarray(query, dtype=np.float64)
    for i, dot, norm in zip(usable, dots, norms, strict=True):
        result[i] = float(dot / (query_norm * norm)) if norm else 0.0
    return result


def diversity_score(similarities_to_selected: Sequence[float]) -> float:
    """1 − the highest similarity to what is already selected (MMR), in [0, 1]; 1 when nothing is."""
    if not len(similarities_to_selected):
        return 1.0
    return min(1.0, max(0.0, 1.0 - max(similarities_to_selected)))


# --------------------------------------------------------------------------------------------------
# Candidates, paths and fusion


@dataclass
class Candidate:
    """Anything that can be selected: a memory, or an item an extra path brings (`kind` other than
    ``memory``, e.g. a world-book entry). `tokens` are its search tokens (for dedupe)."""

    kind: str
    id: int | str
    content: str
    importance: float = 0.5
    layer: str | None = None
    turn: int = 0
    keywords: Sequence[str] = ()
    tags: Sequence[str] = ()
    mention_count: int = 0
    embedding: np.ndarray | None = None
    tokens: frozenset[str] | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    speaker: str = ""  # who said it, for a memory of a dialogue line (its `related_character`), "" when unknown

    @property
    def key(self) -> tuple[str, int | str]:
        return (self.kind, self.id)


@dataclass(frozen=True)
class PathHit:
    """One candidate found by a path: a memory id (kind ``memory``) or an item of its own (`item`)."""

    id: int | str
    score: float
    kind: str = "memory"
    item: Candidate | None = None

    @property
    def key(self) -> tuple[str, int | str]:
        return (self.kind, self.id)


@dataclass(frozen=True)
class PathQuery:
    """What a candidate path gets: who is remembering, the query (text, tokens, embedding) and the context."""

    instance_id: int
    character_id: int
    query: str
    tokens: Sequence[str]
    embedding: np.ndarray
    context: MatchText
    turn: int
    limit: int


CandidatePath = Callable[[PathQuery], Sequence[PathHit]]
BUILTIN_PATHS = ("bm25", "vector", "tags")
KEYWORD_MODES = ("bm25", "seed", "max")


@dataclass(frozen=True)
class Fused:
    key: tuple[str, int | str]
    rrf: float
    ranks: Mapping[str, int]  # path → 1-based rank
    scores: Mapping[str, float]  # path → the path's own score
    item: Candidate | None = None


def fuse(paths: Mapping[str, Sequence[PathHit]], *, rrf_k: int = 60, limit: int | None = None) -> list[Fused]:
    """Reciprocal-rank fusion: Σ over paths of 1 / (rrf_k + rank); best first, ties by best single rank,
    then by the order of the paths and of their hits."""
    table: dict[tuple[str, int | str], dict[str, Any]] = {}
    order = 0
    for path, hits in paths.items():
        seen: set[tuple[str, int | str]] = set()
        for rank, hit in enumerate(hits, start=1):
            if hit.key in seen:
                continue
            seen.add(hit.key)
            entry = table.get(hit.key)
            if entry is None:
                entry = table[hit.key] = {"rrf": 0.0, "ranks": {}, "scores": {}, "item": None, "order": order}
                order += 1
            entry["rrf"] += 1.0 / (rrf_k + rank)
            entry["ranks"][path] = rank
            entry["scores"][path] = float(hit.score)
            if hit.item is not None and entry["item"] is None:
                entry["item"] = hit.item
    ranked = sorted(table.items(), key=lambda kv: (-kv[1]["rrf"], min(kv[1]["ranks"].values()), kv[1]["order"]))
    if limit is not None:
        ranked = ranked[:limit]
    return [Fused(key, e["rrf"], e["ranks"], e["scores"], e["item"]) for key, e in ranked]


# --------------------------------------------------------------------------------------------------
# Dedupe (seed 001 记忆去重)


def similarity_tokens(tokens: Iterable[str]) -> frozenset[str]:
    """The tokens that near-duplicate checks compare: words, without the single Chinese characters that keyword
    search adds (`keywords.search_tokens`): two lines that share their words share most of their characters too,
    and counting both would make different lines look alike (第1条传闻 / 第2条传闻)."""
    return frozenset(token for token in set(tokens) if len(token) > 1 or not _han_character(token))


@lru_cache(maxsize=65_536)
def _han_character(token: str) -> bool:
    return has_han(token)


@lru_cache(maxsize=4096)  # ~1.3 KiB each: the set; its words are shared
def stored_similarity_tokens(search_text: str) -> frozenset[str]:
    """`similarity_tokens` of a stored memory's search text, kept per text: the same memories are candidates turn
    after turn (a dialogue-record entry's text, with its context, has some 40 tokens). The words are interned: the
    kept sets share one copy of each (issue 29: 36,000 copies of a few thousand words after 1,000 turns)."""
    return similarity_tokens(map(sys.intern, search_text.split()))


def _tokens_of(candidate: Candidate) -> frozenset[str]:
    if candidate.tokens is None:
        candidate.tokens = similarity_tokens(tokenize(candidate.content))
    return candidate.tokens


def drop_said_recently(
    candidates: Sequence[Candidate], recent_lines: Sequence[str], threshold: float = 0.8
) -> tuple[list[Candidate], list[dict[str, Any]]]:
    """Seed `DeduplicateMemories`: drop candidates whose Jaccard token similarity with something the
    character said recently is above `threshold`. Returns (kept, dropped with the line's similarity)."""
    said = [similarity_tokens(tokenize(line)) for line in recent_lines if line and line.strip()]
    kept: list[Candidate] = []
    dropped: list[dict[str, Any]] = []
    for candidate in candidates:
        tokens = _tokens_of(candidate)
        best = max((jaccard(tokens, line) for line in said), default=0.0)
        if best > threshold:
            dropped.append({"kind": candidate.kind, "id": candidate.id, "reason": "said_recently", "similarity": best})
        else:
            kept.append(candidate)
    return kept, dropped


# --------------------------------------------------------------------------------------------------
# Scoring and selection


@dataclass(frozen=True)
class Breakdown:
    """Why an item scored what it did: every factor, its weighted share, and the paths that found it."""

    scene: str
    context_relevance: float
    keyword: float
    vector: float
    recency: float
    importance: float
    diversity: float
    layer_priority: float
    mention_penalty: float
    weighted: Mapping[str, float]
    paths: Mapping[str, int]
    score: float

    def to_dict(self) -> dict[str, Any]:
        """Plain data (what `dataclasses.asdict` gives, without its deep copies of every value: a turn turns
        twenty of these into state)."""
        values = {name: getattr(self, name) for name in _BREAKDOWN_FIELDS}
        values["weighted"], values["paths"] = dict(self.weighted), dict(self.paths)
        return values


_BREAKDOWN_FIELDS = tuple(item.name for item in fields(Breakdown))


@dataclass(frozen=True)
class RetrievedItem:
    kind: str
    id: int | str
    content: str
    score: float
    breakdown: Breakdown
    layer: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "id": self.id,
            "content": self.content,
            "score": self.score,
            "layer": self.layer,
            **dict(self.data),
            "breakdown": self.breakdown.to_dict(),
        }


# Issue 29: a Chinese query's keyword evidence when a memory shares none of its words, only single characters.
# `keywords.search_tokens` adds the characters of Chinese words so that 害怕 finds 最怕; but in a short question
# most characters are common (他, 好, 天), and BM25's score divided by the pool's best makes the memory sharing the
# most of them a full keyword match (1.0, i.e. .6 of relevance) whatever it is about. Such a memory keeps this
# share of the keyword weight and the rest goes to the cosine; a memory sharing a word of two or more characters (or
# a non-Chinese word) keeps the seed's 0.6 / 0.4. 0.25 set from arithmetic before measuring: character-only evidence
# then gives at most .15 of relevance, about what the cosine part differs by between an answer and an unrelated
# memory (.85 × .05), so the dense encoder decides between memories that share no word with the question.
CHARACTER_EVIDENCE = 0.25
GATED_POWER = 2.0
"""The gate's power (`relevance_gate`), `RetrievalConfig()`'s: a turn's and `memory search`'s (docs/retrieval.md)."""
GATE_FLOOR = 0.4
"""The best relevance below which the gate measures on the absolute scale (`relevance_gate`, docs/retrieval.md)."""


# Issue 26: a question asked in other words than the fact it asks about (万一我们失散了，你会去哪儿等我？ against
# 我们约好了，要是走散了，就在旧水塔下面碰头。) shares no telling word with it, and the default encoder ranks the fact
# far down (74th of 281). What often bridges the two in a long dialogue is a memory between them: the same question
# asked before in the fact's words (要是我们走散了，约好在哪里碰头？), which the encoder does find, far above every other
# hit. Its most telling words, added to the keyword query, find the fact (pseudo-relevance feedback from the dense
# path). Only when the best vector hit stands out of the path's hits (its cosine `FEEDBACK_OUTLIER` standard
# deviations above their mean; a scale-free test, since one encoder's cosines spread over .1–.6 and another's over
# .84–.89): a best hit like the rest says nothing the query does not.
FEEDBACK_TERMS = 5
FEEDBACK_OUTLIER = 3.0


def stands_out(cosines: Sequence[float], outlier: float) -> bool:
    """Whether the first (best) of a path's hit scores is `outlier` standard deviations above the mean of them all
    (at least 5 hits: fewer say nothing of a spread)."""
    if outlier <= 0 or len(cosines) < 5:
        return False
    values = np.asarray(cosines, dtype=np.float64)
    spread = float(values.std())
    return spread > 0 and (float(values[0]) - float(values.mean())) / spread >= outlier


def character_evidence(query_words: frozenset[str], memory_words: frozenset[str], share: float) -> float:
    """What part of its keyword score a memory keeps (issue 29, a deviation from seed 001
    `CalculateContextRelevance`, docs/retrieval.md): 1 when it shares a word with the query (`similarity_tokens`:
    words, not the single Chinese characters keyword search adds) or when the query has no such word, `share`
    when all it shares with the query is single characters. The weight it does not keep goes to the cosine
    (`score_candidates`), so its relevance stays on the same scale as the others'."""
    if not query_words or query_words & memory_words:
        return 1.0
    return share


@dataclass(frozen=True)
class RetrievalConfig:
    """Knobs of a retrieval; defaults from seed 001 where it gives them (k = maxMemories = 10, the 0.6/0.4
    relevance mix, the 0.2 mention step and floor, the 0.8 dedupe threshold)."""

    k: int = 10
    path_limit: int = 50  # candidates each path returns
    pool: int = 100  # fused candidates that are scored
    rrf_k: int = 60
    keyword_share: float = 0.6
    vector_share: float = 0.4
    recency_rate: float = 0.01  # per turn
    mention_step: float = 0.2
    mention_floor: float = 0.2
    dedupe_threshold: float = 0.8
    keyword_mode: str = "bm25"  # "bm25", "seed" (share of the memory's keywords in the query) or "max" of both
    min_relevance: float = 0.05  # a candidate only the vector path found is dropped below this relevance
    weights: ScoringWeights | None = None  # fixed weights instead of the scene's
    mark_mentioned: bool = True
    expansion_terms: int = 0  # words of the best keyword match added to the keyword query (`expansion_terms`)
    time_boost: float = 0.0  # relevance added, for a question asking when, to memories that say when (`says_when`)
    query_repeat: int = 3  # with expansion: the query's own words count this many times each, an added word once
    speaker_boost: float = 0.0  # relevance added to a memory whose speaker the query names (`names_speaker`)
    # words of the best vector match added to the keyword query when that match stands out of the vector path's hits
    # (`feedback_terms`, `stands_out`; issue 26): on in turns and `memory search`, off for recall (LoCoMo's figures
    # were tuned with the keyword match's expansion, `expansion_terms`)
    feedback_terms: int = FEEDBACK_TERMS
    feedback_outlier: float = FEEDBACK_OUTLIER  # how far above the hits' mean, in standard deviations
    # the query's own words count this many times each beside the feedback's: once, as much as the match's words (a
    # paraphrase shares no telling word with its fact; at 3, as for the keyword match's expansion, the match itself,
    # sharing the query's common words too, kept the fact's keyword part at a quarter of its own)
    feedback_repeat: int = 1
    # the power of `relevance_gate` (0: the seed's plain sum; issue 29, docs/retrieval.md): on in turns, an NPC's
    # witnessed recall and `memory search`. Under the plain sum a fact told 282 turns back scored below two dozen
    # recent small-talk entries of equal or lower relevance (docs/benchmarks/2026-11-27-horizon.md)
    relevance_gate: float = GATED_POWER
    # below this best relevance the gate measures shortfalls on the absolute scale (`relevance_gate`): a pool with no
    # strong match keeps the scene's weights as what orders it (docs/retrieval.md)
    gate_floor: float = GATE_FLOOR
    # the share of the keyword weight kept by a memory sharing only single characters with a Chinese query, the rest
    # going to the cosine (`character_evidence`, issue 29); 1: the seed's blend. Goes with the gate (under the seed's
    # plain sum the smaller relevance of character-only matches let recency and importance decide: paraphrase
    # probes, seed sum with it: hit@1 .867 → .733). Off for recall (`for_recall`): memorybank-cn R@5 .930 → .925
    character_evidence: float = CHARACTER_EVIDENCE

    @classmethod
    def for_recall(cls, **changes: Any) -> RetrievalConfig:
        """Retrieval for recall (see `RECALL_WEIGHTS`): relevance only, and the found memories are not marked
        as mentioned — answering a question about the past is not the character bringing them up."""
        return cls(
            **{
                "weights": RECALL_WEIGHTS,
                "mark_mentioned": False,
                "expansion_terms": 5,
                "time_boost": 0.1,
                "speaker_boost": 0.2,
                "relevance_gate": 0.0,  # relevance is the only weighted factor: nothing to gate
                "character_evidence": 1.0,  # the seed's blend: R@5 on memorybank-cn fell with the rule
                "feedback_terms": 0,  # the keyword match's expansion instead (measured on LoCoMo)
                **changes,
            }
        )


def expansion_terms(document: Sequence[str], query: Sequence[str], weight: Mapping[str, float], n: int) -> list[str]:
    """Pseudo-relevance feedback (Rocchio / RM3 style, for recall): the `n` words of the best keyword match
    (`document`, its search tokens) that the query lacks, by their share of the document times `weight` (how
    telling the word is in this index: its best single-word BM25 score, an IDF that the index gives through its
    search), best first, ties in document order. A question names one side of what it asks about ("When did Jon
    get mentored?"); the turn that answers it often says it in words the best match shares with it.
    Measured on LoCoMo, recall weights, two lines of context, R@10: first five conversations (where the knobs
    were chosen: 1 document, 5 words, the query ×3) .754 → .767; the other five .697 → .704; R@5 drops by about
    .01 on the first five, so recall uses it and a turn's retrieval does not."""
    if n <= 0 or not document:
        return []
    asked = set(query)
    counts: dict[str, int] = {}
    for word in document:
        if word not in asked:
            counts[word] = counts.get(word, 0) + 1
    order = {word: position for position, word in enumerate(counts)}
    ranked = sorted(counts, key=lambda w: (-counts[w] * weight.get(w, 0.0), order[w]))
    return [word for word in ranked[:n] if weight.get(word, 0.0) > 0]


# Time questions (for recall). A question asking when is answered by a line that says when ("I went there
# yesterday", "上个月搬的家"), whatever else it shares with the question. Measured on LoCoMo (recall weights, two
# lines of context, keyword expansion; R@10 first five conversations / other five): no boost .767 / .704; +0.05
# .771, +0.1 .769 / .717, +0.2 .771 on the first five (0.1 kept: the best R@5); temporal questions .849 → .858 and
# .628 → .691.
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_ASKS_WHEN = re.compile(
    r"^\W*(?:when|what (?:time|year|month|date|day)|how long ago|which (?:year|month|day))\b"
    r"|什么时候|哪天|哪一天|哪年|哪一年|几月|几号|几点|多久以前|多久前",
    re.IGNORECASE,
)
_SAYS_WHEN = re.compile(
    rf"\b(?:yesterday|today|tonight|tomorrow|ago|recently|lately|weekend|last (?:week|month|year|night|time|{_WEEKDAYS})"
    rf"|(?:this|next|past) (?:week|month|year|{_WEEKDAYS})|{_MONTHS}|{_WEEKDAYS}|\d{{4}})\b"
    r"|昨天|今天|明天|前天|后天|刚才|最近|以前|之前|周末|上周|下周|这周|上个月|下个月|这个月|去年|今年|明年|前年"
    r"|星期[一二三四五六日天]|周[一二三四五六日]|\d+\s*[年月日号点]|[一二三四五六七八九十]+[年月日号]",
    re.IGNORECASE,
)
_WHEN_PREFIX = re.compile(r"^\[[^\]]*\]\s*")  # the `[when]` a dialogue memory starts with: when it was said


def asks_when(query: str) -> bool:
    """Whether a question asks when something happened (English and Chinese question forms)."""
    return _ASKS_WHEN.search(query) is not None


def says_when(content: str) -> bool:
    """Whether a memory's own line (its last line: the lines before it are its context; its `[when]` prefix left
    out, as it says when the line was said, not when what it tells happened) names a time."""
    own = content.rstrip().rsplit("\n", 1)[-1]
    return _SAYS_WHEN.search(_WHEN_PREFIX.sub("", own)) is not None


# Who said it (for recall). A question that names a person asks, nearly always, about what that person said:
# "What did Lily say about the sword?", "莱姆的妹妹几岁？" (on LoCoMo's first five conversations, 930 of 967 evidence
# lines of the questions naming one of the two speakers are that speaker's). The other speaker's lines around them
# share the topic's words (they ask about it, they answer it) and, with two lines of context, much of the text; a small
# bonus for the named speaker's own lines lets the answer outrank the echo. Measured on LoCoMo (recall weights, two
# lines of context, expansion, time boost; R@10 first five conversations / other five): no bonus .769 / .717; +0.05
# .777 / .743; +0.1 .791 / .751; +0.15 .794 / .753; +0.2 .794 / .754; +0.3 .794 / .754; +0.5 .785 / .750 (0.2 kept:
# the middle of the plateau from 0.15 to 0.3). Recall only: in a turn the user names whom they talk to, not whose
# words they ask about.


def names_speaker(speaker: str, query: MatchText) -> bool:
    """Whether the query names the speaker (`keywords.keyword_in`: a Chinese name as a substring, another name as
    whole words: "Jo" is not named by "Jon")."""
    return bool(speaker.strip()) and keyword_in(speaker, query)


@dataclass
class _Scored:
    candidate: Candidate
    keyword: float
    vector: float
    relevance: float
    recency: float
    layer_priority: float
    penalty: float
    paths: Mapping[str, int]
    # the seed's 0.6 / 0.4 blend (with the same boosts): what `min_relevance` is measured on, whatever the blend
    seed_relevance: float = 0.0


def score_candidates(
    candidates: Sequence[Candidate],
    fused: Mapping[tuple[str, int | str], Fused],
    query: MatchText,
    query_embedding: np.ndarray | None,
    turn: int,
    config: RetrievalConfig,
    added_words: Sequence[str] = (),
) -> list[_Scored]:
    """The factors that do not depend on what is already selected (everything but diversity). `added_words`: the
    words the keyword query was given (`expansion_terms`, the feedback), which a memory can share like the query's."""
    bm25 = {c.key: fused[c.key].scores.get("bm25", 0.0) if c.key in fused else 0.0 for c in candidates}
    best_bm25 = max(bm25.values(), default=0.0)
    scored = []
    if config.keyword_mode not in KEYWORD_MODES:
        raise InvalidInput(f"keyword mode {config.keyword_mode!r} is not one of {', '.join(KEYWORD_MODES)}")
    vectors = cosines_to(query_embedding, [c.embedding for c in candidates]) if query_embedding is not None else None
    time_question = bool(config.time_boost) and asks_when(query.lower)
    named: dict[str, bool] = {}  # speaker → named by the query (a retrieval scores ~100 lines of a few speakers)
    # Chinese queries only: an English word is a word already (no characters are added to its tokens)
    words = (
        similarity_tokens([*query_tokens(query.lower), *added_words])
        if config.character_evidence < 1 and has_han(query.lower)
        else frozenset()
    )
    moved = (  # the blend of a memory sharing only characters: its keyword weight partly moved to the cosine
        config.keyword_share * config.character_evidence,
        config.vector_share + config.keyword_share * (1 - config.character_evidence),
    )
    for position, candidate in enumerate(candidates):
        share = keyword_match_score(candidate.keywords, query) if config.keyword_mode != "bm25" else 0.0
        normalised = bm25[candidate.key] / best_bm25 if best_bm25 > 0 else 0.0
        kept = character_evidence(words, _tokens_of(candidate), config.character_evidence) if words else 1.0
        keyword = {"bm25": normalised, "seed": share, "max": max(share, normalised)}[config.keyword_mode]
        vector = max(0.0, vectors[position]) if vectors is not None else 0.0
        relevance = seed_relevance = context_relevance(keyword, vector, config.keyword_share, config.vector_share)
        if words:
            # sharing a word is never weaker evidence than sharing only characters: a memory that shares one keeps
            # the better of the two blends (its BM25 can be 0: in a two-memory pool a word in one of the two has
            # IDF log(1.5 / 1.5) = 0, and with the seed's blend alone the other memory's cosine, weighted .85
            # against its .4, ranked the unrelated memory first; docs/retrieval.md)
            blended = context_relevance(keyword, vector, *moved)
            relevance = blended if kept < 1 else max(relevance, blended)
        boost = (config.time_boost if time_question and says_when(candidate.content) else 0.0) + (
            config.speaker_boost if config.speaker_boost and _named(candidate.speaker, query, named) else 0.0
        )
        scored.append(
            _Scored(
                candidate=candidate,
                keyword=keyword,
                vector=vector,
                relevance=relevance + boost,
                seed_relevance=seed_relevance + boost,
                recency=recency_score(turn - candidate.turn, config.recency_rate),
                layer_priority=layer_priority(candidate.layer),
                penalty=mention_penalty(candidate.mention_count, config.mention_step, config.mention_floor),
                paths=dict(fused[candidate.key].ranks) if candidate.key in fused else {},
            )
        )
    return scored


def _named(speaker: str, query: MatchText, seen: dict[str, bool]) -> bool:
    if speaker not in seen:
        seen[speaker] = names_speaker(speaker, query)
    return seen[speaker]


def drop_irrelevant(scored: Sequence[_Scored], min_relevance: float) -> tuple[list[_Scored], list[dict[str, Any]]]:
    """Seed 001 注入优化策略 相关性过滤: a candidate that only the vector path found (no shared word, tag or
    trigger) and whose context relevance is below `min_relevance` is not related to the context. Measured on the
    seed's 0.6 / 0.4 blend (`seed_relevance`), whatever the blend ranks with: with single-character evidence
    (`character_evidence`) a memory sharing nothing with a Chinese query has .85 of its cosine as relevance, not .4,
    and an unrelated memory (cosine .09: relevance .037 → .078) passed the filter and outranked, in a two-memory
    pool, the memory whose tag the query names (issue 29, docs/retrieval.md)."""
    kept, dropped = [], []
    for item in scored:
        if item.seed_relevance < min_relevance and set(item.paths) <= {"vector"}:
            dropped.append(
                {
                    "kind": item.candidate.kind,
                    "id": item.candidate.id,
                    "reason": "irrelevant",
                    "relevance": item.relevance,
                }
            )
        else:
            kept.append(item)
    return kept, dropped


def _similarity_matrix(items: Sequence[_Scored]) -> np.ndarray:
    """Pairwise similarity: cosine of embeddings where both have one, token Jaccard otherwise."""
    n = len(items)
    matrix = np.zeros((n, n), dtype=np.float64)
    have = [i for i, s in enumerate(items) if s.candidate.embedding is not None]
    if have:
        vectors = np.stack([np.asarray(items[i].candidate.embedding, dtype=np.float64) for i in have])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = vectors / np.where(norms == 0, 1.0, norms)
        sims = vectors @ vectors.T
        matrix[np.ix_(have, have)] = sims
    missing = [i for i, s in enumerate(items) if s.candidate.embedding is None]
    for i in missing:
        for j in range(n):
            matrix[i, j] = matrix[j, i] = jaccard(_tokens_of(items[i].candidate), _tokens_of(items[j].candidate))
    return matrix


def relevance_gate(relevance: Sequence[float], power: float, floor: float = 0.0) -> np.ndarray:
    """Issue 29 (a deviation from seed 001 `CalculateMemoryScore`, docs/retrieval.md): how much of its recency,
    importance, diversity and layer weight a candidate keeps — (1 − its shortfall from the pool's best relevance /
    max(the best, `floor`)) ** power, which is (its relevance / the best) ** power when the best reaches `floor`.
    The seed adds the factors, so with relevance under half the weight a memory unrelated to the query (relevance
    .05–.2) but recent and important tied with, or beat, the one that shares the query's rare word (.74); gated, the
    best match keeps its whole score and candidates of comparable relevance are still ordered by the scene's
    weights. The floor: in a pool with no strong match (every relevance under `floor`, as in a pool of a few
    memories or a question nothing answers) differences of relevance are measured on the absolute scale, so noise
    between unrelated memories does not silence the scene's weights. `power` 0 is the seed's plain sum."""
    values = np.asarray(relevance, dtype=np.float64)
    best = float(values.max(initial=0.0))
    if power <= 0 or best <= 0:
        return np.ones(len(values))
    scale = max(best, floor)
    return np.clip(1.0 - (best - values) / scale, 0.0, 1.0) ** power


def select(
    scored: Sequence[_Scored],
    weights: ScoringWeights,
    scene: Scene,
    k: int,
    dedupe_threshold: float = 0.8,
    gate_power: float = 0.0,
    gate_floor: float = 0.0,
) -> tuple[list[RetrievedItem], list[dict[str, Any]]]:
    """Greedy MMR: repeatedly take the candidate with the best total score given what is already taken
    (diversity changes as items are taken). A candidate whose tokens overlap an already taken one by more
    than `dedupe_threshold` is skipped (seed: seenContent). Every factor but relevance counts in proportion to
    `relevance_gate(…, gate_power, gate_floor)` (power 0: the seed's sum). Returns (selected best first, skipped)."""
    n = len(scored)
    if n == 0 or k <= 0:
        return [], []
    similarity = _similarity_matrix(scored)
    gate = relevance_gate([s.relevance for s in scored], gate_power, gate_floor)
    static = np.array(
        [
            s.relevance * weights.context_relevance
            + g
            * (
                s.recency * weights.recency
                + s.candidate.importance * weights.importance
                + s.layer_priority * weights.layer_priority
            )
            for s, g in zip(scored, gate, strict=True)
        ]
    )
    penalty = np.array([s.penalty for s in scored])
    max_similarity = np.full(n, -np.inf)
    available = np.ones(n, dtype=bool)
    chosen: list[RetrievedItem] = []
    chosen_tokens: list[tuple[int | str, frozenset[str]]] = []
    skipped: list[dict[str, Any]] = []
    while len(chosen) < k and available.any():
        diversity = np.where(np.isinf(max_similarity), 1.0, np.clip(1.0 - max_similarity, 0.0, 1.0))
        total = (static + gate * diversity * weights.diversity) * penalty
        total = np.where(available, total, -np.inf)
        best = int(np.argmax(total))  # first of equal scores: fused order breaks ties
        available[best] = False
        item = scored[best]
        tokens = _tokens_of(item.candidate)
        duplicate = next((key for key, seen in chosen_tokens if jaccard(tokens, seen) > dedupe_threshold), None)
        if duplicate is not None:
            skipped.append(
                {"kind": item.candidate.kind, "id": item.candidate.id, "reason": "duplicate_of", "of": duplicate}
            )
            continue
        chosen_tokens.append((item.candidate.id, tokens))
        max_similarity = np.maximum(max_similarity, similarity[best])
        kept = float(gate[best])  # the shares as scored: each but relevance's gated
        weighted = {
            "context_relevance": item.relevance * weights.context_relevance,
            "recency": item.recency * weights.recency * kept,
            "importance": item.candidate.importance * weights.importance * kept,
            "diversity": float(diversity[best]) * weights.diversity * kept,
            "layer_priority": item.layer_priority * weights.layer_priority * kept,
        }
        breakdown = Breakdown(
            scene=scene.value,
            context_relevance=item.relevance,
            keyword=item.keyword,
            vector=item.vector,
            recency=item.recency,
            importance=item.candidate.importance,
            diversity=float(diversity[best]),
            layer_priority=item.layer_priority,
            mention_penalty=item.penalty,
            weighted=weighted,
            paths=item.paths,
            score=float(total[best]),
        )
        chosen.append(
            RetrievedItem(
                kind=item.candidate.kind,
                id=item.candidate.id,
                content=item.candidate.content,
                score=float(total[best]),
                breakdown=breakdown,
                layer=item.candidate.layer,
                data=dict(item.candidate.data),
            )
        )
    return chosen, skipped


# --------------------------------------------------------------------------------------------------
# Orchestration


class KeywordIndex(Protocol):
    """A snapshot of one character's keyword and tag indexes (`stores.memory.MemoryIndex` is one)."""

    character_id: int
    latest_turn: int

    def bm25_search(self, tokens: Sequence[str], n: int) -> Sequence[tuple[int, float]]: ...
    def idf(self, tokens: Iterable[str]) -> Mapping[str, float]: ...
    def tag_search(self, context: MatchText, tags: Sequence[str], n: int) -> Sequence[tuple[int, float]]: ...


class MemorySource(Protocol):
    """What `retrieve` needs from a store (`stores.memory.MemoryStore` is one)."""

    def index(self, instance_id: int, character_id: int | None = None) -> KeywordIndex: ...
    def embed_query(self, text: str) -> np.ndarray: ...
    def embed_queries(self, texts: Sequence[str]) -> Sequence[np.ndarray]: ...
    def vector_search(
        self, instance_id: int, character_id: int, embedding: np.ndarray, n: int
    ) -> Sequence[tuple[int, float]]: ...
    def embeddings(
        self,
        instance_id: int,
        character_id: int,
        memory_ids: Sequence[int],
        documents: Mapping[int, str] | None = None,
    ) -> Mapping[int, np.ndarray]: ...
    def load(self, instance_id: int, memory_ids: Sequence[int]) -> Mapping[int, Any]: ...
    def mark_mentioned(self, instance_id: int, memory_ids: Sequence[int], turn: int) -> None: ...


@dataclass(frozen=True)
class RetrievalResult:
    instance_id: int
    character_id: int
    query: str
    turn: int
    scene: SceneAnalysis
    items: tuple[RetrievedItem, ...]
    dropped: tuple[dict[str, Any], ...] = ()
    candidates: int = 0
    timings_ms: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the graph state (last retrieval debug) and `--json`."""
        return {
            "instance_id": self.instance_id,
            "character_id": self.character_id,
            "query": self.query,
            "turn": self.turn,
            "scene": self.scene.scene.value,
            "weights": asdict(self.scene.weights),
            "scene_hits": dict(self.scene.hits),
            "items": [item.to_dict() for item in self.items],
            "dropped": list(self.dropped),
            "candidates": self.candidates,
            "timings_ms": dict(self.timings_ms),
        }


def memory_candidate(entry: Any, embedding: np.ndarray | None) -> Candidate:
    """A stored memory (`stores.memory_tables.MemoryEntry`) as a candidate."""
    return Candidate(
        kind="memory",
        id=entry.id,
        content=entry.content,
        importance=entry.importance,
        layer=entry.layer,
        turn=entry.turn,
        keywords=tuple(entry.keywords or ()),
        tags=tuple(entry.tags or ()),
        mention_count=entry.mention_count,
        embedding=embedding,
        tokens=stored_similarity_tokens(entry.search_text) if entry.search_text else None,
        data={
            "type": entry.type,
            "tags": list(entry.tags or ()),
            "turn": entry.turn,
            "pinned": entry.pinned,
            "user_edited": entry.user_edited,
            "mention_count": entry.mention_count,
            "line_id": getattr(entry, "line_id", None),  # a dialogue-record entry's line (nodes.rules.record)
            # issue 26: until when a fact held (None: still true) and what replaced it
            "valid_to_turn": getattr(entry, "valid_to_turn", None),
            "superseded_by": getattr(entry, "superseded_by", None),
        },
        speaker=getattr(entry, "related_character", "") or "",
    )


def retrieve(
    store: MemorySource,
    instance_id: int,
    query: str,
    *,
    message: str = "",
    context: str = "",
    recent_own_lines: Sequence[str] = (),
    turn: int | None = None,
    recent_from_turn: int | None = None,
    character_id: int | None = None,
    tags: Sequence[str] = (),
    k: int | None = None,
    extra_paths: Mapping[str, CandidatePath] | None = None,
    config: RetrievalConfig | None = None,
) -> RetrievalResult:
    """Retrieve the memories of the instance's character (or `character_id`) for `query`.

    `query`: what the memories must be relevant to (the user's message or the rewritten standalone query).
    `message`: the user's own words when `query` is a rewrite of them: their keywords join the query's (a
    rewrite may drop words the user said, or add the dialogue's), so words in both count twice.
    `context`: recent dialogue text, used with the query for scene analysis and tag matching.
    `recent_own_lines`: what the character said recently (candidates repeating it are dropped).
    `turn`: now, in turns (default: the latest memory's turn). `tags`: tags that select memories directly.
    `recent_from_turn`: the first turn the prompt's recent dialogue shows; the feedback (`stands_out`) reads the
    best vector match written before it (a memory of those turns repeats what the model reads there anyway).
    `extra_paths`: more candidate paths by name (world-book triggers). Returns the ranked items, each with
    its score breakdown; the selected memories are marked as mentioned unless `config.mark_mentioned` is off.
    """
    config = config or RetrievalConfig()
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("query is empty")
    k = config.k if k is None else k
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidInput(f"k {k!r} is not a whole number ≥ 1")
    if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int) or turn < 0):
        raise InvalidInput(f"turn {turn!r} is not a whole number ≥ 0")
    if recent_from_turn is not None and (isinstance(recent_from_turn, bool) or not isinstance(recent_from_turn, int)):
        raise InvalidInput(f"recent_from_turn {recent_from_turn!r} is not a whole number")
    for name in extra_paths or {}:
        if name in BUILTIN_PATHS:
            raise InvalidInput(f"extra path {name!r} has the name of a built-in path")
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = round((now - clock) * 1000, 3)
        clock = now

    started = clock
    index = store.index(instance_id, character_id)
    character = index.character_id
    scene = analyse_scene(f"{query}\n{context}" if context else query)
    query_match = MatchText.of(query)
    scene_match = MatchText.of(f"{query}\n{context}") if context else query_match
    tokens = query_tokens(query)
    if message.strip() and message.strip() != query.strip():
        tokens += query_tokens(message)
    now_turn = index.latest_turn if turn is None else turn
    lap("analyse")
    # the user's own words by meaning when the query is a rewrite of them (the feedback below): embedded with it
    own = message.strip() if config.feedback_terms and message.strip() and message.strip() != query.strip() else ""
    embedding, own_embedding = store.embed_queries([query, own]) if own else (store.embed_query(query), None)
    lap("embed")

    limit = config.path_limit
    paths: dict[str, Sequence[PathHit]] = {}
    vector_hits = store.vector_search(instance_id, character, embedding, limit)
    lap("vector")

    def expansion(best_id: int, n: int, by_idf: bool = False) -> list[str]:
        best = store.load(instance_id, [best_id]).get(best_id)
        if best is None or not best.search_text:
            return []
        document = best.search_text.split()
        if by_idf:  # one look-up per word; the best single-word score cost a search each (~12 ms for 49 words)
            weight = dict(index.idf(document))
        else:  # recall's (LoCoMo's figures were measured with it)
            weight = {word: next(iter(index.bm25_search([word], 1)), (0, 0.0))[1] for word in set(document)}
        return expansion_terms(document, tokens, weight, n)

    keyword_hits = index.bm25_search(tokens, limit)
    added: list[str] = []
    repeat = config.query_repeat
    if config.expansion_terms and keyword_hits:
        added = expansion(keyword_hits[0][0], config.expansion_terms)
    elif config.feedback_terms:
        # the user's own words by meaning when the query is a rewrite of them: a rewrite that adds the dialogue's
        # context is nearest to the last turns, which the prompt's recent dialogue already holds (the offline
        # model's 万一我们失散了（上下文：小时候被什么动物伤过） found the turn before it, .62 against .21)
        asked = (
            vector_hits if own_embedding is None else store.vector_search(instance_id, character, own_embedding, limit)
        )
        if recent_from_turn is not None and asked:
            # the same question asked a few turns ago is the nearest match, and its words are the dialogue's: the
            # feedback reads the memories older than the recent dialogue (the played store's turn 309 found turn
            # 307's question, not turn 53's asked in the fact's words; the vector path has read these rows already)
            rows = store.load(instance_id, [memory_id for memory_id, _ in asked])
            asked = [hit for hit in asked if hit[0] in rows and rows[hit[0]].turn < recent_from_turn]
        if asked and stands_out([s for _, s in asked], config.feedback_outlier):
            added, repeat = expansion(asked[0][0], config.feedback_terms, by_idf=True), config.feedback_repeat
    if added:
        keyword_hits = index.bm25_search([*tokens * repeat, *added], limit)
    paths["bm25"] = [PathHit(i, s) for i, s in keyword_hits]
    paths["vector"] = [PathHit(i, s) for i, s in vector_hits]
    lap("bm25")
    paths["tags"] = [PathHit(i, s) for i, s in index.tag_search(scene_match, tags, limit)]
    if extra_paths:
        request = PathQuery(instance_id, character, query, tokens, embedding, scene_match, now_turn, limit)
        for name, path in extra_paths.items():
            paths[name] = list(path(request))
    lap("paths")

    fused = fuse(paths, rrf_k=config.rrf_k, limit=config.pool)
    memory_ids = [int(f.key[1]) for f in fused if f.key[0] == "memory" and f.item is None]
    entries = store.load(instance_id, memory_ids)
    mine = [i for i in memory_ids if i in entries and entries[i].character_id == character]
    vectors = store.embeddings(instance_id, character, mine, {i: entries[i].content for i in mine})
    candidates: list[Candidate] = []
    for item in fused:
        if item.item is not None:
            candidates.append(item.item)
        elif item.key[0] == "memory" and (memory_id := int(item.key[1])) in entries:
            if entries[memory_id].character_id == character:
                candidates.append(memory_candidate(entries[memory_id], vectors.get(memory_id)))
    lap("load")

    kept, dropped = drop_said_recently(candidates, recent_own_lines, config.dedupe_threshold)
    weights = config.weights or scene.weights
    by_key = {f.key: f for f in fused}
    scored, irrelevant = drop_irrelevant(
        score_candidates(kept, by_key, query_match, embedding, now_turn, config, added), config.min_relevance
    )
    items, skipped = select(
        scored, weights, scene.scene, k, config.dedupe_threshold, config.relevance_gate, config.gate_floor
    )
    lap("score")

    if config.mark_mentioned:
        store.mark_mentioned(instance_id, [item.id for item in items if item.kind == "memory"], now_turn)  # type: ignore[misc]
        lap("mark")
    timings["total"] = round((time.perf_counter() - started) * 1000, 3)
    return RetrievalResult(
        instance_id=instance_id,
        character_id=character,
        query=query,
        turn=now_turn,
        scene=SceneAnalysis(scene.scene, weights, scene.hits),
        items=tuple(items),
        dropped=tuple(dropped + irrelevant + skipped),
        candidates=len(candidates),
        timings_ms=timings,
    )
