"""`personalab bench worldbook`: the world-book scan's time against the book's size, and a turn's whole retrieval
with a big book (issue 28; seed 004 性能要求: 记忆检索延迟 < 100ms).

Books: `--sizes` synthetic SillyTavern world-info books (default 50 / 500 / 5,000 / 20,000 entries), made as a
public lorebook looks: every entry one to three primary keys (made-up English names of three or four syllables and Chinese names
of two or three random ideographs, half and half, all distinct),
one in five with secondary keys (and_any), one in 500 with a `/regex/` key, five constant entries, one in ten
naming another entry's key in its content (recursion), each with its SillyTavern source (options read as on an
import). Each book is prepared once (`PreparedWorldbook`: the key automaton), as a turn's store does once per book
version; the build time is printed apart.

Scan: `--scans` turn contexts (four recent lines and the user's message, mixed English and Chinese filler with
two or three keys of random entries in it), the same texts for every size, through
`nodes.rules.worldbook.explain_worldbook` with the default config (recursion on). p50 / p95 (nearest rank) per
size, measured in one run. Goals: p95 ≤ 20 ms at 5,000 entries, ≤ 50 ms at 20,000, and at 5,000 within 1.5× of
the 50-entry figure.

Retrieval (`--retrieval-entries`, default 5,000; 0 skips it): the sample instance in a temporary data directory,
a `--history-turns` dialogue, the book stored as its character's entries, then `--turns` turns through
`graph.runner.run_turn` with the offline scripted model; the figure is the turn's `debug.retrieval.ms` (the
whole retrieval: world book, memories, knowledge, injection, under the time cap) and its `worldbook_scan`, p50 /
p95 over the turns after the first (a warm-up); the cuts by the time cap are counted (goal: none). Apart: the
book's preparation before the cap (`worldbook_prepare_ms`): the load and build of the first turn, then the
version check.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from typing import Any

from personalab.evals.bench_turn import bench_environment, build_history, nearest_rank
from personalab.evals.data_dir import data_folder
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.worldbook import PreparedWorldbook, WorldbookEntry, context_from_lines, explain_worldbook

GOAL_5000_MS = 20.0
GOAL_20000_MS = 50.0
GOAL_RATIO = 1.5
SEED_004_MS = 100.0
SYLLABLES = (
    "ka", "lo", "mi", "ra", "ven", "tor", "sha", "del", "quin", "bar",
    "zor", "eth", "ny", "wal", "pim", "dra", "sel", "gor", "lin", "mae",
)  # fmt: skip
HAN_FIRST, HAN_LAST = 0x4E00, 0x9FA5  # CJK unified ideographs: names as rare as a lorebook's
FILLER = (
    "she looks out of the window and says nothing for a while",
    "the rain keeps falling on the old roof",
    "他把杯子放下，叹了口气",
    "we should go before it gets dark",
    "街上的灯一盏一盏亮了起来",
    "I remember the road was longer than this",
)


def _english(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(3, 4))).capitalize()


def _chinese(rng: random.Random) -> str:
    return "".join(chr(rng.randint(HAN_FIRST, HAN_LAST)) for _ in range(rng.randint(2, 3)))


def synthetic_book(size: int, seed: int = 28) -> list[WorldbookEntry]:
    """`size` world-info entries as described in the module docstring, with distinct keys."""
    rng = random.Random(seed)
    used: set[str] = set()
    keys: list[list[str]] = []
    for _ in range(size):
        mine: list[str] = []
        while len(mine) < rng.randint(1, 3):
            key = _english(rng) if rng.random() < 0.5 else _chinese(rng)
            if key not in used:
                used.add(key)
                mine.append(key)
        keys.append(mine)
    entries = []
    for index in range(size):
        primary = list(keys[index])
        if index % 500 == 499:
            primary.append(f"/\\bsigil{index}\\w*/i")
        secondary = [rng.choice(keys[rng.randrange(size)])] if index % 5 == 1 else []
        content = f"Entry {index}: " + rng.choice(FILLER)
        if index % 10 == 3:
            content += f" 提到了{rng.choice(keys[rng.randrange(size)])}。"
        constant = index < min(5, size // 10)
        source = {
            "uid": index,
            "key": primary,
            "keysecondary": secondary,
            "content": content,
            "constant": constant,
            "selective": bool(secondary),
            "order": 100,
            "position": 0,
        }
        entries.append(
            WorldbookEntry(
                id=str(index + 1),
                content=content,
                keywords=tuple(primary),
                secondary_keywords=tuple(secondary),
                constant=constant,
                priority=100,
                source=source,
                source_format="world info",
            )
        )
    return entries


def turn_texts(count: int, book: Sequence[WorldbookEntry], seed: int = 5) -> list[tuple[list[dict[str, Any]], str]]:
    """`count` (recent lines, message) pairs, each with two or three keys of random entries in it."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        lines = [{"content": rng.choice(FILLER), "display_name": "Mira"} for _ in range(4)]
        picked = [rng.choice(rng.choice(book).keywords) for _ in range(rng.randint(2, 3))]
        picked = [key for key in picked if not key.startswith("/")]
        message = f"{rng.choice(FILLER)} {' '.join(picked)} — {rng.choice(FILLER)}"
        out.append((lines, message))
    return out


