"""Where the embedded stores live, read from the environment.

Every embedded store (SQLite database, Chroma directory, checkpoint file) lives in one data directory
so that a user can back up, move or delete an installation as one folder.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_DATA_DIR = "./data"


def data_dir() -> Path:
    """`PERSONALAB_DATA_DIR`, default `./data` (relative to the working directory); created on demand."""
    path = Path(os.environ.get("PERSONALAB_DATA_DIR") or DEFAULT_DATA_DIR).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def database_url() -> str:
    """`PERSONALAB_DATABASE_URL`, default a SQLite file `personalab.db` in the data directory."""
    url = os.environ.get("PERSONALAB_DATABASE_URL")
    if url:
        return url
    return f"sqlite:///{(data_dir() / 'personalab.db').resolve()}"
