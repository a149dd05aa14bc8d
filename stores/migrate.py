"""Database migrations (issue 14): Alembic revisions in stores/migrations/versions, run by `personalab db upgrade`.

How they coexist with the schema creation of stores/db.py (create_all + add_missing_columns, which every process
still runs when it opens a database, so a new database works without a migration step):

- a database Alembic has not stamped (made by create_all, before or after migrations existed) is stamped at the
  baseline (0001: the schema before migrations) and upgraded from there; every revision after the baseline checks
  before it changes (a table, column, index or key that create_all or add_missing_columns already made is left
  as it is), so it runs the same on a database at the baseline and on one create_all brought up to date;
- an empty database gets the baseline's tables from the revisions themselves;
- a stamped database runs the revisions it lacks.

The run takes the schema creators' lock (PostgreSQL: the per-schema advisory lock of stores/db.py), so a process
opening the database meanwhile does not run create_all beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from personalab.stores import db as _db
from personalab.stores.config import database_url
from sqlalchemy import Connection, create_engine, inspect
from sqlalchemy.engine import Engine

BASELINE = "0001_baseline"
HERE = Path(__file__).resolve().parent / "migrations"


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(HERE))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision this version of PersonaLab knows."""
    revision = ScriptDirectory.from_config(_config()).get_current_head()
    assert revision is not None
    return revision


def _plain_engine(url: str | None) -> Engine:
    """An engine that does not create tables on open (stores.db.get_engine does): what is there is what we see."""
    url = url or database_url()
    if url.startswith("postgresql://"):
        url = url.replace("postgresql://", "postgresql+psycopg://", 1)
    return create_engine(url)


def current(url: str | None = None) -> dict[str, Any]:
    """The database's revision (None: not stamped, i.e. made by create_all), the head, and whether it is there."""
    engine = _plain_engine(url)
    try:
        with engine.connect() as conn:
            revision = MigrationContext.configure(conn).get_current_revision()
            tables = bool(set(inspect(conn).get_table_names()) - {"alembic_version"})
    except Exception as exc:  # noqa: BLE001 - one line for the user (StoreUnavailable), not a driver traceback
        raise _db.store_unavailable(exc, url) or exc from None
    finally:
        engine.dispose()
    return {"revision": revision, "head": head(), "up_to_date": revision == head(), "has_tables": tables}


def upgrade(url: str | None = None, revision: str = "head") -> dict[str, Any]:
    """Bring the database to `revision` (default: the head); returns the revisions before and after."""
    engine = _plain_engine(url)
    try:
        with _db._schema_lock(engine), engine.begin() as conn:
            before = MigrationContext.configure(conn).get_current_revision()
            config = _config(conn)
            stamped = before is None and bool(set(inspect(conn).get_table_names()) - {"alembic_version"})
            if stamped:
                command.stamp(config, BASELINE)  # made by create_all: at least the baseline's tables are there
            command.upgrade(config, revision)
            after = MigrationContext.configure(conn).get_current_revision()
    except Exception as exc:  # noqa: BLE001
        raise _db.store_unavailable(exc, url) or exc from None
    finally:
        engine.dispose()
    _db.dispose_engines()  # engines opened before the upgrade must not keep an old view of the tables
    if after == head():  # an older revision's tables are not today's: the story states wait for the head
        keep_checkpointed_states(url)
    return {"before": before, "after": after, "stamped_baseline": stamped}


def keep_checkpointed_states(url: str | None = None) -> int:
    """After an upgrade (issue 27): the story state of each turn whose only record is a checkpoint (a version
    from before story states were stored) is stored with its reply (`checkpoints.keep_story_states`), so the
    instance list shows the turns, plot and last turn at once, not after the next turn. A checkpoint store that
    cannot be read is logged and left to the turns' own pruning, which does the same."""
    import logging

    from personalab.stores.checkpoints import checkpoint_file, keep_story_states, open_checkpointer, thread_id_for
    from personalab.stores.tables import Save
    from sqlmodel import col, select

    url = url or database_url()
    if url.startswith("sqlite") and not checkpoint_file().exists():
        return 0
    try:
        with _db.session_scope(url) as session:
            instances = [int(i) for i in session.exec(select(Save.id).order_by(col(Save.id))).all() if i is not None]
        kept = 0
        with open_checkpointer(url) as saver:
            for instance_id in instances:
                kept += keep_story_states(saver, thread_id_for(instance_id), url)
        return kept
    except Exception as exc:  # noqa: BLE001 - the upgrade itself is done; the turns' pruning keeps them too
        logging.getLogger(__name__).warning("story states of old checkpoints not kept: %s", exc)
        return 0


def ensure_postgres_database(url: str) -> bool:
    """Create the PostgreSQL database `url` names when it is missing (issue 27: the serving engine's own database,
    beside PersonaLab's); True when it was created. Connects to the server's `postgres` database to do so."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    target = make_url(url.replace("postgresql://", "postgresql+psycopg://", 1))
    name = target.database
    if not name or target.get_backend_name() != "postgresql":
        raise ValueError(f"not a PostgreSQL database URL: {target.render_as_string(hide_password=True)}")
    engine = create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            if conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first():
                return False
            quoted = conn.dialect.identifier_preparer.quote(name)
            try:
                conn.execute(text(f"CREATE DATABASE {quoted}"))
            except Exception:  # noqa: BLE001 - another starter made it at the same moment: it is there
                if not conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first():
                    raise
                return False
            return True
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line for the user (StoreUnavailable), not a driver traceback
        raise _db.store_unavailable(exc, url) or exc from None
    finally:
        engine.dispose()
