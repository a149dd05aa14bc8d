"""The world book's revisions (issue 28): one row per scope (global, a character, an instance), changed by the
database itself whenever an entry of that scope or its SillyTavern source is added, edited or deleted.

A turn's check "is the book this process prepared still the stored one?" then reads three small rows by primary
key (`revisions`) instead of an aggregate over every entry the instance sees (~9 ms a turn with 5,000 entries).
The rows are kept by triggers on `worldbook_entry` and `worldbook_entry_source` (SQLite and PostgreSQL), created with
the revision table — by `create_all` (`install`, on the metadata's `after_create`) or by migration
0016_worldbook_revision — so no write path can forget them: the store's functions, card and file imports, a
migration, another process or a raw SQL statement alike.

A row's `token` is a random number drawn at each change beside the counter: a database made again at the same URL
(tests, a restored file) counts from 1 again, and the pair still differs from what a process kept of the old one.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, text

TABLE = "worldbook_revision"
GLOBAL_SCOPE = "global"
TRIGGERS = (
    ("worldbook_entry", "worldbook_entry_revision"),
    ("worldbook_entry_source", "worldbook_entry_source_revision"),
)


def scope_key(role_id: int | None, save_id: int | None) -> str:
    """A row's scope as the revision table's key: `save:N`, `role:N` or `global` (an instance's entry may name its
    character too: the instance is its scope, as in `stores.worldbook._visible_filter`)."""
    if save_id is not None:
        return f"save:{save_id}"
    if role_id is not None:
        return f"role:{role_id}"
    return GLOBAL_SCOPE


def visible_scopes(save_id: int, role_id: int | None) -> list[str]:
    """The scopes whose entries instance `save_id` (of character `role_id`) sees."""
    scopes = [GLOBAL_SCOPE, scope_key(None, save_id)]
    if role_id is not None:
        scopes.append(scope_key(role_id, None))
    return scopes


def _key_sql(row: str) -> str:
    """`scope_key` in SQL, of the trigger's `NEW` / `OLD` row or a table alias."""
    return (
        f"CASE WHEN {row}.save_id IS NOT NULL THEN 'save:' || {row}.save_id "
        f"WHEN {row}.role_id IS NOT NULL THEN 'role:' || {row}.role_id ELSE '{GLOBAL_SCOPE}' END"
    )


def _token_sql(dialect: str) -> str:
    # SQLite's random() is a 64-bit integer; PostgreSQL's a float in [0, 1): 52 random bits as a bigint
    return "random()" if dialect == "sqlite" else "(random() * 4503599627370496)::bigint"


def _bump_sql(source: str) -> str:
    """One upsert adding 1 to the revision of each scope `source` (VALUES or a SELECT) names."""
    return (
        f"INSERT INTO {TABLE} (scope, revision, token) {source} "
        f"ON CONFLICT (scope) DO UPDATE SET revision = {TABLE}.revision + 1, token = excluded.token"
    )


