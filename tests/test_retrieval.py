"""Retrieval rules (seed 001 场景分析, 多因子评分, 多样性, 去重, 已提及惩罚), pure: no store, no model."""

from __future__ import annotations

import math

import numpy as np
import pytest
from personalab.nodes.rules.keywords import MatchText
from personalab.nodes.rules.retrieval import (
    CHARACTER_EVIDENCE,
    GATE_FLOOR,
    GATED_POWER,
    SCENE_WEIGHTS,
    Candidate,
    PathHit,
    RetrievalConfig,
    Scene,
    ScoringWeights,
    analyse_scene,
    asks_when,
    context_relevance,
    cosine,
    cosines_to,
    diversity_score,
    drop_irrelevant,
    drop_said_recently,
    expansion_terms,
    fuse,
    layer_priority,
    mention_penalty,
    recency_score,
    relevance_gate,
    says_when,
    score_candidates,
    select,
    similarity_tokens,
    stands_out,
    stored_similarity_tokens,
)


@pytest.mark.parametrize(
    ("text", "scene"),
    [
        ("今天天气不错，想吃点什么食物？", Scene.CASUAL),
        ("我好担心你，一想到就很悲伤", Scene.EMOTIONAL_TALK),
        ("明天的工作计划是建造仓库", Scene.WORK_DISCUSSION),
        ("你还记得以前那时候吗", Scene.HISTORY_RECALL),
        ("危险！紧急情况，快逃跑", Scene.EMERGENCY),
        ("你好，我是新来的", Scene.INTRODUCTION),
        ("Do you remember what happened in the past?", Scene.HISTORY_RECALL),
        ("Help! This is an emergency", Scene.EMERGENCY),
    ],
)
def test_scene_analysis_picks_the_scene_with_most_keywords(text: str, scene: Scene) -> None:
    analysis = analyse_scene(text)
    assert analysis.scene is scene
    assert analysis.weights == SCENE_WEIGHTS[scene]


def test_no_scene_keyword_means_casual_and_ties_go_to_the_earlier_scene() -> None:
    assert analyse_scene("嗯嗯").scene is Scene.CASUAL
    assert analyse_scene("工作 记得").scene is Scene.WORK_DISCUSSION  # one hit each: work comes first


def test_scene_weights_are_the_seed_table() -> None:
    assert SCENE_WEIGHTS[Scene.EMOTIONAL_TALK] == ScoringWeights(0.30, 0.15, 0.30, 0.10, 0.15)
    assert SCENE_WEIGHTS[Scene.EMERGENCY] == ScoringWeights(0.50, 0.30, 0.15, 0.05, 0.00)
    for weights in SCENE_WEIGHTS.values():
        total = (
            weights.context_relevance
            + weights.recency
            + weights.importance
            + weights.diversity
            + weights.layer_priority
        )
        assert total == pytest.approx(1.0)


def test_context_relevance_is_keyword_sixty_vector_forty() -> None:
    assert context_relevance(1.0, 0.0) == pytest.approx(0.6)
    assert context_relevance(0.5, 0.5) == pytest.approx(0.5)


def test_recency_decays_exponentially_with_age() -> None:
    assert recency_score(0, 0.01) == 1.0
    assert recency_score(100, 0.01) == pytest.approx(math.exp(-1))
    assert recency_score(-5, 0.01) == 1.0


def test_layer_priority_prefers_shallow_layers() -> None:
    assert [layer_priority(x) for x in ("active", "situational", "event_log", "archive", None)] == [
        1.0,
        0.8,
        0.6,
        0.4,
        0.5,
    ]


def test_mention_penalty_drops_by_a_fifth_per_mention_down_to_a_floor() -> None:
    assert [mention_penalty(n) for n in range(6)] == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2, 0.2])
    assert mention_penalty(10) == 0.2


def test_diversity_is_one_minus_the_highest_similarity() -> None:
    assert diversity_score([]) == 1.0
    assert diversity_score([0.2, 0.9]) == pytest.approx(0.1)


