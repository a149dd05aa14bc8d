"""Per-turn figures for the statistics charts (issue 25): `turn_record.figures` holds what the graph measured for
the turn — the prompt's tokens per region (head, middle, retrieved, tail), the graph's own time and each node's
time in milliseconds. Older rows keep none (their charts show no point for them).

Checks first, like 0009: add_missing_columns (stores/db.py) may have added the column already.

Revision ID: 0010_charts_turn_figures
Revises: 0009_curated_memory
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_charts_turn_figures"
down_revision: str | None = "0009_curated_memory"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    if "figures" not in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("turn_record")}:
        op.add_column("turn_record", sa.Column("figures", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("turn_record", "figures")
