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

`--server aegra --workers 1 3` serves the same graph on Aegra instead (`personalab serve-production`, issue 27:
Python 3.12, Redis as the runs' queue, a PostgreSQL database of Aegra's own), once per worker count;
`--server langgraph-dev aegra` plays the same load on both, one after the other, each on fresh stores, and compares
them (p50 / p95 against `langgraph dev`, throughput against the fewest Aegra processes). Every line a user says is
unique (a number after it), so after the load each instance's stored dialogue is checked line by line: a turn
answered to its client but not stored (lost), a user line stored twice or with a sibling (duplicated), a line stored
on an instance it was not said to (crossed), a user line without its reply (half-written). `--kill N` kills one
Aegra process with SIGKILL N times during the load (every `--kill-interval` s); after each kill a probe instance
plays until a turn answers: the time from the kill to that answer is the recovery, the time from the kill to sending
that turn is when the instance was usable again (the answered turn's own time under load left out), and the probe's
turns refused or failed before it are listed.

`--deadline SECONDS` bounds the whole command (a stuck server or client would otherwise hang it): at the deadline
the clients stop taking turns, the servers are stopped, the schemas and databases are dropped as after any run, one
line says the load was cut and what had been played, and the exit code is 1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import secrets
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
from personalab.evals.data_dir import data_folder, postgres_schema
from personalab.evals.filler import filler_lines
from personalab.evals.report import percentile
from personalab.evals.served import (
    aegra_server,
    aegra_workers,
    chroma_server,
    fresh_postgres_database,
    graph_server,
)
from personalab.graph.runner import load_sample
from personalab.nodes.rules.errors import InvalidInput
from personalab.stores.checkpoints import thread_id_for

ASSISTANT = "personalab"


class DeadlineReached(Exception):
    """`bench load --deadline` ran out (raised in the main thread, wherever it was waiting)."""


class Deadline:
    """The whole command's deadline. While `armed`, SIGALRM raises `DeadlineReached` in the main thread at the
    deadline, whatever it waits on (a server's start, a client's request, a thread, the outbox's catch-up): a
    stuck server or client cannot hold it. Disarmed before the servers are stopped and the schemas dropped, so
    that clean-up is never cut half-way."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds

    def remaining(self) -> float:
        return self.ends - time.monotonic()

    @contextmanager
    def armed(self) -> Iterator[None]:
        if self.remaining() <= 0:
            raise DeadlineReached
        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach only the main thread: there the deadline is checked between turns alone
            return
        live = [True]

        def expire(signum: int, frame: object) -> None:
            if live[0]:
                raise DeadlineReached

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, self.remaining())
        try:
            yield
        finally:
            live[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def default_deadline(args: argparse.Namespace, loads: int) -> float:
    """The deadline when `--deadline` is not given: per load, Aegra's start allowance, the outbox's catch-up and a
    minute, plus 5 s for every turn played (the client's p95 under load is well under 1 s), so that a normal run
    never meets it."""
    turns = args.users * args.instances * args.turns + args.turns + 1 + 5 * args.kill
    return loads * (args.start_timeout + MEMORY_WAIT_S + 60.0 + 5.0 * turns)


class Progress:
    """What the load had done when the deadline cut it: the load, its phase and its clients."""

    def __init__(self) -> None:
        self.label = ""
        self.phase = "starting"
        self.planned = 0
        self.users: list[User] = []
        self.finished: list[str] = []

    def summary(self, deadline: Deadline) -> str:
        answered = sum(
            outcome == "ok" for user in self.users for sent in user.sent.values() for outcome in sent.values()
        )
        said = sum(len(sent) for user in self.users for sent in user.sent.values())
        done = f"; loads finished before: {', '.join(self.finished)}" if self.finished else ""
        return (
            f"bench load: cut at the deadline ({deadline.seconds:g} s) on {self.label or 'the first load'} while "
            f"{self.phase}: {answered} turn(s) answered of {said} sent, {self.planned} planned under load; "
            f"clients stopped, servers stopped, schemas dropped{done}"
        )


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
        # what each instance was told, and whether its client got an answer ("ok") or an error ("error")
        self.sent: dict[int, dict[str, str]] = {}

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
        sent = self.sent.setdefault(instance_id, {})
        sent[message] = "error"
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
            sent[message] = "ok"
            self.times_ms.append(elapsed)
            clock = (output.get("debug") or {}).get("turn_time") or {}
            if "graph_ms" in clock:
                self.graph_ms.append(float(clock["graph_ms"]))
                self.overhead_ms.append(float(clock["without_reply_model_ms"]))
        except httpx.HTTPError as exc:
            self.errors.append(f"instance {instance_id}: {type(exc).__name__}: {exc}")

    def ok(self) -> bool:
        """Whether the last turn answered (the probe's question after a kill)."""
        return any(outcome == "ok" for outcome in list(self.sent.get(self.instances[0], {}).values())[-1:])

    def stored_lines(self, instance_id: int) -> list[dict[str, Any]]:
        """The instance's current branch, every page."""
        lines: list[dict[str, Any]] = []
        while True:
            response = self.http.get(f"/instances/{instance_id}/history", params={"offset": len(lines), "limit": 1000})
            response.raise_for_status()
            page = response.json()
            lines.extend(page["lines"])
            if not page["lines"] or len(lines) >= int(page["total"]):
                return lines

    def stored_memories(self, instance_id: int) -> list[dict[str, Any]]:
        """Every memory of the instance, the dialogue record included, every branch, every page."""
        found: list[dict[str, Any]] = []
        while True:
            response = self.http.get(
                f"/instances/{instance_id}/memories",
                params={"include_record": "true", "all_branches": "true", "offset": len(found), "limit": 1000},
            )
            response.raise_for_status()
            page = response.json()
            found.extend(page["items"])
            if not page["items"] or len(found) >= int(page["total"]):
                return found

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


def integrity(users: list[User]) -> dict[str, int]:
    """Each instance's stored dialogue against what its clients were told (the lines are unique): turns answered
    but not stored (lost), user lines stored twice or beside a sibling of their own (duplicated), lines stored on an
    instance they were not said to (crossed), user lines without a reply after them (half-written), and turns whose
    client got an error but that were stored whole all the same (stored after an error: allowed, the client can see
    it in the history)."""
    found = {"lost": 0, "duplicated": 0, "crossed_lines": 0, "half_written": 0, "stored_after_error": 0}
    for user in users:
        for instance_id in user.instances:
            sent = user.sent.get(instance_id, {})
            lines = user.stored_lines(instance_id)
            said = [line for line in lines if line["attribute"] == "user"]
            contents = [line["content"] for line in said]
            found["duplicated"] += len(contents) - len(set(contents))
            found["duplicated"] += sum(max(0, int(line["sibling_count"]) - 1) for line in said)
            found["crossed_lines"] += sum(content not in sent for content in set(contents))
            found["lost"] += sum(outcome == "ok" and message not in contents for message, outcome in sent.items())
            found["stored_after_error"] += sum(
                outcome == "error" and message in contents for message, outcome in sent.items()
            )
            for index, line in enumerate(lines):
                if line["attribute"] == "user":
                    after = lines[index + 1] if index + 1 < len(lines) else None
                    found["half_written"] += after is None or after["attribute"] == "user"
    return found


MEMORY_WAIT_S = 120.0  # the outbox applies a turn's memory writes after its reply; a killed worker's after its claim


def memory_integrity(users: list[User]) -> dict[str, int]:
    """Each instance's stored memories against its stored dialogue (issue 27 "no memory lost or duplicated"): every
    line of the current branch has exactly one dialogue-record memory (`missing`: none, `duplicated`: more than
    one), and no memory of an instance belongs to another's line or holds a line said to another instance
    (`crossed`: between instances, whether of one user or of two)."""
    lines = {i: user.stored_lines(i) for user in users for i in user.instances}
    memories = {i: user.stored_memories(i) for user in users for i in user.instances}
    owner_of_line = {line["id"]: i for i, kept in lines.items() for line in kept}
    said_to = {message: i for user in users for i, sent in user.sent.items() for message in sent}
    found = {"memories": 0, "missing": 0, "duplicated": 0, "crossed": 0}
    for instance_id, kept in lines.items():
        records: dict[int, int] = {}
        for memory in memories[instance_id]:
            found["memories"] += 1
            line_id = memory.get("line_id")
            if memory["layer"] == "record" and line_id is not None:
                records[line_id] = records.get(line_id, 0) + 1
            elsewhere = line_id is not None and owner_of_line.get(line_id, instance_id) != instance_id
            # a unique user line inside another instance's memory (its text, or the context a record carries)
            foreign = any(message in memory["content"] and i != instance_id for message, i in said_to.items())
            found["crossed"] += bool(elsewhere or foreign)
        for line in kept:
            if str(line.get("content") or "").strip():
                count = records.get(line["id"], 0)
                found["missing"] += count == 0
                found["duplicated"] += max(0, count - 1)
    return found


def settled_memory_integrity(users: list[User], wait_s: float = MEMORY_WAIT_S) -> dict[str, int]:
    """`memory_integrity` once the outbox has caught up: asked again every 2 s while a line still misses its
    record, up to `wait_s` (the writes of a turn are applied after its reply, at least once)."""
    deadline = time.monotonic() + wait_s
    while True:
        found = memory_integrity(users)
        if not found["missing"] or time.monotonic() > deadline:
            return found
        time.sleep(2.0)


@contextmanager
def _served(args: argparse.Namespace, server: str, workers: int, folder: Path, env: dict[str, str]) -> Iterator[str]:
    """The server `server` serving the repository (Aegra with `workers` processes, its own database beside)."""
    repo = Path(args.repo).resolve()
    if server == "langgraph-dev":
        with graph_server(repo, folder / "server", env) as url:
            yield url
        return
    if not args.postgres_url:
        raise SystemExit("bench load --server aegra needs --postgres-url (Aegra keeps its records in PostgreSQL)")
    with (
        fresh_postgres_database(args.postgres_url) as engine_url,
        aegra_server(
            repo,
            folder / "server",
            env,
            engine_database_url=engine_url,
            workers=workers,
            redis_url=args.redis_url,
            start_timeout=args.start_timeout,
        ) as url,
    ):
        yield url


def play_once(
    args: argparse.Namespace, server: str, workers: int, folder: Path, deadline: Deadline, progress: Progress
) -> dict[str, Any]:
    """One load on fresh stores served by `server`; prints and returns its figures. `DeadlineReached` once the
    servers are stopped and the schemas dropped, when `deadline` comes first (`progress` says how far it got)."""
    label = "langgraph dev" if server == "langgraph-dev" else f"Aegra x{workers}"
    progress.label, progress.phase, progress.users = label, "starting the servers", []
    progress.planned = args.users * args.instances * args.turns
    # a clean-up (servers stopped, schemas dropped) is never cut: the deadline is disarmed before it starts
    with ExitStack() as stack, deadline.armed():
        return _play(args, server, workers, folder, stack, progress)


def _play(
    args: argparse.Namespace, server: str, workers: int, folder: Path, stack: ExitStack, progress: Progress
) -> dict[str, Any]:
    label = progress.label
    names = [f"user{n + 1}" for n in range(args.users)]
    # --auth: the server checks a bearer token per user (PERSONALAB_AUTH=tokens), each user sees only their own
    tokens = {name: secrets.token_urlsafe(16) for name in [*names, "probe"]} if args.auth else {}
    kills = args.kill if server == "aegra" else 0
    folder.mkdir(parents=True, exist_ok=True)
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
    database = "PostgreSQL" if args.postgres_url else "SQLite"
    print(f"\n== {label}: starting ({database}, Chroma {args.chroma})", flush=True)
    url = stack.enter_context(_served(args, server, workers, folder, env))
    users = [User(name, url, tokens.get(name)) for name in names]
    probe = User("probe", url, tokens.get("probe"))
    progress.users, progress.phase = [*users, probe], "setting up the users"
    for user in [*users, probe]:
        stack.callback(user.http.close)
        user.set_up(1 if user is probe else args.instances)
        user.create_threads()
    count = args.turns * args.instances * len(users) + args.turns + 1 + 50 * kills
    # a number after each line: every line said is unique, so the stored dialogue can be checked line by line
    lines = [f"{line}（{n}）" for n, line in enumerate(filler_lines(count, seed=args.seed))]

    # baseline: one instance alone, the same number of turns after a warm-up turn (the server's first turn
    # loads the models; it is left out)
    alone = users[0]
    progress.phase = "playing the baseline (one instance alone)"
    for n in range(args.turns + 1):
        alone.turn(alone.instances[0], lines[n])
    baseline, baseline_errors = list(alone.times_ms[1:]), list(alone.errors)
    baseline_graph, baseline_overhead = list(alone.graph_ms[1:]), list(alone.overhead_ms[1:])
    for kept in (alone.times_ms, alone.graph_ms, alone.overhead_ms, alone.errors):
        kept.clear()

    counter = iter(range(args.turns + 1, len(lines)))
    take = threading.Lock()

    def next_line() -> str:
        with take:
            return lines[next(counter)]

    stop = threading.Event()  # the deadline: no client takes another turn
    # runs before the servers stop (last in, first out): the clients stop, and a turn in flight errs out with them
    stack.callback(stop.set)

    def play(user: User) -> None:
        for _ in range(args.turns):
            for instance_id in user.instances:
                if stop.is_set():
                    return
                user.turn(instance_id, next_line())

    recoveries: list[float] = []
    usable: list[float] = []  # from the kill to sending the probe's turn that was answered
    refusals: list[str] = []  # the probe's turns refused or failed after a kill, before that one
    killed: list[int] = []
    done = stop

    def kill_and_probe() -> None:
        """kill -9 one Aegra worker every --kill-interval s; then the probe instance plays until it answers."""
        supervisor = int((folder / "server" / "server.pid").read_text())
        chooser = random.Random(args.seed)
        for _ in range(kills):
            if done.wait(args.kill_interval):
                return
            workers_now = aegra_workers(supervisor)
            if not workers_now:
                print("  no Aegra worker left to kill", flush=True)
                return
            victim = chooser.choice(workers_now)
            os.kill(victim, signal.SIGKILL)
            struck = time.perf_counter()
            killed.append(victim)
            refused_before = len(probe.errors)
            while not done.is_set():
                sent = time.perf_counter()
                probe.turn(probe.instances[0], next_line())
                if probe.ok():
                    # the instance was usable from when the answered turn was sent: the rest is that turn's own
                    # time, which under load is the load's, not the kill's
                    usable.append(sent - struck)
                    break
                time.sleep(0.1)
            recoveries.append(time.perf_counter() - struck)
            refusals.extend(probe.errors[refused_before:])

    progress.phase = "playing the load"
    started = time.perf_counter()
    killer = threading.Thread(target=kill_and_probe, daemon=True) if kills else None
    if killer:
        killer.start()
    # daemon threads, not a pool: at the deadline the main thread leaves them behind (a pool's exit would wait for
    # a stuck request); the servers' stop ends their requests
    clients = [threading.Thread(target=play, args=(user,), name=f"load-{user.name}", daemon=True) for user in users]
    for client in clients:
        client.start()
    for client in clients:
        client.join()
    wall = time.perf_counter() - started
    done.set()
    if killer:
        killer.join(timeout=300)
    progress.phase = "checking the stored dialogue and memories"

    played = {
        instance_id: sum(outcome == "ok" for outcome in user.sent.get(instance_id, {}).values())
        for user in users
        for instance_id in user.instances
    }
    lost = sum(
        max(0, played[instance_id] - user.stored_turns(instance_id)) for user in users for instance_id in user.instances
    )
    checked = integrity([*users, probe])
    # the memories too: each played line recorded once, on its own instance (after the outbox caught up)
    remembered = settled_memory_integrity([*users, probe])
    # with auth, every user lists exactly their own instances (nothing of another user's)
    crossed = sum(len(user.listed_instances() ^ set(user.instances)) for user in users) if tokens else 0
    loaded = [ms for user in users for ms in user.times_ms]
    loaded_graph = [ms for user in users for ms in user.graph_ms]
    loaded_overhead = [ms for user in users for ms in user.overhead_ms]
    errors = baseline_errors + [error for user in users for error in user.errors] + probe.errors
    turns = len(users) * args.instances * args.turns
    ratio = percentile(loaded, 0.5) / percentile(baseline, 0.5) if baseline and loaded else float("nan")
    print(
        f"\n{label}: {len(users)} users x {args.instances} instances x {args.turns} turns = {turns} turns under load, "
        f"scripted model, {database}, Chroma {args.chroma}"
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
    print("  stored dialogue against what was said: " + ", ".join(f"{k} {v}" for k, v in checked.items()))
    print("  memories checked after the load: " + ", ".join(f"{k} {v}" for k, v in remembered.items()))
    if tokens:
        print(f"  instances listed across users {crossed}")
    if kills:
        print(
            f"  kill -9 of one Aegra process  {len(killed)} time(s); probe instance answering again after "
            f"p50 {percentile(recoveries, 0.5) if recoveries else float('nan'):.1f} s, "
            f"max {max(recoveries or [float('nan')]):.1f} s; usable again (the answered turn sent) after "
            f"p50 {percentile(usable, 0.5) if usable else float('nan'):.1f} s, "
            f"max {max(usable or [float('nan')]):.1f} s; {len(refusals)} probe turn(s) refused or failed before"
        )
        for refusal in refusals[:10]:
            print(f"    probe: {refusal}")
    for error in errors[:10]:
        print(f"    {error}")
    return {
        "server": server,
        "workers": workers if server == "aegra" else 1,
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
        "integrity": checked,
        "memory_integrity": remembered,
        "auth": bool(tokens),
        "crossed": crossed,
        "kills": len(killed),
        "recovery_s": recoveries,
        "usable_again_s": usable,
        "probe_refusals": refusals,
    }


def _failed(run: dict[str, Any]) -> bool:
    """A run's figures break a promise: an error to a client (unless processes were killed: then the client's error
    is the promise), a turn lost or stored twice or crossed, half-written, a memory missing, stored twice or
    crossed, or an instance unusable for 5 s."""
    checked, remembered = run["integrity"], run["memory_integrity"]
    broken = (
        run["turns_lost"]
        or run["crossed"]
        or any(checked[key] for key in ("lost", "duplicated", "crossed_lines", "half_written"))
        or any(remembered[key] for key in ("missing", "duplicated", "crossed"))
    )
    return bool(broken or (run["errors"] and not run["kills"]) or any(s > 5.0 for s in run["usable_again_s"]))


def run(args: argparse.Namespace) -> int:
    if args.deadline is not None and not 0 < args.deadline < math.inf:
        raise InvalidInput(f"--deadline must be a positive number of seconds, got {args.deadline:g}")
    targets = [(server, n) for server in args.server for n in (args.workers if server == "aegra" else [1])]
    deadline = Deadline(args.deadline if args.deadline is not None else default_deadline(args, len(targets)))
    runs: list[dict[str, Any]] = []
    progress = Progress()
    try:
        with data_folder(args.data_dir, "personalab-load-") as folder:
            for server, workers in targets:
                runs.append(play_once(args, server, workers, folder / f"{server}-{workers}", deadline, progress))
                progress.finished.append(progress.label)
    except DeadlineReached:
        cut = progress.summary(deadline)
        print(f"\n{cut}", flush=True)
        if args.json:
            summary = {"cut_at_deadline": cut, "deadline_s": deadline.seconds, "runs": runs}
            Path(args.json).write_text(json.dumps(summary, ensure_ascii=False, indent=2), encoding="utf-8")
        return 1
    comparison: dict[str, float] = {}
    dev = next((r for r in runs if r["server"] == "langgraph-dev"), None)
    aegra = sorted((r for r in runs if r["server"] == "aegra"), key=lambda r: r["workers"])
    if len(runs) > 1:
        print("\nin this run:")
    for r in aegra:
        if dev and dev["load_ms"]["p50"]:
            p50, p95 = (r["load_ms"][q] / dev["load_ms"][q] for q in ("p50", "p95"))
            comparison[f"aegra{r['workers']}_p50_vs_dev"], comparison[f"aegra{r['workers']}_p95_vs_dev"] = p50, p95
            print(
                f"  Aegra x{r['workers']} / langgraph dev, client time per turn under load: "
                f"p50 {p50:.2f}x, p95 {p95:.2f}x"
            )
        if r is not aegra[0] and aegra[0]["turns_per_s"]:
            comparison[f"aegra{r['workers']}_throughput_vs_aegra{aegra[0]['workers']}"] = (
                r["turns_per_s"] / aegra[0]["turns_per_s"]
            )
            print(
                f"  throughput Aegra x{r['workers']} / Aegra x{aegra[0]['workers']}: "
                f"{r['turns_per_s'] / aegra[0]['turns_per_s']:.2f}x"
            )
    if args.json:
        summary = {**runs[0], "runs": runs, "comparison": comparison}
        Path(args.json).write_text(json.dumps(summary, ensure_ascii=False, indent=2), encoding="utf-8")
    return 1 if any(_failed(r) for r in runs) else 0


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
    load.add_argument(
        "--server",
        nargs="+",
        choices=("langgraph-dev", "aegra"),
        default=["langgraph-dev"],
        help="the server(s) to play the load on, one after the other (aegra: `personalab serve-production`, "
        "Python 3.12; default langgraph-dev)",
    )
    load.add_argument(
        "--workers", type=int, nargs="+", default=[3], help="Aegra's server processes, one load per count (default 3)"
    )
    load.add_argument(
        "--start-timeout", type=float, default=900.0, help="seconds Aegra's processes may take to start (default 900)"
    )
    load.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="Redis for Aegra's run queue")
    load.add_argument("--kill", type=int, default=0, help="kill -9 one Aegra process this many times during the load")
    load.add_argument("--kill-interval", type=float, default=6.0, help="seconds between two kills (default 6)")
    load.add_argument(
        "--deadline",
        type=float,
        metavar="SECONDS",
        help="seconds the whole command may take; then the clients and servers stop, the schemas are dropped and "
        "the exit code is 1 (default: per load, --start-timeout + 180 s + 5 s per turn: 8 users x 4 instances x 5 "
        "turns on one server, 1910 s)",
    )
    load.add_argument("--repo", default=".", help="the folder with langgraph.json (default: here)")
    load.add_argument("--data-dir", help="keep the server's data and logs here (default: a temporary directory)")
    load.add_argument("--json", help="also write the figures to this file")
    load.set_defaults(handler=run)
