"""The process's background work: one writer thread for store writes off the reply's path (seed 002 事件写入异步执行),
held back while the turn that queued them runs, and the capped search pool (seed 002 需求3: 1.5 s)."""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)
_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="event-writer")
_pending: list[Future[Any]] = []


# Turns running in this process: instance id → {part: mark}. The graph marks its part from taking the
# instance's turn lock to its last node, `run_turn` the whole run. Work a turn queues waits for the marks its
# instance had when it was queued, i.e. for the turn that queued it: embedding an event or rebuilding an index
# takes the interpreter from the turn's own nodes (one lock for all threads), and the reply is what the user
# waits for. A later turn (new marks) never holds it back, and it waits at most MAX_DEFER_S from when it was
# queued (a turn that died without ending).
MAX_DEFER_S = 1.0
_marks: dict[int, dict[str, object]] = {}
_marks_changed = threading.Condition()


def turn_started(instance_id: int, part: str = "graph") -> None:
    with _marks_changed:
        _marks.setdefault(instance_id, {})[part] = object()


def turn_ended(instance_id: int, part: str = "graph") -> None:
    """The turn's last node ran (or the run is over): the work it queued may start."""
    with _marks_changed:
        marks = _marks.get(instance_id, {})
        marks.pop(part, None)
        if not marks:
            _marks.pop(instance_id, None)
        _marks_changed.notify_all()


@contextmanager
def turn_running(instance_id: int) -> Iterator[None]:
    """Mark a whole in-process run (the graph's last checkpoint write included) as the instance's turn."""
    turn_started(instance_id, "run")
    try:
        yield
    finally:
        turn_ended(instance_id, "run")


def _after_turn_of(fn: Any, instance_id: int | None) -> Any:
    if instance_id is None:
        return fn
    deadline = time.monotonic() + MAX_DEFER_S
    with _marks_changed:
        held = list(_marks.get(instance_id, {}).values())

    def still_running() -> bool:
        now = _marks.get(instance_id, {}).values()
        return any(mark in now for mark in held)

    def job(*args: Any, **kwargs: Any) -> Any:
        with _marks_changed:
            while still_running() and (left := deadline - time.monotonic()) > 0:
                _marks_changed.wait(left)
        return fn(*args, **kwargs)

    return job


def run_in_background(fn: Any, *args: Any, after_turn_of: int | None = None, **kwargs: Any) -> Future[Any]:
    """Queue a store write on the single background worker (in order); `after_turn_of`: it starts when that
    instance's running turn ends (at most `MAX_DEFER_S` later). Failures are logged, never raised into the turn."""
    future = _writer.submit(_after_turn_of(fn, after_turn_of), *args, **kwargs)
    future.add_done_callback(_log_failure)
    _pending.append(future)
    return future


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


# A search that overruns its cap keeps its worker until it ends; a few workers keep the next turns moving.
_searches = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rag")


def search_with_cap(search: Any, timeout_s: float) -> tuple[Any, dict[str, Any]]:
    """Run `search()` for at most `timeout_s`; returns (result or [], debug)."""
    start = time.perf_counter()
    future = _searches.submit(search)
    try:
        results = future.result(timeout=timeout_s)
        status = "ok"
    except FutureTimeout:
        results, status = [], f"timed out after {timeout_s:g} s: the turn goes on without retrieved memory"
    except Exception as exc:  # noqa: BLE001 - retrieval must never fail the turn
        results, status = [], f"failed ({type(exc).__name__}: {exc}): the turn goes on without retrieved memory"
    return results, {"status": status, "ms": round((time.perf_counter() - start) * 1000, 1)}


atexit.register(flush_event_writes)