def scan_figures(sizes: Sequence[int], scans: int, texts_seed: int = 5) -> dict[int, dict[str, float]]:
    """Build time, p50 / p95 of the scan and the mean entries fired, per book size. The sizes are measured
    interleaved — each turn text is scanned by every book in turn, the order rotating — so a slow moment of the
    machine falls on every size alike and the ratio between sizes is the scan's, not the machine's."""
    books: dict[int, PreparedWorldbook] = {}
    build_ms: dict[int, float] = {}
    texts: list[tuple[list[dict[str, Any]], str]] = []
    for size in sizes:
        entries = synthetic_book(size)
        started = time.perf_counter()
        books[size] = PreparedWorldbook(entries)
        build_ms[size] = (time.perf_counter() - started) * 1000
        if not texts:
            # the texts name keys of the 50-entry prefix shared by every size: the same turns for every book
            texts = turn_texts(scans + 1, entries[: min(size, 50)], texts_seed)
    times: dict[int, list[float]] = {size: [] for size in sizes}
    fired = dict.fromkeys(sizes, 0)
    for index, (lines, message) in enumerate(texts):
        context = context_from_lines(lines, user_message=message)
        turn = index % len(sizes)
        for size in [*sizes[turn:], *sizes[:turn]]:
            started = time.perf_counter()
            result = explain_worldbook(books[size], context)
            elapsed = (time.perf_counter() - started) * 1000
            if index > 0:  # the first scan warms the patterns' cache up
                times[size].append(elapsed)
                fired[size] += len(result.triggered)
    return {
        size: {
            "build_ms": build_ms[size],
            "p50": nearest_rank(times[size], 50),
            "p95": nearest_rank(times[size], 95),
            "fired": fired[size] / max(1, len(times[size])),
        }
        for size in sizes
    }


def played_retrieval(graph: Any, ctx: Any, instance_id: int, message: str, turn: str) -> dict[str, Any]:
    """One measured turn through `graph.runner.run_turn`, its writes flushed before the next; its `debug.retrieval`
    (empty when the turn ran none). A failed turn is a `RuntimeError` naming `turn`: a figure of it would mislead."""
    from personalab.graph.runner import run_turn
    from personalab.stores.background import flush_event_writes

    state = run_turn(graph, ctx, instance_id, message)
    flush_event_writes()
    if state.get("error"):
        raise RuntimeError(f"{turn} failed: {state['error']}")
    return dict(state["debug"].get("retrieval") or {})


def retrieval_figures(entries: int, turns: int, history_turns: int) -> dict[str, Any]:
    """The whole retrieval of `turns` real turns on the sample instance with an `entries`-entry character book."""
    from personalab.graph.runner import create_sample_instance, turn_graph
    from personalab.nodes.context import Context
    from personalab.stores.db import session_scope
    from personalab.stores.saves import get_save
    from personalab.stores.worldbook import add_worldbook_row

    instance_id = create_sample_instance()
    with session_scope() as session:
        role_id = get_save(session, instance_id).role_id
        for entry in synthetic_book(entries):
            add_worldbook_row(session, entry.model_copy(update={"role_id": role_id}), uid=entry.id)
    build_history(instance_id, history_turns)
    book = synthetic_book(entries)
    texts = turn_texts(turns, book[:50], seed=9)
    retrieval: list[float] = []
    scan: list[float] = []
    load: list[float] = []
    prepare: list[float] = []
    first_prepare = 0.0
    cuts = 0
    with turn_graph(Context()) as (graph, ctx):
        for index, (_lines, message) in enumerate(texts):
            debug = played_retrieval(graph, ctx, instance_id, message, f"turn {index + 1}")
            if debug.get("status") != "ok":
                cuts += 1
            if index == 0:
                first_prepare = float(debug.get("worldbook_prepare_ms") or 0.0)
                continue
            prepare.append(float(debug.get("worldbook_prepare_ms") or 0.0))
            retrieval.append(float(debug.get("ms") or 0.0))
            figures = debug.get("worldbook_scan") or {}
            scan.append(float(figures.get("scan_ms") or 0.0))
            load.append(float(figures.get("load_ms") or 0.0))
    return {
        "p50": nearest_rank(retrieval, 50),
        "p95": nearest_rank(retrieval, 95),
        "scan_p95": nearest_rank(scan, 95),
        "load_p95": nearest_rank(load, 95),
        "prepare_first": first_prepare,
        "prepare_p95": nearest_rank(prepare, 95),
        "cuts": cuts,
        "turns": len(retrieval),
    }


