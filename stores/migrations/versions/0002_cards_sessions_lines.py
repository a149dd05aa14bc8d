"""Today's columns and tables (issues 11, 13, 14, 15): the character's card fields and avatar, world-book settings
and entry sources, SillyTavern cards, memories' reply line, knowledge's creation turn, turn records' session, the
turn lock's holder.

Every step checks first: a database made before migrations was brought up to date by create_all and
add_missing_columns (stores/db.py), which add tables and nullable columns but no constraints, so this revision
runs on it as on one at the baseline.

Revision ID: 0002_cards_sessions_lines
Revises: 0001_baseline
Create Date: 2026-11-24
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision = "0002_cards_sessions_lines"
down_revision: str | None = "0001_baseline"
branch_labels: str | None = None
depends_on: str | None = None


def _inspector() -> Any:
    return sa.inspect(op.get_bind())


def _create_table(name: str, *items: Any) -> None:
    if not _inspector().has_table(name):
        op.create_table(name, *items)


def _add_column(table: str, column: sa.Column[Any]) -> None:
    if column.name not in {c["name"] for c in _inspector().get_columns(table)}:
        op.add_column(table, column)


def _create_index(name: str, table: str, columns: list[str]) -> None:
    if name not in {i["name"] for i in _inspector().get_indexes(table)}:
        op.create_index(name, table, columns, unique=False)


def upgrade() -> None:
    _create_table(
        "character_card",
        sa.Column("role_id", sa.Integer(), nullable=False),
        sa.Column("spec", AutoString(), nullable=False),
        sa.Column("source", AutoString(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("top_level", sa.JSON(), nullable=False),
        sa.Column("avatar", sa.LargeBinary(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["role_id"], ["role.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("role_id"),
    )
    _create_table(
        "worldbook_settings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("role_id", sa.Integer(), nullable=True),
        sa.Column("save_id", sa.Integer(), nullable=True),
        sa.Column("budget_share", sa.Float(), nullable=True),
        sa.Column("max_tokens", sa.Integer(), nullable=True),
        sa.Column("scan_depth", sa.Integer(), nullable=True),
        sa.Column("recursive", sa.Boolean(), nullable=True),
        sa.Column("max_recursion_steps", sa.Integer(), nullable=True),
        sa.Column("case_sensitive", sa.Boolean(), nullable=True),
        sa.Column("match_whole_words", sa.Boolean(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["role_id"], ["role.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["save_id"], ["save.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    _create_table(
        "worldbook_entry_source",
        sa.Column("entry_id", sa.Integer(), nullable=False),
        sa.Column("format", AutoString(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["entry_id"], ["worldbook_entry.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("entry_id"),
    )
    _add_column("background", sa.Column("updated_at", UTCDateTime(), nullable=True))
    _add_column("knowledge_entry", sa.Column("created_turn", sa.Integer(), nullable=True))
    _add_column("memory_entry", sa.Column("line_id", sa.Integer(), nullable=True))
    _add_column("role", sa.Column("avatar_image", sa.LargeBinary(), nullable=True))
    _add_column("role", sa.Column("avatar_mime", AutoString(), nullable=True))
    _add_column("role", sa.Column("traits", sa.Text(), nullable=True))
    _add_column("role", sa.Column("backstory", sa.Text(), nullable=True))
    _add_column("role", sa.Column("motives", sa.Text(), nullable=True))
    _add_column("role", sa.Column("greetings", sa.JSON(), nullable=True))
    _add_column("role", sa.Column("example_dialogue", sa.Text(), nullable=True))
    _add_column("role", sa.Column("system_prompt", sa.Text(), nullable=True))
    _add_column("role", sa.Column("post_history_instructions", sa.Text(), nullable=True))
    _add_column("role", sa.Column("updated_at", UTCDateTime(), nullable=True))
    _add_column("turn_lock", sa.Column("holder", AutoString(), nullable=True))
    _add_column("turn_lock", sa.Column("acquired_at", sa.Float(), nullable=True))
    _add_column("turn_record", sa.Column("session_id", sa.Integer(), nullable=True))
    _create_index("ix_worldbook_settings_role_id", "worldbook_settings", ["role_id"])
    _create_index("ix_worldbook_settings_save_id", "worldbook_settings", ["save_id"])
    _create_index("ix_memory_entry_line_id", "memory_entry", ["line_id"])
    _create_index("ix_turn_record_session_id", "turn_record", ["session_id"])
    # SQLite cannot add a constraint to a table (it would be rebuilt); its column has no foreign key there, as
    # add_missing_columns left it. PostgreSQL gets it unless it is there already.
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        keys = _inspector().get_foreign_keys("turn_record")
        if not any(key["constrained_columns"] == ["session_id"] for key in keys):
            op.create_foreign_key(
                "fk_turn_record_session_id_play_session", "turn_record", "play_session", ["session_id"], ["id"]
            )


def downgrade() -> None:
    raise NotImplementedError("0002 is not reversible: restore a backup to go back")
