"""Curated memory (issue 26): each memory records who witnessed it (`witnesses`) and the turns it held
(`valid_from_turn`, `valid_to_turn`, `superseded_by`); `memory_consolidation` records every consolidation step so
that it can be undone; every `line` has its time (`created_at`; older lines none); `turn_record` records the tokens of each turn (`prompt_tokens`, `reply_tokens`). Rows already stored keep no witnesses (seen by everyone) and no validity (still true).

Every step checks first, like 0002: add_missing_columns (stores/db.py) may have added the columns already.

Revision ID: 0009_curated_memory
Revises: 0008_run_identity
Create Date: 2026-11-26
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision = "0009_curated_memory"
down_revision: str | None = "0008_run_identity"
branch_labels: str | None = None
depends_on: str | None = None


def _inspector() -> Any:
    return sa.inspect(op.get_bind())


def _add_column(table: str, column: sa.Column[Any]) -> None:
    if column.name not in {c["name"] for c in _inspector().get_columns(table)}:
        op.add_column(table, column)


def upgrade() -> None:
    _add_column("memory_entry", sa.Column("witnesses", sa.JSON(), nullable=True))
    _add_column("memory_entry", sa.Column("valid_from_turn", sa.Integer(), nullable=True))
    _add_column("memory_entry", sa.Column("valid_to_turn", sa.Integer(), nullable=True))
    _add_column("memory_entry", sa.Column("superseded_by", sa.Integer(), nullable=True))
    _add_column("line", sa.Column("created_at", UTCDateTime(), nullable=True))
    _add_column("turn_record", sa.Column("prompt_tokens", sa.Integer(), nullable=True))
    _add_column("turn_record", sa.Column("reply_tokens", sa.Integer(), nullable=True))
    if "memory_consolidation" not in _inspector().get_table_names():
        op.create_table(
            "memory_consolidation",
            sa.Column("id", sa.Integer(), primary_key=True),
            sa.Column("instance_id", sa.Integer(), sa.ForeignKey("save.id"), nullable=False),
            sa.Column("character_id", sa.Integer(), nullable=False),
            sa.Column("turn", sa.Integer(), nullable=False),
            sa.Column("action", AutoString(), nullable=False),
            sa.Column("memory_id", sa.Integer(), nullable=True),
            sa.Column("target_id", sa.Integer(), nullable=True),
            sa.Column("slot", AutoString(), nullable=False),
            sa.Column("reason", sa.Text(), nullable=False),
            sa.Column("decided_by", AutoString(), nullable=False),
            sa.Column("before", sa.JSON(), nullable=True),
            sa.Column("created_at", UTCDateTime(), nullable=False),
            sa.Column("undone_at", UTCDateTime(), nullable=True),
        )
        op.create_index("ix_memory_consolidation_instance_id", "memory_consolidation", ["instance_id"])


def downgrade() -> None:
    raise NotImplementedError("0006 is not reversible: restore a backup to go back")