def test_fusion_sums_reciprocal_ranks_across_paths() -> None:
    fused = fuse({"bm25": [PathHit(1, 5.0), PathHit(2, 3.0)], "vector": [PathHit(2, 0.9), PathHit(3, 0.8)]}, rrf_k=60)
    assert [f.key for f in fused] == [("memory", 2), ("memory", 1), ("memory", 3)]
    assert fused[0].rrf == pytest.approx(1 / 62 + 1 / 61)
    assert fused[0].ranks == {"bm25": 2, "vector": 1}
    assert fused[0].scores == {"bm25": 3.0, "vector": 0.9}
    assert len(fuse({"bm25": [PathHit(i, 1.0) for i in range(10)]}, limit=4)) == 4


def test_an_extra_path_can_bring_its_own_items() -> None:
    entry = Candidate(kind="worldbook", id="wb-7", content="龙族不能进入人类城市")
    fused = fuse({"bm25": [PathHit(1, 2.0)], "worldbook": [PathHit("wb-7", 1.0, kind="worldbook", item=entry)]})
    assert {f.key for f in fused} == {("memory", 1), ("worldbook", "wb-7")}
    assert next(f for f in fused if f.key[0] == "worldbook").item is entry


def test_candidates_repeating_what_the_character_just_said_are_dropped() -> None:
    said = Candidate("memory", 1, "我们昨天一起去了海边看日落")
    other = Candidate("memory", 2, "我最喜欢吃鱼干")
    kept, dropped = drop_said_recently([said, other], ["我们昨天一起去了海边看日落！"], threshold=0.8)
    assert kept == [other]
    assert dropped[0]["id"] == 1 and dropped[0]["reason"] == "said_recently"


def _candidate(id: int, vector: list[float], **fields: object) -> Candidate:
    return Candidate("memory", id, fields.pop("content", f"memory {id}"), embedding=np.array(vector), **fields)  # type: ignore[arg-type]


def _score(candidates: list[Candidate], query: list[float], turn: int = 0, **config: object):  # type: ignore[no-untyped-def]
    fused = {f.key: f for f in fuse({"vector": [PathHit(c.id, 1.0) for c in candidates]})}
    return score_candidates(candidates, fused, MatchText.of("x"), np.array(query), turn, RetrievalConfig(**config))  # type: ignore[arg-type]


def test_score_is_the_weighted_sum_of_the_factors() -> None:
    weights = ScoringWeights(0.4, 0.2, 0.2, 0.1, 0.1)
    candidate = _candidate(1, [1.0, 0.0], importance=0.7, layer="situational", turn=90)
    items, _ = select(_score([candidate], [1.0, 0.0], turn=100), weights, Scene.CASUAL, k=1)
    b = items[0].breakdown
    expected = 0.4 * (0.4 * 1.0) + 0.2 * math.exp(-0.1) + 0.2 * 0.7 + 0.1 * 1.0 + 0.1 * 0.8
    assert items[0].score == pytest.approx(expected)
    assert b.vector == pytest.approx(1.0) and b.keyword == 0.0 and b.diversity == 1.0
    assert sum(b.weighted.values()) == pytest.approx(expected)
    assert b.paths == {"vector": 1} and b.scene == "casual"


def test_a_near_duplicate_of_a_selected_memory_loses_to_a_different_one() -> None:
    weights = ScoringWeights(0.4, 0.0, 0.0, 0.6, 0.0)
    first = _candidate(1, [1.0, 0.0, 0.0], content="a")
    twin = _candidate(2, [0.99, 0.14, 0.0], content="b")
    other = _candidate(3, [0.6, 0.0, 0.8], content="c")
    items, _ = select(_score([first, twin, other], [1.0, 0.0, 0.0]), weights, Scene.CASUAL, k=3)
    assert [i.id for i in items] == [1, 3, 2]
    assert items[2].breakdown.diversity < items[1].breakdown.diversity


