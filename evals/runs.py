"""`personalab eval run PATH... [--parallel N] [--out DIR] [--model scripted|openai] [--judge] [--resume]
[--via inprocess|cli|served] [--conditions full,recent,history]`.

Validates every scenario file first (one line naming file, path and problem, exit 2), then plays them (evals.play),
several scenarios at a time, with a progress bar. Each scenario plays in a process of its own (`evals.worker`) on
a fresh embedded data folder of its own, `<data>/<name>` (SQLite + Chroma + checkpoints; `--data-dir` keeps them),
so scenarios played at the same time share no process-wide state (environment, settings, engines, Chroma clients,
caches, background writers). Each finished scenario's result is written at once to `OUT/results/<name>.json`, so
Ctrl-C keeps what is done and `--resume` plays only the rest; the report (`report.md`, `report.json`, PNG plots)
is written from every result in `OUT/results` at the end, and after an interruption too. `--via` says how the turns
are played (evals/via.py): in the scenario's process (default), one `personalab turn --json` process per turn, or
through `langgraph dev`. `--conditions` (issue 30) plays each scenario once per memory condition, each a unit
`<name>@<condition>` of its own (process, data folder, instances), and the report sets them side by side; a goal
the scenario file sets and the run misses makes the exit code 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from personalab.evals.data_dir import data_folder
from personalab.evals.scenario import Scenario, load_scenarios
from personalab.evals.worker import TICK
from personalab.nodes.rules.errors import InvalidInput

DEFAULT_RAG_TIMEOUT_S = 10.0
CONDITIONS = ("full", "recent", "history")  # issue 30: the memory conditions (nodes/context.py memory_mode)
WORKER = ("-m", "personalab.evals.worker")  # what `sys.executable` runs to play one scenario (evals/worker.py)
COMMAND_LINE: list[str] = []  # the command as typed (set by evals.__main__), for the resume hint


def scenario_digest(scenario: Scenario, via: str = "inprocess") -> str:
    """What a finished result was played from: a changed file (or another --via) is played again on --resume."""
    data: dict[str, Any] = scenario.model_dump(mode="json", exclude={"source"})
    if via != "inprocess":  # the digests of earlier in-process results stay valid
        data["via"] = via
    return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def _result_file(out: Path, name: str) -> Path:
    return out / "results" / f"{_safe(name)}.json"


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1, default=str), encoding="utf-8")
    tmp.replace(path)


def finished_results(out: Path) -> dict[str, dict[str, Any]]:
    """Results already in OUT/results (by scenario name)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((out / "results").glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            found[data["name"]] = data
    return found


def play_all(
    scenarios: Sequence[Scenario],
    out: Path,
    *,
    parallel: int = 2,
    model: str = "scripted",
    judge: bool = False,
    resume: bool = False,
    data_dir: str | None = None,
    rag_timeout_s: float = DEFAULT_RAG_TIMEOUT_S,
    progress: bool = True,
    argv: Sequence[str] = (),
    via: str = "inprocess",
    repo: Path | None = None,
    conditions: Sequence[str] = ("full",),
) -> tuple[list[dict[str, Any]], bool]:
    """Play the scenarios not already finished in `out` (with `resume`), each in a process of its own
    (`evals.worker`) with its own data folder `<data>/<name>`, `parallel` processes at a time; returns (every
    result of this run's scenarios, interrupted?). With `conditions` other than full alone (issue 30), each
    scenario is played once per condition, each a unit of its own named `<name>@<condition>` (own process, data
    folder and instances: nothing shared)."""
    from personalab.evals.play import check_samples

    for scenario in scenarios:
        check_samples(scenario)
    condition_of: dict[str, tuple[str, str]] = {}  # unit name -> (condition, the scenario's own name)
    if tuple(conditions) != ("full",):
        units = []
        for scenario in scenarios:
            for condition in conditions:
                unit = scenario.model_copy(update={"name": f"{scenario.name}@{condition}"})
                condition_of[unit.name] = (condition, scenario.name)
                units.append(unit)
        scenarios = units
    out.mkdir(parents=True, exist_ok=True)
    done = finished_results(out) if resume else {}
    digests = {s.name: scenario_digest(s, via) for s in scenarios}
    kept = {
        name: r
        for name, r in done.items()
        if name in digests and r.get("digest") == digests[name] and r.get("status") in ("ok", "failed")
    }
    if not resume:
        for scenario in scenarios:
            _result_file(out, scenario.name).unlink(missing_ok=True)
    todo = [s for s in scenarios if s.name not in kept]
    from personalab.evals.scenario import expand_turns

    total = sum(sum(1 if step.instance else s.instances for step in expand_turns(s)) + len(s.secrets) for s in todo)
    results: dict[str, dict[str, Any]] = dict(kept)
    with data_folder(data_dir, "personalab-eval-") as data:
        bar = _progress_bar(total, progress)
        players = Players(bar, model=model, judge=judge, rag_timeout_s=rag_timeout_s, via=via, repo=repo)
        pool = ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="eval")
        futures: dict[Future[dict[str, Any]], Scenario] = {
            pool.submit(
                players.play,
                scenario,
                data.resolve() / _safe(scenario.name),
                *condition_of.get(scenario.name, ("full", scenario.name)),
            ): scenario
            for scenario in todo
        }
        pending = set(futures)
        try:
            while pending:
                finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in finished:
                    _keep(future, futures[future], out, digests, results)
        except KeyboardInterrupt:
            players.interrupt()
            try:
                # the scenarios under way stop at their next turn; the finished ones among them are kept
                for future, scenario in futures.items():
                    if scenario.name not in results and not future.cancel():
                        _keep(future, scenario, out, digests, results)
            except KeyboardInterrupt:  # a second Ctrl-C: do not wait for the turns under way
                players.kill()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            if bar is not None:
                bar.close()
    if players.interrupted:
        left = [s.name for s in scenarios if s.name not in results]
        command = " ".join(shlex.quote(a) for a in argv) if argv else "personalab eval run ..."
        if "--resume" not in argv:
            command += " --resume"
        print(
            f"interrupted: {len(results)} of {len(scenarios)} scenario(s) finished and kept in {out / 'results'}; "
            f"{len(left)} left. Resume with: {command}",
            file=sys.stderr,
        )
    return [results[s.name] for s in scenarios if s.name in results], players.interrupted


