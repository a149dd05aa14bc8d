"""The process's background work: store writes off the reply's path (seed 002 事件写入异步执行), in order per
instance, held back while the turn that queued them runs and waited for by the instance's next turn (read your
writes), and the capped search pool (seed 002 需求3: 1.5 s)."""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)


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
    if part == "graph":
        with _lanes_changed:  # what this turn must read (`wait_for_writes`): the writes queued before it
            _horizon[instance_id] = _queued.get(instance_id, 0)


def turn_ended(instance_id: int, part: str = "graph") -> None:
    """The turn's last node ran (or the run is over): the work it queued may start."""
    with _marks_changed:
        marks = _marks.get(instance_id, {})
        marks.pop(part, None)
        if not marks:
            _marks.pop(instance_id, None)
        _marks_changed.notify_all()
    if part == "graph":
        with _lanes_changed:
            _horizon.pop(instance_id, None)


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


# Lanes: the work queued for one instance runs in order on that instance's own writer thread (started when work
# arrives, ended when its lane is empty), so a write held back for one instance's running turn never holds
# another instance's writes back. `_one_writer` lets one store write run at a time, as a single writer did: the
# writes never compete with each other for the interpreter. Per instance, `_queued` counts the jobs ever queued
# and `_done` those finished, in order: a turn reads its own instance's writes by waiting until `_done` reaches
# `_queued` as it was when the turn started (`turn_started` keeps it in `_horizon`), not for the writes the turn
# itself queues meanwhile.
_Job = tuple[Any, tuple[Any, ...], dict[str, Any], "Future[Any]", list[bool], bool]
_lanes: dict[int | None, deque[_Job]] = {}
_queued: dict[int | None, int] = {}
_done: dict[int | None, int] = {}
_horizon: dict[int, int] = {}
# Per job, whether the next memory retrieval can read what it writes (issue 29): a job that makes that visible
# before its slow part (the outbox's drain: the database rows and keyword index first, the vectors after) says so
# with `writes_visible`; a job whose writes no retrieval reads (`unread_by_retrieval`: a checkpoint prune, the
# director's next search) is visible once the jobs before it are; any other job when it ends. The director reads the
# story's events, written whole by the drain: it waits for every job to end but those that write no event
# (`unread_by_director`: the layer maintenance, the persona-change archive, a checkpoint prune), which count once the
# jobs before them have ended.
_in_lane = threading.local()
_lanes_changed = threading.Condition()
_one_writer = threading.Lock()
READ_YOUR_WRITES_TIMEOUT_S = 30.0  # a turn waits at most this long for its instance's writes (a stuck store)


def _drain(key: int | None) -> None:
    lane = _lanes[key]
    while True:
        with _lanes_changed:
            if not lane:
                del _lanes[key]
                return
            fn, args, kwargs, future, visible, _unread_by_director = lane[0]
        _in_lane.visible = visible
        if future.set_running_or_notify_cancel():
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the future, logged by its callback
                future.set_exception(exc)
            else:
                future.set_result(result)
        with _lanes_changed:
            lane.popleft()
            _done[key] = _done.get(key, 0) + 1
            _in_lane.visible = None
            _lanes_changed.notify_all()


def _one_at_a_time(fn: Any) -> Any:
    def job(*args: Any, **kwargs: Any) -> Any:
        with _one_writer:
            return fn(*args, **kwargs)

    return job


def run_in_background(
    fn: Any,
    *args: Any,
    after_turn_of: int | None = None,
    unread_by_retrieval: bool = False,
    unread_by_director: bool = False,
    **kwargs: Any,
) -> Future[Any]:
    """Queue a store write on the background writer of instance `after_turn_of` (in order per instance); it
    starts when that instance's running turn ends (at most `MAX_DEFER_S` later), and the instance's next turn
    waits for it (`wait_for_writes`; with `unread_by_retrieval`, its memory retrieval does not: nothing it reads is
    written; with `unread_by_director`, its director does not: no story event is written). Failures are logged,
    never raised into the turn."""
    future: Future[Any] = Future()
    future.add_done_callback(_log_failure)
    wrapped = _after_turn_of(_one_at_a_time(fn), after_turn_of)
    job: _Job = (wrapped, args, kwargs, future, [unread_by_retrieval], unread_by_director)
    with _lanes_changed:
        _queued[after_turn_of] = _queued.get(after_turn_of, 0) + 1
        lane = _lanes.get(after_turn_of)
        start = lane is None
        if lane is None:
            lane = _lanes[after_turn_of] = deque()
        lane.append(job)
    if start:
        name = f"writer-{'any' if after_turn_of is None else after_turn_of}"
        threading.Thread(target=_drain, args=(after_turn_of,), name=name, daemon=True).start()
    return future


def _log_failure(future: Future[Any]) -> None:
    exc = future.exception()
    if exc is not None:
        from personalab.stores.db import store_unavailable  # lazily: this module needs no database

        # a database that is down: its own turn (or the outbox, which keeps the write) says so; not a second line
        level = logging.DEBUG if store_unavailable(exc) is not None else logging.ERROR
        log.log(level, "background store write failed: %s", exc)


def pending_writes(instance_id: int | None) -> int:
    """Writes queued for the instance and not finished yet."""
    with _lanes_changed:
        return _queued.get(instance_id, 0) - _done.get(instance_id, 0)


