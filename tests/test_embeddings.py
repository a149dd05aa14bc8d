"""The embedding configuration: the offline model as a langchain `Embeddings`, and NumPy's BLAS threads."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from stores.embeddings import OfflineUSEEmbeddings, get_embeddings, limit_blas_threads


def blas_thread_counts() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}


@pytest.fixture
def fresh_embeddings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process whose BLAS has more than one thread and whose embeddings are not configured yet."""
    get_embeddings.cache_clear()
    threadpool_limits(limits=2, user_api="blas")
    yield
    monkeypatch.undo()
    get_embeddings.cache_clear()
    limit_blas_threads()  # back to the default for the tests after


def test_blas_runs_on_one_thread_once_embeddings_are_configured(fresh_embeddings: None) -> None:
    get_embeddings()
    assert blas_thread_counts() == {1}


def test_the_blas_thread_count_can_be_raised(fresh_embeddings: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONALAB_BLAS_THREADS", "2")
    get_embeddings()
    assert blas_thread_counts() == {2}


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_bad_blas_thread_count_names_the_variable(
    fresh_embeddings: None, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("PERSONALAB_BLAS_THREADS", value)
    with pytest.raises(ValueError, match=f"PERSONALAB_BLAS_THREADS='{value}'"):
        get_embeddings()


def test_the_offline_model_embeds_chinese_queries_as_unit_vectors() -> None:
    embeddings = get_embeddings()
    assert isinstance(embeddings, OfflineUSEEmbeddings)
    query, same, other = (np.asarray(embeddings.embed_query(t)) for t in ["净水厂在哪里？", "净水厂在哪儿", "我饿了"])
    assert query.shape == (512,) and np.linalg.norm(query) == pytest.approx(1.0, abs=1e-3)
    assert float(query @ same) > float(query @ other)
