"""The character card a character was imported from (issue 15), kept whole for a lossless export.

One row per imported character: the card's V3-shaped `data` (unknown fields and extensions included, the
embedded `character_book` too: the entries themselves live in the world book, scoped to the character), the
fields beside `data` at the file's top level, the spec it was read as, and the PNG it came in (its avatar).
Registered with the world-book tables (`stores.worldbook_tables` imports this module, `stores.db` imports that).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from personalab.stores.tables import utcnow
from sqlalchemy import JSON, Column, LargeBinary
from sqlmodel import Field, SQLModel


class CardRow(SQLModel, table=True):
    __tablename__ = "character_card"

    role_id: int = Field(primary_key=True, foreign_key="role.id", ondelete="CASCADE")  # goes with its character
    spec: str
    source: str = "JSON"
    data: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    top_level: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    avatar: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))
    created_at: datetime = Field(default_factory=utcnow)
