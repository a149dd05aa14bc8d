"""Chroma collections through langchain-chroma.

Embedded persistent client in `<data dir>/chroma` by default; an HTTP client to a Chroma server when
`PERSONALAB_CHROMA_HOST` (and optionally `PERSONALAB_CHROMA_PORT`) is set. One client per path per
process (Chroma refuses two clients with different settings on one path), telemetry off, and always an
explicit embedding function (Chroma's default one downloads a model).
"""

from __future__ import annotations

import logging
import threading
from functools import lru_cache
from typing import Any

import chromadb
from chromadb.config import Settings as ChromaSettings
from langchain_chroma import Chroma
from personalab.nodes.rules.errors import StoreUnavailable
from personalab.stores.config import data_dir
from personalab.stores.embeddings import get_embeddings
from personalab.stores.settings import settings

log = logging.getLogger(__name__)

# Chroma persists a collection's vector index every `sync_threshold` writes (1,000 by default) and until then every
# write also pays for the writes not yet persisted: an upsert of two memories grew from 52 to 82 ms over a thousand
# writes, then fell back at the persist; at 100 it stayed at 11-17 ms, 16 ms on 100,000 vectors against 37 ms
# (issue 29, docs/benchmarks/2026-12-06-session14.md). A turn makes 2-4 such writes, off the reply's path, but the
# next turn waits for them and they hold the interpreter meanwhile.
SYNC_THRESHOLD = 100
COLLECTION_METADATA = {"hnsw:space": "cosine", "hnsw:sync_threshold": SYNC_THRESHOLD}

# lru_cache does not hold other threads back while it makes a missing entry: two threads asking at once would both
# make a client for one path (Chroma then fails) or both create one collection ("already exists"). One lock per
# entry, so a slow creation (a remote server) holds back only the threads asking for that same entry.
_making: dict[tuple[Any, ...], threading.Lock] = {}
_making_lock = threading.Lock()


def _one_maker(*key: Any) -> threading.Lock:
    with _making_lock:
        return _making.setdefault(key, threading.Lock())


@lru_cache(maxsize=8)
def _client(path: str | None, host: str | None, port: int) -> Any:
    options = ChromaSettings(anonymized_telemetry=False)
    if host:
        try:
            return chromadb.HttpClient(host=host, port=port, settings=options)
        except Exception as exc:  # noqa: BLE001 - the client connects on creation: a stopped server is one line
            raise chroma_unavailable(host, port, exc) from exc
    where = path or str(data_dir() / "chroma")
    try:
        return chromadb.PersistentClient(path=where, settings=options)
    except Exception as exc:
        # Chroma keeps the half-made system of a failed client per folder: forget it, so the next attempt (room on
        # the disk again) makes a new one instead of failing on the broken one ("could not connect to tenant")
        from chromadb.api.shared_system_client import SharedSystemClient

        SharedSystemClient._identifier_to_system.pop(where, None)  # noqa: SLF001 - no public way per folder
        unavailable = chroma_store_error(where, exc)
        if unavailable is None:
            raise
        raise unavailable from exc


EMBEDDED_UNAVAILABLE = {
    "disk is full": "cannot be written: the disk is full",
    "no space left": "cannot be written: the disk is full",
    "readonly database": "cannot be written: it is read-only",
    "read-only file system": "cannot be written: it is read-only",
    "permission denied": "cannot be opened: permission denied",
    "unable to open database": "cannot be opened",
}


def chroma_store_error(path: str, exc: BaseException) -> StoreUnavailable | None:
    """An embedded Chroma store that cannot be opened or written (a full disk, a read-only folder: issue 27) as
    one line naming the folder and why; None for any other error."""
    said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    what = next((why for text, why in EMBEDDED_UNAVAILABLE.items() if text in said.lower()), None)
    if what is None:
        return None
    return StoreUnavailable(f"the Chroma store {path} {what} ({said})")


def chroma_unavailable(host: str, port: int, exc: BaseException) -> StoreUnavailable:
    """A stopped or unreachable Chroma server as the project's one-line error naming the server (issue 27): the
    client raises a bare ValueError on creation and httpx errors on each call."""
    said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return StoreUnavailable(f"the Chroma server {host}:{port} cannot be reached ({said})")


def chroma_error(exc: BaseException) -> StoreUnavailable | None:
    """`chroma_unavailable` for an error of a call to the configured Chroma server that could not reach it (a
    connection refused, reset or timed out), None for anything else (embedded Chroma, a bad request)."""
    current = settings()
    if not current.chroma_host:
        return None
    import httpx

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, StoreUnavailable):
            return seen
        if isinstance(seen, httpx.TransportError) or "could not connect to a chroma server" in str(seen).lower():
            return chroma_unavailable(current.chroma_host, current.chroma_port, seen)
        seen = seen.__cause__ or seen.__context__
    return None


def chroma_path() -> str:
    """Where the embedded Chroma store of the current data directory lives."""
    return str(data_dir() / "chroma")


def chroma_client(path: str | None = None) -> Any:
    """The process's Chroma client for `path` (default `<data dir>/chroma`) or the configured server."""
    current = settings()
    host = current.chroma_host
    resolved = None if host else (path or chroma_path())
    with _one_maker("client", resolved, host, current.chroma_port):
        return _client(resolved, host, current.chroma_port)


def get_collection(name: str, path: str | None = None) -> Chroma:
    """A langchain `Chroma` vector store on collection `name`, cosine distance (one wrapper per store)."""
    host = settings().chroma_host
    store = None if host else (path or chroma_path())
    with _one_maker("collection", name, store, host):
        return _collection(name, store, host)


def _collection(name: str, path: str | None, host: str | None) -> Chroma:
    try:
        return _made_collection(name, path, host)
    except StoreUnavailable:
        raise
    except Exception as exc:
        unavailable = chroma_error(exc) if host else chroma_store_error(path or chroma_path(), exc)
        if unavailable is None:
            raise
        raise unavailable from exc


@lru_cache(maxsize=256)
def _made_collection(name: str, path: str | None, host: str | None) -> Chroma:
    store = Chroma(
        collection_name=name,
        embedding_function=get_embeddings(),
        client=chroma_client(path),  # host, when set, is read again by chroma_client
        collection_metadata=COLLECTION_METADATA,
    )
    tune_collection(store._collection)
    return store


def tune_collection(collection: Any) -> None:
    """Give a collection made before SYNC_THRESHOLD (or by another program) the threshold: once per process and
    collection (the caller caches it). A Chroma that refuses the change keeps its own: only slower writes."""
    try:
        hnsw = (collection.configuration_json or {}).get("hnsw") or {}
        if hnsw and hnsw.get("sync_threshold") != SYNC_THRESHOLD:
            collection.modify(configuration={"hnsw": {"sync_threshold": SYNC_THRESHOLD}})
    except Exception as exc:  # noqa: BLE001 - a tuning, never a reason to fail a write or a search
        log.debug("collection %s keeps its vector-index sync threshold: %s", getattr(collection, "name", "?"), exc)


def where(**equals: Any) -> dict[str, Any] | None:
    """A Chroma `where` filter of equalities; more than one key is wrapped in `$and` as Chroma requires."""
    clauses = [{key: value} for key, value in equals.items() if value is not None]
    if not clauses:
        return None
    if len(clauses) == 1:
        return clauses[0]
    return {"$and": clauses}
