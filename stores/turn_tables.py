"""Tables of the turn graph (seed 002): the per-instance turn lock and the record of each turn."""

from __future__ import annotations

from datetime import datetime

from personalab.stores.tables import utcnow
from sqlmodel import Field, SQLModel


class TurnLock(SQLModel, table=True):
    """Held by the one turn running on an instance; `expires_at` (epoch seconds) frees a crashed holder's lock."""

    __tablename__ = "turn_lock"

    save_id: int = Field(primary_key=True, foreign_key="save.id")
    token: str
    expires_at: float


class TurnRecord(SQLModel, table=True):
    """One turn of an instance: its lines, outcome, which model answered and when."""

    __tablename__ = "turn_record"

    id: int | None = Field(default=None, primary_key=True)
    save_id: int = Field(foreign_key="save.id", index=True)
    turn: int
    user_line_id: int | None = None
    reply_line_id: int | None = None
    status: str = "ok"  # ok | error
    error: str | None = None
    model: str = ""
    created_at: datetime = Field(default_factory=utcnow)
