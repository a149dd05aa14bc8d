"""`personalab eval all --out DIR [--locomo PATH] [--quick]`: the benchmark figures (docs/benchmarks/) in one command (issue 12).

Runs, one after the other and each in a new process (a benchmark's figures depend on what its process has loaded):
the benchmarks (`bench builder`, `history`, `turn`, `retrieval`, `cold`), LoCoMo retrieval recall (`eval locomo`,
when `--locomo PATH` names the file) and the shipped scenario suite (`eval run shipped`). Each one's output is kept
in `DIR/<name>.txt` (the suite's report in `DIR/scenarios/`); `DIR/report.md` starts with the summary table
(figure, goal, measured, met?) read from their goal lines, and says which goals were missed and which runs failed.
`--quick` uses smaller fixtures (minutes instead of tens of minutes; the figures are then not the logged ones).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from personalab.nodes.rules.errors import InvalidInput

# name, arguments (full), arguments (--quick)
BENCHMARKS: tuple[tuple[str, list[str], list[str]], ...] = (
    ("bench builder", ["bench", "builder"], ["bench", "builder", "--lines", "20000", "--repeats", "3"]),
    (
        "bench history",
        ["bench", "history"],
        ["bench", "history", "--lines", "20000", "--depth", "500", "--repeats", "3"],
    ),
    ("bench turn", ["bench", "turn"], ["bench", "turn", "--turns", "30", "--history-turns", "300", "--events", "2000"]),
    (
        "bench retrieval",
        ["bench", "retrieval"],
        [
            "bench",
            "retrieval",
            "--memories",
            "10000",
            "--retrievals",
            "200",
            "--inserts",
            "100",
            "--after-insert",
            "10",
        ],
    ),
    ("bench cold", ["bench", "cold"], ["bench", "cold", "--repeats", "1"]),
)
_GOAL = re.compile(r"goal: (?P<goal>.+?): (?P<measured>[^—]+?) — (?P<verdict>met|NOT met)")
_RATIO = re.compile(r"ratio build/floor: (?P<value>[\d.]+)x\s+\(goal: within (?P<goal>[\d.]+)x\)")
_SPEEDUP = re.compile(r"speed-up: (?P<value>[\d.]+)x\s+\(goal: at least (?P<goal>[\d.]+)x(?P<where>[^)]*)\)")
_BACKEND = re.compile(r"^(\w+): save of", re.MULTILINE)
STEP_TIMEOUT_S = 3 * 3600


def goal_rows(name: str, output: str) -> list[dict[str, Any]]:
    """The summary rows a run's output states: its `goal: …: measured — met` lines and the builder's and history's
    ratio lines."""
    rows = []
    for match in _GOAL.finditer(output):
        rows.append(
            {
                "figure": f"{name}: {match['goal']}",
                "goal": match["goal"],
                "measured": match["measured"].strip(),
                "met": match["verdict"] == "met",
            }
        )
    for match in _RATIO.finditer(output):
        value, goal = float(match["value"]), float(match["goal"])
        rows.append(
            {
                "figure": f"{name}: build time vs concatenation floor",
                "goal": f"<= {goal:g}x",
                "measured": f"{value:.2f}x",
                "met": value <= goal,
            }
        )
    for match in _SPEEDUP.finditer(output):
        value, goal = float(match["value"]), float(match["goal"])
        headers = _BACKEND.findall(output[: match.start()])
        backend = headers[-1] if headers else ""
        for_backend = match["where"].strip()  # e.g. "on SQLite": the goal holds for that backend only
        applies = not for_backend or not backend or backend.lower() in for_backend.lower()
        rows.append(
            {
                "figure": f"{name}: recursive fetch vs load-all walk ({backend or 'speed-up'})",
                "goal": f">= {goal:g}x" if applies else f"none ({for_backend}: {goal:g}x)",
                "measured": f"{value:.1f}x",
                "met": value >= goal if applies else None,
            }
        )
    return rows


def _run_step(name: str, argv: Sequence[str], out: Path, timeout_s: float) -> tuple[int, str, float]:
    """Run `python -m personalab.evals ARGV` in a new process; its output (stdout then stderr) goes to a file."""
    started = time.perf_counter()
    print(f"== {name}: personalab {' '.join(argv)}", flush=True)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "personalab.evals", *argv],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        code, text = done.returncode, done.stdout + ("\n" + done.stderr if done.stderr.strip() else "")
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        code, text = -1, f"{partial}\n(timed out after {timeout_s:.0f} s)"
    wall = time.perf_counter() - started
    (out / f"{name.replace(' ', '_')}.txt").write_text(text, encoding="utf-8")
    print(f"   exit {code}, {wall:.0f} s", flush=True)
    return code, text, wall


def run(args: argparse.Namespace) -> int:
    """`personalab eval all`."""
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"--out {out}: not a folder")
    if args.locomo and not Path(args.locomo).is_file():
        raise InvalidInput(f"--locomo {args.locomo}: no such file")
    out.mkdir(parents=True, exist_ok=True)
    skip = set(args.skip or [])
    steps: list[tuple[str, list[str]]] = []
    if "bench" not in skip:
        steps += [(name, quick if args.quick else full) for name, full, quick in BENCHMARKS]
    if args.locomo and "locomo" not in skip:
        steps.append(
            ("eval locomo", ["eval", "locomo", args.locomo, *(["--conversations", "2"] if args.quick else [])])
        )
    if "scenarios" not in skip:
        steps.append(
            (
                "scenario suite",
                [
                    "eval",
                    "run",
                    "shipped",
                    "--out",
                    str(out / "scenarios"),
                    "--parallel",
                    str(args.parallel),
                    "--model",
                    args.model,
                    "--no-progress",
                ],
            )
        )
    rows: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for name, argv in steps:
        code, text, wall = _run_step(name, argv, out, STEP_TIMEOUT_S)
        found = goal_rows(name, text) if name != "scenario suite" else _suite_rows(out / "scenarios")
        if code not in (0, 1) or (code == 1 and name != "scenario suite"):
            found.append(
                {"figure": f"{name}: ran to the end", "goal": "exit 0", "measured": f"exit {code}", "met": False}
            )
        rows.extend(found)
        runs.append(
            {
                "name": name,
                "command": f"personalab {' '.join(argv)}",
                "exit": code,
                "wall_s": round(wall, 1),
                "goals": len(found),
            }
        )
    if not args.locomo and "locomo" not in skip:
        runs.append(
            {
                "name": "eval locomo",
                "command": "(skipped: give --locomo PATH to locomo10.json)",
                "exit": None,
                "wall_s": 0,
                "goals": 0,
            }
        )
    report = _markdown(rows, runs, args)
    (out / "report.md").write_text(report, encoding="utf-8")
    (out / "report.json").write_text(
        json.dumps({"summary": rows, "runs": runs, "quick": args.quick}, ensure_ascii=False, indent=1), encoding="utf-8"
    )
    missed = [row for row in rows if row["met"] is False]
    scored = [row for row in rows if row["met"] is not None]
    print(f"report: {out / 'report.md'}: {len(scored) - len(missed)} of {len(scored)} goals met")
    for row in missed:
        print(f"  NOT met: {row['figure']}: {row['measured']} (goal {row['goal']})")
    return 0 if not missed else 1


def _suite_rows(folder: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return []
    return [{**row, "figure": f"scenarios: {row['figure']}"} for row in data.get("summary", [])]


def _markdown(rows: Sequence[dict[str, Any]], runs: Sequence[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = ["# PersonaLab: every figure in one run", ""]
    lines.append(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · `personalab eval all{' --quick' if args.quick else ''}` · "
        f"model {args.model}" + (" · **quick fixtures: not README's figures**" if args.quick else "")
    )
    lines += ["", "| figure | goal | measured | met? |", "| --- | --- | --- | --- |"]
    for row in rows:
        verdict = "–" if row["met"] is None else "yes" if row["met"] else "**NO**"
        lines.append(f"| {row['figure']} | {row['goal']} | {row['measured']} | {verdict} |")
    missed = [row["figure"] for row in rows if row["met"] is False]
    lines += ["", f"Goals missed: {'; '.join(missed)}." if missed else "Every goal met."]
    lines += ["", "## Runs", "", "| run | command | exit | wall s | output |", "| --- | --- | --- | --- | --- |"]
    for item in runs:
        output = "scenarios/report.md" if item["name"] == "scenario suite" else f"{item['name'].replace(' ', '_')}.txt"
        lines.append(
            f"| {item['name']} | `{item['command']}` | {item['exit']} | {item['wall_s']} | [{output}]({output}) |"
        )
    if (Path(args.out) / "scenarios" / "hit_rate_by_distance.png").exists():
        lines += ["", "![probe hit rate by distance](scenarios/hit_rate_by_distance.png)"]
    return "\n".join(lines) + "\n"


def register(kinds: argparse._SubParsersAction) -> None:
    every = kinds.add_parser("all", help="benchmarks, LoCoMo and the scenario suite, with a summary table")
    every.add_argument("--out", default="eval-all", help="folder of the outputs and report.md (default eval-all)")
    every.add_argument("--locomo", help="the LoCoMo file (locomo10.json); without it LoCoMo is skipped")
    every.add_argument("--quick", action="store_true", help="smaller fixtures: minutes, not README's figures")
    every.add_argument("--parallel", type=int, default=2, help="scenarios played at a time")
    every.add_argument("--model", choices=["scripted", "openai"], default="scripted")
    every.add_argument("--skip", action="append", choices=["bench", "locomo", "scenarios"], help="leave a part out")
    every.set_defaults(handler=run)
