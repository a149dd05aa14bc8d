"""What a front end needs besides the areas (LAYOUT "one door"): reading and writing a user's files within limits
(no traceback for a missing file, a directory or a file over the limit: `InvalidInput` naming it), JSON arguments
with bounded nesting, waiting for the writes a turn queued, where the configured database is, and telling the
database's own "cannot open / cannot write" apart from a bug, and the server's settings (`settings()`). The front ends import these here, never from the
stores."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from personalab.nodes.rules.errors import StoreUnavailable

if TYPE_CHECKING:
    from personalab.stores.settings import Settings

__all__ = [
    "Settings",
    "database_location",
    "flush_writes",
    "parse_json",
    "read_file",
    "read_json",
    "settings",
    "store_unavailable",
    "write_file",
]


def read_file(path: str | os.PathLike[str], limit: int, *, what: str = "file") -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them (`InvalidInput` naming the path)."""
    from personalab.stores.files import read_file as read

    return read(path, limit, what=what)


def read_json(path: str | os.PathLike[str], limit: int, *, what: str = "file") -> Any:
    """The JSON in the regular file `path` (UTF-8, a BOM allowed)."""
    from personalab.stores.files import read_json as read

    return read(path, limit, what=what)


def write_file(path: str | os.PathLike[str], data: bytes, *, overwrite: bool = False) -> Path:
    """Write `data` as the regular file `path` in one step; an existing file only with `overwrite`."""
    from personalab.stores.files import write_file as write

    return write(path, data, overwrite=overwrite)


def parse_json(text: str, source: str) -> Any:
    """The JSON value of `text`; `InvalidInput` naming `source` for malformed or too deeply nested JSON."""
    from personalab.stores.files import parse_json as parse

    return parse(text, source)


def flush_writes() -> None:
    """Wait for the memory and event writes this process's turns queued (a command's exit, a batch's end)."""
    from personalab.stores.background import flush_event_writes

    flush_event_writes()


def database_location() -> str:
    """The configured database (`PERSONALAB_DATABASE_URL`, or the SQLite file in the data folder)."""
    from personalab.stores.config import database_url

    return database_url()


def store_unavailable(exc: BaseException) -> StoreUnavailable | None:
    """PersonaLab's `StoreUnavailable` for a database driver's "cannot open / cannot write" error (raised from
    outside the engine's own calls, e.g. the checkpointer's connection); None for any other exception."""
    from personalab.stores.db import store_unavailable as unavailable

    return unavailable(exc)


def settings() -> Settings:
    """The server's settings (`PERSONALAB_*`, validated together; `ConfigError` naming a bad one)."""
    from personalab.stores.settings import settings as load

    return load()


def __getattr__(name: str) -> Any:
    """`Settings`, the settings' class, loaded when first asked for (PEP 562): parsing a command line loads no
    pydantic-settings."""
    if name == "Settings":
        from personalab.stores.settings import Settings

        return Settings
    raise AttributeError(f"module 'personalab.graph.api.support' has no attribute {name!r}")
