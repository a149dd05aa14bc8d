"""The memory console's tables (issue 23): `memory_edit`, the earlier texts of user-edited memories, and
`reply_provenance`, what fed each reply's prompt (stores/memapi_tables.py).

Checks first, like 0002: a database brought up to date by create_all already has the tables.

Revision ID: 0007_memory_edits_provenance
Revises: 0006_trigger_config
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision = "0007_memory_edits_provenance"
down_revision: str | None = "0006_trigger_config"
branch_labels: str | None = None
depends_on: str | None = None


def _indexes(table: str) -> set[str | None]:
    return {index["name"] for index in sa.inspect(op.get_bind()).get_indexes(table)}


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("memory_edit"):
        op.create_table(
            "memory_edit",
            sa.Column("id", sa.Integer(), nullable=False),
            sa.Column("memory_id", sa.Integer(), nullable=False),
            sa.Column("instance_id", sa.Integer(), nullable=False),
            sa.Column("version", sa.Integer(), nullable=False),
            sa.Column("content", sa.Text(), nullable=False),
            sa.Column("type", AutoString(), nullable=False),
            sa.Column("layer", AutoString(), nullable=False),
            sa.Column("importance", sa.Float(), nullable=False),
            sa.Column("tags", sa.JSON(), nullable=False),
            sa.Column("notes", AutoString(), nullable=False),
            sa.Column("edited_at", UTCDateTime(), nullable=False),
            sa.ForeignKeyConstraint(["instance_id"], ["save.id"]),
            sa.PrimaryKeyConstraint("id"),
        )
    if "ix_memory_edit_memory" not in _indexes("memory_edit"):
        op.create_index("ix_memory_edit_memory", "memory_edit", ["memory_id", "version"], unique=True)
    if "ix_memory_edit_instance_id" not in _indexes("memory_edit"):
        op.create_index("ix_memory_edit_instance_id", "memory_edit", ["instance_id"], unique=False)
    if not inspector.has_table("reply_provenance"):
        op.create_table(
            "reply_provenance",
            sa.Column("id", sa.Integer(), nullable=False),
            sa.Column("instance_id", sa.Integer(), nullable=False),
            sa.Column("turn", sa.Integer(), nullable=False),
            sa.Column("reply_line_id", sa.Integer(), nullable=False),
            sa.Column("line_ids", sa.JSON(), nullable=False),
            sa.Column("data", sa.JSON(), nullable=False),
            sa.Column("created_at", UTCDateTime(), nullable=False),
            sa.ForeignKeyConstraint(["instance_id"], ["save.id"]),
            sa.PrimaryKeyConstraint("id"),
            sa.UniqueConstraint("reply_line_id"),
        )
    if "ix_reply_provenance_scope" not in _indexes("reply_provenance"):
        op.create_index("ix_reply_provenance_scope", "reply_provenance", ["instance_id", "reply_line_id"], unique=False)


def downgrade() -> None:
    raise NotImplementedError("revisions are not reversible: restore a backup")