def scenario_environment(scenario: Scenario) -> dict[str, str]:
    """The settings a scenario file sets (issue 26), as the environment of its process and its turns' processes."""
    if scenario.settings is None or scenario.settings.consolidation is None:
        return {}
    return {"PERSONALAB_CONSOLIDATION": "1" if scenario.settings.consolidation else "0"}


def _safe(name: str) -> str:
    """A file name for scenario `name`: unsafe characters replaced, and then a short hash of the name, so that
    two names differing only there ("a b", "a/b") do not share a result file or a data folder."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    if safe == name and not name.startswith("."):
        return name
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


class Players:
    """The processes playing scenarios (one per scenario, `evals.worker`) and the progress bar they tick."""

    def __init__(
        self,
        bar: Any,
        *,
        model: str,
        judge: bool,
        rag_timeout_s: float,
        via: str = "inprocess",
        repo: Path | None = None,
    ) -> None:
        self.bar, self.model, self.judge, self.rag_timeout_s = bar, model, judge, rag_timeout_s
        self.via, self.repo = via, repo
        self.interrupted = False
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[str]] = set()

    def environment(self, folder: Path) -> dict[str, str]:
        """This process's environment with the scenario's own data folder and the run's model; the embedded
        stores, never a configured database or Chroma server (the scenario must start empty)."""
        env = {k: v for k, v in os.environ.items() if k not in ("PERSONALAB_DATABASE_URL", "PERSONALAB_CHROMA_HOST")}
        env.update(PERSONALAB_DATA_DIR=str(folder), PERSONALAB_LLM=self.model, PYTHONUNBUFFERED="1")
        return env

    def play(
        self, scenario: Scenario, folder: Path, condition: str = "full", scenario_name: str | None = None
    ) -> dict[str, Any]:
        """Play `scenario` in a new process in the fresh data folder `folder`; its result (interrupted when the
        run was interrupted before the scenario finished)."""
        interrupted = {"name": scenario.name, "source": scenario.source, "status": "interrupted"}
        shutil.rmtree(folder, ignore_errors=True)  # a kept folder of an earlier, interrupted run
        folder.mkdir(parents=True)
        job, result_path, log_path = folder / "job.json", folder / "result.json", folder / "worker.log"
        write_json(
            job,
            {
                "scenario": scenario.model_dump(mode="json"),
                "result": str(result_path),
                "judge": self.judge,
                "rag_timeout_s": self.rag_timeout_s,
                "via": self.via,
                "repo": str(self.repo) if self.repo else None,
                "condition": condition,
                "scenario_name": scenario_name or scenario.name,
            },
        )
        with self._lock, open(log_path, "w", encoding="utf-8") as log:
            if self.interrupted:
                return interrupted
            process = subprocess.Popen(
                [sys.executable, *WORKER, str(job)],
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env={**self.environment(folder), **scenario_environment(scenario)},
                text=True,
                encoding="utf-8",
            )
            self._running.add(process)
        try:
            assert process.stdout is not None
            for line in process.stdout:
                if line.strip() == TICK and self.bar is not None:
                    with self._lock:
                        self.bar.update(1)
            code = process.wait()
        finally:
            with self._lock:
                self._running.discard(process)
        result = _read_result(result_path)
        if result is not None and result.get("status") in ("ok", "failed"):
            return result
        # a terminal's Ctrl-C reaches the whole process group: the scenario's process may die of it before this
        # process's own KeyboardInterrupt is handled — unfinished, not failed (the resume plays it). Python exits
        # with code 1, not by the signal, when the Ctrl-C lands while it is still starting (an import): its log
        # then ends with the KeyboardInterrupt
        tail = _tail(log_path)
        if (
            self.interrupted
            or code in (-signal.SIGINT, 128 + signal.SIGINT)
            or tail.rstrip().endswith("KeyboardInterrupt")
        ):
            with self._lock:
                self.interrupted = True  # and no more scenarios start
            return interrupted
        raise RuntimeError(
            f"{scenario.source}: the scenario's process ended (exit code {code}) without a result"
            + (f": {tail}" if tail else "")
        )

    def interrupt(self) -> None:
        """Ctrl-C: start no more scenarios, and stop the ones under way at their next turn (SIGINT, which a
        terminal's Ctrl-C has sent them already; a parent signalled alone passes it on)."""
        with self._lock:
            self.interrupted = True
            running = list(self._running)
        for process in running:
            try:
                process.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        with self._lock:
            running = list(self._running)
        for process in running:
            process.kill()


def _read_result(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _tail(path: Path, lines: int = 12) -> str:
    """The end of a scenario process's log (its traceback, when it crashed), on one line per log line."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " | ".join(line.rstrip() for line in text.strip().splitlines()[-lines:])


def _keep(
    future: Future[dict[str, Any]],
    scenario: Scenario,
    out: Path,
    digests: dict[str, str],
    results: dict[str, dict[str, Any]],
) -> None:
    try:
        result = future.result()
    except Exception as exc:  # noqa: BLE001 - its process could not play it: the scenario is failed, the others go on
        result = {
            "name": scenario.name,
            "source": scenario.source,
            "status": "failed",
            "error": str(exc) if scenario.source in str(exc) else f"{scenario.source}: {type(exc).__name__}: {exc}",
        }
    if result.get("status") == "interrupted":
        return
    result["digest"] = digests[scenario.name]
    write_json(_result_file(out, scenario.name), result)
    results[scenario.name] = result


def _progress_bar(total: int, enabled: bool) -> Any:
    if not enabled or total <= 0:
        return None
    from tqdm import tqdm  # type: ignore[import-untyped]

    return tqdm(total=total, unit="turn", desc="eval", file=sys.stderr, dynamic_ncols=True, disable=None)


def run(args: argparse.Namespace) -> int:
    """`personalab eval run`."""
    try:
        return _run(args)
    except KeyboardInterrupt:  # before the scenarios started, or a second Ctrl-C while the report is written
        print(f"interrupted: the results finished so far are in {Path(args.out) / 'results'}", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    conditions = parse_conditions(args.conditions)
    if args.parallel < 1:
        raise InvalidInput(f"--parallel must be at least 1, got {args.parallel}")
    if args.rag_timeout is not None and args.rag_timeout <= 0:
        raise InvalidInput(f"--rag-timeout must be above 0, got {args.rag_timeout}")
    scenarios = load_scenarios(args.paths)
    from personalab.stores.embeddings import get_embeddings
    from personalab.stores.settings import settings

    # a bad setting is one line now, not a failure in every scenario's process
    settings()
    get_embeddings()
    if args.judge and args.no_judge:
        raise InvalidInput("--judge and --no-judge: give one of them")
    if args.judge or args.model == "openai":
        if settings().openai_api_key is None:
            option = "--judge" if args.judge else "--model openai"
            raise InvalidInput(f"{option} needs an OpenAI-compatible endpoint: OPENAI_API_KEY is not set")
    # conditions side by side with a real model: its judge scores every probe too (issue 30), unless --no-judge:
    # on a one-request-at-a-time local server the judge's long request evicts the prompt cache the next turn reuses
    judge = bool(args.judge or (args.model == "openai" and conditions != ("full",) and not args.no_judge))
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"--out {out}: not a folder")
    repo = None
    if args.via == "served":
        from personalab.evals.via import default_repo

        repo = Path(args.repo).resolve() if args.repo else default_repo()
        if not (repo / "langgraph.json").is_file():
            raise InvalidInput(f"--repo {repo}: no langgraph.json there (the folder the served graph is started from)")
    results, interrupted = play_all(
        scenarios,
        out,
        parallel=args.parallel,
        model=args.model,
        judge=judge,
        resume=args.resume,
        data_dir=args.data_dir,
        rag_timeout_s=args.rag_timeout or DEFAULT_RAG_TIMEOUT_S,
        progress=not args.no_progress,
        argv=COMMAND_LINE,
        via=args.via,
        repo=repo,
        conditions=conditions,
    )
    from personalab.evals.report import missed_goals, write_report

    meta = {
        "model": args.model,
        "parallel": args.parallel,
        "judge": judge,
        "via": args.via,
        "conditions": list(conditions),
    }
    summary = write_report(results, out, meta=meta)
    for line in summary:
        print(line)
    if interrupted:
        return 130
    missed = missed_goals(results)
    for line in missed:
        print(f"GOAL MISSED {line}")
    return 1 if missed or any(r.get("status") != "ok" for r in results) else 0


def parse_conditions(text: str | None) -> tuple[str, ...]:
    """`--conditions full,recent,history` (issue 30): known names, each once, in the order given."""
    names = tuple(dict.fromkeys(part.strip() for part in (text or "full").split(",") if part.strip()))
    if not names:
        raise InvalidInput("--conditions names no condition: give some of " + ", ".join(CONDITIONS))
    for name in names:
        if name not in CONDITIONS:
            raise InvalidInput(f"--conditions: unknown condition {name!r}; one of {', '.join(CONDITIONS)}")
    return names


def register(kinds: argparse._SubParsersAction) -> None:
    """`eval run` on the evaluation command's sub-commands."""
    run_parser = kinds.add_parser("run", help="play scenario files through the turn graph and score them")
    run_parser.add_argument(
        "paths", nargs="+", help="scenario files (JSON or YAML) or folders of them; 'shipped' = the package's"
    )
    run_parser.add_argument("--parallel", type=int, default=2, help="scenarios played at a time (default 2)")
    run_parser.add_argument("--out", default="eval-out", help="folder of the results and the report (default eval-out)")
    run_parser.add_argument("--model", choices=["scripted", "openai"], default="scripted")
    run_parser.add_argument("--judge", action="store_true", help="an LLM judge on the same endpoint scores the probes")
    run_parser.add_argument(
        "--no-judge",
        action="store_true",
        help="no judge in a conditions run with --model openai (the phrase checks only)",
    )
    run_parser.add_argument("--resume", action="store_true", help="keep the finished results in --out, play the rest")
    run_parser.add_argument("--data-dir", help="keep the stores here (default: a temporary folder)")
    run_parser.add_argument(
        "--rag-timeout",
        type=float,
        help=f"retrieval cap per turn in seconds (default {DEFAULT_RAG_TIMEOUT_S:g}: a loaded machine must not change scores)",
    )
    run_parser.add_argument(
        "--via",
        choices=["inprocess", "cli", "served"],
        default="inprocess",
        help="how each turn is played: in the scenario's process (default), a `personalab turn --json` process "
        "each, or through `langgraph dev` (LangGraph HTTP API)",
    )
    run_parser.add_argument(
        "--repo", help="with --via served: the folder with langgraph.json (default: the package's tree)"
    )
    run_parser.add_argument(
        "--conditions",
        default="full",
        help="memory conditions played side by side, comma-separated (issue 30): full = PersonaLab's memory, "
        "recent = the recent-dialogue window only, history = the whole dialogue in the prompt when it fits "
        "(default: full)",
    )
    run_parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    run_parser.set_defaults(handler=run)
