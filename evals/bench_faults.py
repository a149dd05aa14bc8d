"""`bench faults`: kill -9 at every phase of a turn, on SQLite and PostgreSQL (issue 14 fault tests).

For each database, each trial and each phase, a real `personalab turn` process tells the instance a new fact and
is killed with SIGKILL at the phase (`PERSONALAB_FAILPOINT`, stores/failpoints.py: the process kills itself there,
as `kill -9` or the OOM killer would, with no clean-up):
- `before_model`: the prompt is built, the model not yet called;
- `mid_stream`: the reply's first chunk has arrived;
- `after_reply`: the reply, its turn record, story state and queued writes are committed, none applied;
- `during_writes`: the turn's queued writes half applied: their memory and record rows and mention marks stored
  (what the next retrieval reads first, issue 29), their vectors and event not, none of them marked applied.

Then this process opens the graph (as the next process would: start-up resumes the writes left behind) and plays
a turn on the instance, retrying while it is busy, and checks the store:
- lines lost or duplicated: the fact's user line is stored once (for the two later phases with exactly one reply
  under it; for the two earlier ones with none: no half reply), and no turn number is used twice;
- memories lost or duplicated (the two later phases): every line of the killed turn is in the dialogue record
  once, its reply's turn memory is stored, its event is in the story's collection once, and no queued write is
  left unapplied;
- time until the instance works again: from the kill to the end of the first turn that succeeds after it (this
  process has played a turn before the first kill, so its own start-up is not counted).

The database down mid-turn (`db_down_<point>`): the turn process stops itself at the failpoint
(`PERSONALAB_FAILPOINT_ACTION=stop`), the database goes away (`evals/outage.py`: PostgreSQL for the turn and for this
process, both reaching the server through a relay that refuses new connections while the server ends the relayed
ones; SQLite: another process holds the file's write lock longer than the turn waits for it), the turn goes on into
the outage and ends, then the database comes back. Points: `before_model`, `after_reply`,
`during_writes` (above). Besides the checks above (the point decides which): the turn ended with one line and exit
2, or, when its reply was stored, as a turn (exit 0, no line about the outage); the time is from the database's return.
Goal: 0 lost, 0 duplicated, usable within 5 s. The scripted model answers (no model time).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from personalab.evals.data_dir import data_folder, postgres_schema
from personalab.evals.outage import PostgresLink, SqliteWriteLock, postgres_link
from personalab.evals.report import percentile

REMEMBERED = "important"
"""Each trial's turn is a choice the review says to remember (issue 26: small talk writes no turn memory), so the
check that its turn memory survived the kill or the outage applies to every trial."""

KILL_PHASES = ("before_model", "mid_stream", "after_reply", "during_writes")
# the database down from a phase of the turn on (PostgreSQL): `db_down_<failpoint>`
OUTAGE_PHASES = ("db_down_before_model", "db_down_after_reply", "db_down_during_writes")
PHASES = KILL_PHASES + OUTAGE_PHASES
STORED = ("after_reply", "during_writes")  # phases after the reply's commit: everything of the turn must be kept
OUTAGE_MAX_S = 60.0  # a turn still running this long after the database went away is reported as hung
USABLE_GOAL_S = 5.0
PLACES = ("旧水塔下面", "据点的地窖里", "铁皮箱底层", "北墙的砖缝里", "废车的后座下")


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """This process's environment set to `values` (the settings the in-process recovery reads), restored after."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _cli() -> str:
    here = Path(sys.executable).parent / "personalab"
    return str(here) if here.exists() else "personalab"


def _recover(url: str, instance_id: int, since: float | None = None) -> tuple[float, str | None]:
    """Open the graph and play a turn until one is accepted; (seconds from `since`, default now, to the end of that
    turn; error if none succeeded in 60 s)."""
    from personalab.graph.runner import run_turn, turn_graph
    from personalab.nodes.context import Context
    from personalab.nodes.rules.errors import InstanceBusy
    from personalab.stores.background import flush_event_writes

    started = time.monotonic() if since is None else since
    problem: str | None = None
    while time.monotonic() - started < 60:
        try:
            with turn_graph(Context(database_url=url)) as (graph, ctx):
                state = run_turn(graph, ctx, instance_id, "我们接着走吧。")
            if state.get("error"):
                problem = str(state["error"])
            else:
                problem = None
                break
        except InstanceBusy as exc:
            problem = str(exc)
            time.sleep(0.1)
    spent = time.monotonic() - started
    flush_event_writes()
    return spent, problem


