"""Servers the evaluations start on this machine's loopback: the served graph (`langgraph dev` with the repository's
`langgraph.json`) and a Chroma server (`chroma run`), each in its own process group on a free port of 127.0.0.1,
stopped with everything they started. The graph is served as a deployment runs it: without a checkpointer of the
process's own (langgraph.json names the factory), thread ids uuid5 of the instance.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

START_TIMEOUT_S = 180.0
# what the server must not inherit from the caller's environment: it gets its settings from `env`
UNSET = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "PERSONALAB_LLM",
    "PERSONALAB_DATABASE_URL",
    "PERSONALAB_CHROMA_HOST",
    "LANGSMITH_TRACING",
    "LANGCHAIN_TRACING_V2",
    "LANGSMITH_API_KEY",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _absolute(value: Any, root: Path) -> Any:
    """`langgraph.json` with every `./…` path (and `.`) made absolute against the repository."""
    if isinstance(value, dict):
        if isinstance(value.get("env"), str):  # a dotenv file name, relative to the config
            value = {**value, "env": str(root / value["env"])}
        return {key: _absolute(item, root) for key, item in value.items()}
    if isinstance(value, list):
        return [_absolute(item, root) for item in value]
    if isinstance(value, str) and (value == "." or value.startswith(("./", "../"))):
        path, colon, attribute = value.rpartition(":") if ":" in value else (value, "", "")
        return f"{(root / path).resolve()}{colon}{attribute}"
    return value


def _tool(name: str) -> str:
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    raise FileNotFoundError(f"{name} is not installed beside {sys.executable} (pip install -e '.[test]')")


def _wait_until_up(
    url: str, process: subprocess.Popen[bytes], what: str, log: Path, timeout: float = START_TIMEOUT_S
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode} before it was up; log: {log}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{what} did not answer {url} within {timeout:g} s; log: {log}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
    except ProcessLookupError:
        pass


@contextmanager
def _process(command: list[str], *, cwd: Path, env: Mapping[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        _stop(process)


@contextmanager
def chroma_server(path: Path, log: Path) -> Iterator[tuple[str, int]]:
    """`chroma run` on a free port, storing in `path`; yields (host, port)."""
    port = free_port()
    command = [_tool("chroma"), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    with _process(command, cwd=path.parent, env=env, log=log) as process:
        _wait_until_up(f"http://127.0.0.1:{port}/api/v2/heartbeat", process, "chroma run", log)
        yield "127.0.0.1", port


@contextmanager
def graph_server(repo: Path, workdir: Path, env: Mapping[str, str], *, inherit_settings: bool = True) -> Iterator[str]:
    """`langgraph dev` serving `repo`'s langgraph.json from `workdir` (its records live there: a second server
    started elsewhere never finds them) with the PERSONALAB_* settings in `env`; yields the base URL. The log is
    `workdir/server.log`, the server's process id `workdir/server.pid`. `inherit_settings=False`: no PERSONALAB_* variable of this process reaches the server.
    `--no-reload`: other files of the tree may change while it runs, and a reload would cut a run off."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = json.loads((repo / "langgraph.json").read_text(encoding="utf-8"))
    (workdir / "langgraph.json").write_text(json.dumps(_absolute(config, repo)), encoding="utf-8")
    full = {
        key: value
        for key, value in os.environ.items()
        if key not in UNSET and (inherit_settings or not key.startswith("PERSONALAB_"))
    }
    full.update(LANGGRAPH_CLI_NO_ANALYTICS="1", LANGGRAPH_NO_VERSION_CHECK="true", **env)
    port = free_port()
    command = [_tool("langgraph"), "dev", "--no-browser", "--no-reload", "--port", str(port)]
    log = workdir / "server.log"
    with _process([*command, "--config", "langgraph.json"], cwd=workdir, env=full, log=log) as process:
        (workdir / "server.pid").write_text(str(process.pid), encoding="ascii")
        url = f"http://127.0.0.1:{port}"
        _wait_until_up(f"{url}/ok", process, "langgraph dev", log)
        yield url


