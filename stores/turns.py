"""Turn bookkeeping: one turn at a time per instance, and a record of every turn."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from personalab.nodes.rules.errors import InstanceBusy
from personalab.stores.background import turn_ended, turn_started
from personalab.stores.db import session_scope
from personalab.stores.saves import get_save
from personalab.stores.sessions import current_session
from personalab.stores.tables import Line, Save, utcnow
from personalab.stores.turn_tables import StoryState, TurnLock, TurnRecord, TurnRun
from sqlalchemy import delete, func, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

# the locks this process holds, so a run interrupted outside its nodes (Ctrl-C while LangGraph waits between them
# or runs one in a worker thread) can free its instance at once instead of leaving it to the lease
_held: dict[tuple[str, int], str] = {}
_held_lock = threading.Lock()  # turns of other instances run in other threads: no iteration while one adds
# served runs cancelled while their turn may still be taking the lock in a worker thread (issue 27): run key → when
_abandoned: dict[str, float] = {}
ABANDONED_KEEP_S = 600.0  # a cancelled run's node thread has long finished by then
# the heartbeat of each held lock (by token): set the event to stop it
_beats: dict[str, threading.Event] = {}
_acquiring: set[str] = set()  # tokens of locks being taken, not yet with their heartbeat
_beats_lock = threading.Lock()
log = logging.getLogger(__name__)
# how long a replayed run waits for its twin's lock: the same run still running elsewhere (issue 27, Aegra: a live
# worker whose run lease lapsed under load has its run queued again and learns it at its next heartbeat, then
# cancels it, which frees its turn lock; up to 5 s seen on a loaded 2-core machine)
TWIN_WAIT_S = 30.0
TWIN_POLL_S = 0.2


def run_mark(run_key: str) -> str:
    """The part of a lock's token that names the run holding it (a digest: any length of run key fits)."""
    return hashlib.sha256(run_key.encode()).hexdigest()[:16]


def _held_by_twin(lock: TurnLock, run_key: str | None) -> bool:
    """The lock is held by another execution of the same run (its token ends with the run's mark)."""
    return run_key is not None and lock.token.endswith(f".{run_mark(run_key)}")


