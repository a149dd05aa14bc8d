"""Users own their library (issue 14, auth and ownership): `owner` on characters (`role`), backgrounds and
instances (`save`), and `shared` on characters and backgrounds. Everything else belongs through them (an
instance's lines, memories, records, suggestions and its own knowledge and world-book entries; a character's
card and entries). Rows made before have no owner: they are the local operator's.

Every step checks first, like 0002: create_all and add_missing_columns may have added the columns already.

Revision ID: 0003_ownership
Revises: 0002_cards_sessions_lines
Create Date: 2026-11-26
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlmodel.sql.sqltypes import AutoString

revision = "0003_ownership"
down_revision: str | None = "0002_cards_sessions_lines"
branch_labels: str | None = None
depends_on: str | None = None


def _inspector() -> Any:
    return sa.inspect(op.get_bind())


def _add_column(table: str, column: sa.Column[Any]) -> None:
    if column.name not in {c["name"] for c in _inspector().get_columns(table)}:
        op.add_column(table, column)


def _create_index(name: str, table: str, columns: list[str]) -> None:
    if name not in {i["name"] for i in _inspector().get_indexes(table)}:
        op.create_index(name, table, columns, unique=False)


def upgrade() -> None:
    for table in ("role", "background", "save"):
        _add_column(table, sa.Column("owner", AutoString(), nullable=True))
        _create_index(f"ix_{table}_owner", table, ["owner"])
    for table in ("role", "background"):
        _add_column(table, sa.Column("shared", sa.Boolean(), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("revisions are not reversible: restore the backup taken before upgrading")
