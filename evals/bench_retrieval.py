"""`personalab bench retrieval`: memory retrieval latency on a large store, and the process's memory growth.

Fixture (in a temporary data directory unless `--data-dir`): `--memories` memories spread evenly over
`--instances` instances (each a role's save), in the store's own layout — the database, one Chroma collection
per instance and character, one BM25 index per instance built on first use. Each instance's memories are what a
long play-through leaves, in the product's proportion (issue 11: the dialogue record is searched beside the
curated memories):
- the dialogue record (`nodes.rules.record`): one entry per line of every turn — the user's line and one or two
  of the character's (as `bench turn`'s turns: 2.5 lines a turn on average) — of type and layer ``record``, its
  content ``speaker：text``, the two lines before it as its context, its line id, its importance the line's fact
  estimate (at least `MIN_RECORD_IMPORTANCE`);
- the curated memories: one a turn, of which the layer flow keeps at most the layers' capacities
  (`LayerConfig()`: 10 active, 50 situational, 200 event log, 1,000 archive; the newest in the shallowest).
So an instance of 10,000 memories is a play-through of ~3,500 turns: 1,260 curated memories and ~8,740 record
entries. Texts are role-play memories and lines made from templates (every memory's text distinct). The offline
model embeds a text in about 5–10 ms here, so 100,000 of them would take longer than the benchmark: `--pool`
distinct template texts are embedded (curated memories and lines alike), and a memory gets the vector of its
template text plus a little noise (distinct vectors, an index of the real size; a record entry's context is not
in its vector), added in bulk through `MemoryStore.add_memories(..., embeddings=...)`. A curated memory's text is
its template text plus its day, a record entry's its line with the lines before it, so BM25 sees distinct
documents.

Measured, in one process:
- latency: `--retrievals` calls of `nodes.rules.retrieval.retrieve` with the turn's defaults (`RetrievalConfig()`:
  scene weights, found memories marked as mentioned), round-robin over the instances, each on one instance,
  each with a new query text (its embedding is part of the time). p50 / p95 (nearest rank) of the whole call and
  of its steps (`RetrievalResult.timings_ms`). Goal: p95 ≤ 30 ms (seed 004 asks for < 100 ms).
- retrieval right after an insert into the same instance (what a turn's retrieval pays after the previous turn
  stored a memory): the write applies itself to the process's kept keyword index (`stores.memory_index`), so
  the retrieval finds it current; `--after-insert` pairs.
- memory: the process's resident set (VmRSS of /proc/self/status) after the warm-up (the product's own,
  `stores.warmup.warm_up`, then one retrieval per instance), after the retrievals and after `--inserts` single `add_memory` calls (each embedding its text),
  as growth over the baseline. Goal: < 5 %.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from personalab.evals.data_dir import data_folder
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.memory_layers import Layer, LayerConfig
from personalab.nodes.rules.retrieval import RetrievalConfig, retrieve

GOAL_P95_MS = 30.0
SEED_004_MS = 100.0
GOAL_GROWTH = 0.05
ADD_BATCH = 5_000
NOISE = 0.004  # per dimension: a pooled vector stays ~0.99 cosine from its text's own
STEPS = ("embed", "bm25", "vector", "load", "score", "mark")

WHO = ["我", "莱姆", "白小喵", "老陈", "雷娜", "商队首领", "酒馆老板", "巡逻兵", "小女孩", "神秘旅人"]
PLACES = ["废弃加油站", "旧城区的地下通道", "北边的净水厂", "黑市", "帮派据点", "辐射区边缘", "老仓库", "铁轨桥下"]
DEEDS = ["找到了", "弄丢了", "藏起了", "交换了", "修好了", "送出了", "偷走了", "买下了"]
THINGS = ["一封信", "一箱弹药", "净水片", "旧地图", "叛徒的名单", "发电机零件", "药品", "无线电", "一把钥匙", "罐头"]
FEELINGS = ["心里很不安", "松了一口气", "觉得有人在跟踪", "决定以后小心点", "很开心", "有点后悔"]
QUERIES = [
    "你还记得{place}那次吗？",
    "{thing}后来怎么样了？",
    "{who}是不是在{place}出现过？",
    "我们什么时候去过{place}？",
    "谁{deed}{thing}？",
    "上次在{place}发生了什么",
]
REPLIES = [
    "{place}？那里不安全，但我跟你去。",
    "{thing}我已经藏好了，放心。",
    "我在{place}见过{who}的记号。",
    "{who}拿走了{thing}，我亲眼看见的。",
    "走吧，天快黑了，{place}晚上更危险。",
    "别担心{thing}，{who}会帮我们的。",
]
LINES_PER_TURN = 2.5  # the user's line and one or two of the character's
CURATED_LAYERS = [(layer.value, LayerConfig().policy(layer).capacity) for layer in Layer]  # shallowest first
TYPES = ["event", "conversation", "action", "observation", "emotion", "relationship"]


def memory_text(rng: random.Random) -> str:
    return (
        f"{rng.choice(WHO)}在{rng.choice(PLACES)}{rng.choice(DEEDS)}{rng.choice(THINGS)}，"
        f"{rng.choice(WHO)}{rng.choice(FEELINGS)}。"
    )


def query_text(rng: random.Random, serial: int) -> str:
    """A question about the memories; the serial keeps every query text (and so its embedding) new."""
    template = rng.choice(QUERIES)
    text = template.format(
        place=rng.choice(PLACES), thing=rng.choice(THINGS), who=rng.choice(WHO), deed=rng.choice(DEEDS)
    )
    return f"{text}（第{serial}次问）"


def rss_kib() -> int:
    """The process's resident set now (VmRSS); where /proc is missing, the peak (ru_maxrss)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile (`share` in (0, 1])."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _instances(url: str, count: int) -> list[int]:
    from personalab.stores.db import session_scope
    from personalab.stores.saves import create_role, create_save

    ids = []
    with session_scope(url) as session:
        for n in range(count):
            role = create_role(session, f"角色{n + 1}")
            ids.append(int(create_save(session, role.id, None, title=f"bench {n + 1}").id))  # type: ignore[arg-type]
    return ids