def test_mentioned_memories_are_penalised() -> None:
    weights = ScoringWeights(1.0, 0.0, 0.0, 0.0, 0.0)
    fresh = _candidate(1, [0.9, 0.436], content="a")
    mentioned = _candidate(2, [1.0, 0.0], content="b", mention_count=2)
    items, _ = select(_score([fresh, mentioned], [1.0, 0.0]), weights, Scene.CASUAL, k=2)
    assert [i.id for i in items] == [1, 2]
    assert items[1].breakdown.mention_penalty == pytest.approx(0.6)
    assert items[1].score == pytest.approx(0.4 * 0.6)


def test_text_duplicates_are_selected_once() -> None:
    weights = ScoringWeights(1.0, 0.0, 0.0, 0.0, 0.0)
    a = _candidate(1, [1.0, 0.0], content="我们昨天一起去了海边")
    b = _candidate(2, [0.99, 0.1], content="我们昨天一起去了海边。")
    items, skipped = select(_score([a, b], [1.0, 0.0]), weights, Scene.CASUAL, k=2)
    assert [i.id for i in items] == [1]
    assert skipped == [{"kind": "memory", "id": 2, "reason": "duplicate_of", "of": 1}]


def test_vector_only_candidates_unrelated_to_the_query_are_filtered() -> None:
    related = _candidate(1, [1.0, 0.0])
    unrelated = _candidate(2, [0.0, 1.0])
    kept, dropped = drop_irrelevant(_score([related, unrelated], [1.0, 0.0]), min_relevance=0.05)
    assert [s.candidate.id for s in kept] == [1]
    assert dropped[0]["id"] == 2 and dropped[0]["reason"] == "irrelevant"


def test_keyword_part_of_relevance_uses_bm25_normalised_by_the_best() -> None:
    a, b = Candidate("memory", 1, "a", keywords=("种植",)), Candidate("memory", 2, "b")
    fused = {f.key: f for f in fuse({"bm25": [PathHit(1, 4.0), PathHit(2, 1.0)]})}
    query = MatchText.of("种植")
    scored = score_candidates([a, b], fused, query, None, 0, RetrievalConfig())
    assert [s.keyword for s in scored] == [1.0, 0.25]
    seed = score_candidates([a, b], fused, query, None, 0, RetrievalConfig(keyword_mode="seed"))
    assert [s.keyword for s in seed] == [1.0, 0.0]
    with pytest.raises(ValueError, match="keyword mode 'magic'"):
        score_candidates([a], fused, query, None, 0, RetrievalConfig(keyword_mode="magic"))


def test_expansion_takes_the_best_matchs_telling_words_the_query_lacks() -> None:
    document = "jon mentor business mentor dude inspir dance studio the".split()
    weight = {"mentor": 2.0, "business": 3.0, "dude": 1.0, "inspir": 1.5, "dance": 1.0, "studio": 4.0, "jon": 0.5}
    # the query's words never come back; a word twice in the document counts twice; a word with no weight never
    assert expansion_terms(document, ["jon", "dance"], weight, 3) == ["mentor", "studio", "business"]
    assert expansion_terms(document, ["jon"], weight, 0) == [] and expansion_terms([], ["jon"], weight, 5) == []
    assert "the" not in expansion_terms(document, [], weight, 20)
    assert RetrievalConfig().expansion_terms == 0 and RetrievalConfig.for_recall().expansion_terms == 5


