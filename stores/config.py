"""Where the embedded stores live, from the settings (`PERSONALAB_DATA_DIR`, `PERSONALAB_DATABASE_URL`).

Every embedded store (SQLite database, Chroma directory, checkpoint file) lives in one data directory
so that a user can back up, move or delete an installation as one folder.
"""

from __future__ import annotations

from pathlib import Path

from personalab.nodes.rules.errors import StoreUnavailable
from personalab.stores.settings import settings


def data_dir() -> Path:
    """`PERSONALAB_DATA_DIR`, default `./data` (relative to the working directory); created on demand."""
    path = Path(settings().data_dir).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a read-only or missing parent: one line for the user, not a traceback
        raise StoreUnavailable(f"the data directory {path} cannot be created ({exc.strerror or exc})") from None
    return path


def database_url() -> str:
    """`PERSONALAB_DATABASE_URL`, default a SQLite file `personalab.db` in the data directory."""
    url = settings().database_url
    if url:
        return url
    return f"sqlite:///{(data_dir() / 'personalab.db').resolve()}"
