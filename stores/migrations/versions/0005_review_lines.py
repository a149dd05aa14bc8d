"""The review's plot nodes and world-book suggestions follow the branch (issue 13, seed 000's tree): each carries
the reply line of the turn that wrote it (`line_id`), and plot nodes are no longer one per instance and turn (the
unique key `uq_plot_node_save_turn` goes: a regenerated turn keeps a node per branch). Rows already stored keep
no line and count as on every branch.

Every step checks first, like 0002: add_missing_columns (stores/db.py) may have added the columns already.

Revision ID: 0005_review_lines
Revises: 0004_outbox
Create Date: 2026-11-26
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0005_review_lines"
down_revision: str | None = "0004_outbox"
branch_labels: str | None = None
depends_on: str | None = None

OLD_KEY = "uq_plot_node_save_turn"


def _inspector() -> Any:
    return sa.inspect(op.get_bind())


def _add_column(table: str, column: sa.Column[Any]) -> None:
    if column.name not in {c["name"] for c in _inspector().get_columns(table)}:
        op.add_column(table, column)


def _create_index(name: str, table: str, columns: list[str]) -> None:
    if name not in {i["name"] for i in _inspector().get_indexes(table)}:
        op.create_index(name, table, columns, unique=False)


def upgrade() -> None:
    _add_column("plot_node", sa.Column("line_id", sa.Integer(), nullable=True))
    _add_column("worldbook_suggestion", sa.Column("line_id", sa.Integer(), nullable=True))
    _create_index("ix_plot_node_line_id", "plot_node", ["line_id"])
    _create_index("ix_worldbook_suggestion_line_id", "worldbook_suggestion", ["line_id"])
    if OLD_KEY in {key["name"] for key in _inspector().get_unique_constraints("plot_node")}:
        # SQLite drops a constraint by rebuilding the table (Alembic's batch mode); PostgreSQL alters it in place
        with op.batch_alter_table("plot_node") as batch:
            batch.drop_constraint(OLD_KEY, type_="unique")


def downgrade() -> None:
    raise NotImplementedError("0005 is not reversible: restore a backup to go back")
