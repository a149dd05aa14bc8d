"""`personalab bench retrieval`: memory retrieval latency on a large store, and the process's memory growth.

Fixture (in a temporary data directory unless `--data-dir`): `--memories` memories spread evenly over
`--instances` instances (each a role's save), in the store's own layout — the database, one Chroma collection
per instance and character, one BM25 index per instance built on first use. Texts are role-play memories made
from templates (every one distinct). The offline model embeds a memory in about 5–10 ms here, so 100,000 of
them would take longer than the benchmark: `--pool` distinct template texts are embedded, and a memory gets the
vector of its template text plus a little noise (distinct vectors, an index of the real size), added in bulk
through `MemoryStore.add_memories(..., embeddings=...)`. Its text is the template text plus its day, so BM25
sees distinct documents.

Measured, in one process:
- latency: `--retrievals` calls of `nodes.retrieval.retrieve` with the turn's defaults (`RetrievalConfig()`:
  scene weights, found memories marked as mentioned), round-robin over the instances, each on one instance,
  each with a new query text (its embedding is part of the time). p50 / p95 (nearest rank) of the whole call and
  of its steps (`RetrievalResult.timings_ms`). Goal: p95 ≤ 30 ms (seed 004 asks for < 100 ms).
- retrieval right after an insert into the same instance (what a turn's retrieval pays after the previous turn
  stored a memory): the write applies itself to the process's kept keyword index (`stores.memory_index`), so
  the retrieval finds it current; `--after-insert` pairs.
- memory: the process's resident set (VmRSS of /proc/self/status) after the warm-up (one retrieval per
  instance), after the retrievals and after `--inserts` single `add_memory` calls (each embedding its text),
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
LAYERS = ["active", "situational", "event_log", "archive"]
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


def build_fixture(store: Any, url: str, memories: int, instances: int, pool: int) -> dict[str, Any]:
    """The instances and their memories (module docstring); returns the instance ids and the build times."""
    from personalab.stores.embeddings import get_embeddings

    rng = random.Random(11)
    started = time.perf_counter()
    distinct = list(dict.fromkeys(memory_text(rng) for _ in range(pool * 3)))[:pool]
    base = np.asarray(get_embeddings().embed_documents(distinct), dtype=np.float64)
    embed_s = time.perf_counter() - started
    ids = _instances(url, instances)
    noise_rng = np.random.default_rng(5)
    started = time.perf_counter()
    per_instance = [memories // instances + (1 if n < memories % instances else 0) for n in range(instances)]
    for instance, count in zip(ids, per_instance, strict=True):
        for start in range(0, count, ADD_BATCH):
            size = min(ADD_BATCH, count - start)
            picks = [rng.randrange(len(distinct)) for _ in range(size)]
            items = []
            for offset, pick in enumerate(picks):
                turn = start + offset
                tags = [rng.choice(THINGS)] if rng.random() < 0.1 else []
                items.append(
                    {
                        "content": f"第{turn // 20 + 1}天：{distinct[pick]}",
                        "type": rng.choice(TYPES),
                        "layer": rng.choice(LAYERS),
                        "importance": round(rng.random(), 2),
                        "tags": tags,
                        "turn": turn,
                    }
                )
            vectors = base[picks] + noise_rng.normal(0.0, NOISE, size=(size, base.shape[1]))
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            store.add_memories(instance, items, embeddings=vectors)
    return {"instances": ids, "distinct": len(distinct), "embed_s": embed_s, "store_s": time.perf_counter() - started}


def run(args: argparse.Namespace) -> int:
    for name in ("memories", "instances", "pool", "retrievals"):
        if getattr(args, name) < 1:
            raise InvalidInput(f"--{name} must be at least 1, got {getattr(args, name)}")
    for name in ("inserts", "after_insert"):
        if getattr(args, name) < 0:
            raise InvalidInput(f"--{name.replace('_', '-')} must not be negative, got {getattr(args, name)}")
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
    fixture = build_fixture(store, url, args.memories, args.instances, args.pool)
    instances: list[int] = fixture["instances"]
    print(
        f"bench retrieval: {args.memories:,} memories over {len(instances)} instances; "
        f"{fixture['distinct']:,} distinct texts embedded, each memory's vector = its text's + noise "
        f"(σ {NOISE} per dimension), bulk-added with MemoryStore.add_memories(embeddings=...)"
    )
    print(
        f"  fixture: embedding {fixture['embed_s']:.1f} s, store {fixture['store_s']:.1f} s "
        f"({1000 * fixture['store_s'] / args.memories:.2f} ms per memory); data dir {data}"
    )

    rng = random.Random(23)
    serial = 0
    config = RetrievalConfig()

    def one(instance: int) -> tuple[float, dict[str, float]]:
        nonlocal serial
        serial += 1
        started = time.perf_counter()
        result = retrieve(store, instance, query_text(rng, serial), config=config)
        return (time.perf_counter() - started) * 1000, dict(result.timings_ms)

    for instance in instances:  # warm-up: the model, each instance's BM25 index and Chroma collection
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

    per = args.memories // len(instances)
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
