"""The keyword index is changed one memory at a time (`stores.memory_index.BM25Index`, `MemoryIndex.apply`) and must
rank exactly as a fresh build over the same memories, and as rank_bm25's `BM25Okapi` (the semantics it keeps)."""

from __future__ import annotations

import random

import pytest
from personalab.nodes.rules.keywords import MatchText, tokenize
from personalab.stores.memory_index import BM25Index, IndexedMemory, MemoryIndex, search_text
from rank_bm25 import BM25Okapi

# role-play lines of the kind the engine stores (memories and dialogue record), tokenised by jieba as the store does
LINES = [
    "雷娜在废弃加油站找到了一箱弹药，心里很不安。",
    "我妹妹今年十二岁，住在北边的净水厂旁边。",
    "莱姆把金色怀表藏在了旧仓库的地板下。",
    "白小喵说她最喜欢吃鱼干，尤其是海边晒的那种。",
    "老陈答应下周三帮我们修好发电机零件。",
    "商队首领在黑市用净水片交换了旧地图。",
    "我们约好日落的时候在铁轨桥下见面。",
    "雷娜发誓永远不背叛莱姆，哪怕帮派据点的人来找她。",
    "酒馆老板偷偷告诉我，叛徒的名单在无线电旁边的抽屉里。",
    "小女孩弄丢了一把钥匙，哭了很久。",
    "神秘旅人说辐射区边缘有一座没人去过的图书馆。",
    "我平时最喜欢听爵士乐，尤其是下雨天。",
    "巡逻兵在旧城区的地下通道里发现了脚印。",
    "雷娜觉得有人在跟踪，决定以后小心点。",
    "John said the water plant in the north is safe again.",
    "我们在帮派据点外面等了整整一夜，雷娜一直没说话。",
    "莱姆的生日是三月十二号，他想要一把新的猎枪。",
    "白小喵把罐头分给了雷娜和小女孩。",
]
QUERIES = [
    "雷娜找到了什么？",
    "金色怀表藏在哪里",
    "鱼干",
    "谁答应修发电机？",
    "water plant",
    "雷娜 雷娜 莱姆",
    "图书馆在哪",
]
TAGS = ["弹药", "家人", "怀表", "约定", "雷娜", "Water Plant"]


def random_memory(rng: random.Random, memory_id: int) -> IndexedMemory:
    """A memory of one to three lines, sometimes with the line before it as context, sometimes tagged; most
    mention 雷娜, so her name is in more than half of the memories (rank_bm25's negative-IDF floor is used)."""
    content = "".join(rng.sample(LINES, rng.randint(1, 3)))
    if rng.random() < 0.6:
        content = "雷娜：" + content
    tags = rng.sample(TAGS, rng.randint(0, 2))
    context = rng.choice(LINES) if rng.random() < 0.3 else ""
    return IndexedMemory(memory_id, search_text(content, tags, context), tuple(tags), rng.randint(0, 50))