def create_sql(dialect: str) -> list[str]:
    """The statements that make the triggers (and, on PostgreSQL, their functions) and give every scope that has
    entries already its first revision. The table itself is `WorldbookRevisionRow`'s."""
    token = _token_sql(dialect)
    # a token per scope, not per entry: the scopes first, then one random number each
    seed = _bump_sql(
        f"SELECT k.scope, 1, {token} FROM (SELECT DISTINCT {_key_sql('e')} AS scope FROM worldbook_entry AS e) "
        "AS k WHERE true",
    )
    if dialect == "sqlite":
        entry_new = _bump_sql(f"VALUES ({_key_sql('NEW')}, 1, {token})")
        entry_old = _bump_sql(f"VALUES ({_key_sql('OLD')}, 1, {token})")

        def source(row: str) -> str:
            return _bump_sql(
                f"SELECT {_key_sql('e')}, 1, {token} FROM worldbook_entry AS e WHERE e.id = {row}.entry_id"
            )

        statements = [
            f"CREATE TRIGGER IF NOT EXISTS worldbook_entry_revision_insert AFTER INSERT ON worldbook_entry "
            f"BEGIN {entry_new}; END",
            f"CREATE TRIGGER IF NOT EXISTS worldbook_entry_revision_update AFTER UPDATE ON worldbook_entry "
            f"BEGIN {entry_old}; {entry_new}; END",
            f"CREATE TRIGGER IF NOT EXISTS worldbook_entry_revision_delete AFTER DELETE ON worldbook_entry "
            f"BEGIN {entry_old}; END",
            f"CREATE TRIGGER IF NOT EXISTS worldbook_entry_source_revision_insert AFTER INSERT ON "
            f"worldbook_entry_source BEGIN {source('NEW')}; END",
            f"CREATE TRIGGER IF NOT EXISTS worldbook_entry_source_revision_update AFTER UPDATE ON "
            f"worldbook_entry_source BEGIN {source('OLD')}; {source('NEW')}; END",
            # a source deleted with its entry (ON DELETE CASCADE) finds no entry: the entry's own trigger counted it
            f"CREATE TRIGGER IF NOT EXISTS worldbook_entry_source_revision_delete AFTER DELETE ON "
            f"worldbook_entry_source BEGIN {source('OLD')}; END",
        ]
        return [*statements, seed]
    entry_row = _bump_sql(f"VALUES ({_key_sql('r')}, 1, {token})")
    source_row = _bump_sql(f"SELECT {_key_sql('e')}, 1, {token} FROM worldbook_entry AS e WHERE e.id = r.entry_id")
    statements = []
    for table, function in TRIGGERS:
        bump = entry_row if table == "worldbook_entry" else source_row
        # the function resolves the table by the search path it was created under (a test's schema, the
        # deployment's), not by whichever the writing session has
        statements.append(
            f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql "
            "SET search_path FROM CURRENT AS $body$\n"
            f"DECLARE r {table};\n"  # the row changed, OLD then NEW
            "BEGIN\n"
            "  IF TG_OP <> 'INSERT' THEN r := OLD; " + bump + "; END IF;\n"
            "  IF TG_OP <> 'DELETE' THEN r := NEW; " + bump + "; END IF;\n"
            "  RETURN NULL;\n"
            "END $body$"
        )
        statements.append(f"DROP TRIGGER IF EXISTS {function} ON {table}")
        statements.append(
            f"CREATE TRIGGER {function} AFTER INSERT OR UPDATE OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {function}()"
        )
    return [*statements, seed]


def drop_sql(dialect: str) -> list[str]:
    """The statements that remove the triggers (the migration's downgrade; the table goes after them)."""
    if dialect == "sqlite":
        return [
            f"DROP TRIGGER IF EXISTS {table}_revision_{event}"
            for table, _function in TRIGGERS
            for event in ("insert", "update", "delete")
        ]
    return [
        statement
        for table, function in TRIGGERS
        for statement in (f"DROP TRIGGER IF EXISTS {function} ON {table}", f"DROP FUNCTION IF EXISTS {function}()")
    ]


def install(connection: Any) -> None:
    """Create the triggers on `connection` and seed the rows (inside the caller's transaction)."""
    for statement in create_sql(connection.dialect.name):
        connection.exec_driver_sql(statement)


def revisions(session: Any, scopes: list[str]) -> tuple[tuple[str, int, int | None], ...]:
    """(scope, revision, token) of those of `scopes` that have a row, in scope order: three reads by primary key."""
    rows = session.execute(
        text(f"SELECT scope, revision, token FROM {TABLE} WHERE scope IN :scopes").bindparams(
            bindparam("scopes", expanding=True)
        ),
        {"scopes": scopes},
    ).all()
    return tuple(sorted((str(scope), int(revision), token) for scope, revision, token in rows))


def instance_revisions(session: Any, save_id: int) -> tuple[int | None, tuple[tuple[str, int, int | None], ...]] | None:
    """(the instance's character, `revisions` of the scopes it sees) in one query — a turn's whole check of its
    prepared book; None when the instance does not exist."""
    rows = session.execute(
        text(
            f"SELECT s.role_id, r.scope, r.revision, r.token FROM save AS s LEFT JOIN {TABLE} AS r "
            f"ON r.scope IN ('{GLOBAL_SCOPE}', 'save:' || s.id, 'role:' || s.role_id) WHERE s.id = :save_id"
        ),
        {"save_id": save_id},
    ).all()
    if not rows:
        return None
    found = sorted((str(scope), int(revision), token) for _role, scope, revision, token in rows if scope is not None)
    return rows[0][0], tuple(found)