def test_the_best_vector_hit_stands_out_by_its_spread_not_by_an_encoders_scale() -> None:
    """Issue 26's feedback test: one encoder's cosines spread over .1–.6, another's over .84–.89; the best hit
    stands out when it is 3 standard deviations above the hits' mean, on either scale."""
    use_like = [0.62, 0.21, 0.2, 0.19, 0.18, 0.18, 0.17, 0.16, 0.15, 0.15, 0.14, 0.14]
    assert stands_out(use_like, 3.0)
    assert stands_out([0.84 + 0.1 * (c - 0.15) for c in use_like], 3.0)  # the same spread on e5's scale
    assert not stands_out([0.31, 0.3, 0.29, 0.29, 0.28, 0.28, 0.27, 0.26], 3.0)  # a best hit like the rest
    assert not stands_out([0.9, 0.1, 0.1, 0.1], 3.0)  # too few hits to tell a spread
    assert not stands_out([0.5] * 10, 3.0) and not stands_out(use_like, 0.0)  # no spread; the feedback off
    assert RetrievalConfig().feedback_terms > 0 and RetrievalConfig.for_recall().feedback_terms == 0


def test_a_question_asking_when_is_told_from_other_questions() -> None:
    assert asks_when("When did Caroline go to the support group?") and asks_when("what year did Jon start dancing?")
    assert asks_when("你什么时候去的水库？") and asks_when("我们是哪一天走散的？")
    assert not asks_when("What did Caroline research?") and not asks_when("我最害怕的是什么？")
    assert not asks_when("Whenever you like.")


def test_a_memory_that_says_when_names_a_time_in_its_own_line() -> None:
    assert says_when("Jon: I got mentored by this amazing business dude yesterday!")
    assert says_when("林澈：上个月我们搬到了旧水塔旁边") and says_when("雷娜：1998年的冬天")
    assert not says_when("[8 May, 2023] Caroline: I love painting sunsets.")  # when it was said, not what it tells
    assert not says_when("Jon: We met yesterday.\nGina: I love dancing.")  # the line before is only its context
    assert not says_when("Gina: Mayonnaise is great.")


def test_recall_favours_memories_that_say_when_for_a_when_question() -> None:
    told = Candidate("memory", 1, "Jon: I got mentored last week.")
    other = Candidate("memory", 2, "Jon: Mentoring is great.")
    fused = {f.key: f for f in fuse({"bm25": [PathHit(1, 1.0), PathHit(2, 1.0)]})}
    config = RetrievalConfig.for_recall()
    when = score_candidates([told, other], fused, MatchText.of("When was Jon mentored?"), None, 0, config)
    assert when[0].relevance == pytest.approx(when[1].relevance + 0.1)
    what = score_candidates([told, other], fused, MatchText.of("Who mentored Jon?"), None, 0, config)
    assert what[0].relevance == what[1].relevance
    daily = score_candidates([told, other], fused, MatchText.of("When was Jon mentored?"), None, 0, RetrievalConfig())
    assert daily[0].relevance == daily[1].relevance  # a turn's retrieval does not boost


def test_near_duplicate_checks_compare_words_not_the_searched_characters() -> None:
    first, second = (
        Candidate("memory", 1, "据点的第1条传闻：风沙很大"),
        Candidate("memory", 2, "据点的第2条传闻：风沙很大"),
    )
    assert similarity_tokens(["据点", "据", "点", "fox", "x"]) == {"据点", "fox", "x"}
    kept, dropped = drop_said_recently([first, second], ["据点的第1条传闻：风沙很大"])
    assert [c.id for c in kept] == [2] and dropped[0]["id"] == 1


def test_kept_similarity_tokens_share_one_copy_of_each_word() -> None:
    """Issue 29 (a long process's memory): the similarity tokens kept per stored text hold one copy of a word that
    many texts have, not one per text."""
    # built at run time: equal strings that are not one object, as read from the store
    first = stored_similarity_tokens(" ".join(["".join(["黑", "市"]), "地图", "第1轮"]))
    second = stored_similarity_tokens(" ".join(["".join(["黑", "市"]), "水塔", "第2轮"]))
    (shared,) = first & second
    assert shared == "黑市"
    assert next(t for t in first if t == "黑市") is next(t for t in second if t == "黑市")


