"""The outbox of durable writes (issue 14): one row per store write a turn queues for after its reply.

Checks first, like 0002: a database brought up to date by create_all already has the table.

Revision ID: 0004_outbox
Revises: 0003_ownership
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision = "0004_outbox"
down_revision: str | None = "0003_ownership"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("outbox"):
        op.create_table(
            "outbox",
            sa.Column("id", sa.Integer(), nullable=False),
            sa.Column("instance_id", sa.Integer(), nullable=False),
            sa.Column("kind", AutoString(), nullable=False),
            sa.Column("key", AutoString(), nullable=False),
            sa.Column("payload", sa.JSON(), nullable=False),
            sa.Column("attempts", sa.Integer(), nullable=False),
            sa.Column("next_attempt_at", sa.Float(), nullable=False),
            sa.Column("last_error", sa.Text(), nullable=True),
            sa.Column("claimed_by", AutoString(), nullable=True),
            sa.Column("claimed_until", sa.Float(), nullable=True),
            sa.Column("created_at", UTCDateTime(), nullable=False),
            sa.Column("applied_at", UTCDateTime(), nullable=True),
            sa.ForeignKeyConstraint(["instance_id"], ["save.id"]),
            sa.PrimaryKeyConstraint("id"),
        )
    if "ix_outbox_pending" not in {index["name"] for index in sa.inspect(op.get_bind()).get_indexes("outbox")}:
        op.create_index("ix_outbox_pending", "outbox", ["instance_id", "applied_at", "id"], unique=False)


def downgrade() -> None:
    raise NotImplementedError("revisions are not reversible: restore a backup")
