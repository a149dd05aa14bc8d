"""The memory inspector (issue 25): `memory_entry.last_used_turn` / `last_used_at` (the last reply whose prompt
held the memory, written with that reply's provenance) and the index `ix_memory_entry_branch` (instance_id,
line_id) for the inspector's current-branch page. Rows already stored keep no "last used" (never since recorded).

Every step checks first, like 0002: add_missing_columns (stores/db.py) may have added the columns already.

Revision ID: 0011_inspector_last_used
Revises: 0010_charts_turn_figures
Create Date: 2026-11-27
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import UTCDateTime

revision = "0011_inspector_last_used"
down_revision: str | None = "0010_charts_turn_figures"
branch_labels: str | None = None
depends_on: str | None = None


def _inspector() -> Any:
    return sa.inspect(op.get_bind())


def _add_column(table: str, column: sa.Column[Any]) -> None:
    if column.name not in {c["name"] for c in _inspector().get_columns(table)}:
        op.add_column(table, column)


def upgrade() -> None:
    _add_column("memory_entry", sa.Column("last_used_turn", sa.Integer(), nullable=True))
    _add_column("memory_entry", sa.Column("last_used_at", UTCDateTime(), nullable=True))
    if "ix_memory_entry_branch" not in {index["name"] for index in _inspector().get_indexes("memory_entry")}:
        op.create_index("ix_memory_entry_branch", "memory_entry", ["instance_id", "line_id"])


def downgrade() -> None:
    raise NotImplementedError("0010 is not reversible: restore a backup to go back")
