"""Tables of the character's long-term memory (seed 001 记忆条目数据结构, seed 004 记忆类型).

`memory_entry` is one memory of one character in one conversation instance (save). Its fields follow the
seed's `MemoryEntry` (+ the mention tracking of 避免重复对话的机制 / 记忆标记机制); the seed's game tick is a
turn number here, next to a wall-clock time. `memory_index_state` holds a revision number per instance that
every write changing what the keyword index sees (content, tags, a new or deleted memory) increments in the
same transaction, so that every process can tell whether its cached BM25 index is still current.
Record entries (type ``record``, layer ``record``: the dialogue record, `nodes.rules.memory_layers`) share the
table and carry the `line_id` of the line they keep.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from personalab.stores.tables import utcnow
from sqlalchemy import JSON, Column, Index, Text, text
from sqlmodel import Field, SQLModel


class MemoryEntry(SQLModel, table=True):
    """One memory (seed 001 `MemoryEntry`)."""

    __tablename__ = "memory_entry"
    __table_args__ = (
        Index("ix_memory_entry_scope", "instance_id", "character_id", "layer"),
        # issue 25: the inspector's current-branch page (`line_id IS NULL OR line_id IN path`) of one instance
        Index("ix_memory_entry_branch", "instance_id", "line_id"),
        # issue 26/28: the few memories a later fact closed, read on every turn's retrieval (`closed_record_lines`)
        # and by the director (`closed_turns`); without it each turn reads every row of the instance (~20 ms at
        # 10,000 memories, a fifth of seed 004's 100 ms)
        Index(
            "ix_memory_entry_closed",
            "instance_id",
            sqlite_where=text("valid_to_turn IS NOT NULL"),
            postgresql_where=text("valid_to_turn IS NOT NULL"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    instance_id: int = Field(foreign_key="save.id", index=True)
    # The character whose memory this is: a role id, 0 when the instance has no role.
    character_id: int = 0

    content: str = Field(sa_column=Column(Text, nullable=False))
    type: str  # nodes.rules.memory_layers.MemoryType
    layer: str  # nodes.rules.memory_layers.Layer

    turn: int = 0  # the turn the memory was made (the seed's tick timestamp)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    importance: float = 0.5  # 0–1
    activity: float = 1.0  # 0–1, decays with time (seed: 活跃度)
    activity_turn: int = 0  # the turn `activity` was last brought up to date
    layer_since_turn: int = 0  # the turn the memory entered its layer

    related_character: str = ""  # seed: relatedPawnId / relatedPawnName
    location: str = ""
    tags: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    keywords: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    # Search-mode tokens of content + tags, space-separated: tokenised once at write time so that building
    # an instance's BM25 index never runs jieba over every memory.
    search_text: str = Field(default="", sa_column=Column(Text, nullable=False))

    user_edited: bool = False
    pinned: bool = False
    notes: str = ""

    mention_count: int = 0
    # The dialogue line a record entry (type ``record``) was made from, so a branch filter can keep to the
    # current path of the line tree; None for curated memories. No foreign key: lines are never deleted.
    line_id: int | None = Field(default=None, index=True)
    last_mentioned_turn: int | None = None
    last_mentioned_at: datetime | None = None
    # Issue 25: the last reply whose prompt held this memory (written with the reply's provenance, in its
    # transaction); None: never in a prompt since it was recorded
    last_used_turn: int | None = None
    last_used_at: datetime | None = None

    # Issue 26 (curation). Who was present when it happened (seed 000's line identities: ``role:<role_id>``,
    # ``npc:<script_role_id>``, ``user``, ``narration``); None or empty: made before witnesses were recorded,
    # seen by everyone of the instance.
    witnesses: list[str] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    # The turns a fact held (Zep/Graphiti's validity interval): from `valid_from_turn`, until `valid_to_turn`
    # (None: still true). A fact a later one updated keeps its row, closed, pointing at its successor.
    valid_from_turn: int | None = None
    valid_to_turn: int | None = None
    superseded_by: int | None = None


class MemoryIndexState(SQLModel, table=True):
    """Revision of an instance's searchable memory text (see the module docstring)."""

    __tablename__ = "memory_index_state"

    instance_id: int = Field(foreign_key="save.id", primary_key=True)
    revision: int = 0


class MemoryConsolidation(SQLModel, table=True):
    """One consolidation step (issue 26, mem0's add / update / merge / none decisions): what a new fact did to
    the stored ones, who decided it (``rules`` or ``model``), and what to put back to undo it (`before`: the
    changed columns of the old memory as they were). `undone_at` is set once the step was undone."""

    __tablename__ = "memory_consolidation"

    id: int | None = Field(default=None, primary_key=True)
    instance_id: int = Field(foreign_key="save.id", index=True)
    character_id: int = 0
    turn: int = 0
    action: str  # nodes.rules.consolidation.Action
    memory_id: int | None = None  # the new memory (add / update), or the one a repeat merged into
    target_id: int | None = None  # the stored memory it updated or merged into
    slot: str = ""  # what the fact is about (`nodes.rules.consolidation.slot_of`)
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    decided_by: str = "rules"
    before: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    created_at: datetime = Field(default_factory=utcnow)
    undone_at: datetime | None = None
