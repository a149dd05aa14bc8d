"""`personalab serve-production`: the graph API, the HTTP routes and the web app on Aegra, several processes sharing
PostgreSQL, Redis and a Chroma server (issue 27; docs/deployment.md "Production serving on Aegra").

Aegra (`aegra-api`, the `serve` extra; Python 3.12+) reads the same `langgraph.json`: the graph, `http.app` and
`auth.path`. It keeps its own records (assistants, threads, runs, crons) and checkpoints in a PostgreSQL database of
its own, beside PersonaLab's: both keep an Alembic `alembic_version` table, so they cannot share one schema. Before
the workers start, this one process does what must happen once: PersonaLab's migrations (`db upgrade`, under the
schema lock), then, under the same lock again (several hosts may start at once), Aegra's database created if missing
and its migrations, and Aegra's default assistant registered (several Aegra workers starting on a fresh database race
to insert it, and the loser stops the whole server). `--prepare-only` stops there. Then uvicorn runs
`APP` (Aegra's app with PersonaLab's run wait: `runs/wait` answered on the run's `end` event, not on Aegra's 2 s
poll; checked against the installed Aegra first, `WAIT_CHECK`) with `--workers N`, Redis as the runs' queue and
stream broker, and a shorter run lease (`LEASE_DEFAULTS`: a killed process's runs come back within 12 s, not Aegra's
30-45 s).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from personalab.graph.cli.output import echo
from personalab.nodes.rules.errors import InvalidInput

# registers the graphs' assistants once, in one process, before the workers start (see the module docstring)
_REGISTER_ASSISTANTS = """
import asyncio
from aegra_api.core.database import db_manager
from aegra_api.services.langgraph_service import get_langgraph_service

async def main() -> None:
    await db_manager.initialize()
    try:
        await get_langgraph_service().initialize()
    finally:
        await db_manager.close()

