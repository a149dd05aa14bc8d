"""The knowledge library's order (issue 25): `knowledge_entry.order`, the editor's order (lower is injected
first). Existing rows get their id, so the order is what it was (oldest first).

Checks first, like 0009: create_all / add_missing_columns (stores/db.py) may have added the column already.

Revision ID: 0014_knowledge_order
Revises: 0013_personas
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_knowledge_order"
down_revision: str | None = "0013_personas"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "order" not in {c["name"] for c in inspector.get_columns("knowledge_entry")}:
        op.add_column("knowledge_entry", sa.Column("order", sa.Integer(), nullable=True))
    entries = sa.table("knowledge_entry", sa.column("id", sa.Integer()), sa.column("order", sa.Integer()))
    op.execute(entries.update().where(entries.c.order.is_(None)).values(order=entries.c.id))


def downgrade() -> None:
    op.drop_column("knowledge_entry", "order")
