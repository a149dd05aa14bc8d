"""What the engine knows about a slow local model's server, kept between processes (issue 30): each model's
measured speed, the last prompt each server was sent (what its one-slot prompt cache holds) and until when it is
still reading a prompt given up. Without it every new process (a one-shot `personalab turn`, a restarted server)
would start knowing nothing: its first turn would send the whole prompt unfitted and be cut at the deadline.

Kept as `<data dir>/cache/model_servers.json`, written whole or not at all (another process may be reading it); a
missing, unreadable or foreign file is read as knowing nothing, since it only ever holds estimates.
"""

from __future__ import annotations

import logging
from pathlib import Path

from personalab.nodes.rules.errors import StoreUnavailable
from personalab.stores.config import data_dir
from personalab.stores.files import write_file
from pydantic import BaseModel, Field, ValidationError

log = logging.getLogger(__name__)


class KeptSpeed(BaseModel):
    """One model's measured speed on one server (`nodes.rules.deadline.ModelSpeed`'s fields)."""

    server: str
    model: str
    prompt_per_s: float = Field(gt=0)
    gen_per_s: float | None = Field(default=None, gt=0)
    reply_tokens: float | None = Field(default=None, ge=0)


class KeptServers(BaseModel):
    speeds: list[KeptSpeed] = Field(default_factory=list)
    last_sent: dict[str, str] = Field(default_factory=dict)  # server -> the last prompt it was sent (rendered)
    busy_until: dict[str, float] = Field(default_factory=dict)  # server -> epoch seconds


def kept_servers_path() -> Path:
    return data_dir() / "cache" / "model_servers.json"


def read_kept_servers(path: Path | None = None) -> KeptServers:
    """What the file holds; nothing when there is no file or it cannot be read (logged)."""
    try:
        path = path or kept_servers_path()
        return KeptServers.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return KeptServers()
    except (OSError, ValidationError, StoreUnavailable) as exc:
        log.warning("the kept model-server state %s is ignored: %s", path, exc)
        return KeptServers()


def write_kept_servers(state: KeptServers, path: Path | None = None) -> None:
    """Replace the file with `state`, atomically. A failure is logged, never raised: it only costs an estimate."""
    try:
        path = path or kept_servers_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, state.model_dump_json().encode("utf-8"), overwrite=True)
    except Exception as exc:  # noqa: BLE001 - a read-only data dir must not fail a turn
        log.warning("the model-server state could not be kept: %s", exc)