def test_cosines_to_many_vectors_match_one_at_a_time() -> None:
    rng = np.random.default_rng(4)
    query = rng.normal(size=16).astype(np.float32)
    vectors = [rng.normal(size=16).astype(np.float32) for _ in range(20)]
    vectors += [None, np.zeros(16, dtype=np.float32), np.ones(8, dtype=np.float32), -query]
    got = cosines_to(query, vectors)
    assert got == pytest.approx([cosine(query, v) if v is not None else 0.0 for v in vectors], abs=1e-6)
    assert got[-1] == pytest.approx(-1.0) and got[-4:-1] == [0.0, 0.0, 0.0]
    assert cosines_to(np.zeros(16), vectors) == [0.0] * len(vectors)


def test_a_breakdown_as_plain_data_is_what_asdict_gives_and_owns_its_dicts() -> None:
    from dataclasses import asdict

    from personalab.nodes.rules.retrieval import Breakdown

    breakdown = Breakdown("daily", 0.5, 0.4, 0.6, 0.9, 0.5, 1.0, 0.8, 1.0, {"recency": 0.2}, {"bm25": 1}, 0.7)
    plain = breakdown.to_dict()
    assert plain == asdict(breakdown)
    plain["weighted"]["recency"] = 9.0
    assert breakdown.weighted == {"recency": 0.2}


def _issue_29_pool(power: float):  # type: ignore[no-untyped-def]
    """Issue 29's example: 13 memories; one shares the query's rare word (keyword 1.0, relevance .74) but is old,
    unimportant and archived; twelve are unrelated (relevance .05–.2) but recent, important and active."""
    strong = Candidate(
        "memory", 1, "那道红烧狮子头", embedding=np.array([0.35, math.sqrt(1 - 0.35**2)]),
        importance=0.2, layer="archive", turn=0,
    )  # fmt: skip
    weak = []
    for n in range(12):
        vector = 0.125 + 0.375 * n / 11  # relevance 0.4 · vector: .05 … .2
        angle = [vector, math.sqrt(1 - vector**2)]
        weak.append(
            Candidate(
                "memory", 2 + n, f"无关的事 {n}", embedding=np.array(angle), importance=1.0, layer="active", turn=200
            )
        )
    candidates = [strong, *weak]
    fused = {f.key: f for f in fuse({"bm25": [PathHit(1, 5.0)], "vector": [PathHit(c.id, 1.0) for c in candidates]})}
    config = RetrievalConfig(character_evidence=1.0)  # the issue's example: the seed's 0.6 / 0.4 blend
    scored = score_candidates(candidates, fused, MatchText.of("狮子头"), np.array([1.0, 0.0]), 200, config)
    return select(scored, SCENE_WEIGHTS[Scene.CASUAL], Scene.CASUAL, k=10, gate_power=power, gate_floor=GATE_FLOOR)[0]


def test_relevance_gates_the_other_factors_so_a_strong_match_comes_first() -> None:
    gated = _issue_29_pool(GATED_POWER)
    assert gated[0].id == 1
    top = gated[0].breakdown
    assert top.keyword == 1.0 and top.context_relevance == pytest.approx(0.74)
    assert all(0.05 - 1e-9 <= item.breakdown.context_relevance <= 0.2 + 1e-9 for item in gated[1:])
    # the shares still add up to the score, each but relevance's gated
    assert all(i.score == pytest.approx(sum(i.breakdown.weighted.values())) for i in gated)
    # the seed's plain sum (gate off): recency, importance and layer let an unrelated memory come first
    assert _issue_29_pool(0.0)[0].id != 1
    # a turn's retrieval and `memory search` (the default config) gate; recall keeps relevance alone and the seed's blend
    assert _issue_29_pool(RetrievalConfig().relevance_gate)[0].id == 1
    assert RetrievalConfig.for_recall().character_evidence == 1.0 and RetrievalConfig.for_recall().relevance_gate == 0


