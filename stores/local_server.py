"""The record a running `personalab serve` keeps in its data folder (issue 29: a one-shot turn hands itself to it).

`personalab turn` in a new process imports the engine and loads its models for seconds; the web app's server has
them loaded. While `personalab serve` runs, it keeps `<data folder>/local-server.json` (readable by its user only):
its URL, its process id, a random token and which database it serves. A `personalab turn` of the same data folder
and database finds the record, proves with the token that it may read the data folder, and hands the turn to the
server (`graph.api.handoff`). It also keeps two processes from writing one embedded Chroma folder at once (embedded
Chroma keeps its index in one process's memory). A record whose process is gone is ignored.

The client's side (`running_server`) reads the environment itself instead of building the settings (0.3 s of
imports): the data folder and database it computes are `stores.config`'s (tests/test_handoff.py compares them).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

RECORD = "local-server.json"
_DEFAULT_DATA_DIR = "./data"  # stores.settings.Settings.data_dir's default


@dataclass(frozen=True)
class LocalServer:
    """A running `personalab serve`: where it answers, its process, its token, the key of its database."""

    url: str
    pid: int
    token: str
    database: str


def database_key(url: str) -> str:
    """The served database, as the record names it: a digest of its URL (the record never holds a password)."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()


def _data_folder_from_environment() -> Path:
    return Path(os.environ.get("PERSONALAB_DATA_DIR") or _DEFAULT_DATA_DIR).expanduser()


def database_url_from_environment() -> str:
    """`stores.config.database_url()` without the settings: the URL set, or the data folder's SQLite file."""
    url = os.environ.get("PERSONALAB_DATABASE_URL")
    if url:
        return url
    return f"sqlite:///{(_data_folder_from_environment() / 'personalab.db').resolve()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process with that id: not a server of this user's data folder
        return False
    return True


def _read(path: Path) -> LocalServer | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return LocalServer(str(data["url"]), int(data["pid"]), str(data["token"]), str(data["database"]))
    except (OSError, ValueError, KeyError, TypeError):  # none, half-written by hand, or not ours
        return None


def running_server() -> LocalServer | None:
    """The `personalab serve` of this environment's data folder and database, if one runs (None otherwise)."""
    record = _read(_data_folder_from_environment() / RECORD)
    if record is None or not _alive(record.pid):
        return None
    if record.database != database_key(database_url_from_environment()):
        return None  # the server serves another database than this command would use
    return record


def keep_record(url: str) -> LocalServer:
    """Write this server's record (a new token each start), readable by this user only; returns it."""
    from personalab.stores.config import data_dir, database_url
    from personalab.stores.files import write_file

    record = LocalServer(url=url, pid=os.getpid(), token=secrets.token_hex(32), database=database_key(database_url()))
    write_file(data_dir() / RECORD, json.dumps(asdict(record)).encode("utf-8"), overwrite=True, mode=0o600)
    return record


def drop_record(record: LocalServer) -> None:
    """Remove the record when it is still this server's (a server started later on the data folder keeps its own)."""
    from personalab.stores.config import data_dir

    path = data_dir() / RECORD
    current = _read(path)
    if current is not None and current.token == record.token:
        path.unlink(missing_ok=True)


def token_accepted(token: str) -> bool:
    """Whether `token` is the one of the server recorded in this data folder (the server's side of a hand-off)."""
    from personalab.stores.config import data_dir

    record = _read(data_dir() / RECORD)
    return record is not None and bool(token) and hmac.compare_digest(record.token, token)
