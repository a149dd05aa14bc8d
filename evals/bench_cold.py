"""`./run bench cold`: a one-shot `personalab turn` in a new process against the time to import what it imports
(issue 11, cold start; goal since issue 29: wall time at most 1.3× the import time, measured in the same run).

Fixture: a data directory with the sample instance and a few turns already played (so the store has memories
to retrieve). Then `--repeats` rounds, alternating, of
- import: a new interpreter that imports, in the same order, every module the one-shot turn had imported by
  its end (the list is taken from a turn run first, not measured) and exits;
- turn: `personalab turn --json` in a new interpreter (offline scripted model, as the script runs it, timing its
  phases), its wall time, the imports done before the command runs, the command, and from its output the graph's
  run (`total_ms`), what the retrieval waited for the loads (`warm_up_ms`), its status, and what each load of the
  warm-up thread took (`stores.warmup.TIMINGS_MS`; they overlap the command's other work);
- bare: `python -c pass` (the interpreter's own start-up, part of both);
- handed: with `personalab serve` running for the data folder, `personalab turn --json` (the turn handed to the
  server, graph/api/handoff.py; goal since issue 29: at most 0.5 s plus the model), after one turn not counted;
- the commands that start without the engine (issue 29: `personalab --help` at most 0.5 s, `personalab instance
  list` at most 1.0 s on a quiet machine), beside the import of the SQL layer every listing needs (SQLAlchemy's ORM
  and SQLModel) as their baseline.
Figures: medians; the ratio turn / import, of the wall times and of the CPU times (user + system, of the process and
its threads: on a shared machine the wall time is mostly the other processes' load, the CPU time much less so; the
turn's warm-up thread runs on another core, so its CPU time may exceed its wall time on a quiet machine). The fixture's fact is a stored memory (`personalab memory add`), so
the measured turn has something to retrieve outside its recent dialogue.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL_RATIO = 1.3  # issue 29 (issue 11's was 1.5)
GOAL_HELP_S = 0.5  # `personalab --help`, wall, quiet machine (issue 29)
GOAL_LIST_S = 1.0  # `personalab instance list`
GOAL_HANDED_S = 0.5  # `personalab turn` handed to a running `personalab serve`, plus the model (issue 29)
# a one-shot turn as the `personalab` script runs it, with the times of its phases and what it imported
TIMED_TURN = """
import time
started = time.perf_counter()
import sys, json
from personalab.graph.cli import main
imported = time.perf_counter()
code = main(sys.argv[1:])
ended = time.perf_counter()
from personalab.stores.warmup import TIMINGS_MS
print("\\n@@PHASES@@" + json.dumps({
    "eager imports": imported - started, "command": ended - imported,
    "loads": {name: ms / 1000 for name, ms in TIMINGS_MS.items()},
    "modules": [m for m in sys.modules if not m.startswith("__")],
}))
raise SystemExit(code)
"""
IMPORT_ONLY = """
import importlib, json, sys
for name in json.load(open(sys.argv[1])):
    try:
        importlib.import_module(name)
    except Exception:
        pass
