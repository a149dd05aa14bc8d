"""Tables of the turn graph (seed 002): the per-instance turn lock, the record of each turn, and the story state
each stored turn leaves."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from personalab.stores.tables import utcnow
from sqlalchemy import JSON, Column
from sqlmodel import Field, SQLModel


class TurnLock(SQLModel, table=True):
    """Held by the one turn running on an instance; `expires_at` (epoch seconds) frees a crashed holder's lock."""

    __tablename__ = "turn_lock"

    save_id: int = Field(primary_key=True, foreign_key="save.id")
    token: str
    # renewed by the holder's heartbeat while the turn runs (stores/turns.py), so a short lease suffices
    expires_at: float
    # who holds it (host:pid) and since when (epoch seconds), for `personalab instance unlock`; None on older rows
    holder: str | None = None
    acquired_at: float | None = None


class TurnRecord(SQLModel, table=True):
    """One turn of an instance: its lines, outcome, which model answered and when."""

    __tablename__ = "turn_record"

    id: int | None = Field(default=None, primary_key=True)
    save_id: int = Field(foreign_key="save.id", index=True)
    turn: int
    user_line_id: int | None = None
    reply_line_id: int | None = None
    status: str = "ok"  # ok | error
    # the sitting it belongs to (seed 002 可暂停/继续); None for turns stored before sessions were recorded
    session_id: int | None = Field(default=None, foreign_key="play_session.id", index=True)
    error: str | None = None
    model: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    # issue 26: what the turn cost — the reply prompt's tokens and the reply's (as the prompt assembly counts
    # them); None on turns stored before they were recorded
    prompt_tokens: int | None = None
    reply_tokens: int | None = None
    # issue 25 (charts): the prompt's tokens per region, the graph's time and each node's (ms); None before
    figures: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))


class StoryState(SQLModel, table=True):
    """The story state a stored turn leaves (turn counter, plot state, relationship, core memory and its
    versions, world-book firings, state-change events): written in the transaction that stores the reply and
    brought up to date when the turn ends, so the database, not the graph's checkpoint, says where an instance's
    story is. The checkpoint is a copy that a turn checks under the instance's lock."""

    __tablename__ = "story_state"

    id: int | None = Field(default=None, primary_key=True)
    save_id: int = Field(foreign_key="save.id", index=True)
    turn: int
    # the reply's last line: the leaf this state belongs to
    reply_line_id: int | None = None
    state: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class TurnRun(SQLModel, table=True):
    """The run that stored a user line (issue 27): a served run's id (`configurable.run_id`) or an in-process run's
    key. A run replayed after its server was killed finds its user line here: answered, it answers with the stored
    reply; not yet answered, it answers that line instead of storing the user's words a second time."""

    __tablename__ = "turn_run"

    save_id: int = Field(primary_key=True, foreign_key="save.id")
    run_key: str = Field(primary_key=True, max_length=200)
    user_line_id: int = Field(foreign_key="line.id")
    # the reply's last line once the run stored it: a run resumed past its reply's commit does not store another
    reply_line_id: int | None = None
    created_at: datetime = Field(default_factory=utcnow)
