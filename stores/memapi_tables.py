"""Tables of the memory console (issue 23): the earlier texts of edited memories, and what fed each reply.

`memory_edit` keeps one row per user edit of a memory (seed 001 用户可编辑性: isUserEdited): the fields as they were
before the edit, numbered per memory from 1. A deleted memory's versions go with it (`stores.memory_edits`).

`reply_provenance` is what went into the prompt of one reply (issue 23 "what fed each reply"): written in the
transaction that stores the reply's lines (`nodes.write_back`), keyed by the reply's last line, with the ids of all its
lines. Lines are never deleted, so neither is this: every branch keeps its replies' provenance.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from personalab.stores.tables import utcnow
from sqlalchemy import JSON, Column, Index, Text
from sqlmodel import Field, SQLModel


class MemoryEdit(SQLModel, table=True):
    """A memory's fields before one user edit (version `version` of memory `memory_id`)."""

    __tablename__ = "memory_edit"
    __table_args__ = (Index("ix_memory_edit_memory", "memory_id", "version", unique=True),)

    id: int | None = Field(default=None, primary_key=True)
    # no foreign key to memory_entry: the maintenance deletes memories in bulk; their versions are deleted with them
    memory_id: int
    instance_id: int = Field(foreign_key="save.id", index=True)
    version: int
    content: str = Field(sa_column=Column(Text, nullable=False))
    type: str
    layer: str
    importance: float
    tags: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    notes: str = ""
    edited_at: datetime = Field(default_factory=utcnow)  # when this text was replaced


class ReplyProvenance(SQLModel, table=True):
    """What fed one reply's prompt (see the module docstring)."""

    __tablename__ = "reply_provenance"
    __table_args__ = (Index("ix_reply_provenance_scope", "instance_id", "reply_line_id"),)

    id: int | None = Field(default=None, primary_key=True)
    instance_id: int = Field(foreign_key="save.id")
    turn: int
    reply_line_id: int = Field(unique=True)  # the reply's last line
    line_ids: list[int] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    data: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)