asyncio.run(main())
"""


# what uvicorn serves: Aegra's app, its run wait replaced (graph/serving/aegra_app.py, issue 27 "no polling delay")
APP = "personalab.graph.serving.aegra_app:app"
# the installed Aegra checked against the internals that wait relies on, once, before the workers start: a
# different Aegra is one line and exit 2 here, not N workers' tracebacks, never a silent 2 s poll
WAIT_CHECK = "personalab.graph.serving.aegra_wait"

# Aegra's lease on a running run (aegra_api/settings.py `WorkerSettings`; its defaults 30 / 10 / 15 s): a worker
# renews the lease every heartbeat, and the reaper in every process puts a run whose lease expired back in the queue
# under the same run id. kill -9 of one process brings its runs back only after lease + reaper: 30-45 s with Aegra's
# defaults, within 12 s with these. The instance itself is usable again at once whatever the lease: the next turn
# takes the dead process's turn lock over (stores.turns `holder_is_gone`), and the caught run, replayed after it,
# fails with RunOvertaken instead of answering its old line (issue 27; docs/deployment.md "A process killed").
# Shorter is worse on a loaded machine: with 4 / 1 / 1 s at load average ~13 on 2 cores, live workers lost their
# runs 34 times in 80 turns (their heartbeats late), 5 runs failed to their clients, and 2 were left `running` with
# no owner by Aegra 0.11.0 (a reaped run's late `start_run`), their clients waiting for ever. Aegra requires
# lease > 2 x heartbeat, whole seconds. The three go together: an operator who sets any of them in the environment
# gets Aegra's own defaults for the others.
LEASE_DEFAULTS = {"LEASE_DURATION_SECONDS": "10", "HEARTBEAT_INTERVAL_SECONDS": "2", "REAPER_INTERVAL_SECONDS": "2"}
# One checkpoint per turn, written when the turn ends — what the in-process runner does (`graph.runner`,
# durability="exit"): a turn that dies midway is played again from the dialogue PersonaLab stored, so the supersteps
# in between need not be written to Aegra's PostgreSQL one by one (under load: the graph's time per turn 694 against
# 1,123 ms at p50, 2.32 against 1.56 turns/s; docs/benchmarks/2026-11-28-lead.md). An operator's
# AEGRA_CHECKPOINT_DURABILITY (sync, async or exit) and a run's own `durability` win.
DURABILITY_DEFAULT = {"AEGRA_CHECKPOINT_DURABILITY": "exit"}
AEGRA_LEASE_DEFAULTS = {
    "LEASE_DURATION_SECONDS": "30",
    "HEARTBEAT_INTERVAL_SECONDS": "10",
    "REAPER_INTERVAL_SECONDS": "15",
}


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "serve-production",
        help="the graph API, HTTP API and web app on Aegra: several processes on PostgreSQL, Redis, a Chroma server",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=2026, help="port (default 2026)")
    parser.add_argument("--workers", type=int, default=2, help="server processes (default 2)")
    parser.add_argument(
        "--engine-database-url",
        default=os.environ.get("PERSONALAB_AEGRA_DATABASE_URL"),
        help="Aegra's own PostgreSQL database (env PERSONALAB_AEGRA_DATABASE_URL; default: PersonaLab's database "
        "name + _aegra on the same server, created if missing)",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("PERSONALAB_REDIS_URL", "redis://127.0.0.1:6379/0"),
        help="Redis for the runs' queue and streams (env PERSONALAB_REDIS_URL; default redis://127.0.0.1:6379/0)",
    )
    parser.add_argument(
        "--config", default=None, help="the langgraph.json to serve (default: the one of the current folder)"
    )
    parser.add_argument(
        "--prepare-only",
        action="store_true",
        help="run the once-only steps (both databases' migrations, Aegra's database and assistant), then exit "
        "without serving: for the first host of a deployment, before the others start",
    )
    parser.set_defaults(handler=serve_production)


def engine_database_url(personalab_url: str) -> str:
    """Aegra's database beside PersonaLab's: same server, the database name + `_aegra`, a plain `postgresql://`
    URL (Aegra picks its drivers itself), the query (a schema's search_path) left out."""
    parts = urlsplit(personalab_url.replace("postgresql+psycopg://", "postgresql://", 1))
    name = parts.path.lstrip("/") or "postgres"
    return f"postgresql://{parts.netloc}/{name}_aegra"


def lease_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """Aegra's lease, heartbeat and reaper settings serve-production adds: `LEASE_DEFAULTS`, none when the operator
    set any of the three (theirs, with Aegra's defaults beside)."""
    if not any(name in environ for name in LEASE_DEFAULTS):
        return dict(LEASE_DEFAULTS)
    chosen = {**AEGRA_LEASE_DEFAULTS, **{name: environ[name] for name in LEASE_DEFAULTS if name in environ}}
    for name, value in chosen.items():
        if not value.strip().isdigit() or int(value) < 1:
            raise InvalidInput(f"{name}: {value!r} is not a whole number of seconds ≥ 1")
    lease, beat = int(chosen["LEASE_DURATION_SECONDS"]), int(chosen["HEARTBEAT_INTERVAL_SECONDS"])
    if lease <= 2 * beat:  # Aegra's own rule, checked here so the workers do not each die on it
        raise InvalidInput(f"LEASE_DURATION_SECONDS ({lease}) must be over 2 x HEARTBEAT_INTERVAL_SECONDS ({beat})")
    return {}


def _reachable(url: str, what: str, default_port: int) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or default_port
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        raise InvalidInput(f"{what} at {host}:{port} is unreachable ({exc.strerror or exc})") from None


def serve_production(args: argparse.Namespace) -> int:
    from personalab.graph.api import PersonaLab
    from personalab.graph.api.support import settings

    if not 1 <= args.workers <= 64:
        raise InvalidInput(f"--workers: {args.workers} is not from 1 to 64")
    if not 1 <= args.port <= 65535:
        raise InvalidInput(f"--port: {args.port} is not a port number (1-65535)")
    current = settings()
    url = current.database_url or ""
    if not url.startswith("postgresql"):
        raise InvalidInput("serve-production needs PostgreSQL: set PERSONALAB_DATABASE_URL to a postgresql:// URL")
    if args.workers > 1 and not current.chroma_host:
        # embedded Chroma keeps its index in one process's memory: two writers in one folder lose vectors
        raise InvalidInput(
            f"--workers {args.workers} needs a Chroma server: set PERSONALAB_CHROMA_HOST "
            "(embedded Chroma in one data folder is not safe for several processes)"
        )
    config = Path(args.config or "langgraph.json").resolve()
    if not config.is_file():
        raise InvalidInput(f"--config: {config} does not exist")
    lease = lease_settings(os.environ)  # a bad lease of the operator's: one line here, not a traceback per worker
    engine_url = args.engine_database_url or engine_database_url(url)
    _reachable(args.redis_url, "Redis", 6379)
    if importlib.util.find_spec("aegra_api") is None:
        raise InvalidInput(
            "Aegra is not installed: pip install -e '.[serve]' on Python 3.12+ (./run serve-production does it)"
        )

    env = {
        **lease,
        **DURABILITY_DEFAULT,
        **os.environ,
        "DATABASE_URL": engine_url,
        "AEGRA_CONFIG": str(config),
        "REDIS_BROKER_ENABLED": "true",
        "REDIS_URL": args.redis_url,
        # the migrations run here, once; the workers must not each run them
        "RUN_MIGRATIONS_ON_STARTUP": "false",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "ANONYMIZED_TELEMETRY": "False",
    }
    # before anything is migrated: an Aegra this wait does not know is refused with nothing changed
    check = subprocess.run([sys.executable, "-m", WAIT_CHECK], env=env, capture_output=True, text=True)
    if check.returncode != 0:
        lines = (check.stderr or check.stdout).strip().splitlines() or [f"exit {check.returncode}"]
        raise InvalidInput(f"Aegra's run wait: {lines[-1]}")
    # the check's last line (Aegra's modules log to stdout as they are imported)
    wait_mode = ([line for line in check.stdout.splitlines() if line.startswith("run wait:")] or ["run wait: ?"])[-1]
    admin = PersonaLab().admin
    done = admin.upgrade()  # PersonaLab's migrations, once, under the schema lock
    echo(f"PersonaLab database: revision {done['after']}")
    aegra = str(Path(sys.executable).with_name("aegra"))
    steps = [
        ([aegra, "db", "upgrade"], "Aegra's migrations"),
        ([sys.executable, "-c", _REGISTER_ASSISTANTS], "Aegra's assistants"),
    ]
    # the once-only steps under PersonaLab's schema lock, taken after `upgrade` (which takes and frees it itself):
    # two starters at once otherwise both create Aegra's `alembic_version` and the second dies on its unique key
    with admin.setup_lock():
        if admin.ensure_database(engine_url):
            echo("Aegra database: created")
        for command, what in steps:
            result = subprocess.run(command, env=env, cwd=config.parent, capture_output=True, text=True)
            if result.returncode != 0:
                sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
                raise InvalidInput(f"{what} failed (exit {result.returncode}); its output is above")
    if args.prepare_only:
        echo("Aegra database: migrated, assistants registered; --prepare-only: not serving")
        return 0
    shown = f"[{args.host}]" if ":" in args.host else args.host
    echo(f"PersonaLab on Aegra, {args.workers} process(es), at http://{shown}:{args.port}/app  (Ctrl-C stops it)")
    shown_lease = {name: env.get(name, "Aegra's default") for name in LEASE_DEFAULTS}
    echo("run lease " + ", ".join(f"{name}={value}" for name, value in shown_lease.items()))
    echo(f"checkpoints: durability {env['AEGRA_CHECKPOINT_DURABILITY']} (AEGRA_CHECKPOINT_DURABILITY)")
    echo(wait_mode)
    sys.stdout.flush()
    uvicorn = [sys.executable, "-m", "uvicorn", APP, "--host", args.host, "--port", str(args.port)]
    os.chdir(config.parent)
    os.execve(sys.executable, [*uvicorn, "--workers", str(args.workers)], env)
    return 0  # not reached: exec replaces this process
