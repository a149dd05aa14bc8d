"""Archival memory of seed 002: one event per turn in Chroma, with instance / character / background / turn.

Writes go through a single background worker so the reply never waits for the embedding (seed 002:
事件写入异步执行，不阻塞响应); `flush_event_writes()` waits for them (CLI exit, tests, batch runs).
"""

from __future__ import annotations

import atexit
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from stores.vectors import chroma_path, get_collection, where

log = logging.getLogger(__name__)
COLLECTION = "events"
_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="event-writer")
_pending: list[Future[Any]] = []


def _write(text: str, metadata: dict[str, Any], event_id: str, path: str) -> None:
    get_collection(COLLECTION, path).add_texts([text], metadatas=[metadata], ids=[event_id])


def run_in_background(fn: Any, *args: Any, **kwargs: Any) -> Future[Any]:
    """Queue a store write on the single background worker; failures are logged, never raised into the turn."""
    future = _writer.submit(fn, *args, **kwargs)
    future.add_done_callback(_log_failure)
    _pending.append(future)
    return future


def write_event_async(
    text: str, *, instance_id: int, character_id: int | None, background_id: int | None, turn: int
) -> Future[None]:
    """Queue one event; failures are logged, never raised into the turn."""
    metadata = {
        "instance_id": instance_id,
        "character_id": character_id if character_id is not None else -1,
        "background_id": background_id if background_id is not None else -1,
        "turn": turn,
    }
    # the store is resolved now, not when the worker runs, so a queued write lands where the turn ran
    return run_in_background(_write, text, metadata, f"i{instance_id}-t{turn}", chroma_path())


def _log_failure(future: Future[Any]) -> None:
    if future.exception() is not None:
        log.error("background store write failed: %s", future.exception())


def flush_event_writes(timeout: float = 60.0) -> None:
    while _pending:
        future = _pending.pop(0)
        try:
            future.result(timeout=timeout)
        except Exception:  # noqa: BLE001 - already logged by the callback
            pass


atexit.register(flush_event_writes)


def search_events(query: str, k: int, **filters: Any) -> list[dict[str, Any]]:
    """The `k` events most similar to `query` matching `filters` (instance_id=…, character_id=…, …);
    a value `{"$ne": x}` is passed through as a Chroma operator."""
    if k <= 0:
        return []
    results = get_collection(COLLECTION).similarity_search_with_relevance_scores(query, k=k, filter=where(**filters))
    return [{"text": doc.page_content, "score": round(float(score), 4), **doc.metadata} for doc, score in results]