"""
MESSAGES = ["今天风很大。", "前面好像有人。"]
FACT = "莱姆的妹妹叫林小禾，今年十二岁，住在银杏镇。"  # a stored memory (not in the recent dialogue)
QUESTION = "你还记得我妹妹叫什么吗？"


def _env(data: Path) -> dict[str, str]:
    env = {**os.environ, "PERSONALAB_DATA_DIR": str(data), "PERSONALAB_LLM": "scripted"}
    for key in ("PERSONALAB_DATABASE_URL", "OPENAI_API_KEY", "PERSONALAB_CHROMA_HOST"):
        env.pop(key, None)
    return env


def _personalab() -> str:
    return str(Path(sys.executable).with_name("personalab"))


CPU_S: list[float] = []  # the CPU time (user + system) of each process `_timed` ran, in order


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    cpu = _cpu_of_children()
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=600)
    elapsed = time.perf_counter() - started
    CPU_S.append(_cpu_of_children() - cpu)  # the child was waited for: its time is counted now
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} … failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed, done


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="personalab-cold-") as tmp:
        data = Path(args.data_dir) if args.data_dir else Path(tmp) / "data"
        env = _env(data)
        _, created = _timed([_personalab(), "instance", "create", "--sample"], env)
        instance = created.stdout.strip()
        _timed([_personalab(), "memory", "add", "--instance", instance, "--importance", "0.9", FACT], env)
        for message in MESSAGES:
            _timed([_personalab(), "turn", "--instance", instance, message], env)
        turn = [sys.executable, "-c", TIMED_TURN, "turn", "--instance", instance, "--json", QUESTION]
        # the modules a one-shot turn imports, in their order (from a turn before the measured ones)
        _, dumped = _timed(turn, env)
        modules = json.loads(dumped.stdout.rsplit("@@PHASES@@", 1)[1])["modules"]
        listing = Path(tmp) / "modules.json"
        listing.write_text(json.dumps(modules), encoding="utf-8")

        bare: list[float] = []
        imports: list[float] = []
        turns: list[float] = []
        graph_runs: list[float] = []
        warm_waits: list[float] = []
        statuses: list[str] = []
        retrieved: list[int] = []
        phases: list[dict[str, Any]] = []
        cpu: dict[str, list[float]] = {"bare": [], "import": [], "turn": []}
        quick = {
            "personalab --help": [_personalab(), "--help"],
            "personalab instance list": [_personalab(), "instance", "list"],
            "import of the SQL layer (baseline)": [sys.executable, "-c", "import sqlalchemy.orm, sqlmodel"],
        }
        quick_wall: dict[str, list[float]] = {name: [] for name in quick}
        quick_cpu: dict[str, list[float]] = {name: [] for name in quick}
        for _ in range(args.repeats):
            for name, argv in quick.items():
                quick_wall[name].append(_timed(argv, env)[0])
                quick_cpu[name].append(CPU_S[-1])
            bare.append(_timed([sys.executable, "-c", "pass"], env)[0])
            cpu["bare"].append(CPU_S[-1])
            imports.append(_timed([sys.executable, "-c", IMPORT_ONLY, str(listing)], env)[0])
            cpu["import"].append(CPU_S[-1])
            wall, done = _timed(turn, env)
            turns.append(wall)
            cpu["turn"].append(CPU_S[-1])
            text, phase = done.stdout.rsplit("@@PHASES@@", 1)
            phases.append(json.loads(phase))
            out: dict[str, Any] = json.loads(text)
            retrieval = out["debug"].get("retrieval") or {}
            graph_runs.append(float(out.get("total_ms") or 0.0) / 1000)
            warm_waits.append(float(retrieval.get("warm_up_ms") or 0.0) / 1000)
            statuses.append(str(retrieval.get("status")))
            retrieved.append(len(out.get("retrieved_events") or []))
        handed = _handed_turns(env, instance, args.repeats)

    med = statistics.median
    ratio = med(turns) / med(imports)
    print(
        f"cold start: one-shot `personalab turn --json` vs importing its {len(modules):,} modules, {args.repeats} rounds"
    )
    print(f"  load average at the end: {', '.join(f'{load:.2f}' for load in os.getloadavg())}")
    print(f"  interpreter start (python -c pass)          {med(bare):6.2f} s   (CPU {med(cpu['bare']):.2f} s)")
    print(f"  import of the turn's modules                {med(imports):6.2f} s   (runs: {_list(imports)})")
    print(f"    its CPU time                              {med(cpu['import']):6.2f} s   (runs: {_list(cpu['import'])})")
    print(f"  one-shot turn, wall                         {med(turns):6.2f} s   (runs: {_list(turns)})")
    print(f"    its CPU time                              {med(cpu['turn']):6.2f} s   (runs: {_list(cpu['turn'])})")
    print(f"    imports done before the command runs      {med([p['eager imports'] for p in phases]):6.2f} s")
    print(f"    the command (turn + flush)                {med([p['command'] for p in phases]):6.2f} s")
    print(f"      the graph's run (total_ms)              {med(graph_runs):6.2f} s")
    print(f"        waiting for the loads in the retrieval {med(warm_waits):5.2f} s   (warm_up_ms)")
    for name in phases[0]["loads"]:
        took = med([p["loads"].get(name, 0.0) for p in phases])
        print(f"      load in the warm-up thread: {name:<13}{took:6.2f} s")
    print(f"  retrieval status: {', '.join(sorted(set(statuses)))}; items retrieved per turn: {_list(retrieved, 0)}")
    print("  commands without the engine (wall, CPU):")
    for name in quick:
        print(f"    {name:<40}{med(quick_wall[name]):6.2f} s  {med(quick_cpu[name]):6.2f} s")
    for name, goal in (("personalab --help", GOAL_HELP_S), ("personalab instance list", GOAL_LIST_S)):
        took = med(quick_wall[name])
        print(
            f"goal: {name} at most {goal} s on a quiet machine: {took:.2f} s — {'met' if took <= goal else 'NOT met'}"
        )
    walls, runs, models = handed
    took = med(walls)
    print(
        f"  handed to a running `personalab serve`: wall {took:.2f} s (runs: {_list(walls)}), the server's graph "
        f"{med(runs):.2f} s, its model {med(models):.3f} s"
    )
    print(
        f"goal: a turn handed to a running server at most {GOAL_HANDED_S} s plus the model: "
        f"{took - med(models):.2f} s — {'met' if took - med(models) <= GOAL_HANDED_S else 'NOT met'}"
    )
    verdict = "met" if ratio <= GOAL_RATIO else "NOT met"
    cpu_ratio = med(cpu["turn"]) / med(cpu["import"])
    print(f"goal: wall at most {GOAL_RATIO}x the import time: {ratio:.2f}x — {verdict} (CPU time: {cpu_ratio:.2f}x)")
    return 0


def _handed_turns(env: dict[str, str], instance: str, repeats: int) -> tuple[list[float], list[float], list[float]]:
    """`personalab turn --json` while `personalab serve` runs for the data folder (the turn handed to it): the
    wall times, the server's graph times and its model times (`generate`) of `repeats` turns after a first one."""
    import signal

    server = subprocess.Popen(
        [_personalab(), "serve", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    walls: list[float] = []
    runs: list[float] = []
    models: list[float] = []
    try:
        if server.stdout is None or "PersonaLab is at" not in server.stdout.readline():
            raise RuntimeError("personalab serve did not start")
        for index in range(repeats + 1):
            wall, done = _timed([_personalab(), "turn", "--json", "--instance", instance, QUESTION], env)
            out = json.loads(done.stdout)
            if out.get("ran_in") != "server":
                raise RuntimeError(f"the turn was not handed to the server: {out.get('ran_in')}")
            if index:  # the first: the server's first turn
                walls.append(wall)
                runs.append(float(out.get("total_ms") or 0.0) / 1000)
                models.append(float((out.get("timings_ms") or {}).get("generate") or 0.0) / 1000)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    return walls, runs, models


def _list(values: list[float] | list[int], digits: int = 2) -> str:
    return ", ".join(f"{value:.{digits}f}" for value in values)
