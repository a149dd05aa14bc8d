"""`bench load`: many users playing at once through the served graph, the scale-out path (issue 14 Load).

Starts, on this machine's loopback, a Chroma server (`chroma run`; `--chroma embedded` keeps the vectors in the
server's data folder instead) and `langgraph dev` serving the repository's `langgraph.json` on PostgreSQL (a new
schema of `--postgres-url`, dropped afterwards) with the offline scripted model. Through the HTTP API, each of
`--users` users creates a character and a background (the shipped sample's) and `--instances` instances of them,
then every user plays `--turns` rounds over their instances, one turn at a time per user, all users at once
(`runs.wait` on the instance's thread, uuid5 of the instance).

Baseline in the same run: before the load, one instance plays `--turns` turns alone (after a warm-up turn, left out). Reported: errors (an HTTP
error or a turn whose output has `error`), turns lost (each instance's stored turn count against the turns it
played), the client's time per turn p50 / p95 / max alone and under load and their ratio, the graph's own time per
turn and that time without the reply's model call (`debug.turn_time` of each answer: PersonaLab's per-turn overhead,
server-side, without the run queue), turns per second. The
scripted model answers at once, so a turn's time is PersonaLab's and the server's overhead, not a model's.
With `--auth` the server runs with `PERSONALAB_AUTH=tokens` (docs/deployment.md "Users and auth") and one token per user, and
after the load every user must list exactly their own instances.
"""

from __future__ import annotations

import argparse
import json
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from personalab.evals.data_dir import data_folder, postgres_schema
from personalab.evals.filler import filler_lines
from personalab.evals.report import percentile
from personalab.evals.served import chroma_server, graph_server
from personalab.graph.runner import load_sample
from personalab.stores.checkpoints import thread_id_for

ASSISTANT = "personalab"


class User:
    """One client of the served API: its headers (a bearer token when auth is on) and its instances."""

    def __init__(self, name: str, url: str, token: str | None) -> None:
        self.name = name
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url, headers=self.headers, timeout=120)
        self.instances: list[int] = []
        self.times_ms: list[float] = []
        self.graph_ms: list[float] = []  # the graph's own time per turn (debug.turn_time), server-side
        self.overhead_ms: list[float] = []  # … without the reply's model call: PersonaLab's per-turn overhead
        self.errors: list[str] = []

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(path, json=body)
        if response.status_code >= 400:
            raise RuntimeError(f"{self.name}: POST {path} answered {response.status_code}: {response.text[:300]}")
        return dict(response.json())

    def set_up(self, instances: int) -> None:
        sample = load_sample("wasteland.json")
        role, background = sample["role"], sample["background"]
        character = self.post(
            "/characters",
            {"name": role["name"], "description": role.get("description", ""), "persona": role.get("persona", "")},
        )
        world = self.post(
            "/backgrounds",
            {
                "name": background["name"],
                "world_setting": background["world_setting"],
                "outline": background["outline"],
            },
        )
        for n in range(instances):
            made = self.post(
                "/instances",
                {"character_id": character["id"], "background_id": world["id"], "title": f"{self.name} #{n + 1}"},
            )
            self.instances.append(int(made["id"]))

    def turn(self, instance_id: int, message: str) -> None:
        """One turn on the instance's thread; its time, or what went wrong."""
        thread = thread_id_for(instance_id)
        body = {"assistant_id": ASSISTANT, "input": {"instance_id": instance_id, "message": message}}
        started = time.perf_counter()
        try:
            response = self.http.post(f"/threads/{thread}/runs/wait", json=body)
            elapsed = (time.perf_counter() - started) * 1000
            if response.status_code >= 400:
                self.errors.append(f"instance {instance_id}: HTTP {response.status_code} {response.text[:200]}")
                return
            output = response.json()
            if output.get("error") or not output.get("reply"):
                self.errors.append(f"instance {instance_id}: {output.get('error') or 'no reply'}")
                return
            self.times_ms.append(elapsed)
            clock = (output.get("debug") or {}).get("turn_time") or {}
            if "graph_ms" in clock:
                self.graph_ms.append(float(clock["graph_ms"]))
                self.overhead_ms.append(float(clock["without_reply_model_ms"]))
        except httpx.HTTPError as exc:
            self.errors.append(f"instance {instance_id}: {type(exc).__name__}: {exc}")

    def stored_turns(self, instance_id: int) -> int:
        response = self.http.get(f"/instances/{instance_id}")
        response.raise_for_status()
        return int(response.json().get("turns") or 0)

    def listed_instances(self) -> set[int]:
        response = self.http.get("/instances")
        response.raise_for_status()
        return {int(item["id"]) for item in response.json()}

    def create_threads(self) -> None:
        for instance_id in self.instances:
            body = {"thread_id": thread_id_for(instance_id), "if_exists": "do_nothing"}
            response = self.http.post("/threads", json=body)
            if response.status_code >= 400:
                raise RuntimeError(f"{self.name}: POST /threads answered {response.status_code}: {response.text[:300]}")


