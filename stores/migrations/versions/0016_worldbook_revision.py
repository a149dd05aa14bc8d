"""The world book's revisions (issue 28): the table `worldbook_revision` (one row per scope: global, a character, an
instance) and the triggers on `worldbook_entry` and `worldbook_entry_source` that count a scope's row up at every
change to its entries, on SQLite and PostgreSQL (`stores.worldbook_revision`). A turn checks its prepared book by
reading three rows by primary key instead of an aggregate over every entry the instance sees.

Checks first, like 0015: `create_all` (stores/db.py) may have made the table and its triggers already.

Revision ID: 0016_worldbook_revision
Revises: 0015_closed_memory_index
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from personalab.stores.worldbook_revision import TABLE, create_sql, drop_sql

revision = "0016_worldbook_revision"
down_revision: str | None = "0015_closed_memory_index"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    bind = op.get_bind()
    if TABLE in sa.inspect(bind).get_table_names():
        return  # made by create_all, with its triggers
    op.create_table(
        TABLE,
        sa.Column("scope", sa.String(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("scope"),
    )
    for statement in create_sql(bind.dialect.name):
        op.get_bind().exec_driver_sql(statement)


def downgrade() -> None:
    for statement in drop_sql(op.get_bind().dialect.name):
        op.get_bind().exec_driver_sql(statement)
    op.drop_table(TABLE)
