"""`./run bench cold`: a one-shot `personalab turn` in a new process against the time to import what it imports
(issue 11, cold start; goal: wall time at most 1.5× the import time, measured in the same run).

Fixture: a data directory with the sample instance and a few turns already played (so the store has memories
to retrieve). Then `--repeats` rounds, alternating, of
- import: a new interpreter that imports, in the same order, every module the one-shot turn had imported by
  its end (the list is taken from a turn run first, not measured) and exits;
- turn: `personalab turn --json` in a new interpreter (offline scripted model, as the script runs it, timing its
  phases), its wall time, the imports done before the command runs, the command, and from its output the graph's
  run (`total_ms`), what the retrieval waited for the loads (`warm_up_ms`), its status, and what each load of the
  warm-up thread took (`stores.warmup.TIMINGS_MS`; they overlap the command's other work);
- bare: `python -c pass` (the interpreter's own start-up, part of both).
Figures: medians; the ratio turn / import. The fixture's fact is a stored memory (`personalab memory add`), so
the measured turn has something to retrieve outside its recent dialogue.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL_RATIO = 1.5
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


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=600)
    elapsed = time.perf_counter() - started
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
        for _ in range(args.repeats):
            bare.append(_timed([sys.executable, "-c", "pass"], env)[0])
            imports.append(_timed([sys.executable, "-c", IMPORT_ONLY, str(listing)], env)[0])
            wall, done = _timed(turn, env)
            turns.append(wall)
            text, phase = done.stdout.rsplit("@@PHASES@@", 1)
            phases.append(json.loads(phase))
            out: dict[str, Any] = json.loads(text)
            retrieval = out["debug"].get("retrieval") or {}
            graph_runs.append(float(out.get("total_ms") or 0.0) / 1000)
            warm_waits.append(float(retrieval.get("warm_up_ms") or 0.0) / 1000)
            statuses.append(str(retrieval.get("status")))
            retrieved.append(len(out.get("retrieved_events") or []))

    med = statistics.median
    ratio = med(turns) / med(imports)
    print(
        f"cold start: one-shot `personalab turn --json` vs importing its {len(modules):,} modules, {args.repeats} rounds"
    )
    print(f"  interpreter start (python -c pass)          {med(bare):6.2f} s")
    print(f"  import of the turn's modules                {med(imports):6.2f} s   (runs: {_list(imports)})")
    print(f"  one-shot turn, wall                         {med(turns):6.2f} s   (runs: {_list(turns)})")
    print(f"    imports done before the command runs      {med([p['eager imports'] for p in phases]):6.2f} s")
    print(f"    the command (turn + flush)                {med([p['command'] for p in phases]):6.2f} s")
    print(f"      the graph's run (total_ms)              {med(graph_runs):6.2f} s")
    print(f"        waiting for the loads in the retrieval {med(warm_waits):5.2f} s   (warm_up_ms)")
    for name in phases[0]["loads"]:
        took = med([p["loads"].get(name, 0.0) for p in phases])
        print(f"      load in the warm-up thread: {name:<13}{took:6.2f} s")
    print(f"  retrieval status: {', '.join(sorted(set(statuses)))}; items retrieved per turn: {_list(retrieved, 0)}")
    verdict = "met" if ratio <= GOAL_RATIO else "NOT met"
    print(f"goal: wall at most {GOAL_RATIO}x the import time: {ratio:.2f}x — {verdict}")
    return 0


def _list(values: list[float] | list[int], digits: int = 2) -> str:
    return ", ".join(f"{value:.{digits}f}" for value in values)
