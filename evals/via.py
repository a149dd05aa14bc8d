"""How `personalab eval run --via inprocess|cli|served` plays a scenario's turns (issue 11: memory that lasts in
every way a turn is played), each giving the turn's final state (reply, `prompt` with each message's region,
`debug`), which evals.play scores the same way.

- `inprocess`: `graph.runner.run_turn` on the graph this process compiled (back-to-back batch runs); the writes a
  turn queued are flushed after it.
- `cli`: each turn is a new `personalab turn --json` process, the console script beside this interpreter, with the
  scenario's data folder, model and retrieval cap in its environment (`PERSONALAB_DATA_DIR`, `PERSONALAB_LLM`,
  `PERSONALAB_RAG_TIMEOUT`), as a user would run it; the state is the command's JSON, with the whole process's wall
  time (start-up and imports included, issue 29) as `debug.process_ms` beside the graph's `debug.total_ms`.
- `served`: `langgraph dev` on the scenario's data folder (evals.served.graph_server); each turn is a run on the
  instance's thread (uuid5 of the instance) through the LangGraph SDK, streamed in the `updates` mode (which nodes
  ran, and when: the served state has no per-node timings), then the thread's state is read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from personalab.evals.scenario import Step
from personalab.stores.background import flush_event_writes

VIAS = ("inprocess", "cli", "served")
_flush_lock = threading.Lock()  # flush_event_writes pops a shared list: one flusher at a time
SERVED_RUN_TIMEOUT_S = 600.0


class Turns(Protocol):
    """One way of playing turns: `send` plays one and returns its final state."""

    via: str
    stall_turns: int  # the director's stall threshold the turns run with

    def send(self, instance_id: int, step: Step, user_name: str | None) -> dict[str, Any]: ...

    def recall(self, instance_id: int, query: str, npc: str | None) -> dict[str, Any]:
        """Issue 26: what `npc` (None: the character) recalls, as `api.memories.recall` returns it."""
        ...

    def rss_mb(self) -> float:
        """Resident memory (MiB) of the process that played the last turn."""
        ...


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of process `pid` in MiB (Linux /proc; 0 where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
            pages = int(handle.read().split()[1])
        return round(pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024), 1)
    except (OSError, ValueError, IndexError):
        return 0.0


def flush_writes() -> None:
    with _flush_lock:
        flush_event_writes()


def _turn_fields(step: Step, user_name: str | None) -> dict[str, Any]:
    """TurnInput's fields besides instance and message that this step sets."""
    fields: dict[str, Any] = {
        "lines_before": list(step.lines_before) or None,
        "user_name": user_name,
        "selected_choice": {"level": step.choice} if step.choice else None,
        "time_gap": step.gap,
    }
    return {key: value for key, value in fields.items() if value is not None}


def new_sitting(instance_id: int) -> None:
    """`session: "new"` (issue 30): a new sitting of the instance starts before the step's turn, through the
    API (`PersonaLab().dialogue.new_session`, what `personalab session new` does): the current sitting ends and
    the next turn gets its recap."""
    from personalab.graph.api import PersonaLab

    PersonaLab().dialogue.new_session(instance_id)


def api_recall(instance_id: int, query: str, npc: str | None) -> dict[str, Any]:
    """What `npc` (None: the character) recalls for `query`, through the API (issue 26)."""
    from personalab.graph.api import PersonaLab

    return PersonaLab().memories.recall(instance_id, query, npc=npc)


class InProcessTurns:
    via = "inprocess"

    def recall(self, instance_id: int, query: str, npc: str | None) -> dict[str, Any]:
        return api_recall(instance_id, query, npc)

    def __init__(self, graph: Any, ctx: Any) -> None:
        self.graph, self.ctx = graph, ctx
        self.stall_turns = int(ctx.stall_turns)

    def send(self, instance_id: int, step: Step, user_name: str | None) -> dict[str, Any]:
        from personalab.graph.runner import run_turn

        if step.session:
            new_sitting(instance_id)
        state = run_turn(self.graph, self.ctx, instance_id, step.message, **_turn_fields(step, user_name))
        flush_writes()
        return state

    def rss_mb(self) -> float:
        return rss_mb()


