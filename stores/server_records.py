"""Whose thread records a served graph keeps (issue 27): `langgraph dev` keeps its threads, runs and checkpoints of
its own in `.langgraph_api` of the folder it is started from, whatever PersonaLab's data folder. Two servers started
from one folder for two data folders would share those records (a thread of one instance id, two stories). The
first server to use a records folder writes which data folder and database it serves there; a server of another
data folder or database started from that folder refuses to start, naming the folder to start it from instead
(a folder of its own, e.g. `<data folder>/server`, as `personalab.evals.served.graph_server` does)."""

from __future__ import annotations

import os
from pathlib import Path

from personalab.nodes.rules.errors import ConfigError
from personalab.stores.config import data_dir, database_url

RECORDS = ".langgraph_api"
"""The folder `langgraph dev` (langgraph-runtime-inmem) keeps its records in, relative to where it runs."""
MARKER = "personalab-served-data.txt"


def served_data() -> str:
    """The data folder and database a server of this environment serves (the database without its password)."""
    from sqlalchemy.engine import make_url

    try:
        database = make_url(database_url()).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a bad URL is the turn's to report; the text still tells servers apart
        database = "(unreadable database URL)"
    return f"data folder: {data_dir().resolve()}\ndatabase: {database}\n"


def claim_server_records(folder: Path | None = None) -> Path:
    """Mark `folder`'s records (default: the working directory's) as this environment's data folder's, or refuse
    (`ConfigError`) when they are another's. Returns the records folder."""
    records = (folder or Path(os.getcwd())) / RECORDS
    marker = records / MARKER
    mine = served_data()
    try:
        theirs = marker.read_text(encoding="utf-8")
    except FileNotFoundError:
        records.mkdir(parents=True, exist_ok=True)
        temporary = marker.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(mine, encoding="utf-8")
        os.replace(temporary, marker)
        return records
    if theirs != mine:
        raise ConfigError(
            f"{records} holds the thread records of the server of another data folder"
            f" ({'; '.join(theirs.splitlines())}): start the server of this one ({'; '.join(mine.splitlines())}) from"
            f" a folder of its own, e.g. {data_dir() / 'server'}"
        )
    return records