def _failpoint(phase: str) -> str:
    """The failpoint a phase acts at: `db_down_after_reply` → `after_reply`."""
    return phase.removeprefix("db_down_")


def _wait_stopped(turn: subprocess.Popen[str], timeout: float) -> bool:
    """Wait until the turn process stops itself at its failpoint (True) or ends first (False, its exit code kept)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status = os.waitpid(turn.pid, os.WUNTRACED | os.WNOHANG)
        if pid == 0:
            time.sleep(0.01)
            continue
        if os.WIFSTOPPED(status):
            return True
        turn.returncode = os.waitstatus_to_exitcode(status)
        return False
    return False


Outage = PostgresLink | SqliteWriteLock
# what a line about the outage says (a traceback, a driver's or the store's error)
FAULT_WORDS = ("traceback", "error", "database", "connection", "psycopg", "sqlalchemy", "sqlite", "locked")
SQLITE_TURN_WAIT_S = 2.0  # the turn process's PERSONALAB_SQLITE_BUSY_TIMEOUT in the SQLite outages (default 30 s)


def _outage_turn(link: Outage, instance_id: int, fact: str, phase: str) -> tuple[list[str], float, int]:
    """A `personalab turn` process that stops at the phase's failpoint; the database goes away (`link.down()`), the
    process goes on into the outage until it ends, then the database comes back. Returns what was wrong with how
    the turn ended, the time the database came back (time.monotonic()) and the turn's exit code."""
    point = _failpoint(phase)
    problems: list[str] = []
    env = {**os.environ, "PERSONALAB_FAILPOINT": point, "PERSONALAB_FAILPOINT_ACTION": "stop"}
    if isinstance(link, SqliteWriteLock):
        env["PERSONALAB_SQLITE_BUSY_TIMEOUT"] = str(SQLITE_TURN_WAIT_S)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        turn = subprocess.Popen(
            [_cli(), "turn", "--instance", str(instance_id), "--choice", REMEMBERED, fact],
            env=env,
            stdout=out,
            stderr=err,
            text=True,
        )
        stopped = _wait_stopped(turn, 600)
        if stopped:
            link.down()
            os.kill(turn.pid, signal.SIGCONT)
        try:
            code = turn.wait(timeout=OUTAGE_MAX_S)
        except subprocess.TimeoutExpired:
            turn.kill()
            code = turn.wait()
            problems.append(f"the turn still ran {OUTAGE_MAX_S:g} s into the outage")
        link.up()
        back = time.monotonic()
        err.seek(0)
        lines = [line for line in err.read().splitlines() if line.strip()]
    # the user's contract: the turn ends with one line (exit 2) or, when its reply was stored and only the writes
    # after it met the outage, as a turn (exit 0, the writes wait in the outbox); never a traceback. The turn's own
    # warnings (a progress marker past the outline) are not the outage's and may stay.
    errors = [line for line in lines if line.startswith("personalab: error: ")]
    noise = [line for line in lines if line not in errors and any(word in line.lower() for word in FAULT_WORDS)]
    shown = " | ".join(lines)[-500:]
    if not stopped:
        problems.append(f"not stopped at {point} (exit {code}): {shown}")
    elif code == 2 and (len(errors) != 1 or noise):
        problems.append(f"the failed turn printed {len(errors) + len(noise)} lines about it: {shown}")
    elif code == 0 and point in STORED and (errors or noise):
        problems.append(f"the turn printed {len(errors) + len(noise)} lines about the outage: {shown}")
    elif code != 2 and not (code == 0 and point in STORED):
        problems.append(f"the turn ended with exit {code}: {shown}")
    return problems, back, code


