"""A run's identity (issue 27: a killed server replays turns): `turn_run` records which run stored which user line
and, once stored, which reply, so a run replayed after its server was killed answers with what it stored instead
of storing the user's line and a second reply again.

Checks first, like 0002: create_tables (stores/db.py) may have created the table already.

And on SQLite, `turn_record.session_id` gets the foreign key to `play_session` a fresh database has (0002 could
not add it there): Alembic's batch mode rebuilds the table with it, keeping every row.

Revision ID: 0008_run_identity
Revises: 0007_memory_edits_provenance
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision = "0008_run_identity"
down_revision: str | None = "0007_memory_edits_provenance"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        keys = sa.inspect(bind).get_foreign_keys("turn_record")
        if not any(key["constrained_columns"] == ["session_id"] for key in keys):
            with op.batch_alter_table("turn_record", recreate="always") as batch:
                batch.create_foreign_key(
                    "fk_turn_record_session_id_play_session", "play_session", ["session_id"], ["id"]
                )
    if "turn_run" in sa.inspect(bind).get_table_names():
        return
    op.create_table(
        "turn_run",
        sa.Column("save_id", sa.Integer(), sa.ForeignKey("save.id"), nullable=False),
        sa.Column("run_key", AutoString(length=200), nullable=False),
        sa.Column("user_line_id", sa.Integer(), sa.ForeignKey("line.id"), nullable=False),
        sa.Column("reply_line_id", sa.Integer(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("save_id", "run_key"),
    )


def downgrade() -> None:
    op.drop_table("turn_run")