def _character_pool(**config: object) -> dict[int, float]:
    """A short Chinese question (words 几天, 地方) and three memories: one sharing only common characters (她, 天)
    but the best BM25 score, the answer sharing only 她 and closer in meaning, one sharing the word 地方."""
    unit = lambda c: np.array([c, math.sqrt(1 - c**2)])  # noqa: E731 (a cosine to [1, 0])
    candidates = [
        Candidate("memory", 1, "她说那天的晚饭很好吃。", embedding=unit(0.2)),
        Candidate("memory", 2, "暴雨那周她借宿在教堂的阁楼上。", embedding=unit(0.35)),
        Candidate("memory", 3, "她在地方志里读到过这座城。", embedding=unit(0.1)),
    ]
    bm25 = [PathHit(1, 5.0), PathHit(3, 4.0), PathHit(2, 2.0)]
    fused = {f.key: f for f in fuse({"bm25": bm25, "vector": [PathHit(c.id, 1.0) for c in candidates]})}
    query = MatchText.of("她那几天住在什么地方？")
    scored = score_candidates(candidates, fused, query, np.array([1.0, 0.0]), 0, RetrievalConfig(**config))  # type: ignore[arg-type]
    return {int(s.candidate.id): s.relevance for s in scored}


def test_single_shared_characters_weigh_less_than_the_cosine_in_a_chinese_question() -> None:
    seed = _character_pool(character_evidence=1.0)
    issue_29 = _character_pool(character_evidence=CHARACTER_EVIDENCE)
    # the seed's 0.6 / 0.4 blend: the memory sharing the most common characters is the best match
    assert seed[1] == pytest.approx(0.6 * 1.0 + 0.4 * 0.2) and seed[1] > seed[2]
    # characters only: a quarter of the keyword weight, the rest to the cosine, so meaning decides
    assert issue_29[1] == pytest.approx(0.15 * 1.0 + 0.85 * 0.2)
    assert issue_29[2] == pytest.approx(0.15 * 0.4 + 0.85 * 0.35) and issue_29[2] > issue_29[1]
    # a memory sharing a word of the question keeps the seed's blend
    assert issue_29[3] == seed[3] == pytest.approx(0.6 * 0.8 + 0.4 * 0.1)
    # English questions have no characters added to their tokens: unchanged
    english = [Candidate("memory", 1, "the bell tower", embedding=np.array([0.5, math.sqrt(0.75)]))]
    fused = {f.key: f for f in fuse({"bm25": [PathHit(1, 3.0)]})}
    for config in (RetrievalConfig(character_evidence=1.0), RetrievalConfig(character_evidence=CHARACTER_EVIDENCE)):
        scored = score_candidates(english, fused, MatchText.of("where is the tower?"), np.array([1.0, 0.0]), 0, config)
        assert scored[0].relevance == pytest.approx(0.6 + 0.4 * 0.5)


def test_candidates_of_comparable_relevance_are_still_ordered_by_the_scene_weights() -> None:
    old = _candidate(1, [1.0, 0.0], importance=0.5, turn=0)
    recent = _candidate(2, [1.0, 0.0], importance=0.5, turn=100, content="another")
    items, _ = select(
        _score([old, recent], [1.0, 0.0], turn=100), SCENE_WEIGHTS[Scene.CASUAL], Scene.CASUAL, k=2, gate_power=2.0
    )
    assert [i.id for i in items] == [2, 1]
    assert list(relevance_gate([0.74, 0.37, 0.0], 2.0)) == pytest.approx([1.0, 0.25, 0.0])
    assert list(relevance_gate([0.0, 0.0], 2.0)) == [1.0, 1.0] and list(relevance_gate([0.5, 0.1], 0.0)) == [1.0, 1.0]