def _check(url: str, instance_id: int, fact: str, phase: str) -> dict[str, Any]:
    """Lines and memories of the killed turn: lost and duplicated, with what was wrong."""
    from personalab.stores.db import session_scope
    from personalab.stores.events import story_collection
    from personalab.stores.memory import MemoryStore
    from personalab.stores.outbox_tables import OutboxWrite
    from personalab.stores.saves import get_save
    from personalab.stores.tables import Line
    from personalab.stores.turn_tables import TurnRecord
    from personalab.stores.vectors import get_collection
    from sqlmodel import col, select

    problems: list[str] = []
    lost = duplicated = memories_lost = memories_duplicated = 0
    with session_scope(url) as session:
        users = list(
            session.exec(select(Line).where(col(Line.save_id) == instance_id, col(Line.content) == fact)).all()
        )
        # every turn record of the instance, read once: the killed turn's are those of its user line
        all_records = list(session.exec(select(TurnRecord).where(col(TurnRecord.save_id) == instance_id)).all())
        answered_records = [r for r in all_records if r.reply_line_id is not None]
        records = [r for r in answered_records if users and r.user_line_id == users[0].id]
        reply_lines: list[Line] = []
        for record in records:
            line = session.get(Line, record.reply_line_id)
            chain: list[Line] = []
            while line is not None and line.id != users[0].id:
                chain.append(line)
                line = session.get(Line, line.parent_line_id) if line.parent_line_id is not None else None
            reply_lines.extend(reversed(chain))
        pending = session.exec(
            select(OutboxWrite).where(
                col(OutboxWrite.instance_id) == instance_id, col(OutboxWrite.applied_at).is_(None)
            )
        ).all()
        save = get_save(session, instance_id)
        role, background = save.role_id, save.background_id
    if len(users) > 1:
        duplicated += len(users) - 1
        problems.append(f"the user line is stored {len(users)} times")
    if phase in STORED and not users:
        lost += 1
        problems.append("the user line is gone")
    if len(records) > 1:
        duplicated += len(records) - 1
        problems.append(f"the turn was answered {len(records)} times")
    if phase in STORED and not reply_lines:
        lost += 1
        problems.append("the stored reply is gone")
    if phase not in STORED and reply_lines:
        problems.append("a reply was stored for a turn killed before its reply")
        duplicated += len(reply_lines)
    repeated = [turn for turn, count in Counter(r.turn for r in answered_records).items() if count > 1]
    if repeated:
        duplicated += len(repeated)
        problems.append(f"turn numbers answered twice: {repeated}")
    if pending:
        memories_lost += len(pending)
        held = "; ".join(
            f"{row.key} (attempts {row.attempts}, claimed by {row.claimed_by} for"
            f" {(row.claimed_until or 0) - time.time():.0f} s, {row.last_error})"
            for row in pending
        )
        problems.append(f"{len(pending)} queued writes never applied: {held[:600]}")
    if phase in STORED and users and reply_lines:
        store = MemoryStore(db_url=url)
        recorded = Counter(m.line_id for m in store.list_memories(instance_id, type="record"))
        for line in [users[0], *reply_lines]:
            if recorded[line.id] == 0:
                memories_lost += 1
                problems.append(f"line {line.id} is not in the dialogue record")
            elif recorded[line.id] > 1:
                memories_duplicated += recorded[line.id] - 1
                problems.append(f"line {line.id} is in the dialogue record {recorded[line.id]} times")
        last = reply_lines[-1].id
        curated = [m for m in store.list_memories(instance_id) if m.line_id == last]
        if not curated:
            memories_lost += 1
            problems.append(f"no turn memory for reply line {last}")
        copies = Counter(m.content for m in curated)
        memories_duplicated += sum(count - 1 for count in copies.values())
        events = get_collection(story_collection(role, background))._collection.get(
            where={"instance_id": instance_id}, include=[]
        )["ids"]
        wanted = f"i{instance_id}-l{last}"
        if events.count(wanted) == 0:
            memories_lost += 1
            problems.append(f"event {wanted} is missing")
    return {
        "lines_lost": lost,
        "lines_duplicated": duplicated,
        "memories_lost": memories_lost,
        "memories_duplicated": memories_duplicated,
        "turn_records": len(all_records),
        "problems": problems,
    }