def run(args: argparse.Namespace) -> int:
    sizes = [int(size) for size in args.sizes.split(",") if size.strip()]
    if not sizes or any(size < 1 for size in sizes):
        raise InvalidInput(f"--sizes must be positive entry counts separated by commas, got {args.sizes!r}")
    if args.scans < 2 or args.turns < 2:
        raise InvalidInput("--scans and --turns must be at least 2 (the first is a warm-up)")
    print(
        f"world-book scan: {args.scans} scans per book (+1 warm-up), the same turn texts for every size, "
        "the sizes interleaved"
    )
    print(f"  {'entries':>8}{'build ms':>10}{'p50 ms':>9}{'p95 ms':>9}{'fired':>7}")
    figures = scan_figures(sizes, args.scans)
    for size, row in figures.items():
        print(f"  {size:>8,}{row['build_ms']:>10.0f}{row['p50']:>9.2f}{row['p95']:>9.2f}{row['fired']:>7.1f}")
    for size, goal in ((5_000, GOAL_5000_MS), (20_000, GOAL_20000_MS)):
        if size in figures:
            p95 = figures[size]["p95"]
            print(f"goal: p95 at most {goal:.0f} ms at {size:,} entries: {p95:.2f} ms — {_verdict(p95 <= goal)}")
    if 50 in figures and 5_000 in figures:
        ratio = figures[5_000]["p95"] / max(figures[50]["p95"], 1e-9)
        print(f"goal: p95 at 5,000 within {GOAL_RATIO}x of 50 entries: {ratio:.2f}x — {_verdict(ratio <= GOAL_RATIO)}")
    if args.retrieval_entries > 0:
        with data_folder(args.data_dir, "personalab-bench-") as path, bench_environment(path):
            found = retrieval_figures(args.retrieval_entries, args.turns, args.history_turns)
        print(
            f"retrieval with a {args.retrieval_entries:,}-entry book, {args.history_turns:,}-turn history, "
            f"{found['turns']} turns (+1 warm-up): p50 {found['p50']:.1f} ms, p95 {found['p95']:.1f} ms "
            f"(world-book scan p95 {found['scan_p95']:.2f} ms); cut by the time cap: {found['cuts']}"
        )
        print(
            f"  book prepared before the cap: {found['prepare_first']:.0f} ms on the first turn (load and build), "
            f"then p95 {found['prepare_p95']:.2f} ms (the version check)"
        )
        print(f"goal: p95 under {SEED_004_MS:.0f} ms (seed 004): {_verdict(found['p95'] < SEED_004_MS)}")
    return 0


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def register(kinds: argparse._SubParsersAction) -> None:
    worldbook = kinds.add_parser(
        "worldbook", help="world-book scan p95 against the book's size, retrieval with a big book"
    )
    worldbook.add_argument("--sizes", default="50,500,5000,20000", help="book sizes, comma-separated")
    worldbook.add_argument("--scans", type=int, default=1_000, help="scans measured per size (after a warm-up)")
    worldbook.add_argument("--retrieval-entries", type=int, default=5_000, help="book of the retrieval figure; 0 skips")
    worldbook.add_argument("--turns", type=int, default=30, help="turns of the retrieval figure (first: warm-up)")
    worldbook.add_argument("--history-turns", type=int, default=200, help="turns already in the dialogue tree")
    worldbook.add_argument("--data-dir", help="keep the fixture here (default: a temporary directory)")
    worldbook.set_defaults(handler=run)
