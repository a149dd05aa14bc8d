"""The prepared world book is never stale (issue 28): its version is the revisions of the instance's three scopes,
kept by the database's triggers, so a change to an entry the instance sees — made by another process, on its own
engine, in raw SQL that no store function wrote — is in the next turn's prepared book; a change to an entry the
instance does not see leaves its version alone. A database made before the revisions gets them by migration 0016.
SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

from personalab.stores import migrate
from personalab.stores.db import session_scope
from personalab.stores.saves import create_role, create_save
from personalab.stores.worldbook import Scope, add_worldbook_entry, prepared_worldbook_for_instance, worldbook_version
from sqlalchemy import create_engine, text


def _other_process(url: str, *statements: tuple[str, dict[str, Any]]) -> None:
    """Raw SQL on an engine of its own, as another process (or a tool outside PersonaLab) would write."""
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.begin() as conn:
            for statement, params in statements:
                conn.execute(text(statement), params)
    finally:
        engine.dispose()


def _book(url: str, save_id: int) -> dict[int, str]:
    with session_scope(url) as session:
        return {int(entry.id): entry.content for entry in prepared_worldbook_for_instance(session, save_id).entries}


def _version(url: str, save_id: int) -> tuple[Any, ...]:
    with session_scope(url) as session:
        return worldbook_version(session, save_id)


def test_a_raw_write_by_another_process_is_in_the_next_prepared_book(db_url: str) -> None:
    with session_scope(db_url) as session:
        role = create_role(session, "雷娜")
        other_role = create_role(session, "老陈")
        save = int(create_save(session, role.id, None, title="mine").id)  # type: ignore[arg-type]
        other = int(create_save(session, other_role.id, None, title="other").id)  # type: ignore[arg-type]
        own = add_worldbook_entry(session, "绿洲在北方。", keywords=["绿洲"], scope=Scope(role_id=role.id))
        add_worldbook_entry(session, "全局设定。", keywords=["设定"])
    assert sorted(_book(db_url, save).values()) == ["全局设定。", "绿洲在北方。"]
    kept = _version(db_url, save)

    # another character's and another instance's entries are not this book: its version stays (no rebuild)
    _other_process(
        db_url,
        (
            "INSERT INTO worldbook_entry (content, keywords, secondary_keywords, selective_logic, trigger_type, kind,"
            " priority, constant, enabled, relevance_weight, emotional_weight, time_decay_factor, emotions, role_id,"
            " save_id, title, created_at, updated_at) VALUES ('别人的。', '[]', '[]', 'and_any', 'keyword', 'semantic',"
            " 100, false, true, 1.0, 0.5, 0.0, '[]', :role, :save, '', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)",
            {"role": other_role.id, "save": other},
        ),
    )
    assert _version(db_url, save) == kept

    # an edit of the character's entry, in raw SQL that leaves updated_at as it was
    _other_process(db_url, ("UPDATE worldbook_entry SET content = '绿洲在南方。' WHERE id = :id", {"id": own.id}))
    assert _book(db_url, save)[int(own.id)] == "绿洲在南方。"  # type: ignore[arg-type]

    # an entry added to the instance itself, then its SillyTavern source changed alone
    _other_process(
        db_url,
        (
            "INSERT INTO worldbook_entry (content, keywords, secondary_keywords, selective_logic, trigger_type, kind,"
            " priority, constant, enabled, relevance_weight, emotional_weight, time_decay_factor, emotions,"
            " save_id, title, created_at, updated_at) VALUES ('只在这局。', '[\"这局\"]', '[]', 'and_any', 'keyword',"
            " 'semantic', 100, false, true, 1.0, 0.5, 0.0, '[]', :save, '', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)",
            {"save": save},
        ),
    )
    added = next(entry_id for entry_id, content in _book(db_url, save).items() if content == "只在这局。")
    before = _version(db_url, save)
    _other_process(
        db_url,
        (
            "INSERT INTO worldbook_entry_source (entry_id, format, data) VALUES (:id, 'world info', :data)",
            {"id": added, "data": json.dumps({"uid": 7})},
        ),
    )
    assert _version(db_url, save) != before
    before = _version(db_url, save)
    _other_process(
        db_url,
        ("UPDATE worldbook_entry_source SET data = :data WHERE entry_id = :id", {"id": added, "data": '{"uid": 8}'}),
    )
    assert _version(db_url, save) != before

    # deletions: the instance's entry (its source goes with it) and the global one
    _other_process(
        db_url,
        ("DELETE FROM worldbook_entry_source WHERE entry_id = :id", {"id": added}),
        ("DELETE FROM worldbook_entry WHERE id = :id", {"id": added}),
        ("DELETE FROM worldbook_entry WHERE content = '全局设定。'", {}),
    )
    assert sorted(_book(db_url, save).values()) == ["绿洲在南方。"]


def test_a_database_made_before_the_revisions_gets_them_by_migration(db_url: str) -> None:
    migrate.upgrade(db_url, "0015_closed_memory_index")
    _other_process(
        db_url,
        (
            "INSERT INTO role (id, name, description, persona, created_at) VALUES (1, 'r', '', '', CURRENT_TIMESTAMP)",
            {},
        ),
        (
            "INSERT INTO save (id, title, role_id, created_at, updated_at)"
            " VALUES (1, 's', 1, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)",
            {},
        ),
        (
            "INSERT INTO worldbook_entry (content, keywords, secondary_keywords, selective_logic, trigger_type, kind,"
            " priority, constant, enabled, relevance_weight, emotional_weight, time_decay_factor, emotions, role_id,"
            " title, created_at, updated_at) VALUES ('旧条目。', '[]', '[]', 'and_any', 'keyword', 'semantic', 100,"
            " false, true, 1.0, 0.5, 0.0, '[]', 1, '', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)",
            {},
        ),
    )
    assert migrate.upgrade(db_url)["after"] == "0016_worldbook_revision"
    kept = _version(db_url, 1)
    assert [scope for scope, _revision, _token in kept] == ["role:1"]  # the old entries' scope has its revision
    assert list(_book(db_url, 1).values()) == ["旧条目。"]
    _other_process(db_url, ("UPDATE worldbook_entry SET enabled = false", {}))
    assert _version(db_url, 1) != kept
