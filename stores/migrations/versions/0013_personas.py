"""User personas (issue 28): the `user_persona` table (name, description, optional avatar, owner) and the persona
each instance plays with (`save.persona_id`, none on older instances: their turns keep the user name per call);
the leaf last viewed under each line a swipe left (`save.viewed_leaves`), so that a swipe back lands there.

Every step checks first, like 0009: create_all / add_missing_columns (stores/db.py) may have made them already.

Revision ID: 0013_personas
Revises: 0012_cardplay_language
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString, UTCDateTime

revision = "0013_personas"
down_revision: str | None = "0012_cardplay_language"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "persona_id" not in {c["name"] for c in inspector.get_columns("save")}:
        op.add_column("save", sa.Column("persona_id", sa.Integer(), nullable=True))
        op.create_index("ix_save_persona_id", "save", ["persona_id"])
    if "viewed_leaves" not in {c["name"] for c in inspector.get_columns("save")}:
        op.add_column("save", sa.Column("viewed_leaves", sa.JSON(), nullable=True))
    if "user_persona" not in inspector.get_table_names():
        op.create_table(
            "user_persona",
            sa.Column("id", sa.Integer(), primary_key=True),
            sa.Column("name", AutoString(), nullable=False),
            sa.Column("description", sa.Text(), nullable=False),
            sa.Column("avatar_image", sa.LargeBinary(), nullable=True),
            sa.Column("avatar_mime", AutoString(), nullable=True),
            sa.Column("created_at", UTCDateTime(), nullable=False),
            sa.Column("updated_at", UTCDateTime(), nullable=True),
            sa.Column("owner", AutoString(), nullable=True),
        )
        op.create_index("ix_user_persona_owner", "user_persona", ["owner"])


def downgrade() -> None:
    op.drop_table("user_persona")
    op.drop_column("save", "viewed_leaves")
    op.drop_index("ix_save_persona_id", "save")
    op.drop_column("save", "persona_id")