def console_script(name: str = "personalab") -> str:
    """The console script `name` of this interpreter's environment."""
    here = Path(sys.executable).parent / name
    if not here.exists():
        raise FileNotFoundError(f"{name} is not installed beside {sys.executable} (pip install -e .)")
    return str(here)


class CliTurns:
    """Each turn a new `personalab turn --json` process (one-shot CLI turns)."""

    via = "cli"

    def __init__(self, env: Mapping[str, str], folder: Path) -> None:
        from personalab.stores.settings import settings

        self.env = dict(env)
        self.stall_turns = int(settings().stall_turns)
        self.script = console_script()
        self.out, self.err = folder / "turn.out.json", folder / "turn.err.log"
        self._rss = 0.0

    def command(self, instance_id: int, step: Step, user_name: str | None) -> list[str]:
        argv = [self.script, "turn", "--instance", str(instance_id), "--json"]
        if step.lines_before:
            argv += ["--lines-before", json.dumps(list(step.lines_before), ensure_ascii=False)]
        if user_name:
            argv += ["--user-name", user_name]
        if step.choice:
            argv += ["--choice", step.choice]
        if step.gap:
            argv += ["--gap", step.gap]
        return [*argv, "--", step.message]

    def send(self, instance_id: int, step: Step, user_name: str | None) -> dict[str, Any]:
        if step.session:  # as a user would: `personalab session new` before the turn
            subprocess.run(
                [self.script, "session", "new", "--instance", str(instance_id)],
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=True,
            )
        started = time.perf_counter()
        with self.out.open("wb") as out, self.err.open("wb") as err:
            # a session of its own: a terminal's Ctrl-C stops the scenario between turns (the worker's flag), not
            # in the middle of one
            process = subprocess.Popen(
                self.command(instance_id, step, user_name),
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
            # wait4, not wait: the turn process's own peak memory
            _pid, status, usage = os.wait4(process.pid, 0)
            process.returncode = code = os.waitstatus_to_exitcode(status)
        # what a user waits for (issue 29): the graph's own total leaves out the interpreter's start-up and imports
        process_ms = round((time.perf_counter() - started) * 1000, 2)
        self._rss = round(usage.ru_maxrss / 1024, 1)
        text = self.out.read_text(encoding="utf-8", errors="replace")
        try:
            state = json.loads(text)
        except json.JSONDecodeError:
            state = None
        if not isinstance(state, dict) or code not in (0, 1):
            problem = self.err.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            raise RuntimeError(f"personalab turn exited with code {code}: {problem[-1] if problem else text[:300]}")
        state.setdefault("retrieved", state.get("retrieved_events"))  # the command's name for the state's field
        debug = state.get("debug")
        state["debug"] = {**(debug if isinstance(debug, dict) else {}), "process_ms": process_ms}
        return state

    def rss_mb(self) -> float:
        return self._rss

    def recall(self, instance_id: int, query: str, npc: str | None) -> dict[str, Any]:
        """`personalab memory recall --npc NPC --json` in a process of its own, as a user would type it."""
        argv = [self.script, "memory", "recall", "--instance", str(instance_id), "--json"]
        if npc:
            argv += ["--npc", npc]
        done = subprocess.run(
            [*argv, "--", query], env=self.env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            problem = done.stderr.strip().splitlines()
            raise RuntimeError(f"personalab memory recall exited with code {done.returncode}: {problem[-1:]}")
        return dict(json.loads(done.stdout))


class ServedTurns:
    """Runs on the instances' threads of a `langgraph dev` server, through the LangGraph SDK."""

    via = "served"

    def __init__(self, url: str, server_pid: int | None, memory_mode: str = "full") -> None:
        from langgraph_sdk import get_sync_client
        from personalab.stores.settings import settings

        self.client = get_sync_client(url=url, timeout=(10.0, SERVED_RUN_TIMEOUT_S, SERVED_RUN_TIMEOUT_S, 10.0))
        self.stall_turns = int(settings().stall_turns)
        self.server_pid = server_pid
        self.memory_mode = memory_mode
        self._threads: set[str] = set()

    def send(self, instance_id: int, step: Step, user_name: str | None) -> dict[str, Any]:
        from personalab.stores.checkpoints import thread_id_for

        thread = thread_id_for(instance_id)
        if thread not in self._threads:
            self.client.threads.create(thread_id=thread, if_exists="do_nothing")
            self._threads.add(thread)
        if step.session:
            new_sitting(instance_id)  # the server reads the instance's sittings from the same database
        payload = {"instance_id": instance_id, "message": step.message, **_turn_fields(step, user_name)}
        timings: dict[str, float] = {}
        started = last = time.perf_counter()
        # the condition as a run knob of the run's context (nodes/context.py), not the server's configuration
        context = {"memory_mode": self.memory_mode} if self.memory_mode != "full" else None
        for part in self.client.runs.stream(
            thread, "personalab", input=payload, stream_mode="updates", context=context
        ):
            if part.event == "error":
                raise RuntimeError(f"the run failed: {part.data}")
            if part.event == "updates" and isinstance(part.data, dict):
                now = time.perf_counter()
                for node in part.data:
                    timings[node] = round((now - last) * 1000, 2)
                last = now
        total = round((time.perf_counter() - started) * 1000, 2)
        values = self.client.threads.get_state(thread)["values"]
        if not isinstance(values, dict):
            raise RuntimeError(f"the thread's state is not an object: {str(values)[:200]}")
        state = dict(values)
        # as run_turn reports them, measured by the client (the HTTP round trips included)
        state["debug"] = {**(state.get("debug") or {}), "timings_ms": timings, "total_ms": total}
        return state

    def rss_mb(self) -> float:
        return rss_mb(self.server_pid) if self.server_pid else 0.0

    def recall(self, instance_id: int, query: str, npc: str | None) -> dict[str, Any]:
        """Through the API on the same data folder (the served graph has no recall route of its own)."""
        return api_recall(instance_id, query, npc)


def default_repo() -> Path:
    """The folder with the `langgraph.json` that serves this installation's graph (the source tree of an
    editable install), else the current folder."""
    import personalab.graph

    tree = Path(personalab.graph.__file__).resolve().parents[1]
    return tree if (tree / "langgraph.json").exists() else Path.cwd()


@contextmanager
def open_turns(
    via: str, *, folder: Path, rag_timeout_s: float, repo: Path | None = None, memory_mode: str = "full"
) -> Iterator[Turns]:
    """The turns of a scenario whose data folder is `folder` (this process's PERSONALAB_DATA_DIR), played `via`,
    under the memory condition `memory_mode` (issue 30): the run context's `memory_mode` in this process and on
    the served graph, the `PERSONALAB_MEMORY_MODE` of each `personalab turn` process."""
    if via == "inprocess":
        from personalab.graph.runner import turn_graph
        from personalab.nodes.context import Context

        with turn_graph(Context(rag_timeout_s=rag_timeout_s, memory_mode=memory_mode)) as (graph, ctx):  # type: ignore[arg-type]
            yield InProcessTurns(graph, ctx)
        return
    from personalab.stores.db import dispose_engines

    # this process set the scenario up; from here on only the turns' own processes use the stores
    flush_writes()
    dispose_engines()
    env = {
        **os.environ,
        "PERSONALAB_DATA_DIR": str(folder),
        "PERSONALAB_RAG_TIMEOUT": f"{rag_timeout_s:g}",
        "PERSONALAB_MEMORY_MODE": memory_mode,
    }
    if via == "cli":
        yield CliTurns(env, folder)
        return
    if via != "served":
        raise ValueError(f"unknown --via {via!r}: one of {', '.join(VIAS)}")
    from personalab.evals.served import graph_server

    passed = ("PERSONALAB_LLM", "OPENAI_API_KEY", "OPENAI_BASE_URL")  # graph_server does not pass them on by itself
    server_env = {key: env[key] for key in passed if key in env}
    server_env.update(
        PERSONALAB_DATA_DIR=env["PERSONALAB_DATA_DIR"], PERSONALAB_RAG_TIMEOUT=env["PERSONALAB_RAG_TIMEOUT"]
    )
    workdir = folder / "server"
    with graph_server(repo or default_repo(), workdir, server_env) as url:
        pid_file = workdir / "server.pid"
        pid = int(pid_file.read_text()) if pid_file.exists() else None
        yield ServedTurns(url, pid, memory_mode)
