"""Where a benchmark or evaluation keeps its stores: `--data-dir`, or a temporary folder; on PostgreSQL, a new
schema dropped afterwards (the tests' per-test schemas too)."""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def data_folder(data_dir: str | None, prefix: str) -> Iterator[Path]:
    """`data_dir` (created if missing, kept afterwards), or a new temporary folder named `prefix…` that is
    removed afterwards."""
    if data_dir:
        path = Path(data_dir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        yield Path(tmp)


@contextmanager
def postgres_schema(base_url: str, prefix: str = "load_") -> Iterator[str]:
    """A new schema of `base_url`'s database, as the URL the server connects with; dropped afterwards."""
    import psycopg

    conninfo = base_url.replace("postgresql+psycopg://", "postgresql://", 1)
    schema = f"{prefix}{uuid.uuid4().hex[:12]}"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in base_url else "?"
    driver = base_url.replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{driver}{separator}options=-csearch_path%3D{schema}"
    finally:
        for attempt in range(5):
            try:
                with psycopg.connect(conninfo, autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA {schema} CASCADE")
                break
            except psycopg.errors.DeadlockDetected:
                # a background writer of the process that used the schema (a drain finishing its last row) met
                # the drop's locks: PostgreSQL aborted the drop, which is tried again once that writer is done
                if attempt == 4:
                    raise
                time.sleep(0.5)