def _two_memory_pool(config: RetrievalConfig) -> list[int]:
    """Issue 29's small pool, as `memory search` meets it in a new instance: two memories, one sharing the query's
    word 怀表 (older, less important), one unrelated (recent, important, a little less close in meaning). BM25 gives
    the shared word nothing: in two documents a word found in one has IDF log(1.5 / 1.5) = 0 (rank_bm25's Okapi)."""
    unit = lambda c: np.array([c, math.sqrt(1 - c**2)])  # noqa: E731 (a cosine to [1, 0])
    related = Candidate("memory", 1, "莱姆把怀表埋在老橡树下", embedding=unit(0.5), importance=0.3, turn=0)
    unrelated = Candidate("memory", 2, "车队明天出发", embedding=unit(0.3), importance=0.8, turn=10)
    paths = {"bm25": [PathHit(1, 0.0)], "vector": [PathHit(1, 0.5), PathHit(2, 0.3)]}
    fused = {f.key: f for f in fuse(paths)}
    query = MatchText.of("怀表在哪里？")
    scored = score_candidates([related, unrelated], fused, query, np.array([1.0, 0.0]), 10, config)
    items, _ = select(
        scored,
        SCENE_WEIGHTS[Scene.CASUAL],
        Scene.CASUAL,
        2,
        gate_power=config.relevance_gate,
        gate_floor=config.gate_floor,
    )
    return [int(item.id) for item in items]


def test_in_a_two_memory_pool_the_memory_sharing_the_querys_word_comes_first() -> None:
    # a turn's and `memory search`'s ranking (the default config)
    assert _two_memory_pool(RetrievalConfig()) == [1, 2]
    # the seed's plain sum: recency and importance put the unrelated memory first
    assert _two_memory_pool(RetrievalConfig(relevance_gate=0.0, character_evidence=1.0)) == [2, 1]
    # why the gate failed here before (CI, 2026-11-27): the memory sharing no word had its keyword weight moved to its
    # cosine (.85 × .3 = .255) while the one sharing the word kept the seed's blend with a keyword score of 0
    # (.4 × .5 = .2), so the unrelated memory was the pool's best match; now sharing a word is never weaker evidence
    # than sharing characters: .85 × .5 = .425
    scored = score_candidates(
        [Candidate("memory", 1, "莱姆把怀表埋在老橡树下", embedding=np.array([0.5, math.sqrt(0.75)]))],
        {f.key: f for f in fuse({"bm25": [PathHit(1, 0.0)]})},
        MatchText.of("怀表在哪里？"),
        np.array([1.0, 0.0]),
        0,
        RetrievalConfig(),
    )
    assert scored[0].keyword == 0.0 and scored[0].relevance == pytest.approx(0.85 * 0.5)


def test_in_a_pool_with_no_strong_match_the_scene_weights_still_order_the_memories() -> None:
    """The gate's floor: when the best relevance is under GATE_FLOOR nothing in the pool answers the query, and
    a small difference of cosine between unrelated memories does not silence recency and importance (the seed's
    order); a strong match still gates them fully."""
    unit = lambda c: np.array([c, math.sqrt(1 - c**2)])  # noqa: E731
    older = _candidate(1, list(unit(0.3)), importance=0.3, turn=0)
    recent = _candidate(2, list(unit(0.2)), importance=0.8, turn=50, content="another")
    scored = _score([older, recent], [1.0, 0.0], turn=50)  # relevance .12 and .08: noise
    weights = SCENE_WEIGHTS[Scene.CASUAL]
    floored, _ = select(scored, weights, Scene.CASUAL, k=2, gate_power=GATED_POWER, gate_floor=GATE_FLOOR)
    plain, _ = select(scored, weights, Scene.CASUAL, k=2)
    naive, _ = select(scored, weights, Scene.CASUAL, k=2, gate_power=GATED_POWER)  # relative to the pool's best
    assert [i.id for i in floored] == [i.id for i in plain] == [2, 1]
    assert [i.id for i in naive] == [1, 2]
    # the floor measures the shortfall on the absolute scale below it, and is the relative gate above it
    assert list(relevance_gate([0.12, 0.08], 2.0, 0.4)) == pytest.approx([1.0, 0.9**2])
    assert list(relevance_gate([0.74, 0.37, 0.0], 2.0, 0.4)) == pytest.approx([1.0, 0.25, 0.0])