def _row(label: str, values: list[float]) -> str:
    if not values:
        return f"  {label:<28} (no turns)"
    return (
        f"  {label:<28} n={len(values):<5} p50 {percentile(values, 0.5):8.1f}  p95 {percentile(values, 0.95):8.1f}"
        f"  max {max(values):8.1f} ms"
    )


def _figures(alone: list[float], loaded: list[float]) -> dict[str, dict[str, float]]:
    return {
        "alone": {"p50": percentile(alone, 0.5), "p95": percentile(alone, 0.95)} if alone else {},
        "load": {"p50": percentile(loaded, 0.5), "p95": percentile(loaded, 0.95)} if loaded else {},
    }


def run(args: argparse.Namespace) -> int:
    names = [f"user{n + 1}" for n in range(args.users)]
    # --auth: the server checks a bearer token per user (PERSONALAB_AUTH=tokens), each user sees only their own
    tokens = {name: secrets.token_urlsafe(16) for name in names} if args.auth else {}
    repo = Path(args.repo).resolve()
    with ExitStack() as stack:
        folder = stack.enter_context(data_folder(args.data_dir, "personalab-load-"))
        env = {"PERSONALAB_DATA_DIR": str(folder / "data")}
        if tokens:
            env.update(
                PERSONALAB_AUTH="tokens",
                PERSONALAB_AUTH_TOKENS=",".join(f"{token}:{name}" for name, token in tokens.items()),
            )
        if args.postgres_url:
            env["PERSONALAB_DATABASE_URL"] = stack.enter_context(postgres_schema(args.postgres_url))
        if args.chroma == "server":
            (folder / "chroma").mkdir(exist_ok=True)
            host, port = stack.enter_context(chroma_server(folder / "chroma", folder / "chroma.log"))
            env.update(PERSONALAB_CHROMA_HOST=host, PERSONALAB_CHROMA_PORT=str(port))
        print(f"starting the served graph ({'PostgreSQL' if args.postgres_url else 'SQLite'}, Chroma {args.chroma})")
        url = stack.enter_context(graph_server(repo, folder / "server", env))
        users = [User(name, url, tokens.get(name)) for name in names]
        for user in users:
            stack.callback(user.http.close)
            user.set_up(args.instances)
            user.create_threads()
        lines = filler_lines(args.turns * args.instances * len(users) + args.turns + 1, seed=args.seed)

        # baseline: one instance alone, the same number of turns after a warm-up turn (the server's first turn
        # loads the models; it is left out)
        alone = users[0]
        for n in range(args.turns + 1):
            alone.turn(alone.instances[0], lines[n])
        baseline, baseline_errors = list(alone.times_ms[1:]), list(alone.errors)
        baseline_graph, baseline_overhead = list(alone.graph_ms[1:]), list(alone.overhead_ms[1:])
        for kept in (alone.times_ms, alone.graph_ms, alone.overhead_ms, alone.errors):
            kept.clear()

        counter = iter(range(args.turns + 1, len(lines)))
        take = threading.Lock()

        def play(user: User) -> None:
            for _ in range(args.turns):
                for instance_id in user.instances:
                    with take:
                        line = lines[next(counter)]
                    user.turn(instance_id, line)

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=len(users)) as pool:
            list(pool.map(play, users))
        wall = time.perf_counter() - started

        played = {instance_id: args.turns for user in users for instance_id in user.instances}
        played[alone.instances[0]] += args.turns + 1
        lost = sum(
            max(0, played[instance_id] - user.stored_turns(instance_id))
            for user in users
            for instance_id in user.instances
        )
        # with auth, every user lists exactly their own instances (nothing of another user's)
        crossed = sum(len(user.listed_instances() ^ set(user.instances)) for user in users) if tokens else 0
        loaded = [ms for user in users for ms in user.times_ms]
        loaded_graph = [ms for user in users for ms in user.graph_ms]
        loaded_overhead = [ms for user in users for ms in user.overhead_ms]
        errors = baseline_errors + [error for user in users for error in user.errors]
        turns = len(users) * args.instances * args.turns
        ratio = percentile(loaded, 0.5) / percentile(baseline, 0.5) if baseline and loaded else float("nan")
        print(
            f"\n{len(users)} users x {args.instances} instances x {args.turns} turns = {turns} turns under load, "
            f"scripted model, {'PostgreSQL' if args.postgres_url else 'SQLite'}, Chroma {args.chroma}"
        )
        print("client time per turn (runs/wait: the server's run queue, the graph, its checkpoint writes):")
        print(_row("one instance alone", baseline))
        print(_row("under load (per turn)", loaded))
        print(f"  p50 under load / alone        {ratio:.2f}x")
        print("server side, the graph's own time per turn (debug.turn_time: history_fetch to end_turn):")
        print(_row("one instance alone", baseline_graph))
        print(_row("under load (per turn)", loaded_graph))
        print("… without the reply's model call (PersonaLab's per-turn overhead):")
        print(_row("one instance alone", baseline_overhead))
        print(_row("under load (per turn)", loaded_overhead))
        print(f"  throughput                    {len(loaded) / wall:.2f} turns/s over {wall:.1f} s")
        print(f"  errors                        {len(errors)}")
        print(f"  turns lost (stored < played)  {lost}")
        if tokens:
            print(f"  instances listed across users {crossed}")
        for error in errors[:10]:
            print(f"    {error}")
        if args.json:
            summary = {
                "users": len(users),
                "instances_per_user": args.instances,
                "turns_per_instance": args.turns,
                "database": "postgresql" if args.postgres_url else "sqlite",
                "chroma": args.chroma,
                "alone_ms": {"p50": percentile(baseline, 0.5), "p95": percentile(baseline, 0.95)},
                "load_ms": {"p50": percentile(loaded, 0.5), "p95": percentile(loaded, 0.95), "max": max(loaded or [0])},
                "ratio_p50": ratio,
                "graph_ms": _figures(baseline_graph, loaded_graph),
                "overhead_ms": _figures(baseline_overhead, loaded_overhead),
                "turns_per_s": len(loaded) / wall,
                "errors": errors,
                "turns_lost": lost,
                "auth": bool(tokens),
                "crossed": crossed,
            }
            Path(args.json).write_text(json.dumps(summary, ensure_ascii=False, indent=2), encoding="utf-8")
        return 1 if errors or lost or crossed else 0


def register(kinds: argparse._SubParsersAction) -> None:
    load = kinds.add_parser("load", help="users playing at once through the served graph (PostgreSQL + Chroma server)")
    load.add_argument("--users", type=int, default=8)
    load.add_argument("--instances", type=int, default=4, help="instances per user")
    load.add_argument("--turns", type=int, default=5, help="turns per instance")
    load.add_argument("--seed", type=int, default=7, help="seed of the filler lines the users say")
    load.add_argument(
        "--postgres-url",
        default="postgresql://postgres@127.0.0.1:5432/test",
        help="database for a new schema, dropped afterwards; empty: the server's embedded SQLite",
    )
    load.add_argument("--chroma", choices=("server", "embedded"), default="server")
    load.add_argument(
        "--auth", action="store_true", help="the server checks a bearer token per user (PERSONALAB_AUTH=tokens)"
    )
    load.add_argument("--repo", default=".", help="the folder with langgraph.json (default: here)")
    load.add_argument("--data-dir", help="keep the server's data and logs here (default: a temporary directory)")
    load.add_argument("--json", help="also write the figures to this file")
    load.set_defaults(handler=run)
