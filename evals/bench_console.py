"""The memory console's figures (issue 25 "Figures"), written as markdown tables to stdout:

1. the memory inspector's server time per page, p50 / p95, with `--memories` memories in one instance (in-process
   through FastAPI's TestClient on the real app and SQLite: request to last byte), for the first page, a deep page,
   a layer filter and a text search;
2. "try it" (`api.memories.preview`, the turn's own gathering without the turn) against the turn's own retrieval
   (the `rag_retrieve` node's time in `run_turn`), alternated in the same run on the same instance (each message
   is tried before its turn on even turns and after it on odd ones: whichever runs second finds the message's
   embedding cached).

The memories are seeded with one bulk SQL insert (not turns): they are in the SQL store (what the inspector pages
and the keyword path read), not in the vector index, so the semantic path finds only the played turns' memories.

    personalab bench console --memories 100000 --requests 30 --turns 15
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PHRASES = ("灯塔", "怀表", "码头", "雾港", "旧船", "父亲", "钥匙", "集市", "风暴", "茶馆")
LAYERS = ("active", "situational", "event_log", "archive")
TYPES = ("event", "conversation", "observation", "emotion", "relationship", "trait", "goal")


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def seed_memories(instance_id: int, character_id: int, count: int) -> float:
    """`count` memories in one instance by bulk SQL; returns the seconds it took."""
    from personalab.stores.db import session_scope
    from personalab.stores.memory_tables import MemoryEntry
    from sqlalchemy import insert

    started = time.perf_counter()
    now = datetime.now(UTC)
    batch: list[dict[str, Any]] = []
    with session_scope(None) as session:
        for n in range(count):
            a, b = PHRASES[n % len(PHRASES)], PHRASES[(n // len(PHRASES)) % len(PHRASES)]
            content = f"第{n}条：阿岚在{a}附近提到了{b}"
            batch.append(
                {
                    "instance_id": instance_id,
                    "character_id": character_id,
                    "content": content,
                    "type": TYPES[n % len(TYPES)],
                    "layer": LAYERS[n % len(LAYERS)],
                    "turn": n // 10,
                    "created_at": now,
                    "updated_at": now,
                    "importance": 0.3 + (n % 7) / 10,
                    "activity": 0.5,
                    "activity_turn": n // 10,
                    "layer_since_turn": n // 10,
                    "related_character": "",
                    "location": a,
                    "tags": [a],
                    "keywords": [a, b],
                    "search_text": f"{a} {b} 阿岚",
                    "user_edited": False,
                    "pinned": False,
                    "notes": "",
                    "mention_count": 0,
                }
            )
            if len(batch) == 5000:
                session.execute(insert(MemoryEntry), batch)
                batch = []
        if batch:
            session.execute(insert(MemoryEntry), batch)
    return time.perf_counter() - started


def run(args: argparse.Namespace) -> int:
    root = Path(args.data_dir or tempfile.mkdtemp(prefix="bench-console-"))
    (root / "data").mkdir(parents=True, exist_ok=True)
    os.environ["PERSONALAB_DATA_DIR"] = str(root / "data")
    os.environ.pop("PERSONALAB_DATABASE_URL", None)
    os.environ.setdefault("PERSONALAB_LLM", "scripted")
    from fastapi.testclient import TestClient
    from personalab.graph.api import PersonaLab
    from personalab.graph.http.app import app
    from personalab.graph.runner import run_turn, turn_graph

    api = PersonaLab()
    character = api.characters.create({"name": "雷娜", "description": "雾港的守灯人", "greetings": ["你来了。"]})
    background = api.backgrounds.create({"name": "雾港", "world_setting": "终年有雾", "outline": ["相遇", "出发"]})
    instance = api.instances.create({"character_id": character.id, "background_id": background.id})
    with turn_graph() as (graph, ctx):
        run_turn(graph, ctx, instance.id, "我叫阿岚，我的怀表丢在灯塔了。")  # a story state and the warm-up
    seconds = seed_memories(instance.id, int(character.id), args.memories)
    total = api.memories.list(instance.id, include_record=True, limit=1).total
    print(f"## Memory console, {total} memories in one instance (seeded in {seconds:.1f} s)\n")

    pages = {
        "first page": "",
        "page 1000 (deep)": "?page=1000",
        "layer + type filter": "?layer=archive&type=event",
        "text search 怀表": "?q=%E6%80%80%E8%A1%A8",
        "scene + turn range": "?scene=%E7%81%AF%E5%A1%94&turn_from=100&turn_to=5000",
    }
    print("| inspector page | requests | p50 ms | p95 ms |\n| --- | --- | --- | --- |")
    with TestClient(app) as client:
        for name, query in pages.items():
            url = f"/app/instances/{instance.id}/memories{query}"
            assert client.get(url).status_code == 200, url  # warm
            times = []
            for _ in range(args.requests):
                started = time.perf_counter()
                response = client.get(url)
                times.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200
            print(f"| {name} | {len(times)} | {statistics.median(times):.1f} | {_p(times, 0.95):.1f} |")

    messages = ["怀表在哪里？", "灯塔附近发生过什么？", "你还记得码头的事吗？", "父亲留下了什么？", "风暴那天怎么了？"]
    turn_ms: list[float] = []
    try_ms: list[float] = []
    gather_ms: list[float] = []  # the preview's gathering alone (the part the turn's node times)
    with turn_graph() as (graph, ctx):
        api.memories.preview(instance.id, messages[0])  # warm
        for n in range(args.turns):
            message = messages[n % len(messages)]

            def try_it(message: str = message) -> None:
                started = time.perf_counter()
                record = api.memories.preview(instance.id, message)
                try_ms.append((time.perf_counter() - started) * 1000)
                gather_ms.append(float(record["ms"]))

            # alternate which goes first: the second would find the message's embedding cached
            if n % 2 == 0:
                try_it()
            state = run_turn(graph, ctx, instance.id, message)
            turn_ms.append(float(state["debug"]["timings_ms"]["rag_retrieve"]))
            if n % 2 == 1:
                try_it()
    ratio = _p(try_ms, 0.95) / _p(turn_ms, 0.95)
    print("\n| retrieval | runs | p50 ms | p95 ms |\n| --- | --- | --- | --- |")
    print(
        f"| the turn's `rag_retrieve` node | {len(turn_ms)} | {statistics.median(turn_ms):.1f} | {_p(turn_ms, 0.95):.1f} |"
    )
    print(f"| try it (`memories.preview`) | {len(try_ms)} | {statistics.median(try_ms):.1f} | {_p(try_ms, 0.95):.1f} |")
    print(
        f"| try it, its gathering only | {len(gather_ms)} | {statistics.median(gather_ms):.1f} "
        f"| {_p(gather_ms, 0.95):.1f} |"
    )
    print(f"\ntry it p95 / turn retrieval p95: **{ratio:.2f}×** (goal ≤ 1.2×)")
    return 0


def register(kinds: argparse._SubParsersAction) -> None:
    console = kinds.add_parser("console", help="the memory inspector's page time and try-it vs the turn's retrieval")
    console.add_argument("--memories", type=int, default=100_000, help="memories in the one instance")
    console.add_argument("--requests", type=int, default=30, help="requests per inspector page (after a warm-up)")
    console.add_argument("--turns", type=int, default=15, help="turns played, each with a try-it before it")
    console.add_argument("--data-dir", help="keep the fixture here (default: a temporary directory)")
    console.set_defaults(handler=run)
