"""Turn bookkeeping: one turn at a time per instance, and a record of every turn."""

from __future__ import annotations

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
from personalab.stores.tables import utcnow
from personalab.stores.turn_tables import StoryState, TurnLock, TurnRecord
from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

# the locks this process holds, so a run interrupted outside its nodes (Ctrl-C while LangGraph waits between them
# or runs one in a worker thread) can free its instance at once instead of leaving it to the lease
_held: dict[tuple[str, int], str] = {}


def acquire_turn_lock(save_id: int, lease_seconds: float, url: str | None = None) -> str:
    """Take the instance's turn lock (its own transaction) or raise `InstanceBusy`;
    `InstanceNotFound`, with nothing written, for an unknown instance."""
    token = uuid.uuid4().hex
    now = time.time()
    try:
        with session_scope(url) as session:
            get_save(session, save_id)
            session.exec(delete(TurnLock).where(col(TurnLock.save_id) == save_id, col(TurnLock.expires_at) < now))
            session.add(TurnLock(save_id=save_id, token=token, expires_at=now + lease_seconds))
    except IntegrityError as exc:
        raise InstanceBusy(f"instance {save_id} is busy: another turn is running") from exc
    _held[(url or "", save_id)] = token
    turn_started(save_id)
    return token


def release_held_lock(save_id: int, url: str | None = None) -> bool:
    """Release instance `save_id`'s turn lock if this process holds it (an interrupted run); True if it did."""
    token = _held.get((url or "", save_id))
    if token is None:
        return False
    release_turn_lock(save_id, token, url)
    return True


def release_turn_lock(save_id: int, token: str, url: str | None = None) -> None:
    """Release the lock of a turn that ends here (no reply stored, or it failed before the reply)."""
    with session_scope(url) as session:
        drop_turn_lock(session, save_id, token)
    turn_ended(save_id)


def drop_turn_lock(session: Session, save_id: int, token: str) -> None:
    """Release inside the caller's transaction, so the reply and the release commit together."""
    session.exec(delete(TurnLock).where(col(TurnLock.save_id) == save_id, col(TurnLock.token) == token))
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


def last_turn_time(session: Session, save_id: int) -> datetime | None:
    """When the instance's previous turn happened (for the time gap of seed 003)."""
    stmt = select(TurnRecord.created_at).where(TurnRecord.save_id == save_id)
    return session.exec(stmt.order_by(col(TurnRecord.id).desc()).limit(1)).first()


def latest_story_state(session: Session, save_id: int) -> StoryState | None:
    """The story state of the instance's last stored turn (None before its first)."""
    stmt = select(StoryState).where(col(StoryState.save_id) == save_id)
    return session.exec(stmt.order_by(col(StoryState.id).desc()).limit(1)).first()


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


def latest_story_state_id(session: Session, save_id: int) -> int | None:
    """Only the id of `latest_story_state`: what a turn compares with its checkpoint's."""
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
