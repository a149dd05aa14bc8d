"""Seed 004's trigger configuration as data (issue 23): table `trigger_config`, one row per scope (global, a
character, an instance) holding the settings set there as JSON.

Checks first, like 0002: create_all may have made the table already.

Revision ID: 0006_trigger_config
Revises: 0005_review_lines
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import UTCDateTime

revision = "0006_trigger_config"
down_revision: str | None = "0005_review_lines"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("trigger_config"):
        op.create_table(
            "trigger_config",
            sa.Column("id", sa.Integer(), nullable=False),
            sa.Column("role_id", sa.Integer(), nullable=True),
            sa.Column("save_id", sa.Integer(), nullable=True),
            sa.Column("fields", sa.JSON(), nullable=False),
            sa.Column("updated_at", UTCDateTime(), nullable=False),
            sa.ForeignKeyConstraint(["role_id"], ["role.id"], ondelete="CASCADE"),
            sa.ForeignKeyConstraint(["save_id"], ["save.id"], ondelete="CASCADE"),
            sa.PrimaryKeyConstraint("id"),
        )
    indexes = {index["name"] for index in sa.inspect(op.get_bind()).get_indexes("trigger_config")}
    for column in ("role_id", "save_id"):
        if f"ix_trigger_config_{column}" not in indexes:
            op.create_index(f"ix_trigger_config_{column}", "trigger_config", [column], unique=False)


def downgrade() -> None:
    op.drop_table("trigger_config")
