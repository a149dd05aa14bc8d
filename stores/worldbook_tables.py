"""Tables of the world book and the knowledge library (seeds 004 / 001 常识知识库).

Scope, for both tables: `role_id` and `save_id` both empty = global; `role_id` = one character's entry;
`save_id` = one conversation instance's entry (never both). An instance sees global + its character's +
its own. Keyword and emotion lists are JSON columns (the same on SQLite and PostgreSQL). A row reads as its
entry with `KnowledgeEntry.model_validate(row)` / `WorldbookEntry.model_validate(row)` (nodes.rules).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from personalab.stores.tables import utcnow
from sqlalchemy import JSON, BigInteger, Column, Text, event
from sqlmodel import Field, SQLModel


class KnowledgeEntryRow(SQLModel, table=True):
    """Seed 001 CommonKnowledgeEntry: tag, content, importance, keywords, enabled, user-edited, target."""

    __tablename__ = "knowledge_entry"

    id: int | None = Field(default=None, primary_key=True)
    tag: str
    content: str = Field(sa_column=Column(Text, nullable=False))
    importance: float = 0.5
    keywords: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    enabled: bool = True
    user_edited: bool = False
    role_id: int | None = Field(default=None, foreign_key="role.id", index=True)
    save_id: int | None = Field(default=None, foreign_key="save.id", index=True)
    # seed 001 creationTick: the turn an entry made from an event was made at (time prefix); None: permanent.
    # Nullable: stores.db.add_missing_columns adds it to an older database
    created_turn: int | None = None
    # the editor's order (issue 25): lower is injected first; a new row takes its id. Nullable for
    # stores.db.add_missing_columns; an unset one counts as its id (migration 0014 sets it for older rows)
    order: int | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class WorldbookEntryRow(SQLModel, table=True):
    """Seed 004 MemoryTriggerEntry, plus SillyTavern's secondary keys and source uid for imported lorebooks."""

    __tablename__ = "worldbook_entry"

    id: int | None = Field(default=None, primary_key=True)
    uid: str | None = None  # the entry's uid in the file it was imported from
    title: str = ""
    content: str = Field(sa_column=Column(Text, nullable=False))
    keywords: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    secondary_keywords: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    selective_logic: str = "and_any"
    trigger_type: str = "keyword"
    kind: str = "semantic"
    priority: int = 100
    constant: bool = False
    enabled: bool = True
    position: str | None = None
    relevance_weight: float = 1.0
    emotional_weight: float = 0.5
    time_decay_factor: float = 0.0
    emotions: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    min_turn: int | None = None
    max_turn: int | None = None
    min_gap_seconds: float | None = None
    max_gap_seconds: float | None = None
    min_turns_since_fired: int | None = None
    role_id: int | None = Field(default=None, foreign_key="role.id", index=True)
    save_id: int | None = Field(default=None, foreign_key="save.id", index=True)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @property
    def temporal(self) -> dict[str, Any]:
        """The time window's columns as one object: what `WorldbookEntry.model_validate(row)` reads."""
        return {name: getattr(self, name) for name in TEMPORAL_COLUMNS}


TEMPORAL_COLUMNS = ("min_turn", "max_turn", "min_gap_seconds", "max_gap_seconds", "min_turns_since_fired")


class WorldbookEntrySourceRow(SQLModel, table=True):
    """The SillyTavern entry an imported world-book entry came from (issue 15), whole: the fields with no column
    here (position, depth, role, probability, case sensitivity, whole words, groups, timed effects, extensions)
    are kept for a lossless export and read by the trigger (`nodes.rules.worldbook.sillytavern_options`)."""

    __tablename__ = "worldbook_entry_source"

    entry_id: int = Field(primary_key=True, foreign_key="worldbook_entry.id", ondelete="CASCADE")  # goes with its entry
    format: str  # "world info" (a SillyTavern world-info file) or "character book" (a card's lorebook)
    data: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class WorldbookSettingsRow(SQLModel, table=True):
    """A world book's settings as data (issue 15, `nodes.rules.worldbook.WorldbookSettings`): one row for everything
    (both ids empty), per character (its book) or per instance; an empty column is "not set here". The row goes with
    its character or instance."""

    __tablename__ = "worldbook_settings"

    id: int | None = Field(default=None, primary_key=True)
    role_id: int | None = Field(default=None, foreign_key="role.id", ondelete="CASCADE", index=True)
    save_id: int | None = Field(default=None, foreign_key="save.id", ondelete="CASCADE", index=True)
    budget_share: float | None = None
    max_tokens: int | None = None
    scan_depth: int | None = None
    recursive: bool | None = None
    max_recursion_steps: int | None = None
    case_sensitive: bool | None = None
    match_whole_words: bool | None = None
    updated_at: datetime = Field(default_factory=utcnow)


class WorldbookRevisionRow(SQLModel, table=True):
    """A world-book scope's revision (issue 28, `stores.worldbook_revision`): `global`, `role:N` or `save:N`, counted
    up with a new random `token` by the database's triggers at every change to an entry of that scope."""

    __tablename__ = "worldbook_revision"

    scope: str = Field(primary_key=True)
    revision: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    token: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


@event.listens_for(SQLModel.metadata, "after_create")
def _revision_triggers(_metadata: Any, connection: Any, tables: Any = (), **_kw: Any) -> None:
    """The revision table's triggers, made with it by `create_all` (a new database, or an older one that lacks the
    table); migration 0016 makes them on a database it upgrades."""
    if any(getattr(table, "name", None) == WorldbookRevisionRow.__tablename__ for table in tables or ()):
        from personalab.stores.worldbook_revision import install

        install(connection)


# the card table is registered with these tables (stores.db imports this module)
from personalab.stores import card_tables  # noqa: E402, F401
