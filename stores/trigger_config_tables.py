"""The table of seed 004's trigger configuration as data (issue 23, `nodes.rules.trigger_config.TriggerConfig`).

One row per scope: both ids empty = global, `role_id` = a character's, `save_id` = an instance's. `fields` holds
only the settings set on that scope (JSON: the per-type maxima are a nested object); a field absent is the wider
scope's. The row goes with its character or instance.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from personalab.stores.tables import utcnow
from sqlalchemy import JSON, Column
from sqlmodel import Field, SQLModel


class TriggerConfigRow(SQLModel, table=True):
    __tablename__ = "trigger_config"

    id: int | None = Field(default=None, primary_key=True)
    role_id: int | None = Field(default=None, foreign_key="role.id", ondelete="CASCADE", index=True)
    save_id: int | None = Field(default=None, foreign_key="save.id", ondelete="CASCADE", index=True)
    fields: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    updated_at: datetime = Field(default_factory=utcnow)
