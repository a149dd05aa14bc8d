"""The embedding configuration: the offline model as a langchain `Embeddings`, and NumPy's BLAS threads."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from personalab.nodes.rules.errors import ConfigError
from personalab.stores.embeddings import (
    OfflineUSEEmbeddings,
    embed_queries_once,
    embed_query_once,
    get_embeddings,
)

ROOT = Path(__file__).resolve().parents[1]
# threads of a fresh process after a matrix product big enough for OpenBLAS to use its worker threads
COUNT_THREADS = (
    "import {module}, os, numpy as np; a = np.ones((400, 400), np.float32); a @ a; "
    "print(len(os.listdir('/proc/self/task')))"
)


def threads_after_import(module: str, **env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "PERSONALAB_BLAS_THREADS")}
    done = subprocess.run(
        [sys.executable, "-c", COUNT_THREADS.format(module=module)],
        cwd=ROOT, env={**clean, **env}, capture_output=True, text=True, check=True, timeout=120,
    )
    return int(done.stdout.strip())


@pytest.mark.skipif(not Path("/proc/self/task").exists() or (os.cpu_count() or 1) < 2, reason="counts Linux threads")
@pytest.mark.parametrize("module", ["personalab.graph.graph", "personalab.nodes.rules.retrieval", "personalab.stores.memory", "personalab.evals.bench_turn"])
def test_numpy_runs_one_blas_thread_in_every_entry_point(module: str) -> None:
    """Whichever package a process imports first, OpenBLAS starts with one thread (no spinning worker)."""
    one = threads_after_import(module)
    assert threads_after_import(module, PERSONALAB_BLAS_THREADS="2") == one + 1
    assert threads_after_import(module, OPENBLAS_NUM_THREADS="2") == one + 1  # the user's own setting wins


@pytest.fixture
def fresh_embeddings() -> Iterator[None]:
    get_embeddings.cache_clear()
    yield
    get_embeddings.cache_clear()


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_bad_blas_thread_count_names_the_variable(
    fresh_embeddings: None, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("PERSONALAB_BLAS_THREADS", value)
    with pytest.raises(ValueError, match=f"PERSONALAB_BLAS_THREADS='{value}'"):
        get_embeddings()


def test_openai_embeddings_need_a_key_and_take_the_configured_endpoint(
    fresh_embeddings: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_EMBEDDINGS", "openai")
    with pytest.raises(ConfigError, match="^PERSONALAB_EMBEDDINGS=openai but OPENAI_API_KEY is not set$"):
        get_embeddings()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("PERSONALAB_EMBEDDING_MODEL", "bge-m3")
    embeddings = get_embeddings()
    assert (getattr(embeddings, "model", None), getattr(embeddings, "openai_api_base", None)) == (
        "bge-m3",
        "http://127.0.0.1:9/v1",
    )


def test_the_offline_model_embeds_chinese_queries_as_unit_vectors() -> None:
    embeddings = get_embeddings()
    assert isinstance(embeddings, OfflineUSEEmbeddings)
    query, same, other = (np.asarray(embeddings.embed_query(t)) for t in ["净水厂在哪里？", "净水厂在哪儿", "我饿了"])
    assert query.shape == (512,) and np.linalg.norm(query) == pytest.approx(1.0, abs=1e-3)
    assert float(query @ same) > float(query @ other)


def test_a_turns_stored_texts_are_embedded_while_its_rows_are_written() -> None:
    """Issue 29: the vectors of a turn's new memories start as its rows are written, so the next retrieval takes
    them (or waits for that one call) instead of computing them itself."""
    from personalab.stores import embeddings

    texts = ["后台预先计算的向量：灯塔的钥匙在码头。", "后台预先计算的向量：风暴那天船没有回来。"]
    embeddings.embed_stored_texts_soon(texts)
    embeddings._ahead.submit(lambda: None).result(timeout=60)  # the one background worker is done with them
    kept = [embeddings._stored.get(text) for text in texts]
    assert all(vector is not None for vector in kept)
    # and they are the vectors a caller gets: the model's, not computed again
    assert all(a is b for a, b in zip(kept, embeddings.embed_stored_texts(texts), strict=True))
    assert np.allclose(kept, get_embeddings().embed_documents(texts), atol=1e-4)


def test_a_turns_two_queries_are_embedded_in_one_batch_and_kept_like_one() -> None:
    """Issue 26: a retrieval whose query is a rewrite embeds the user's own words too; both in one call of the model,
    the same vectors as one at a time, kept for the turn's later searches."""
    model = OfflineUSEEmbeddings()
    calls: list[list[str]] = []
    batch = model.embed_documents

    def counted(texts: list[str]) -> list[list[float]]:
        calls.append(list(texts))
        return batch(texts)

    model.embed_documents = counted  # type: ignore[method-assign]
    texts = ["万一我们失散了（上下文：天色暗下来了）", "万一我们失散了，你会去哪儿等我？"]
    together = embed_queries_once(texts, model)
    assert calls == [texts]
    assert [embed_query_once(text, model) for text in texts][0] is together[0] and calls == [texts]  # kept
    alone = OfflineUSEEmbeddings().embed_query(texts[1])
    assert np.allclose(together[1], alone, atol=1e-5)
