"""The web app's figures (issue 24 "Figures"), written as markdown tables to stdout:

1. server time of each page, p50 / p95, with `--instances` instances and `--lines` lines in the database (in-process
   through FastAPI's TestClient on the real app and SQLite: the time from request to the last byte);
2. send → first streamed token of the web app's turn against the same turn through the HTTP API (LangGraph's runs
   stream, `stream_mode="messages-tuple"`, first token of the generate node), alternated in one `langgraph dev`;
3. the chat page's weight (HTML + CSS + JS, uncompressed, without avatars).

    .venv/bin/python -m personalab.evals.bench_web --instances 1000 --lines 10000 --requests 50 --turns 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def seed(instances: int, lines: int) -> list[int]:
    """One character and background, `instances` instances with `lines` lines between them (greetings counted)."""
    from personalab.graph.api import library
    from personalab.stores.db import session_scope
    from personalab.stores.saves import append_lines

    character = library.create_character({"name": "雷娜", "description": "废土佣兵", "greetings": ["你来了。"]})
    background = library.create_background({"name": "废土", "world_setting": "核战后", "outline": ["相遇", "出发"]})
    ids = [
        library.create_instance({"character_id": character.id, "background_id": background.id, "title": f"存档 {n}"}).id
        for n in range(instances)
    ]
    per = max(0, lines // instances - 1)
    for instance in ids:
        rows = [
            {"attribute": "user" if n % 2 == 0 else "assistant", "content": f"第 {n} 句：我们继续往北走。"}
            for n in range(per)
        ]
        with session_scope() as session:
            append_lines(session, instance, rows)
    return ids


def page_times(ids: list[int], requests: int) -> tuple[list[tuple[str, float, float]], int]:
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app

    client = TestClient(app)
    pages = {
        "instances list": "/app/instances",
        "characters": "/app/characters",
        "backgrounds": "/app/backgrounds",
        "chat": f"/app/instances/{ids[0]}",
        "chat fragment after a turn": f"/app/instances/{ids[0]}/main",
        "character form": f"/app/characters/{1}/edit",
    }
    rows = []
    for name, path in pages.items():
        client.get(path)  # warm
        times = []
        for _ in range(requests):
            started = time.perf_counter()
            response = client.get(path)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (path, response.status_code)
        rows.append((name, statistics.median(times), _p(times, 0.95)))
    chat = client.get(f"/app/instances/{ids[0]}").content
    assets = sum(len(client.get(f"/app/static/{name}").content) for name in ("htmx.min.js", "app.js", "app.css"))
    return rows, len(chat) + assets


def first_tokens(turns: int) -> tuple[list[float], list[float]]:
    """Alternate a web turn and an HTTP API turn on one `langgraph dev`; the time to the first reply token of each."""
    import httpx
    from langgraph_sdk import get_sync_client
    from personalab.evals.served import graph_server
    from personalab.graph.api import library
    from personalab.stores.checkpoints import thread_id_for

    root = Path(tempfile.mkdtemp(prefix="bench_web_"))
    data = root / "data"
    data.mkdir()
    os.environ["PERSONALAB_DATA_DIR"] = str(data)
    character = library.create_character({"name": "雷娜", "greetings": ["你来了。"]})
    background = library.create_background({"name": "废土", "outline": ["相遇", "出发", "抵达"]})
    web_instance = library.create_instance({"character_id": character.id, "background_id": background.id}).id
    api_instance = library.create_instance({"character_id": character.id, "background_id": background.id}).id
    env = {"PERSONALAB_DATA_DIR": str(data), "PERSONALAB_LLM": "scripted"}
    web: list[float] = []
    api: list[float] = []
    with graph_server(REPO, root / "server", env, inherit_settings=False) as url:
        client = get_sync_client(url=url)
        thread = thread_id_for(api_instance)
        client.threads.create(thread_id=thread, if_exists="do_nothing")
        with httpx.Client(base_url=url, timeout=300) as http:
            for number in range(turns + 1):  # the first pair warms both paths up and is not counted
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    os.environ.setdefault("PERSONALAB_LLM", "scripted")
    os.environ["PERSONALAB_DATA_DIR"] = tempfile.mkdtemp(prefix="bench_web_pages_")
    started = time.perf_counter()
    ids = seed(args.instances, args.lines)
    print(f"seeded {args.instances} instances, {args.lines} lines in {time.perf_counter() - started:.1f} s\n")
    rows, weight = page_times(ids, args.requests)
    print(f"| page ({args.instances} instances, {args.lines} lines) | p50 ms | p95 ms |\n| --- | --- | --- |")
    for name, p50, p95 in rows:
        print(f"| {name} | {p50:.1f} | {p95:.1f} |")
    print(f"\nchat page weight (HTML + CSS + JS, uncompressed, no avatars): {weight / 1024:.1f} KB\n")
    if not args.turns:
        return
    web, api = first_tokens(args.turns)
    print("| send → first token | n | p50 ms | p95 ms |\n| --- | --- | --- | --- |")
    for name, values in (("web app (/app/.../turn, SSE)", web), ("HTTP API (runs stream, messages-tuple)", api)):
        if values:
            print(f"| {name} | {len(values)} | {statistics.median(values):.1f} | {_p(values, 0.95):.1f} |")
    if web and api:
        print(f"\nweb / API (p50): {statistics.median(web) / statistics.median(api):.2f}×")


if __name__ == "__main__":
    main()