def run_campaign(
    database: str,
    url: str,
    folder: Path,
    trials: int,
    phases: tuple[str, ...],
    progress: bool = True,
    link: Outage | None = None,
) -> list[dict[str, Any]]:
    """Every phase `trials` times on one database; a result per kill or outage. The outage phases take the
    database away with `link`: for PostgreSQL a `PostgresLink` (`url` is the database by way of it, for this
    process and the turns' alike), for SQLite a `SqliteWriteLock` on `url`'s file."""
    from personalab.graph.runner import create_sample_instance

    outages = [phase for phase in phases if phase in OUTAGE_PHASES]
    if outages and link is None:
        raise ValueError(f"{', '.join(outages)}: the database down mid-turn needs a link (evals/outage.py)")

    env = {
        "PERSONALAB_DATA_DIR": str(folder),
        "PERSONALAB_DATABASE_URL": url,
        "PERSONALAB_LLM": "scripted",
    }
    results: list[dict[str, Any]] = []
    with _environment(env):
        instance_id = create_sample_instance(url)
        # this process's own start-up (models, dictionaries) is not the instance's recovery: one turn first
        _, problem = _recover(url, instance_id)
        if problem:
            raise RuntimeError(f"the warm-up turn failed: {problem}")
        for trial in range(trials):
            for phase in phases:
                number = len(results) + 1
                fact = f"第{number}条：我把编号{1000 + number}的钥匙藏在了{PLACES[number % len(PLACES)]}。"
                if phase in OUTAGE_PHASES:
                    assert link is not None
                    ended, back, code = _outage_turn(link, instance_id, fact, phase)
                    usable_s, problem = _recover(url, instance_id, since=back)  # from the database's return
                else:
                    killed = subprocess.run(
                        [_cli(), "turn", "--instance", str(instance_id), "--choice", REMEMBERED, fact],
                        env={**os.environ, "PERSONALAB_FAILPOINT": phase, "PERSONALAB_FAILPOINT_ACTION": "kill"},
                        capture_output=True,
                        text=True,
                        timeout=600,
                    )
                    ended, code = [], killed.returncode
                    if killed.returncode != -signal.SIGKILL:
                        ended = [f"not killed at {phase} (exit {killed.returncode}): {killed.stderr[-300:]}"]
                    usable_s, problem = _recover(url, instance_id)
                checked = _check(url, instance_id, fact, _failpoint(phase))
                checked["problems"][:0] = ended
                if problem:
                    checked["problems"].append(f"the instance did not work again: {problem}")
                results.append(
                    {
                        "database": database,
                        "phase": phase,
                        "trial": trial + 1,
                        "exit": code,
                        "usable_s": usable_s,
                        **checked,
                    }
                )
                if progress:
                    mark = "ok" if not checked["problems"] else "PROBLEM: " + "; ".join(checked["problems"])
                    print(f"  {database} {phase:<14} trial {trial + 1:>2}: usable after {usable_s:5.2f} s  {mark}")
    return results


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per database and phase."""
    rows = []
    for database in dict.fromkeys(r["database"] for r in results):
        for phase in dict.fromkeys(r["phase"] for r in results):
            mine = [r for r in results if r["database"] == database and r["phase"] == phase]
            if not mine:
                continue
            usable = [r["usable_s"] for r in mine]
            rows.append(
                {
                    "database": database,
                    "phase": phase,
                    "trials": len(mine),
                    "lines_lost": sum(r["lines_lost"] for r in mine),
                    "lines_duplicated": sum(r["lines_duplicated"] for r in mine),
                    "memories_lost": sum(r["memories_lost"] for r in mine),
                    "memories_duplicated": sum(r["memories_duplicated"] for r in mine),
                    "usable_p50_s": percentile(usable, 0.5),
                    "usable_max_s": max(usable),
                    "problems": sum(1 for r in mine if r["problems"]),
                }
            )
    return rows


def run(args: argparse.Namespace) -> int:
    phases = tuple(args.phases.split(",")) if args.phases else PHASES
    args.outage_trials = args.trials if args.outage_trials is None else args.outage_trials
    unknown = [phase for phase in phases if phase not in PHASES]
    if unknown:
        raise SystemExit(f"--phases: unknown {', '.join(unknown)}; allowed: {', '.join(PHASES)}")
    databases = [name for name in args.databases.split(",") if name]
    results: list[dict[str, Any]] = []
    for database in databases:
        with ExitStack() as stack:
            folder = stack.enter_context(
                data_folder(args.data_dir and f"{args.data_dir}/{database}", "personalab-faults-")
            )
            link: Outage | None = None
            if database == "sqlite":
                url = f"sqlite:///{(folder / 'personalab.db').resolve()}"
                # no server to lose: another process holds the file's write lock (evals/outage.py)
                link = SqliteWriteLock(str(folder / "personalab.db"))
            elif database == "postgres":
                url = stack.enter_context(postgres_schema(args.postgres_url))
            else:
                raise SystemExit(f"--databases: unknown {database!r}; allowed: sqlite, postgres")
            kills = [phase for phase in phases if phase not in OUTAGE_PHASES]
            outages = [phase for phase in phases if phase in OUTAGE_PHASES]
            print(
                f"{database}: {args.trials} trial(s) x {len(kills)} phases with kill -9"
                + (f", {args.outage_trials} x {len(outages)} with the database down" if outages else "")
            )
            if kills:
                results.extend(run_campaign(database, url, folder, args.trials, tuple(kills)))
            if outages:
                if database == "postgres":  # the outages' processes reach the server through the relay only
                    link = stack.enter_context(postgres_link(url))
                    url = link.url_through(url)
                results.extend(run_campaign(database, url, folder, args.outage_trials, tuple(outages), link=link))
    rows = summarize(results)
    print(
        "\n| database | phase | trials | lines lost | lines duplicated | memories lost | memories duplicated | usable again p50 / max |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['database']} | {row['phase']} | {row['trials']} | {row['lines_lost']} | {row['lines_duplicated']} |"
            f" {row['memories_lost']} | {row['memories_duplicated']} | {row['usable_p50_s']:.2f} s / {row['usable_max_s']:.2f} s |"
        )
    failed = [r for r in results if r["problems"]]
    slow = [r for r in results if r["usable_s"] > USABLE_GOAL_S]
    print(
        f"\ngoal: 0 lost, 0 duplicated, usable within {USABLE_GOAL_S:g} s — "
        f"{len(results)} kills and outages, {len(failed)} with a problem, {len(slow)} slower than the goal"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"rows": rows, "results": results}, ensure_ascii=False, indent=2), "utf-8"
        )
    # a lost or duplicated write fails the run (CI); time is reported, never asserted (machines are noisy)
    return 1 if failed else 0


def register(kinds: argparse._SubParsersAction) -> None:
    faults = kinds.add_parser(
        "faults",
        help="kill -9 at every phase of a turn, and the database down mid-turn; lines and memories lost or duplicated",
    )
    faults.add_argument("--trials", type=int, default=20, help="kills per phase and database")
    faults.add_argument("--outage-trials", type=int, help="outages per db_down phase (PostgreSQL; default: --trials)")
    faults.add_argument("--phases", help=f"comma-separated, of: {', '.join(PHASES)} (default: all)")
    faults.add_argument("--databases", default="sqlite,postgres", help="comma-separated: sqlite, postgres")
    faults.add_argument(
        "--postgres-url", default="postgresql://postgres@127.0.0.1:5432/test", help="database for a new schema"
    )
    faults.add_argument("--data-dir", help="keep the stores here (default: temporary directories)")
    faults.add_argument("--json", help="also write every kill's result to this file")
    faults.set_defaults(handler=run)
