"""`personalab bench web`: the web app's figures (issue 24 "Figures"), printed as markdown tables:

1. server time of each page, p50 / p95, with `--instances` instances and `--lines` lines in the database (in-process
   through FastAPI's TestClient on the real app: the time from the request to the last byte of the answer);
2. send → first streamed token of the chat page's turn (`POST /app/instances/{id}/turn`, server-sent events) against
   the same turn through the HTTP API (LangGraph's runs stream, `stream_mode="messages-tuple"`, the first token of
   the generate node), alternated on one `langgraph dev` that serves both, in the same run;
3. the chat page's weight (HTML + CSS + JS, uncompressed, without avatars).

The fixture is written with bulk SQL (not 10,000 turns): one character and background through the API, then the
instances, their lines (a greeting, then user/reply pairs), the story state and turn record of every reply, as a
played instance has them. One instance holds half the lines (the chat measured on a long dialogue), the others
share the rest.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUTLINE = ["相遇", "出发", "穿越废墟", "找到水源", "抵达绿洲"]
GOAL_PAGE_P95_MS = 50.0
GOAL_FIRST_TOKEN_RATIO = 1.1
GOAL_CHAT_WEIGHT_KB = 150.0


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _story_state(turn: int, core: dict[str, Any]) -> dict[str, Any]:
    """A story state as a turn stores it: the plot advanced one point every 20 turns, a relationship, the core."""
    from personalab.nodes.rules.plot import new_plot_state

    plot: dict[str, Any] = dict(new_plot_state(OUTLINE))
    current = min(len(OUTLINE), 1 + turn // 20)
    points = [dict(point) for point in plot["story_outline"]]
    for point in points:
        point["status"] = (
            "completed" if point["index"] < current else "in_progress" if point["index"] == current else "pending"
        )
    plot.update(story_outline=points, current_plot_index=current, last_progress_turn=(current - 1) * 20)
    relationship = {"trust": min(100, turn), "affection": min(100, turn // 2), "familiarity": min(100, turn)}
    return {"plot_state": plot, "relationship": relationship, "core_memory": core}


def seed_library(count: int, avatar_kb: int) -> None:
    """`count` more characters, each with an avatar of `avatar_kb` KB, and `count` more backgrounds of five outline
    points (a library as a user has it: the library pages must not read every avatar's bytes)."""
    from personalab.stores.db import session_scope
    from personalab.stores.tables import Background, OutlinePoint, Role
    from sqlalchemy import func, insert, select, text

    if count <= 0:
        return
    avatar = b"\x89PNG\r\n\x1a\n" + os.urandom(max(0, avatar_kb * 1024 - 8))
    with session_scope() as session:
        first_role = (session.execute(select(func.max(Role.id))).scalar() or 0) + 1
        first_background = (session.execute(select(func.max(Background.id))).scalar() or 0) + 1
        session.execute(
            insert(Role),
            [
                {
                    "id": first_role + n,
                    "name": f"角色 {n + 1}",
                    "description": "废土上的旅人。" * 20,
                    "greetings": ["你好。"],
                    "avatar_image": avatar,
                    "avatar_mime": "image/png",
                }
                for n in range(count)
            ],
        )
        session.execute(
            insert(Background),
            [
                {"id": first_background + n, "name": f"背景 {n + 1}", "world_setting": "荒原。" * 50}
                for n in range(count)
            ],
        )
        session.execute(
            insert(OutlinePoint),
            [
                {"background_id": first_background + n, "position": position, "content": text}
                for n in range(count)
                for position, text in enumerate(OUTLINE, start=1)
            ],
        )
        if session.get_bind().dialect.name == "postgresql":
            for table in ("role", "background"):
                session.execute(
                    text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
                )


def _analyze() -> None:
    """PostgreSQL: the planner's statistics of the bulk-written tables, as autovacuum would gather them on a
    database that grew by use (without them it plans for empty tables)."""
    from personalab.stores.db import get_engine
    from sqlalchemy import text

    engine = get_engine()
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            connection.execute(text("ANALYZE"))


def seed(instances: int, lines: int) -> dict[str, int]:
    """The fixture in the database of `PERSONALAB_DATA_DIR` / `PERSONALAB_DATABASE_URL`, by bulk inserts: returns
    the ids the pages are measured on (`long`: the instance with half the lines, `short`, `character`,
    `background`, `long_lines`: its lines on the branch)."""
    from personalab.graph.api import library
    from personalab.nodes.rules.character import seeded_core_memory
    from personalab.stores.db import session_scope
    from personalab.stores.tables import Line, Save
    from personalab.stores.turn_tables import StoryState, TurnRecord
    from sqlalchemy import func, insert, select, text, update
    from sqlmodel import col

    if instances < 2 or lines < 2 * instances:
        raise SystemExit("bench web: --instances must be at least 2 and --lines at least twice --instances")
    character = library.create_character(
        {"name": "雷娜", "description": "废土佣兵，话少，枪法好。", "persona": "冷静", "greetings": ["你来了。"]}
    )
    background = library.create_background({"name": "废土", "world_setting": "核战后的荒原", "outline": OUTLINE})
    core = seeded_core_memory(character.name, {"persona": "冷静", "description": "废土佣兵"})
    long_count = lines // 2
    per = (lines - long_count) // (instances - 1)
    counts = [long_count] + [per] * (instances - 1)
    counts[-1] += lines - sum(counts)
    base = datetime.now(UTC) - timedelta(days=30)
    with session_scope() as session:
        first_save = (session.execute(select(func.max(Save.id))).scalar() or 0) + 1
        next_line = (session.execute(select(func.max(Line.id))).scalar() or 0) + 1
        saves, line_rows, states, records = [], [], [], []
        long_lines = 0
        for number, count in enumerate(counts):
            save_id = first_save + number
            created = base + timedelta(minutes=number)
            saves.append(
                {
                    "id": save_id,
                    "title": f"存档 {number + 1}",
                    "role_id": character.id,
                    "background_id": background.id,
                    "created_at": created,
                    "updated_at": created,
                }
            )
            parent = None
            for position in range(count):
                line_id = next_line
                next_line += 1
                is_user = position % 2 == 1  # the greeting first, then user / reply pairs
                when = created + timedelta(seconds=30 * position)
                line_rows.append(
                    {
                        "id": line_id,
                        "save_id": save_id,
                        "parent_line_id": parent,
                        "attribute": "user" if is_user else "assistant",
                        "content": f"第 {position} 句：我们继续往北走，风沙很大。"
                        if is_user
                        else f"（点头）走吧，第 {position} 句。",
                        "original_emotion": None if is_user else "平静",
                        "role_id": None if is_user else character.id,
                        "display_name": "你" if is_user else character.name,
                        "created_at": when,
                    }
                )
                if position and not is_user:
                    turn = position // 2
                    states.append(
                        {
                            "save_id": save_id,
                            "turn": turn,
                            "reply_line_id": line_id,
                            "state": _story_state(turn, core),
                            "created_at": when,
                            "updated_at": when,
                        }
                    )
                    records.append(
                        {
                            "save_id": save_id,
                            "turn": turn,
                            "user_line_id": line_id - 1,
                            "reply_line_id": line_id,
                            "model": "scripted",
                            "created_at": when,
                        }
                    )
                parent = line_id
            saves[-1]["last_message_id"] = parent
            if number == 0:
                long_lines = count
        session.execute(insert(Save), saves)
        for start in range(0, len(line_rows), 5_000):
            session.execute(insert(Line), line_rows[start : start + 5_000])
        session.execute(insert(StoryState), states)
        session.execute(insert(TurnRecord), records)
        session.execute(update(Save).where(col(Save.id) == first_save).values(updated_at=datetime.now(UTC)))
        if session.get_bind().dialect.name == "postgresql":  # rows given their ids: the sequences move past them
            for table in ("save", "line"):
                session.execute(
                    text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
                )
    return {
        "long": first_save,
        "short": first_save + instances - 1,
        "character": int(character.id),
        "background": int(background.id),
        "long_lines": long_lines,
    }


def page_times(
    ids: dict[str, int], instances: int, requests: int
) -> tuple[list[tuple[str, float, float, float, float]], int]:
    """Each page `requests` times after one warm-up: (page, p50 ms, p95 ms, CPU p95 ms, SQL statements a request);
    and the chat page's weight in bytes."""
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app

    client = TestClient(app)
    long, short = ids["long"], ids["short"]
    last_page = max(1, -(-instances // 50))
    pages = {
        "instances list, page 1 (50 of them)": "/app/instances",
        f"instances list, page {last_page}": f"/app/instances?page={last_page}",
        "characters": "/app/characters",
        "character form": f"/app/characters/{ids['character']}/edit",
        "backgrounds": "/app/backgrounds",
        "background form (outline editor)": f"/app/backgrounds/{ids['background']}/edit",
        f"chat, {ids['long_lines']:,} lines on the branch (last 40, panels)": f"/app/instances/{long}",
        "chat fragment after a turn": f"/app/instances/{long}/main",
        "older lines, the middle of the branch": f"/app/instances/{long}/lines?before={ids['long_lines'] // 2}",
        "older lines, the first 40": f"/app/instances/{long}/lines?before=40",
        "chat, a short instance": f"/app/instances/{short}",
        "instance delete confirmation": f"/app/instances/{short}/delete",
        "character delete confirmation (1,000 instances go)": f"/app/characters/{ids['character']}/delete",
    }
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    statements = [0]

    def count(*_args: Any) -> None:
        statements[0] += 1

    # the SQL statements a page runs: a figure that does not move with the machine's load
    event.listen(Engine, "before_cursor_execute", count)
    rows = []
    try:
        for name, path in pages.items():
            client.get(path)  # warm
            times, cpu = [], []
            statements[0] = 0
            for _ in range(requests):
                started, started_cpu = time.perf_counter(), time.process_time()
                response = client.get(path)
                times.append((time.perf_counter() - started) * 1000)
                # this process's CPU time (server and test client): what the request costs, whatever else runs
                cpu.append((time.process_time() - started_cpu) * 1000)
                if response.status_code != 200:
                    raise SystemExit(f"bench web: GET {path} answered {response.status_code}")
            rows.append((name, statistics.median(times), _p(times, 0.95), _p(cpu, 0.95), statements[0] / requests))
    finally:
        event.remove(Engine, "before_cursor_execute", count)
    chat = client.get(f"/app/instances/{long}").content
    assets = sum(len(client.get(f"/app/static/{name}").content) for name in ("htmx.min.js", "app.js", "app.css"))
    return rows, len(chat) + assets


def first_tokens(turns: int) -> tuple[list[float], list[float]]:
    """Alternate a web turn and an HTTP API turn on one `langgraph dev` (a data folder of their own); the time to
    the first reply token of each. The first pair warms both paths up and is not counted."""
    import httpx
    from langgraph_sdk import get_sync_client
    from personalab.evals.served import graph_server
    from personalab.graph.api import library
    from personalab.stores.checkpoints import thread_id_for
    from personalab.stores.db import dispose_engines

    root = Path(tempfile.mkdtemp(prefix="bench_web_turns_"))
    data = root / "data"
    data.mkdir()
    os.environ["PERSONALAB_DATA_DIR"] = str(data)
    os.environ.pop("PERSONALAB_DATABASE_URL", None)
    dispose_engines()
    character = library.create_character({"name": "雷娜", "greetings": ["你来了。"]})
    background = library.create_background({"name": "废土", "outline": ["相遇", "出发", "抵达"]})
    web_instance = library.create_instance({"character_id": character.id, "background_id": background.id}).id
    api_instance = library.create_instance({"character_id": character.id, "background_id": background.id}).id
    dispose_engines()
    env = {"PERSONALAB_DATA_DIR": str(data), "PERSONALAB_LLM": "scripted"}
    web: list[float] = []
    api: list[float] = []
    with graph_server(REPO, root / "server", env, inherit_settings=False) as url:
        client = get_sync_client(url=url)
        thread = thread_id_for(api_instance)
        client.threads.create(thread_id=thread, if_exists="do_nothing")
        with httpx.Client(base_url=url, timeout=300) as http:
            for number in range(turns + 1):
                message = f"我们往北走，第 {number} 天。"
                started = time.perf_counter()
                first = None
                with http.stream("POST", f"/app/instances/{web_instance}/turn", data={"message": message}) as response:
                    for line in response.iter_lines():
                        if first is None and line == "event: token":
                            first = (time.perf_counter() - started) * 1000
                if number and first is not None:
                    web.append(first)
                started = time.perf_counter()
                first = None
                for part in client.runs.stream(
                    thread,
                    "personalab",
                    input={"instance_id": api_instance, "message": message},
                    stream_mode="messages-tuple",
                ):
                    if first is None and part.event == "messages" and _generate_token(part.data):
                        first = (time.perf_counter() - started) * 1000
                if number and first is not None:
                    api.append(first)
    return web, api


def _generate_token(data: Any) -> bool:
    if not isinstance(data, list) or len(data) != 2:
        return False
    chunk, metadata = data
    return bool(isinstance(metadata, dict) and metadata.get("langgraph_node") == "generate" and chunk.get("content"))


def _mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def run(args: argparse.Namespace) -> int:
    if args.requests < 2 or args.turns < 0:
        raise SystemExit("bench web: --requests must be at least 2 and --turns at least 0")
    os.environ["PERSONALAB_LLM"] = "scripted"
    os.environ["PERSONALAB_AUTH"] = "none"
    os.environ["PERSONALAB_DATA_DIR"] = args.data_dir or tempfile.mkdtemp(prefix="bench_web_pages_")
    os.environ.pop("PERSONALAB_DATABASE_URL", None)
    if args.postgres_url:
        from personalab.evals.data_dir import postgres_schema

        with postgres_schema(args.postgres_url, prefix="bench_web_") as url:
            os.environ["PERSONALAB_DATABASE_URL"] = url
            print("database: PostgreSQL (a schema of its own, dropped afterwards)")
            pages(args)
        os.environ.pop("PERSONALAB_DATABASE_URL", None)
    else:
        print("database: SQLite (the embedded default)")
        pages(args)
    return turns(args)


def pages(args: argparse.Namespace) -> None:
    """The fixture, then each page's server time and the chat page's weight."""
    started = time.perf_counter()
    ids = seed(args.instances, args.lines)
    seed_library(args.characters - 1, args.avatar_kb)
    _analyze()
    print(
        f"seeded {args.instances:,} instances, {args.lines:,} lines, {args.characters:,} characters (avatars of "
        f"{args.avatar_kb} KB) and backgrounds in {time.perf_counter() - started:.1f} s\n"
    )
    rows, weight = page_times(ids, args.instances, args.requests)
    print(
        f"| page ({args.instances:,} instances, {args.lines:,} lines) | p50 ms | p95 ms | goal p95 ≤ 50 ms "
        "| CPU p95 ms | SQL statements |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, p50, p95, cpu95, sql in rows:
        print(f"| {name} | {p50:.1f} | {p95:.1f} | {_mark(p95 <= GOAL_PAGE_P95_MS)} | {cpu95:.1f} | {sql:.0f} |")
    kb = weight / 1024
    print(
        f"\nchat page weight (HTML + CSS + JS, uncompressed, no avatars): {kb:.1f} KB "
        f"(goal ≤ {GOAL_CHAT_WEIGHT_KB:.0f} KB {_mark(kb <= GOAL_CHAT_WEIGHT_KB)})\n"
    )


def turns(args: argparse.Namespace) -> int:
    """Send → first token, chat page against the HTTP API, alternated in one run."""
    if not args.turns:
        return 0
    web, api = first_tokens(args.turns)
    print("| send → first token | n | p50 ms | p95 ms |\n| --- | --- | --- | --- |")
    for name, values in (("chat page (/app/instances/{id}/turn, SSE)", web), ("HTTP API (runs stream)", api)):
        if values:
            print(f"| {name} | {len(values)} | {statistics.median(values):.1f} | {_p(values, 0.95):.1f} |")
    if web and api:
        ratio = statistics.median(web) / statistics.median(api)
        print(
            f"\nchat page / HTTP API (p50): {ratio:.2f}× (goal ≤ {GOAL_FIRST_TOKEN_RATIO}× {_mark(ratio <= GOAL_FIRST_TOKEN_RATIO)})"
        )
    return 0


def register(kinds: argparse._SubParsersAction) -> None:
    web = kinds.add_parser(
        "web", help="the web app: page server time p95, send → first token against the HTTP API, chat page weight"
    )
    web.add_argument("--instances", type=int, default=1_000)
    web.add_argument("--lines", type=int, default=10_000, help="lines in the database, all instances")
    web.add_argument("--characters", type=int, default=100, help="characters (and backgrounds) in the library")
    web.add_argument("--avatar-kb", type=int, default=200, help="each character's avatar size")
    web.add_argument("--requests", type=int, default=50, help="requests per page (after a warm-up)")
    web.add_argument("--turns", type=int, default=10, help="turn pairs for the first-token figure; 0 skips it")
    web.add_argument("--data-dir", help="keep the fixture here (default: a temporary directory)")
    web.add_argument(
        "--postgres-url",
        default="",
        help="time the pages on this PostgreSQL database (a schema of its own) instead of SQLite",
    )
    web.set_defaults(handler=run)
