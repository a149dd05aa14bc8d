"""A card plays by itself in its language (issue 28): `save.language` is the language of the prompt's own
scaffolding for the instance (`zh`, `en`; None on older rows: Chinese, as before), and `background.open_outline`
marks a background made from a card's scenario, whose outline the director never forces (no progress markers
asked, no pull-back).

Checks first, like 0010: add_missing_columns (stores/db.py) may have added the columns already.

Revision ID: 0012_cardplay_language
Revises: 0011_inspector_last_used
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_cardplay_language"
down_revision: str | None = "0011_inspector_last_used"
branch_labels: str | None = None
depends_on: str | None = None


def _columns(table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    if "language" not in _columns("save"):
        op.add_column("save", sa.Column("language", sa.String(), nullable=True))
    if "open_outline" not in _columns("background"):
        op.add_column("background", sa.Column("open_outline", sa.Boolean(), nullable=True))


def downgrade() -> None:
    op.drop_column("background", "open_outline")
    op.drop_column("save", "language")
