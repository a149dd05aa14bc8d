"""`personalab eval run PATH... [--parallel N] [--out DIR] [--model scripted|openai] [--judge] [--resume]`.

Validates every scenario file first (one line naming file, path and problem, exit 2), then plays them (evals.play)
in a fresh embedded data folder (SQLite + Chroma + checkpoints; `--data-dir` keeps it), several scenarios at a
time, with a progress bar. Each finished scenario's result is written at once to `OUT/results/<name>.json`, so
Ctrl-C keeps what is done and `--resume` plays only the rest; the report (`report.md`, `report.json`, PNG plots)
is written from every result in `OUT/results` at the end, and after an interruption too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shlex
import sys
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from personalab.evals.data_dir import data_folder
from personalab.evals.scenario import Scenario, load_scenarios
from personalab.nodes.rules.errors import InvalidInput

ENV_KEYS = ("PERSONALAB_DATA_DIR", "PERSONALAB_DATABASE_URL", "PERSONALAB_CHROMA_HOST", "PERSONALAB_LLM")
DEFAULT_RAG_TIMEOUT_S = 10.0
COMMAND_LINE: list[str] = []  # the command as typed (set by evals.__main__), for the resume hint


def scenario_digest(scenario: Scenario) -> str:
    """What a finished result was played from: a changed file is played again on --resume."""
    data = scenario.model_dump(mode="json", exclude={"source"})
    return hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


@contextmanager
def run_environment(data_dir: Path, model: str) -> Iterator[None]:
    """The embedded stores of `data_dir` and the chosen model; the old environment after."""
    saved = {key: os.environ.get(key) for key in ENV_KEYS}
    os.environ["PERSONALAB_DATA_DIR"] = str(data_dir)
    os.environ["PERSONALAB_LLM"] = model
    os.environ.pop("PERSONALAB_DATABASE_URL", None)
    os.environ.pop("PERSONALAB_CHROMA_HOST", None)
    try:
        yield
    finally:
        from personalab.stores.background import flush_event_writes
        from personalab.stores.db import dispose_engines

        flush_event_writes()
        dispose_engines()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _result_file(out: Path, name: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return out / "results" / f"{safe}.json"


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
) -> tuple[list[dict[str, Any]], bool]:
    """Play the scenarios not already finished in `out` (with `resume`); returns (every result of this
    run's scenarios, interrupted?)."""
    from personalab.evals.play import PlayOptions, check_samples, play_scenario

    for scenario in scenarios:
        check_samples(scenario)
    out.mkdir(parents=True, exist_ok=True)
    done = finished_results(out) if resume else {}
    digests = {s.name: scenario_digest(s) for s in scenarios}
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

    total = sum(len(expand_turns(s)) * s.instances + len(s.secrets) for s in todo)
    stop = threading.Event()
    interrupted = False
    results: dict[str, dict[str, Any]] = dict(kept)
    with data_folder(data_dir, "personalab-eval-") as data, run_environment(data, model):
        from personalab.graph.runner import turn_graph
        from personalab.nodes.context import Context
        from personalab.stores.embeddings import get_embeddings

        if model == "scripted":
            # the scripted model writes an out-of-range marker on purpose every 12 turns (the ignored path);
            # its warning per turn would bury the progress bar
            logging.getLogger("personalab.nodes.progress_parse").setLevel(logging.ERROR)
        get_embeddings().embed_query("预热")  # the model loads once, before any turn's retrieval cap runs
        judge_model = None
        if judge:
            from personalab.evals.judge import Judge

            judge_model = Judge()
        bar = _progress_bar(total, progress)
        lock = threading.Lock()

        def tick() -> None:
            if bar is not None:
                with lock:
                    bar.update(1)

        with turn_graph(Context(rag_timeout_s=rag_timeout_s)) as (graph, ctx):
            pool = ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="eval")
            futures: dict[Future[dict[str, Any]], Scenario] = {}
            for scenario in todo:
                options = PlayOptions(stop=stop, on_turn=tick, judge=judge_model)
                futures[pool.submit(play_scenario, scenario, graph, ctx, options)] = scenario
            pending = set(futures)
            try:
                while pending:
                    finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for future in finished:
                        _keep(future, futures[future], out, digests, results)
            except KeyboardInterrupt:
                interrupted = True
                stop.set()
                for future in pending:
                    future.cancel()
                for future in pending:
                    if not future.cancelled():
                        try:
                            future.result()
                        except Exception:  # noqa: BLE001, S110 - an interrupted scenario is played again on resume
                            pass
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
                if bar is not None:
                    bar.close()
    if interrupted:
        left = [s.name for s in scenarios if s.name not in results]
        command = " ".join(shlex.quote(a) for a in argv) if argv else "personalab eval run ..."
        if "--resume" not in argv:
            command += " --resume"
        print(
            f"interrupted: {len(results)} of {len(scenarios)} scenario(s) finished and kept in {out / 'results'}; "
            f"{len(left)} left. Resume with: {command}",
            file=sys.stderr,
        )
    return [results[s.name] for s in scenarios if s.name in results], interrupted


def _keep(
    future: Future[dict[str, Any]],
    scenario: Scenario,
    out: Path,
    digests: dict[str, str],
    results: dict[str, dict[str, Any]],
) -> None:
    try:
        result = future.result()
    except Exception as exc:  # noqa: BLE001 - set-up failed: the scenario is failed, the others go on
        result = {
            "name": scenario.name,
            "source": scenario.source,
            "status": "failed",
            "error": f"{type(exc).__name__}: {exc}",
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
    if args.parallel < 1:
        raise InvalidInput(f"--parallel must be at least 1, got {args.parallel}")
    if args.rag_timeout is not None and args.rag_timeout <= 0:
        raise InvalidInput(f"--rag-timeout must be above 0, got {args.rag_timeout}")
    scenarios = load_scenarios(args.paths)
    if args.judge or args.model == "openai":
        from personalab.stores.settings import settings

        if settings().openai_api_key is None:
            option = "--judge" if args.judge else "--model openai"
            raise InvalidInput(f"{option} needs an OpenAI-compatible endpoint: OPENAI_API_KEY is not set")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InvalidInput(f"--out {out}: not a folder")
    results, interrupted = play_all(
        scenarios,
        out,
        parallel=args.parallel,
        model=args.model,
        judge=args.judge,
        resume=args.resume,
        data_dir=args.data_dir,
        rag_timeout_s=args.rag_timeout or DEFAULT_RAG_TIMEOUT_S,
        progress=not args.no_progress,
        argv=COMMAND_LINE,
    )
    from personalab.evals.report import write_report

    summary = write_report(results, out, meta={"model": args.model, "parallel": args.parallel, "judge": args.judge})
    for line in summary:
        print(line)
    if interrupted:
        return 130
    return 1 if any(r.get("status") != "ok" for r in results) else 0


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
    run_parser.add_argument("--resume", action="store_true", help="keep the finished results in --out, play the rest")
    run_parser.add_argument("--data-dir", help="keep the stores here (default: a temporary folder)")
    run_parser.add_argument(
        "--rag-timeout",
        type=float,
        help=f"retrieval cap per turn in seconds (default {DEFAULT_RAG_TIMEOUT_S:g}: a loaded machine must not change scores)",
    )
    run_parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    run_parser.set_defaults(handler=run)
