"""Database migrations (issue 14): `personalab db upgrade` brings a database made by the schema before migrations
(949b958's tables, as the baseline revision creates them) to the head and keeps every row; a database made by
create_all is stamped and upgraded without changes; `personalab db current` says where a database is. SQLite and
PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from alembic.autogenerate import produce_migrations
from alembic.migration import MigrationContext
from cli_helpers import cli
from personalab.stores import migrate
from personalab.stores.db import get_engine, session_scope
from personalab.stores.history import get_chat_history
from personalab.stores.migrate import BASELINE
from sqlalchemy import MetaData, create_engine, func, inspect, select, text
from sqlmodel import SQLModel

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def _engine(url: str) -> Any:
    return create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


def _old_database(url: str) -> dict[str, int]:
    """A database as the code before migrations left it: the baseline's tables, rows in them, no alembic stamp."""
    migrate.upgrade(url, BASELINE)
    engine = _engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE alembic_version"))  # the old code never stamped
        tables = MetaData()
        tables.reflect(conn)
        t = tables.tables
        conn.execute(
            t["background"].insert(), [{"id": 1, "name": "废土", "world_setting": "末日之后。", "created_at": NOW}]
        )
        conn.execute(
            t["role"].insert(),
            [{"id": 1, "name": "雷娜", "description": "赏金猎人", "persona": "冷静", "created_at": NOW}],
        )
        conn.execute(
            t["outline_point"].insert(),
            [{"id": i, "background_id": 1, "position": i, "content": f"第{i}幕"} for i in range(1, 4)],
        )
        conn.execute(
            t["save"].insert(),
            [{"id": 1, "title": "旧存档", "role_id": 1, "background_id": 1, "created_at": NOW, "updated_at": NOW}],
        )
        conn.execute(t["play_session"].insert(), [{"id": 1, "save_id": 1, "started_at": NOW}])
        lines = [
            {"id": 1, "save_id": 1, "attribute": "user", "content": "你好。", "parent_line_id": None},
            {"id": 2, "save_id": 1, "attribute": "assistant", "content": "嗯。", "parent_line_id": 1, "role_id": 1},
        ]
        conn.execute(t["line"].insert(), lines)
        conn.execute(text("UPDATE save SET last_message_id = 2 WHERE id = 1"))
        conn.execute(
            t["turn_record"].insert(),
            [{"id": 1, "save_id": 1, "turn": 1, "status": "ok", "model": "scripted", "created_at": NOW}],
        )
        conn.execute(
            t["knowledge_entry"].insert(),
            [
                {
                    "id": 1, "tag": "地点", "content": "绿洲在北方。", "importance": 0.5, "keywords": ["绿洲"],
                    "enabled": True, "user_edited": False, "created_at": NOW, "updated_at": NOW,
                }
            ],
        )  # fmt: skip
        counts = {name: conn.execute(select(func.count()).select_from(table)).scalar_one() for name, table in t.items()}
    engine.dispose()
    return counts


def _counts(url: str, names: set[str]) -> dict[str, int]:
    engine = _engine(url)
    with engine.connect() as conn:
        tables = MetaData()
        tables.reflect(conn, only=sorted(names))
        counts = {n: conn.execute(select(func.count()).select_from(tables.tables[n])).scalar_one() for n in names}
    engine.dispose()
    return counts


def _missing(url: str) -> list[Any]:
    """What the models have that the database lacks (tables, columns, indexes): nothing after an upgrade."""
    engine = _engine(url)
    with engine.connect() as conn:
        diff = produce_migrations(MigrationContext.configure(conn), SQLModel.metadata).upgrade_ops
    engine.dispose()
    assert diff is not None
    return [op for op in diff.as_diffs() if op[0] in ("add_table", "add_column", "add_index")]


def test_an_old_database_upgrades_and_keeps_every_row(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    before = _old_database(db_url)
    assert _missing(db_url), "the baseline lacks today's columns"
    code, out, err = cli(capsys, "db", "current")
    assert code == 0 and "not stamped" in out, err

    code, out, err = cli(capsys, "db", "upgrade")
    assert code == 0 and f"-> {migrate.head()}" in out, err
    assert _counts(db_url, set(before)) == before  # every row kept
    assert _missing(db_url) == []  # the current models' tables and columns are all there
    code, out, _ = cli(capsys, "db", "current", "--json")
    assert code == 0 and json.loads(out)["revision"] == migrate.head() and json.loads(out)["up_to_date"]
    code, out, _ = cli(capsys, "db", "upgrade")
    assert code == 0 and "up to date" in out

    # the foreign keys are a fresh database's (issue 27: SQLite's turn_record lacked session_id's)
    engine = _engine(db_url)
    try:
        keys = inspect(engine).get_foreign_keys("turn_record")
    finally:
        engine.dispose()
    assert any(key["constrained_columns"] == ["session_id"] and key["referred_table"] == "play_session" for key in keys)

    # the current code reads the old rows
    with session_scope(db_url) as session:
        history = get_chat_history(session, 1)
        assert [(line.attribute, line.content) for line in history] == [("user", "你好。"), ("assistant", "嗯。")]
        role = session.execute(text("SELECT name, traits FROM role WHERE id = 1")).one()
        assert tuple(role) == ("雷娜", None)


def test_a_database_made_by_create_all_is_stamped_and_upgraded(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    get_engine(db_url)  # how every process opens a database: create_all + add_missing_columns
    assert _missing(db_url) == []
    code, out, err = cli(capsys, "db", "upgrade", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result == {"before": None, "after": migrate.head(), "stamped_baseline": True}
    assert migrate.current(db_url)["up_to_date"]
    with _engine(db_url).connect() as conn:
        assert "alembic_version" in inspect(conn).get_table_names()


def test_an_empty_database_is_made_by_the_revisions(db_url: str) -> None:
    result = migrate.upgrade(db_url)
    assert result == {"before": None, "after": migrate.head(), "stamped_baseline": False}
    assert _missing(db_url) == []


def test_after_the_upgrade_a_turn_keeps_a_plot_node_per_branch(db_url: str) -> None:
    """0005: plot nodes and suggestions carry their reply line, and the baseline's one-plot-node-per-turn key is
    gone, so a regenerated turn's node is stored beside the first one's (seed 000's tree)."""
    from personalab.stores.review import list_plot_nodes, record_plot_node

    _old_database(db_url)
    migrate.upgrade(db_url)
    engine = _engine(db_url)
    with engine.connect() as conn:
        assert "uq_plot_node_save_turn" not in {
            key["name"] for key in inspect(conn).get_unique_constraints("plot_node")
        }
    engine.dispose()
    with session_scope(db_url) as session:
        record_plot_node(session, 1, 1, None, "第一个回复的剧情节点", line_id=2)
        record_plot_node(session, 1, 1, None, "另一个分支的剧情节点", line_id=1)
        assert len(list_plot_nodes(session, 1, all_branches=True)) == 2
