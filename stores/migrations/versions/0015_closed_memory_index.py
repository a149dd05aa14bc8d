"""The partial index `ix_memory_entry_closed` (instance_id, where `valid_to_turn IS NOT NULL`): every turn's retrieval
reads the instance's memories a later fact closed (issue 26's consolidation), and the director the turns of those;
without it each read went through every memory row of the instance (~20 ms a turn at 10,000 memories, issue 28's
whole-retrieval figure). Checks first, like 0011: `create_all` on a fresh database made it already.

Revision ID: 0015_closed_memory_index
Revises: 0014_knowledge_order
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_closed_memory_index"
down_revision: str | None = "0014_knowledge_order"
branch_labels: str | None = None
depends_on: str | None = None

WHERE = sa.text("valid_to_turn IS NOT NULL")


def upgrade() -> None:
    if "ix_memory_entry_closed" not in {
        index["name"] for index in sa.inspect(op.get_bind()).get_indexes("memory_entry")
    }:
        op.create_index(
            "ix_memory_entry_closed", "memory_entry", ["instance_id"], sqlite_where=WHERE, postgresql_where=WHERE
        )


def downgrade() -> None:
    op.drop_index("ix_memory_entry_closed", table_name="memory_entry")