def writes_visible() -> None:
    """Called by a background job: what it writes for the next retrieval is readable now (its slower rest, e.g. the
    vectors the retrieval computes itself meanwhile, goes on); the instance's next retrieval stops waiting for it.
    Outside a background job, or called twice, it does nothing."""
    visible = getattr(_in_lane, "visible", None)
    if visible is None or visible[0]:
        return
    with _lanes_changed:
        visible[0] = True
        _lanes_changed.notify_all()


def _settled_count(key: int, settled: Callable[[_Job], bool]) -> int:
    """The instance's jobs, in order, a reader need not wait for any more: the done ones and the leading queued ones
    `settled` says are (under `_lanes_changed`)."""
    count = _done.get(key, 0)
    for job in _lanes.get(key, ()):
        if not settled(job):
            break
        count += 1
    return count


def _visible_count(key: int) -> int:
    """Jobs whose writes a memory retrieval can read (`writes_visible`, or `unread_by_retrieval`)."""
    return _settled_count(key, lambda job: job[4][0])


def _ended_for_director(key: int) -> int:
    """Jobs the director need not wait for: done, or writing no story event (`unread_by_director`)."""
    return _settled_count(key, lambda job: job[5])


def wait_for_writes(instance_id: int, timeout: float = READ_YOUR_WRITES_TIMEOUT_S, *, whole: bool = False) -> float:
    """Read your writes: block until the writes queued for `instance_id` before its running turn started (all
    of them, outside a turn) are visible to a memory retrieval (`writes_visible`; with `whole`, ended but for those
    that write no story event: the director reads the events, which come with the slow part); the writes of other
    instances are not waited for. Returns the milliseconds waited."""
    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    with _lanes_changed:
        target = _horizon.get(instance_id, _queued.get(instance_id, 0))
        while (_ended_for_director(instance_id) if whole else _visible_count(instance_id)) < target:
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("instance %s: its earlier writes are still running after %.0f s", instance_id, timeout)
                break
            _lanes_changed.wait(left)
    return round((time.perf_counter() - started) * 1000, 2)


# A memory retrieval and a layer maintenance of one instance (issue 29). The next turn's retrieval does not wait for
# the last turn's layer maintenance (`unread_by_retrieval`): that step decays, moves, summarises and fades memories
# the turn's own writes do not need, and the turn reads the memories as they were before it or after it. Never
# between: the maintenance stores an event-log summary and then deletes what it summarises, so a retrieval between
# the two would put both into one prompt. The retrieval reads under `begin_memory_read` / `memories_read`, the
# maintenance writes under `memories_rewritten`: the step starts writing once the retrievals reading have ended, and
# a retrieval that comes while it writes waits for it (tens of milliseconds; its model calls are outside). A
# retrieval never waits for a step that is itself waiting (a search left running past its cap holds only the step).
# Per process, as the lanes are.
_reading: dict[int, int] = {}
_writing: set[int] = set()
_readers_changed = threading.Condition()
REWRITE_WAIT_S = 30.0  # a step waits at most this long for the retrievals reading (a search stuck on its store)


def begin_memory_read(instance_id: int, timeout: float = READ_YOUR_WRITES_TIMEOUT_S) -> Callable[[], None]:
    """Start reading the instance's memories (a retrieval); returns the call that ends it (once; from any thread:
    the capped search ends it in its own). Waits while a layer maintenance writes, at most `timeout`."""
    deadline = time.monotonic() + timeout
    with _readers_changed:
        while instance_id in _writing and (left := deadline - time.monotonic()) > 0:
            _readers_changed.wait(left)
        _reading[instance_id] = _reading.get(instance_id, 0) + 1
    ended = threading.Event()

    def end() -> None:
        if ended.is_set():
            return
        ended.set()
        with _readers_changed:
            _reading[instance_id] -= 1
            if not _reading[instance_id]:
                del _reading[instance_id]
            _readers_changed.notify_all()

    return end


@contextmanager
def memories_read(instance_id: int) -> Iterator[None]:
    """Read the instance's memories as one state (`begin_memory_read`)."""
    end = begin_memory_read(instance_id)
    try:
        yield
    finally:
        end()


@contextmanager
def memories_rewritten(instance_id: int) -> Iterator[None]:
    """Write a layer maintenance's changes to the instance's memories as one step for the retrievals: it starts
    when the retrievals reading have ended (at most `REWRITE_WAIT_S`, then logged), and none starts until it ends.
    One step per instance at a time (the instance's lane runs it)."""
    deadline = time.monotonic() + REWRITE_WAIT_S
    with _readers_changed:
        while (_reading.get(instance_id) or instance_id in _writing) and (left := deadline - time.monotonic()) > 0:
            _readers_changed.wait(left)
        if _reading.get(instance_id):
            log.warning(
                "instance %s: a retrieval still reads after %.0f s; the maintenance writes", instance_id, REWRITE_WAIT_S
            )
        _writing.add(instance_id)
    try:
        yield
    finally:
        with _readers_changed:
            _writing.discard(instance_id)
            _readers_changed.notify_all()


def flush_event_writes(timeout: float = 60.0) -> None:
    """Wait for every write queued so far, of every instance (CLI exit, tests, batch runs)."""
    deadline = time.monotonic() + timeout
    with _lanes_changed:
        targets = dict(_queued)
        while any(_done.get(key, 0) < count for key, count in targets.items()):
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("background store writes still running after %.0f s", timeout)
                return
            _lanes_changed.wait(left)


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
