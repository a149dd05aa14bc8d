"""The outbox (issue 14, durable writes): every store write a turn queues for after its reply — its event, its
memories, its dialogue record, its mention marks — is first one `outbox` row, inserted in the transaction that
stores what the write comes from (the reply, the review's effects), and then applied at least once by the
instance's background writer (`stores.outbox`). Applying a row twice changes nothing: each kind writes by a
deterministic id or marks the row applied in the transaction of its own write."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from personalab.stores.tables import utcnow
from sqlalchemy import JSON, Column, Index, Text
from sqlmodel import Field, SQLModel


class OutboxWrite(SQLModel, table=True):
    """One queued write of one instance, applied in id order per instance."""

    __tablename__ = "outbox"
    __table_args__ = (Index("ix_outbox_pending", "instance_id", "applied_at", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    # deleting an instance deletes its queued writes (stores.library finds the tables that refer to `save`)
    instance_id: int = Field(foreign_key="save.id")
    kind: str  # event | record | memory | mention (stores.outbox.APPLIERS)
    # what the write writes, by deterministic id (`event:i3-l42`, `memory:i3-l42`): what doctor names, and what
    # an applier checks so a second application is harmless
    key: str
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    attempts: int = 0
    next_attempt_at: float = 0.0  # epoch seconds: not retried before (exponential backoff after a failure)
    last_error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    # the process applying it now and until when (epoch seconds): two processes never apply one row at once
    claimed_by: str | None = None
    claimed_until: float | None = None
    created_at: datetime = Field(default_factory=utcnow)
    applied_at: datetime | None = None