def python312_venv(repo: Path) -> Path:
    """The repository's Python 3.12 venv with the `serve` extra (Aegra), made or brought up to date by
    `./run venv312` (reused when its stamp matches pyproject.toml); returns its python."""
    result = subprocess.run(["./run", "venv312"], cwd=repo, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"./run venv312 failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}")
    return repo / ".venv312" / "bin" / "python"


@contextmanager
def fresh_postgres_database(base_url: str, prefix: str = "aegra_", *, create: bool = True) -> Iterator[str]:
    """A new, empty database on `base_url`'s server (Aegra's own records: it cannot share a schema with PersonaLab,
    both keep an `alembic_version`); yields its plain `postgresql://` URL; dropped afterwards. `create=False`: only
    a free name, for what creates the database itself (`serve-production`)."""
    import psycopg

    conninfo = base_url.replace("postgresql+psycopg://", "postgresql://", 1)
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    if create:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
    head, _, _ = conninfo.partition("?")
    try:
        yield f"{head.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def aegra_server(
    repo: Path,
    workdir: Path,
    env: Mapping[str, str],
    *,
    engine_database_url: str,
    workers: int = 2,
    redis_url: str = "redis://127.0.0.1:6379/0",
    start_timeout: float = START_TIMEOUT_S,
) -> Iterator[str]:
    """`personalab serve-production` (Aegra, from the repository's Python 3.12 venv) serving `repo`'s
    langgraph.json with `workers` processes and the PERSONALAB_* settings in `env` (none of this process's);
    Aegra's records in `engine_database_url`, its queue and stream channels in Redis under keys of its own (two
    servers on one Redis never take each other's runs). Yields the base URL; log `workdir/server.log`. Each worker
    imports the graph and the HTTP app on its own: on a loaded machine, several take longer than `start_timeout`'s
    default (3 processes at load average 22: over 180 s)."""
    python = python312_venv(repo)
    workdir.mkdir(parents=True, exist_ok=True)
    config = json.loads((repo / "langgraph.json").read_text(encoding="utf-8"))
    (workdir / "langgraph.json").write_text(json.dumps(_absolute(config, repo)), encoding="utf-8")
    full = {key: value for key, value in os.environ.items() if key not in UNSET and not key.startswith("PERSONALAB_")}
    full.pop("VIRTUAL_ENV", None)
    keys = uuid.uuid4().hex[:8]
    full.update(
        LANGGRAPH_CLI_NO_ANALYTICS="1",
        WORKER_QUEUE_KEY=f"aegra:jobs:{keys}",
        REDIS_CHANNEL_PREFIX=f"aegra:run:{keys}:",
        # stopped at the end of a test or a benchmark: no run of its own left to drain (Aegra waits 30 s by default)
        WORKER_DRAIN_TIMEOUT="2",
        **env,
    )
    port = free_port()
    command = [
        str(python.with_name("personalab")),
        "serve-production",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--engine-database-url",
        engine_database_url,
        "--redis-url",
        redis_url,
        "--config",
        "langgraph.json",
    ]
    log = workdir / "server.log"
    with _process(command, cwd=workdir, env=full, log=log) as process:
        (workdir / "server.pid").write_text(str(process.pid), encoding="ascii")
        url = f"http://127.0.0.1:{port}"
        _wait_until_up(f"{url}/health", process, "personalab serve-production (Aegra)", log, start_timeout)
        yield url


def aegra_workers(supervisor: int) -> list[int]:
    """The worker processes of Aegra's uvicorn supervisor (`supervisor`: the process `serve-production` became, its
    pid in `server.pid` of `aegra_server`'s workdir), read from /proc (Linux): the ones a test or `bench load --kill`
    kills with SIGKILL."""
    children: list[int] = []
    for task in Path(f"/proc/{supervisor}/task").iterdir():
        try:
            children += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    # uvicorn's workers are its Python children (not the resource tracker of multiprocessing)
    return [child for child in children if "multiprocessing.resource_tracker" not in _cmdline(child)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