def assert_same_scores(kept: BM25Index, rows: dict[int, IndexedMemory]) -> None:
    ids = sorted(rows)
    docs = [rows[i].search_text.split() for i in ids]
    fresh = BM25Index(ids, docs, k1=kept.k1, b=kept.b)
    reference = BM25Okapi(docs, k1=kept.k1, b=kept.b) if any(docs) else None
    assert len(kept) == len(fresh) == len(ids)
    for query in QUERIES:
        tokens = tokenize(query)
        got, want = kept.scores(tokens), fresh.scores(tokens)
        assert got.keys() == want.keys()
        for memory_id, score in want.items():
            assert got[memory_id] == pytest.approx(score, rel=1e-9, abs=1e-12)
        if reference is not None:
            for memory_id, score in zip(ids, reference.get_scores(tokens), strict=True):
                assert got.get(memory_id, 0.0) == pytest.approx(score, rel=1e-9, abs=1e-12)
        assert [i for i, _ in kept.top(tokens, 7)] == [i for i, _ in fresh.top(tokens, 7)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_adds_updates_and_deletes_in_any_order_score_as_a_fresh_build(seed: int) -> None:
    rng = random.Random(seed)
    rows: dict[int, IndexedMemory] = {}
    kept = BM25Index(k1=1.2, b=0.75) if seed == 3 else BM25Index()
    next_id = 1
    for step in range(300):
        action = rng.random()
        if action < 0.5 or len(rows) < 3:
            row = random_memory(rng, next_id)
            next_id += 1
        elif action < 0.75:  # an edit: new text for a memory already indexed
            row = random_memory(rng, rng.choice(list(rows)))
        else:
            gone = rng.choice(list(rows))
            del rows[gone]
            kept.remove(gone)
            kept.remove(gone)  # removing twice changes nothing
            continue
        rows[row.id] = row
        kept.add(row.id, row.search_text.split())
        if step % 20 == 19:
            assert_same_scores(kept, rows)
    assert_same_scores(kept, rows)
    for memory_id in list(rows):  # emptied, then filled again: the freed slots are reused
        kept.remove(memory_id)
    assert len(kept) == 0 and kept.top(tokenize("雷娜"), 5) == []
    rows = {i: random_memory(rng, i) for i in range(1000, 1030)}
    for row in rows.values():
        kept.add(row.id, row.search_text.split())
    assert_same_scores(kept, rows)


def test_an_index_changed_memory_by_memory_equals_one_built_from_the_same_memories() -> None:
    """Keyword, tag and turn parts of `MemoryIndex` after random `apply`s, against one built from scratch."""
    rng = random.Random(9)
    rows = {i: random_memory(rng, i) for i in range(1, 60)}
    kept = MemoryIndex(1, 0, 1, list(rows.values()))
    for revision in range(2, 40):
        changed = [random_memory(rng, rng.choice(list(rows))) for _ in range(rng.randint(0, 3))]
        changed += [random_memory(rng, max(rows) + 1 + n) for n in range(rng.randint(0, 3))]
        removed = rng.sample(sorted(rows), rng.randint(0, 2))
        for memory_id in removed:
            del rows[memory_id]
        changed = [row for row in changed if row.id not in removed]
        rows.update({row.id: row for row in changed})
        kept.apply(changed, removed, revision)
        kept.apply(changed, removed, revision)  # applied twice (a write and a search that read it): no change
        fresh = MemoryIndex(1, 0, revision, [rows[i] for i in sorted(rows)])
        assert kept.revision == revision and len(kept) == len(fresh) == len(rows)
        assert kept.latest_turn == fresh.latest_turn == max(row.turn for row in rows.values())
        for query in QUERIES:
            tokens = tokenize(query)
            got, want = kept.bm25_search(tokens, 10), fresh.bm25_search(tokens, 10)
            assert [i for i, _ in got] == [i for i, _ in want]
            assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-9)
            context = MatchText.of(query + "，雷娜的弹药和water plant")
            assert kept.tag_search(context, ["约定"], 60) == fresh.tag_search(context, ["约定"], 60)
    assert kept.differences([rows[i] for i in sorted(rows)]) == ([], [])
    newer = random_memory(rng, 5000)
    assert kept.differences([*rows.values(), newer]) == ([newer], [])


def test_a_write_into_a_loaded_index_grows_its_postings_by_an_eighth_not_double() -> None:
    """Issue 26: postings are built exactly full; the first write after a load made every posting of its tokens
    twice as big (~8 MiB kept per 10,000-memory instance). They now grow by an eighth, and score the same."""
    docs = [["水", "信", f"词{n}"] for n in range(1_000)]
    index = BM25Index(list(range(1_000)), docs)
    index.add(5_000, ["水", "信", "新"])
    assert index.postings["水"].n == 1_001
    assert len(index.postings["水"].slots) == 1_000 + 125 and len(index.postings["水"].tf) == 1_000 + 125
    for n in range(5_001, 5_200):  # amortised: a later write reuses the room until it is used up
        index.add(n, ["水"])
    assert index.postings["水"].n == 1_200 and len(index.postings["水"].slots) == 1_125 + 140
    fresh = BM25Index([*range(1_000), 5_000, *range(5_001, 5_200)], [*docs, ["水", "信", "新"], *[["水"]] * 199])
    assert fresh.postings["水"].n == index.postings["水"].n
    grown, built = index.score_array(["水", "新"]), fresh.score_array(["水", "新"])
    pairs = [sorted(zip(ids.tolist(), scores.tolist(), strict=True)) for ids, scores in (grown, built)]
    assert pairs[0] == pairs[1]


def test_the_vector_cache_keeps_a_digest_of_the_text_and_a_changed_text_is_a_miss() -> None:
    """Issue 26's memory growth: the cache keeps 16 bytes for the text, not the text, and still never returns the
    vector of a memory's old text."""
    import sys

    import numpy as np
    from personalab.stores.memory_index import VectorCache

    cache = VectorCache(4)
    place = ("/data/chroma", "".join(["save_7", "_char_1"]))  # a new string object each time, as the store makes it
    cache.keep(place, 1, LINES[0], [0.5, 0.25])
    assert np.array_equal(cache.vector((*place, 1), LINES[0]), np.array([0.5, 0.25], dtype=np.float32))
    assert cache.vector((*place, 1), LINES[0] + "（改）") is None  # the memory's text changed since
    [(key, (digest, vector))] = cache.items()
    assert isinstance(digest, bytes) and len(digest) == 16 and vector.dtype == np.float32
    assert key[1] is sys.intern("save_7_char_1")  # one string per place, shared by its entries
    found, missing = cache.split(place, [1, 2], {1: LINES[0], 2: LINES[1]})
    assert list(found) == [1] and missing == [2]
