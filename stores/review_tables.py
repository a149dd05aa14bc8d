"""Tables of the post-turn review (seed 003): plot nodes and pending world-book suggestions.

Both belong to the branch of the turn's reply (seed 000's tree): `line_id` is the reply's line (its last line, as
memories and archived events carry it), so a regenerated, edited or rewound turn writes its own rows beside the
other branch's instead of over them. Rows from before lines were kept (`line_id` NULL) count as on every branch.
No foreign key to `line`: lines are never deleted but with their instance. The relationship values themselves
live in the turn graph's checkpointed state, not here.
"""

from __future__ import annotations

from datetime import datetime

from personalab.stores.tables import utcnow
from sqlalchemy import JSON, Column, Text
from sqlmodel import Field, SQLModel


class PlotNodeRow(SQLModel, table=True):
    """A plot node the review suggested (seed 003 剧情更新): one per reply line (the turn on its branch). Kept for
    the host to read (`stores.review.list_plot_nodes`); the turn graph does not read them back."""

    __tablename__ = "plot_node"

    id: int | None = Field(default=None, primary_key=True)
    save_id: int = Field(foreign_key="save.id", index=True)
    turn: int
    line_id: int | None = Field(default=None, index=True)  # the reply's line: the branch the node belongs to
    level: str | None = None  # the selected choice's level; None when an LLM review suggested it without a choice
    summary: str = Field(sa_column=Column(Text, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)


class WorldbookSuggestionRow(SQLModel, table=True):
    """A proposed world-book entry (seed 003 世界书更新), waiting for a person to approve or reject it.

    `scope` is where the entry goes on approval: "instance" (this save, the default), "character" (the
    save's role) or "global". `worldbook_entry_id` is the entry created on approval; it becomes NULL if
    that entry is deleted later (the suggestion stays approved). `line_id` is the reply line of the turn that
    proposed it: a pending suggestion belongs to that branch; an approved one is in the world book of its scope,
    on every branch (the approval is the user's decision).
    """

    __tablename__ = "worldbook_suggestion"

    id: int | None = Field(default=None, primary_key=True)
    save_id: int = Field(foreign_key="save.id", index=True)
    turn: int
    line_id: int | None = Field(default=None, index=True)  # the reply's line: the branch that proposed it
    choice_level: str | None = None
    title: str = ""
    content: str = Field(sa_column=Column(Text, nullable=False))
    keywords: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    trigger_type: str = "keyword"
    kind: str = "episodic"
    scope: str = "instance"
    status: str = Field(default="pending", index=True)  # pending / approved / rejected
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)
    decided_at: datetime | None = None
    worldbook_entry_id: int | None = Field(default=None, foreign_key="worldbook_entry.id", ondelete="SET NULL")