def holder_name() -> str:
    """Who holds a lock: host and process id, shown by `personalab instance unlock`."""
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_is_gone(holder: str | None) -> bool:
    """True when a lock's holder (`host:pid`, `holder_name`) is a process of this host that no longer runs. A holder
    on another host, or one that cannot be told, is taken as alive: its lease decides."""
    host, _, pid = (holder or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, but another user's: alive
        return False
    return False


def acquire_turn_lock(
    save_id: int,
    lease_seconds: float,
    url: str | None = None,
    run_key: str | None = None,
    twin_wait_s: float = TWIN_WAIT_S,
) -> str:
    """Take the instance's turn lock (its own transaction) or raise `InstanceBusy`;
    `InstanceNotFound`, with nothing written, for an unknown instance. The lease is short (PERSONALAB_TURN_LEASE)
    and renewed by a heartbeat thread until the lock is released, so a live turn keeps it however long it runs
    and a crashed holder's lock lapses within one lease, at once if it was a process of this host (issue 14).
    A turn played by the run `run_key` (issue 27) marks the lock with it; when the lock is held by another
    execution of that same run (the server queued the run again while the first still ran: Aegra's lease loss),
    this one waits up to `twin_wait_s` for the first to end or be cancelled instead of failing busy: the replay
    then answers the run's stored user line, or its stored reply, once."""
    deadline = time.monotonic() + twin_wait_s
    waited = False
    while True:
        try:
            return _acquire_once(save_id, lease_seconds, url, run_key)
        except _TwinRunning:
            if time.monotonic() >= deadline:
                raise InstanceBusy(
                    f"instance {save_id} is busy: run {run_key} is still running there (played again by its server)"
                ) from None
            if not waited:
                log.info("instance %s: run %s waits for its earlier execution's turn lock", save_id, run_key)
                waited = True
            time.sleep(TWIN_POLL_S)


class _TwinRunning(InstanceBusy):
    """The lock is held by another, live execution of the same run (`acquire_turn_lock` waits for it)."""


def _acquire_once(save_id: int, lease_seconds: float, url: str | None, run_key: str | None) -> str:
    token = uuid.uuid4().hex + (f".{run_mark(run_key)}" if run_key is not None else "")
    now = time.time()
    with _beats_lock:
        _acquiring.add(token)  # live from its commit on, before its heartbeat starts (`_ended_here`)
    try:
        with session_scope(url) as session:
            get_save(session, save_id)
            session.exec(delete(TurnLock).where(col(TurnLock.save_id) == save_id, col(TurnLock.expires_at) < now))
            held = session.exec(select(TurnLock).where(col(TurnLock.save_id) == save_id)).first()
            if held is not None and (holder_is_gone(held.holder) or _ended_here(held)):
                # a process of this host that died holding the lock (kill -9, OOM), or a turn of this process that
                # ended without its release (the database was down then): free it now, not after its lease, so the
                # instance is usable again at once (issue 14 fault tests)
                log.warning("instance %s: taking over the turn lock of %s, whose turn is over", save_id, held.holder)
                session.expunge(held)  # the new lock row takes its key in this transaction
                session.exec(
                    delete(TurnLock).where(col(TurnLock.save_id) == save_id, col(TurnLock.token) == held.token)
                )
            elif held is not None and _held_by_twin(held, run_key):
                raise _TwinRunning(f"instance {save_id} is busy: run {run_key} is running there")
            elif held is not None:
                raise InstanceBusy(f"instance {save_id} is busy: another turn is running")
            session.add(
                TurnLock(
                    save_id=save_id, token=token, expires_at=now + lease_seconds, holder=holder_name(), acquired_at=now
                )
            )
    except BaseException as exc:
        with _beats_lock:
            _acquiring.discard(token)
        if isinstance(exc, IntegrityError):
            raise InstanceBusy(f"instance {save_id} is busy: another turn is running") from exc
        raise
    with _held_lock:
        _held[(url or "", save_id)] = token
    _start_heartbeat(save_id, token, lease_seconds, url)
    turn_started(save_id)
    return token


def _ended_here(lock: TurnLock) -> bool:
    """A lock taken by this process whose turn is over: its heartbeat is stopped (the release stops it first), so
    the release itself failed. A live turn of this process keeps its lock (its heartbeat runs)."""
    if lock.holder != holder_name():
        return False
    with _beats_lock:
        return lock.token not in _beats and lock.token not in _acquiring


def _start_heartbeat(save_id: int, token: str, lease_seconds: float, url: str | None) -> None:
    stop = threading.Event()
    with _beats_lock:
        _beats[token] = stop
        _acquiring.discard(token)
    thread = threading.Thread(
        target=_heartbeat, args=(save_id, token, lease_seconds, url, stop), name=f"turn-lock-{save_id}", daemon=True
    )
    thread.start()


def _stop_heartbeat(token: str) -> None:
    with _beats_lock:
        stop = _beats.pop(token, None)
    if stop is not None:
        stop.set()


def _heartbeat(save_id: int, token: str, lease_seconds: float, url: str | None, stop: threading.Event) -> None:
    """Renew the lock every third of its lease while it is ours; stop when released or lost (taken over)."""
    while not stop.wait(lease_seconds / 3):
        try:
            if not renew_turn_lock(save_id, token, lease_seconds, url):
                log.warning("instance %s: the turn lock was lost (taken over after its lease)", save_id)
                return
        except Exception as exc:  # noqa: BLE001 - a missed beat is retried; the lease covers two of them
            log.warning("instance %s: the turn lock was not renewed: %s", save_id, exc)


def renew_turn_lock(save_id: int, token: str, lease_seconds: float, url: str | None = None) -> bool:
    """Push the lock's expiry one lease ahead if it is still ours; False if it is not (released or taken over)."""
    with session_scope(url) as session:
        result = session.exec(
            update(TurnLock)
            .where(col(TurnLock.save_id) == save_id, col(TurnLock.token) == token)
            .values(expires_at=time.time() + lease_seconds)
        )
        return bool(result.rowcount)


def turn_lock_info(session: Session, save_id: int) -> dict[str, Any] | None:
    """Instance `save_id`'s lock as stored: holder, since when, until when, expired or not; None if unlocked."""
    lock = session.get(TurnLock, save_id)
    if lock is None:
        return None
    return {
        "instance_id": save_id,
        "holder": lock.holder,
        "acquired_at": lock.acquired_at,
        "expires_at": lock.expires_at,
        "expired": lock.expires_at < time.time(),
    }


def unlock_instance(save_id: int, url: str | None = None) -> dict[str, Any] | None:
    """An operator frees instance `save_id` (`personalab instance unlock`): the lock is deleted whoever holds it.
    Returns what it was (`turn_lock_info`), None if the instance was not locked; `InstanceNotFound` if unknown.
    A turn still running there loses its lock and stores no reply (`TurnLockLost`)."""
    with session_scope(url) as session:
        get_save(session, save_id)
        info = turn_lock_info(session, save_id)
        if info is not None:
            session.exec(delete(TurnLock).where(col(TurnLock.save_id) == save_id))
    return info


def release_held_lock(save_id: int, url: str | None = None) -> bool:
    """Release instance `save_id`'s turn lock if this process holds it (an interrupted run); True if it did."""
    with _held_lock:
        token = _held.get((url or "", save_id))
    if token is None:
        return False
    release_turn_lock(save_id, token, url)
    return True


def release_or_abandon(save_id: int, run_key: str, url: str | None = None) -> bool:
    """The served run `run_key` of instance `save_id` was cancelled (issue 27): release the turn lock this process
    holds for it (True), or, when it holds none yet, mark the run abandoned (False): a turn of it whose
    `history_fetch` is still taking the lock in a worker thread (found on Aegra: a client gone right after asking)
    gives the lock back as soon as it has it (`run_abandoned`) instead of holding the instance busy for as long as
    the process lives. Only then: a run cancelled while holding its lock is often queued again by its server (Aegra
    after a lease loss), and that replay, started after the cancel in this same process, must answer the run's
    stored line, not find the run abandoned. Decided under `_held_lock`, where `acquire_turn_lock` registers a lock:
    either the lock is seen here, or the mark is seen by the turn that takes it."""
    now = time.monotonic()
    with _held_lock:
        for key in [key for key, when in _abandoned.items() if now - when > ABANDONED_KEEP_S]:
            del _abandoned[key]
        token = _held.get((url or "", save_id))
        if token is None:
            _abandoned[run_key] = now
    if token is None:
        return False
    release_turn_lock(save_id, token, url)
    return True


def run_abandoned(run_key: str | None, since: float) -> bool:
    """True when the run `run_key` was cancelled (`release_or_abandon`) after `since` (`time.monotonic()` when the
    asking turn started): an execution of the run that started after the cancel is the server's replay of it."""
    if run_key is None:
        return False
    with _held_lock:
        when = _abandoned.get(run_key)
    return when is not None and when >= since


def release_turn_lock(save_id: int, token: str, url: str | None = None) -> None:
    """Release the lock of a turn that ends here (no reply stored, or it failed before the reply)."""
    # the heartbeat stops first: if the database is gone the lock must lapse by itself, not be kept alive, and this
    # process's next turn of the instance takes it over at once (`_ended_here`)
    _stop_heartbeat(token)
    try:
        with session_scope(url) as session:
            drop_turn_lock(session, save_id, token)
    finally:
        _forget(token)
        turn_ended(save_id)


def drop_turn_lock(session: Session, save_id: int, token: str) -> None:
    """Release inside the caller's transaction, so the reply and the release commit together."""
    session.exec(delete(TurnLock).where(col(TurnLock.save_id) == save_id, col(TurnLock.token) == token))
    _stop_heartbeat(token)
    _forget(token)


def _forget(token: str) -> None:
    with _held_lock:
        for key in [key for key, held in _held.items() if held == token]:
            del _held[key]


def holds_turn_lock(session: Session, save_id: int, token: str) -> bool:
    lock = session.get(TurnLock, save_id)
    return lock is not None and lock.token == token


def record_turn(session: Session, record: TurnRecord) -> TurnRecord:
    """Store a turn's record, naming its session: the instance's current one, which the turn chose or started
    under the instance's lock (`history_fetch`)."""
    if record.session_id is None:
        play = current_session(session, record.save_id)
        record.session_id = play.id if play is not None else None
    session.add(record)
    session.flush()
    return record


def record_turn_figures(session: Session, save_id: int, reply_line_id: int, figures: dict[str, Any]) -> None:
    """Add `figures` (issue 25: times of the turn) to the record of the turn whose reply ends at `reply_line_id`,
    in the caller's transaction; nothing when there is no such record."""
    row = session.exec(
        select(TurnRecord).where(TurnRecord.save_id == save_id, TurnRecord.reply_line_id == reply_line_id)
    ).first()
    if row is not None:
        row.figures = {**(row.figures or {}), **figures}
        session.add(row)


def last_turn_time(session: Session, save_id: int) -> datetime | None:
    """When the instance's previous turn happened (for the time gap of seed 003)."""
    stmt = select(TurnRecord.created_at).where(TurnRecord.save_id == save_id)
    return session.exec(stmt.order_by(col(TurnRecord.id).desc()).limit(1)).first()


def branch_story_state(session: Session, save_id: int, path: Sequence[int]) -> StoryState | None:
    """The story state of the branch whose line ids are `path` (root first): the state left by the last stored turn
    whose reply is on it (seed 002 + 000: moving the leaf back to a line, or to a sibling, brings the story back
    to where it stood there). None when no turn on the branch was stored. States are read newest first: the
    branch's own are usually the newest, and a state's descendants on a branch were stored after it."""
    on_path = set(path)
    stmt = select(StoryState.id, StoryState.reply_line_id).where(col(StoryState.save_id) == save_id)
    stmt = stmt.order_by(col(StoryState.id).desc())
    for limit in (8, None):
        rows = session.exec(stmt.limit(limit) if limit else stmt).all()
        for state_id, reply_line_id in rows:
            if reply_line_id in on_path:
                return session.get(StoryState, state_id)
        if limit and len(rows) < limit:
            break
    return None


def branch_story_states(session: Session, scope: Any) -> dict[int, tuple[StoryState, datetime | None]]:
    """The story state of each instance's current branch (`branch_story_state` for the path to its leaf) with
    the time of the turn that stored it, for the instances whose ids `scope` names (a list, or a select of them),
    in one statement however many there are (`instance list`). A recursive walk goes up from each leaf and
    stops at the first line a state was stored at: the deepest such line of the branch, whose newest state is
    the branch's (a line's descendants are stored after it). UNION, not UNION ALL: parents that loop end the
    walk instead of running it forever. Instances without a stored state on their branch are left out."""
    start: Any = select(col(Save.id).label("save_id"), col(Save.last_message_id).label("line_id")).where(
        col(Save.id).in_(scope), col(Save.last_message_id).is_not(None)
    )
    walk = start.cte("branch_walk", recursive=True)
    stored_here = (
        select(StoryState.id)
        .where(col(StoryState.save_id) == walk.c.save_id, col(StoryState.reply_line_id) == walk.c.line_id)
        .exists()
    )
    step = (
        select(walk.c.save_id, col(Line.parent_line_id))
        .join(Line, col(Line.id) == walk.c.line_id)
        .where(col(Line.save_id) == walk.c.save_id, col(Line.parent_line_id).is_not(None), ~stored_here)
    )
    walk = walk.union(step)
    newest = (
        select(func.max(StoryState.id))
        .join(walk, (col(StoryState.save_id) == walk.c.save_id) & (col(StoryState.reply_line_id) == walk.c.line_id))
        .group_by(col(StoryState.save_id))
    )
    # the turn that stored the reply (its record names the same last line); a state stored without one (from
    # before story states were stored) has its own time
    turn_time = (
        select(func.max(TurnRecord.created_at))
        .where(
            col(TurnRecord.save_id) == col(StoryState.save_id),
            col(TurnRecord.reply_line_id) == col(StoryState.reply_line_id),
        )
        .scalar_subquery()
    )
    rows = session.exec(select(StoryState, turn_time).where(col(StoryState.id).in_(newest))).all()
    return {row.save_id: (row, when or row.created_at) for row, when in rows}


def latest_story_state_id(session: Session, save_id: int) -> int | None:
    """The id of the instance's last stored story state (None before its first turn), on any branch."""
    stmt = select(StoryState.id).where(col(StoryState.save_id) == save_id)
    return session.exec(stmt.order_by(col(StoryState.id).desc()).limit(1)).first()


def save_story_state(
    session: Session, save_id: int, turn: int, state: dict[str, Any], reply_line_id: int | None = None
) -> int:
    """Store the story state a turn leaves, inside the caller's transaction; returns its id."""
    row = StoryState(save_id=save_id, turn=turn, reply_line_id=reply_line_id, state=state)
    session.add(row)
    session.flush()
    assert row.id is not None  # given by the flush
    return row.id


def update_story_state(session: Session, state_id: int, state: dict[str, Any]) -> None:
    """Bring a stored story state up to date (the review's and maintenance's changes), in the caller's
    transaction."""
    row = session.get(StoryState, state_id)
    if row is not None:
        row.state = state
        row.updated_at = utcnow()
        session.add(row)


def list_turn_locks(session: Session) -> list[dict[str, Any]]:
    """Every instance's turn lock as stored (`turn_lock_info`), by instance (`personalab locks list`)."""
    ids = session.exec(select(TurnLock.save_id).order_by(col(TurnLock.save_id))).all()
    return [info for save_id in ids if (info := turn_lock_info(session, save_id)) is not None]


def run_user_line(session: Session, save_id: int, run_key: str) -> int | None:
    """The user line the run `run_key` stored on the instance, None for a run not seen before (issue 27)."""
    row = session.get(TurnRun, (save_id, run_key))
    return row.user_line_id if row is not None else None


def remember_run(session: Session, save_id: int, run_key: str, user_line_id: int) -> None:
    """Record that the run `run_key` stored `user_line_id`, in the transaction that stores the line."""
    session.add(TurnRun(save_id=save_id, run_key=run_key, user_line_id=user_line_id))
    session.flush()


def run_reply(session: Session, save_id: int, run_key: str | None) -> int | None:
    """The last line of the reply the run `run_key` stored, None when it stored none (or has no identity)."""
    row = session.get(TurnRun, (save_id, run_key)) if run_key else None
    return row.reply_line_id if row is not None else None


def remember_run_reply(session: Session, save_id: int, run_key: str | None, reply_line_id: int | None) -> None:
    """Record the reply the run `run_key` stored, in the reply's transaction."""
    row = session.get(TurnRun, (save_id, run_key)) if run_key else None
    if row is not None:
        row.reply_line_id = reply_line_id
        session.add(row)


def token_usage(database_url: str | None, instance_id: int) -> dict[str, Any]:
    """Issue 26: the tokens an instance's turns cost — per turn (`turns`: turn, prompt and reply tokens, model,
    time) and in all (`prompt_tokens`, `reply_tokens`, `turns_counted`); turns stored before tokens were recorded
    count as unknown, not as 0. `NotFound` for an unknown instance."""
    with session_scope(database_url) as session:
        get_save(session, instance_id)
        rows = session.exec(
            select(TurnRecord)
            .where(TurnRecord.save_id == instance_id, TurnRecord.status == "ok")
            .order_by(col(TurnRecord.id))
        ).all()
        turns = [
            {
                "turn": row.turn,
                "prompt_tokens": row.prompt_tokens,
                "reply_tokens": row.reply_tokens,
                "model": row.model,
                "created_at": row.created_at,
            }
            for row in rows
        ]
    counted = [t for t in turns if t["prompt_tokens"] is not None]
    return {
        "instance_id": instance_id,
        "turns": turns,
        "turns_counted": len(counted),
        "prompt_tokens": sum(t["prompt_tokens"] for t in counted),
        "reply_tokens": sum(t["reply_tokens"] or 0 for t in counted),
    }