def reply_text(rng: random.Random) -> str:
    return rng.choice(REPLIES).format(place=rng.choice(PLACES), thing=rng.choice(THINGS), who=rng.choice(WHO))


def curated_count(memories: int) -> int:
    """How many of an instance's `memories` are curated in a play-through (module docstring): one a turn beside
    its LINES_PER_TURN record entries, at most the layers' capacities."""
    return min(round(memories / (1 + LINES_PER_TURN)), sum(capacity for _, capacity in CURATED_LAYERS))


def curated_layers(count: int) -> list[str]:
    """The layers of `count` curated memories, oldest first: the newest fill the shallowest layer."""
    layers: list[str] = []
    for layer, capacity in CURATED_LAYERS:
        layers[:0] = [layer] * min(capacity, count - len(layers))
    return ["archive"] * (count - len(layers)) + layers


def play_through(rng: random.Random, count: int, character: str, user_lines: list[str], replies: list[str]) -> Any:
    """An instance's `count` memories as a play-through leaves them (module docstring): (items, the pool text of
    each item, for its vector)."""
    from personalab.nodes.rules.importance import estimate_importance
    from personalab.nodes.rules.record import MIN_RECORD_IMPORTANCE, record_text

    curated = curated_count(count)
    recorded = count - curated
    items: list[dict[str, Any]] = []
    texts: list[str] = []
    before: list[str] = []
    turn, line_id = 0, 0
    while len(items) < recorded:
        turn += 1
        lines = [("用户", rng.choice(user_lines))]
        lines += [(character, rng.choice(replies)) for _ in range(rng.choice((1, 2)))]
        for speaker, text in lines[: recorded - len(items)]:
            line_id += 1
            content = record_text(speaker, text)
            items.append(
                {
                    "content": content,
                    "context": "\n".join(before[-2:]),
                    "type": "record",
                    "layer": "record",
                    "importance": max(MIN_RECORD_IMPORTANCE, _importance(text, estimate_importance)),
                    "turn": turn,
                    "line_id": line_id,
                }
            )
            texts.append(text)
            before.append(content)
    turns = max(turn, 1)
    for position, layer in enumerate(curated_layers(curated)):
        # one memory of every few turns, the newest of the last turn
        at = max(1, turns - (curated - 1 - position) * turns // max(curated, 1))
        text = rng.choice(user_lines)
        items.append(
            {
                "content": f"第{at // 20 + 1}天：{text}",
                "type": rng.choice(TYPES),
                "layer": layer,
                "importance": round(rng.random(), 2),
                "tags": [rng.choice(THINGS)] if rng.random() < 0.1 else [],
                "turn": at,
            }
        )
        texts.append(text)
    return items, texts


_importances: dict[str, float] = {}


def _importance(text: str, estimate: Any) -> float:
    if text not in _importances:
        _importances[text] = float(estimate(text).importance)
    return _importances[text]


def build_fixture(store: Any, url: str, memories: int, instances: int, pool: int) -> dict[str, Any]:
    """The instances and their memories (module docstring); returns the instance ids, the counts and the build
    times."""
    from personalab.stores.embeddings import get_embeddings

    rng = random.Random(11)
    started = time.perf_counter()
    # the pool: the user's lines (also the curated memories' texts) and the character's, each text once
    user_lines = list(dict.fromkeys(memory_text(rng) for _ in range(pool * 3)))[: max(1, pool - pool // 4)]
    replies = list(dict.fromkeys(reply_text(rng) for _ in range(pool * 3)))[: max(1, pool // 4)]
    distinct = user_lines + replies
    base = np.asarray(get_embeddings().embed_documents(distinct), dtype=np.float64)
    row_of = {text: row for row, text in enumerate(distinct)}
    embed_s = time.perf_counter() - started
    ids = _instances(url, instances)
    noise_rng = np.random.default_rng(5)
    started = time.perf_counter()
    per_instance = [memories // instances + (1 if n < memories % instances else 0) for n in range(instances)]
    record = 0
    for n, (instance, count) in enumerate(zip(ids, per_instance, strict=True)):
        every, texts = play_through(rng, count, f"角色{n + 1}", user_lines, replies)
        record += sum(item["type"] == "record" for item in every)
        for start in range(0, count, ADD_BATCH):
            items = every[start : start + ADD_BATCH]
            picks = [row_of[text] for text in texts[start : start + ADD_BATCH]]
            vectors = base[picks] + noise_rng.normal(0.0, NOISE, size=(len(items), base.shape[1]))
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            store.add_memories(instance, items, embeddings=vectors)
    return {
        "instances": ids,
        "distinct": len(distinct),
        "record": record,
        "embed_s": embed_s,
        "store_s": time.perf_counter() - started,
    }


def existing_fixture(url: str) -> dict[str, Any] | None:
    """The fixture an earlier run left in `--data-dir` (its instances, memories and record entries), or None: a
    second run there measures again without building 100,000 memories anew (e.g. two versions of the code, runs
    alternating; the earlier runs' mention marks and inserts stay)."""
    from personalab.nodes.rules.memory_layers import MemoryType
    from personalab.stores.db import session_scope
    from personalab.stores.memory_tables import MemoryEntry
    from personalab.stores.tables import Save
    from sqlalchemy import func
    from sqlmodel import col, select

    with session_scope(url) as session:
        saves = session.exec(select(Save.id).where(col(Save.title).startswith("bench ")).order_by(col(Save.id)))
        ids = [int(i) for i in saves if i is not None]
        if not ids:
            return None
        counted = select(func.count()).select_from(MemoryEntry).where(col(MemoryEntry.instance_id).in_(ids))
        memories = int(session.exec(counted).one())
        record = int(session.exec(counted.where(MemoryEntry.type == MemoryType.RECORD.value)).one())
    return {"instances": ids, "memories": memories, "record": record}


def run(args: argparse.Namespace) -> int:
    for name in ("memories", "instances", "pool", "retrievals"):
        if getattr(args, name) < 1:
            raise InvalidInput(f"--{name} must be at least 1, got {getattr(args, name)}")
    for name in ("inserts", "after_insert"):
        if getattr(args, name) < 0:
            raise InvalidInput(f"--{name.replace('_', '-')} must not be negative, got {getattr(args, name)}")
    if args.book_entries > 0 and (args.instances < 2 or args.book_turns < 2):
        raise InvalidInput("--book-entries needs --instances of at least 2 and --book-turns of at least 2")
    if args.memories < args.instances:
        raise InvalidInput(f"--memories ({args.memories}) must be at least --instances ({args.instances})")
    with data_folder(args.data_dir, "personalab-bench-retrieval-") as data:
        from personalab.stores.db import dispose_engines

        try:
            _measure(args, data)
        finally:
            dispose_engines()
    return 0


def _measure(args: argparse.Namespace, data: Path) -> None:
    from personalab.stores.memory import MemoryStore

    url = f"sqlite:///{data / 'personalab.db'}"
    store = MemoryStore(db_url=url, chroma_path=str(data / "chroma"))
    kept = existing_fixture(url) if (data / "personalab.db").exists() else None
    if kept is not None:
        instances: list[int] = kept["instances"]
        print(
            f"bench retrieval: {kept['memories']:,} memories over {len(instances)} instances "
            f"({kept['record']:,} of them dialogue-record entries, the rest curated), the fixture of an earlier run "
            f"kept in {data}"
        )
    else:
        fixture = build_fixture(store, url, args.memories, args.instances, args.pool)
        instances = fixture["instances"]
        print(
            f"bench retrieval: {args.memories:,} memories over {len(instances)} instances "
            f"({fixture['record']:,} of them dialogue-record entries, the rest curated); "
            f"{fixture['distinct']:,} distinct texts embedded, each memory's vector = its text's + noise "
            f"(σ {NOISE} per dimension), bulk-added with MemoryStore.add_memories(embeddings=...)"
        )
        print(
            f"  fixture: embedding {fixture['embed_s']:.1f} s, store {fixture['store_s']:.1f} s "
            f"({1000 * fixture['store_s'] / args.memories:.2f} ms per memory); data dir {data}"
        )
    per = sum(store.count(instance) for instance in instances) // len(instances)

    rng = random.Random(23)
    serial = 0
    config = RetrievalConfig()

    def one(instance: int) -> tuple[float, dict[str, float]]:
        nonlocal serial
        serial += 1
        started = time.perf_counter()
        result = retrieve(store, instance, query_text(rng, serial), config=config)
        return (time.perf_counter() - started) * 1000, dict(result.timings_ms)

    # warm-up: what a product process loads at its start (`stores.warmup`: jieba's dictionary and IDF table, the
    # embedding model, the Chroma client), then each instance's BM25 index and Chroma collection. Without the first,
    # the IDF table came in with the first insert and counted as the inserts' growth (issue 26)
    from personalab.stores.warmup import warm_up

    warm_up(str(data / "chroma"))
    for instance in instances:
        one(instance)
    gc.collect()
    baseline = rss_kib()

    totals: list[float] = []
    steps: dict[str, list[float]] = {step: [] for step in STEPS}
    for n in range(args.retrievals):
        elapsed, timings = one(instances[n % len(instances)])
        totals.append(elapsed)
        for step in STEPS:
            if step in timings:
                steps[step].append(timings[step])
    gc.collect()
    after_retrievals = rss_kib()

    insert_ms: list[float] = []
    for n in range(args.inserts):
        started = time.perf_counter()
        store.add_memory(instances[n % len(instances)], f"{memory_text(rng)}（新记忆{n}）", type="event")
        insert_ms.append((time.perf_counter() - started) * 1000)
    gc.collect()
    after_inserts = rss_kib()

    after_insert: list[float] = []
    for n in range(args.after_insert):
        instance = instances[n % len(instances)]
        store.add_memory(instance, f"{memory_text(rng)}（刚写入{n}）", type="event")
        after_insert.append(one(instance)[0])

    print(
        f"retrieval on one instance (~{per:,} memories; its own Chroma collection and BM25 index), query "
        f"embedding included, RetrievalConfig() (scene weights, marks mentioned): {len(totals):,} retrievals"
    )
    print(f"  {'':<22}{'p50 ms':>8}{'p95 ms':>8}{'max ms':>8}")
    print(f"  {'total':<22}{percentile(totals, 0.5):8.1f}{percentile(totals, 0.95):8.1f}{max(totals):8.1f}")
    for step in STEPS:
        if steps[step]:
            values = steps[step]
            print(f"  {step:<22}{percentile(values, 0.5):8.1f}{percentile(values, 0.95):8.1f}{max(values):8.1f}")
    p95 = percentile(totals, 0.95)
    print(
        f"goal: p95 at most {GOAL_P95_MS:.0f} ms: {p95:.1f} ms — {'met' if p95 <= GOAL_P95_MS else 'NOT met'} "
        f"(seed 004: under {SEED_004_MS:.0f} ms — {'met' if p95 < SEED_004_MS else 'NOT met'})"
    )
    if insert_ms:
        print(
            f"insert (add_memory, its embedding included): p50 {percentile(insert_ms, 0.5):.1f} ms, "
            f"p95 {percentile(insert_ms, 0.95):.1f} ms over {len(insert_ms):,}"
        )
    if after_insert:
        print(
            f"retrieval right after an insert into its instance (keyword index updated by the write): "
            f"p50 {percentile(after_insert, 0.5):.1f} ms, p95 {percentile(after_insert, 0.95):.1f} ms "
            f"over {len(after_insert):,}"
        )

    def growth(value: int) -> str:
        return f"{value / 1024:,.1f} MiB ({100 * (value - baseline) / baseline:+.1f} %)"

    print(
        f"memory (RSS): baseline {baseline / 1024:,.1f} MiB after the warm-up; after {len(totals):,} retrievals "
        f"{growth(after_retrievals)}; after {args.inserts:,} more inserts {growth(after_inserts)}"
    )
    worst = max(after_retrievals, after_inserts) - baseline
    print(
        f"goal: growth under {100 * GOAL_GROWTH:.0f} %: {100 * worst / baseline:+.1f} % — "
        f"{'met' if worst < GOAL_GROWTH * baseline else 'NOT met'}"
    )
    if args.book_entries > 0:  # issue 28: a turn's whole retrieval with a big world book on this store
        from personalab.evals.bench_bigbook import book_figures, report

        total = sum(store.count(instance) for instance in instances)
        figures = book_figures(data, instances[:2], args.book_entries, args.book_turns, args.history_turns)
        report(figures, per, total, args.history_turns)
