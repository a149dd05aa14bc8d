"""`personalab bench turn`: where a turn's time goes on a long-lived instance, the model's time set apart.

Fixture (in a temporary data directory unless `--data-dir`): the sample instance with a `--history-turns`
dialogue in its tree (user line + one or two character lines per turn, one chain, `save.last_message_id` at
the leaf), `--events` archived events in Chroma (one collection per story) — one per history turn for this
instance, the rest spread over nine other instances (half of them the same character and background, so the
director's "other stories" layer has candidates); this instance's ones are also its long-term memories (what the
turn's retrieval searches) — and the instance's checkpoint moved to the history's last
turn with a plot state in the middle of the outline.

Event vectors: the offline model embeds a 100-character event text in about 10 ms here, so 10,000 of them
would take longer than the benchmark. By default `--event-pool` distinct texts are embedded and every event
gets the vector of one of them plus a little noise (distinct vectors, an index of the real size); with
`--event-pool 0` every event text is embedded. Either way the events go in through `Chroma.add_texts`.

Measured: `--turns` turns through `graph.runner.run_turn` with the offline scripted model, in one process,
the first one a warm-up left out of the figures. What each turn queues for after it (the event and memory
writes, keyword-index updates, the director's next search) is flushed between turns, outside the timings (a person
takes longer than that to answer); with `--back-to-back` it is not, and the next turn's retrieval waits for it
(read your writes: the row `wait for own writes`, part of rag_retrieve's time). Per node, p50 / p95 (nearest rank)
over the turns the node ran in, of
- own: the node's run, from LangChain's callbacks (start → end of the node's run);
- step: `run_turn`'s `debug.timings_ms`, the time between two stream updates — the node plus the framework's
  work before it (for `history_fetch`: the graph's start, loading the checkpoint).
Then per turn: `framework` = the whole turn minus the time some node was running (checkpoint reads and writes, task
scheduling, the final state read), the whole turn (`debug.total_ms`), the turn without `generate` (the
model's node; the goal of seed 002 技术约束 — at most 100 ms at p95 — is checked on this one), the turn
without the chat-model calls themselves (prompt assembly stays in), and the garbage collector's pauses.
Memory (issue 29: RSS growth over 1,000 back-to-back turns under 5 %): the process's resident set after the warm-up
turn and after the last one, its growth in per cent, and its peak over the sampled turns (every `RSS_EVERY`th):
`bench turn --back-to-back --turns 1001` is the issue's figure. The first reading follows a release of the freed
memory (`stores.allocator.release_freed_memory`, which the running process makes every
`PERSONALAB_RELEASE_MEMORY_EVERY_S` while it writes): the fixture's build freed much, and the process would
return it within that period, so counting it in the baseline would hide growth; the last reading is as it comes.
For a profile of all threads: `py-spy record -o turn.svg -- personalab bench turn`.

Consolidation (issue 26): with `--facts N` one turn in N also tells where the user lives now ("我搬到成都了。", a city
that changes: the consolidation's update, the old fact closed); `writes after the turn` is the time the flush between
turns waits for the turn's queued writes (and the director's next search). With `--compare-consolidation` the turns
alternate, in blocks of N (one fact turn each; one turn without `--facts`), between consolidation off and on, on the
same instance in the same process (the machine's load alike for both); then per side p50 / p95 of the turn without
the model, of the writes after it and of the fact turns' writes, the ratio on / off at p95 (issue 26's goal: at
most 1.1) and the consolidation's own cost: the fact turns' writes on minus off (medians), and that per turn.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import math
import os
import random
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any
from uuid import UUID

import numpy as np
from langchain_chroma import Chroma
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.embeddings import Embeddings
from langchain_core.tracers.context import register_configure_hook
from personalab.evals.bench_retrieval import rss_kib
from personalab.evals.data_dir import data_folder
from personalab.graph.runner import create_sample_instance, load_sample, run_turn, turn_config, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.director import turn_event_text
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.plot import new_plot_state
from personalab.nodes.rules.types import PlotState
from personalab.stores.allocator import release_freed_memory
from personalab.stores.background import flush_event_writes
from personalab.stores.db import dispose_engines, session_scope
from personalab.stores.embeddings import get_embeddings
from personalab.stores.events import story_collection
from personalab.stores.memory import MemoryStore
from personalab.stores.saves import get_save
from personalab.stores.tables import Line, Role
from personalab.stores.vectors import chroma_client
from sqlalchemy import func, insert
from sqlmodel import select

GOAL_MS = 100.0
MODEL_NODE = "generate"
OTHER_INSTANCES = 9
ADD_BATCH = 2000  # under Chroma's maximum batch size
NOISE = 0.004  # per dimension: pooled vectors stay ~0.99 cosine from their text's own
RSS_EVERY = 50  # turns between two samples of the resident set
RSS_GOAL_PERCENT = 5.0

PLACES = ["废弃加油站", "旧城区的地下通道", "北边的净水厂", "黑市", "帮派据点外围", "辐射区边缘", "老仓库", "铁轨桥下"]
THINGS = ["那封信", "弹药", "净水片", "旧地图", "叛徒的名单", "发电机零件", "药品", "无线电"]
USER_TEMPLATES = [
    "我们去{place}看看吧，也许能找到{thing}。",
    "你还记得{place}那次吗？",
    "{thing}还剩多少？我们撑不了太久了。",
    "我总觉得{place}有人在盯着我们。",
    "今晚就在{place}过夜，你守上半夜？",
    "如果叛徒就在{place}，你会怎么做？",
    "把{thing}收好，别让别人看见。",
    "雷娜，你为什么一直跟着我？",
]
REPLY_TEMPLATES = [
    "{place}？那里不安全，但我跟你去。",
    "{thing}我已经藏好了，放心。",
    "别多想，先活下去再说。",
    "我在{place}见过那伙人的记号。",
    "你要是倒下了，谁来替兄弟们讨债？",
    "……我不会再让任何人背叛你。",
    "走吧，天快黑了，{place}晚上更危险。",
]
EMOTIONS = ["平静", "担心", "警惕", "难为情", "愤怒", "开心", None]
ACTIONS = ["握紧了枪", "看向远处", "压低声音", "拍了拍你的肩", None, None]


CITIES = ["北京", "上海", "广州", "成都", "杭州", "西安", "重庆", "南京"]
RATIO_GOAL = 1.1  # issue 26: the turn without the model with consolidation on, at p95, over off


def fact_sentence(rng: random.Random, previous: str | None) -> tuple[str, str]:
    """Where the user lives now, another city than `previous`: the sentence a fact turn adds, and the city."""
    city = rng.choice([c for c in CITIES if c != previous])
    return f"我搬到{city}了。", city


def _fill(rng: random.Random, template: str) -> str:
    return template.format(place=rng.choice(PLACES), thing=rng.choice(THINGS))


def synthetic_turn(rng: random.Random) -> tuple[str, list[dict[str, Any]]]:
    """One turn of play: the user's message and one or two character lines."""
    message = _fill(rng, rng.choice(USER_TEMPLATES))
    replies = []
    for _ in range(rng.choice((1, 2))):
        replies.append(
            {
                "original_emotion": rng.choice(EMOTIONS),
                "content": _fill(rng, rng.choice(REPLY_TEMPLATES)),
                "tts_content": "わかった" if rng.random() < 0.2 else None,
                "action_content": rng.choice(ACTIONS),
            }
        )
    return message, replies


def _reply_text(replies: Sequence[dict[str, Any]]) -> str:
    return "".join(
        (f"【{r['original_emotion']}】" if r["original_emotion"] else "")
        + r["content"]
        + (f"({r['action_content']})" if r["action_content"] else "")
        for r in replies
    )


def build_history(instance_id: int, turns: int, seed: int = 11) -> list[tuple[str, str]]:
    """Bulk-insert `turns` turns as one chain under the instance's leaf; returns (message, reply) per turn."""
    rng = random.Random(seed)
    played: list[tuple[str, str]] = []
    with session_scope() as session:
        save = get_save(session, instance_id)
        role = session.get(Role, save.role_id)
        name = role.name if role else "角色"
        next_id = (session.exec(select(func.max(Line.id))).one() or 0) + 1
        parent = save.last_message_id
        rows: list[dict[str, Any]] = []
        for _ in range(turns):
            message, replies = synthetic_turn(rng)
            own = [{**r, "attribute": "assistant", "role_id": save.role_id, "display_name": name} for r in replies]
            for line in [{"attribute": "user", "content": message}, *own]:
                rows.append({**line, "id": next_id, "save_id": instance_id, "parent_line_id": parent})
                parent = next_id
                next_id += 1
            played.append((message, _reply_text(replies)))
        for start in range(0, len(rows), 5000):
            session.execute(insert(Line), rows[start : start + 5000])
        save.last_message_id = parent
        session.add(save)
    return played


class PooledEmbeddings(Embeddings):
    """Vectors looked up by text (the fixture's precomputed ones); a query is never embedded with it."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = vectors

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vectors[text] for text in texts]

    def embed_query(self, text: str) -> list[float]:
        raise NotImplementedError("fixture embeddings only hold the event texts")


def event_rows(
    instance_id: int,
    character: tuple[int, int, str],
    played: Sequence[tuple[str, str]],
    count: int,
) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, text, metadata) of `count` events: one per played turn of this instance, the rest elsewhere.
    `character` is (character id, background id, character name) of the instance."""
    character_id, background_id, name = character
    rows = []
    for turn, (message, reply) in enumerate(played[:count], start=1):
        text = turn_event_text(turn, "用户", message, name, reply)
        meta = {"instance_id": instance_id, "character_id": character_id, "background_id": background_id, "turn": turn}
        rows.append((f"i{instance_id}-t{turn}", text, meta))
    rng = random.Random(23)
    rest = count - len(rows)
    for index in range(rest):
        other = index % OTHER_INSTANCES
        same_story = other % 2 == 0
        turn = index // OTHER_INSTANCES + 1
        message, replies = synthetic_turn(rng)
        meta = {
            "instance_id": -(other + 1),  # no real instance has a negative id
            "character_id": character_id if same_story else character_id + 100,
            "background_id": background_id if same_story else background_id + 100,
            "turn": turn,
        }
        text = turn_event_text(turn, "用户", message, name, _reply_text(replies))
        rows.append((f"i{meta['instance_id']}-t{turn}", text, meta))
    return rows


def add_events(rows: Sequence[tuple[str, str, dict[str, Any]]], pool: int, instance_id: int) -> None:
    """Add the events to their stories' collections (the director's archive) and this instance's ones to its
    long-term memory (the turn's retrieval); `pool` > 0: pooled vectors with noise (module doc)."""
    mine = [(index, text, meta) for index, (_, text, meta) in enumerate(rows) if meta["instance_id"] == instance_id]
    memories = [{"content": text, "type": "event", "turn": meta["turn"]} for _, text, meta in mine]
    embeddings: Any = get_embeddings()
    if pool <= 0:
        MemoryStore().add_memories(instance_id, memories)
    else:
        distinct = [text for _, text, _ in rows[:pool]]
        base = np.asarray(get_embeddings().embed_documents(distinct), dtype=np.float64)
        noise = np.random.default_rng(5).normal(0.0, NOISE, size=(len(rows), base.shape[1]))
        vectors = base[np.arange(len(rows)) % len(distinct)] + noise
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        MemoryStore().add_memories(instance_id, memories, embeddings=vectors[[index for index, _, _ in mine]])
        embeddings = PooledEmbeddings({text: vectors[i].tolist() for i, (_, text, _) in enumerate(rows)})
    stories: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for row in rows:
        stories.setdefault(story_collection(row[2]["character_id"], row[2]["background_id"]), []).append(row)
    for name, story_rows in stories.items():
        store = Chroma(
            collection_name=name,
            embedding_function=embeddings,
            client=chroma_client(),
            collection_metadata={"hnsw:space": "cosine"},
        )
        for start in range(0, len(story_rows), ADD_BATCH):
            batch = story_rows[start : start + ADD_BATCH]
            store.add_texts([t for _, t, _ in batch], metadatas=[m for _, _, m in batch], ids=[i for i, _, _ in batch])


def mid_story_plot(outline: Sequence[str], turn: int) -> PlotState:
    """A plot state halfway through the outline whose last marker came on `turn`."""
    plot = new_plot_state(outline)
    current = max(1, len(outline) // 2)
    for point in plot["story_outline"]:
        point["status"] = "completed" if point["index"] < current else "pending"
    plot["story_outline"][current - 1]["status"] = "in_progress"
    plot["current_plot_index"] = current
    plot["last_progress_turn"] = turn
    return plot


def nearest_rank(values: Sequence[float], percent: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


class NodeTimer(BaseCallbackHandler):
    """Start and end of every node run and every chat-model call of the current turn, from LangChain's
    callbacks (they fire in the graph's worker threads; appends and dict writes are atomic)."""

    def __init__(self) -> None:
        self.root: UUID | None = None
        self.open: dict[UUID, tuple[str, float]] = {}
        self.nodes: dict[str, float] = {}
        self.intervals: list[tuple[float, float]] = []
        self.model_ms = 0.0

    def busy_ms(self) -> float:
        """Wall time during which at least one node ran (nodes of one superstep run side by side)."""
        busy, end = 0.0, float("-inf")
        for start, stop in sorted(self.intervals):
            if stop > end:
                busy += stop - max(start, end)
                end = stop
        return busy * 1000

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        if parent_run_id is None:
            self.root = run_id
        elif parent_run_id == self.root and kwargs.get("name") == (kwargs.get("metadata") or {}).get("langgraph_node"):
            self.open[run_id] = (str(kwargs["name"]), time.perf_counter())

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id in self.open:
            name, start = self.open.pop(run_id)
            stop = time.perf_counter()
            self.nodes[name] = self.nodes.get(name, 0.0) + (stop - start) * 1000
            self.intervals.append((start, stop))

    on_chain_error = on_chain_end  # type: ignore[assignment]

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.open[run_id] = ("model", time.perf_counter())

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id in self.open:
            self.model_ms += (time.perf_counter() - self.open.pop(run_id)[1]) * 1000

    on_llm_error = on_llm_end  # type: ignore[assignment]


_timer: ContextVar[NodeTimer | None] = ContextVar("personalab_bench_timer", default=None)
register_configure_hook(_timer, True)  # every run started while the variable is set reports to the timer


class GCPauses:
    """Time spent in the garbage collector (any thread) while active."""

    def __init__(self) -> None:
        self.total_ms = 0.0
        self._start: dict[int, float] = {}

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        now, thread = time.perf_counter(), threading.get_ident()
        if phase == "start":
            self._start[thread] = now
        elif thread in self._start:
            self.total_ms += (now - self._start.pop(thread)) * 1000


class ConsolidationTimer:
    """While entered, times the outbox's consolidation of each `consolidate` row (`stores.outbox._consolidate`: the
    decisions, the steps and the fact rows; the facts' texts go in the batch's one embeddings call, not timed here),
    wall clock and the writer thread's CPU time; `take` returns the sums since the last take (or None)."""

    def __init__(self) -> None:
        self._spent: list[tuple[float, float]] = []

    def __enter__(self) -> ConsolidationTimer:
        from personalab.stores import outbox

        self._real = real = outbox._consolidate

        def timed(store: Any, row: Any, *, vectors_later: bool, guard: Any) -> Any:
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return real(store, row, vectors_later=vectors_later, guard=guard)
            finally:
                self._spent.append(((time.perf_counter() - wall) * 1000, (time.thread_time() - cpu) * 1000))

        outbox._consolidate = timed
        return self

    def __exit__(self, *exc: object) -> None:
        from personalab.stores import outbox

        outbox._consolidate = self._real

    def take(self) -> tuple[float, float] | None:
        spent, self._spent = self._spent, []
        if not spent:
            return None
        return sum(w for w, _ in spent), sum(c for _, c in spent)


def timed_turn(graph: Any, ctx: Context, instance_id: int, message: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """One turn through `run_turn`; returns its final state and a sample of the figures this benchmark prints."""
    timer, gc_pauses = NodeTimer(), GCPauses()
    token = _timer.set(timer)
    gc.callbacks.append(gc_pauses)
    try:
        state = run_turn(graph, ctx, instance_id, message)
    finally:
        gc.callbacks.remove(gc_pauses)
        _timer.reset(token)
    total = float(state["debug"]["total_ms"])
    sample = {
        "own": timer.nodes,
        "step": dict(state["debug"].get("timings_ms") or {}),
        "total": total,
        "framework": total - timer.busy_ms(),
        "without_model_node": total - timer.nodes.get(MODEL_NODE, 0.0),
        "without_model_calls": total - timer.model_ms,
        "gc": gc_pauses.total_ms,
        # read your writes: rag_retrieve's wait for the writes the turns before queued (inside its own time)
        "wait": float((state["debug"].get("retrieval") or {}).get("waited_for_writes_ms") or 0.0),
    }
    return state, sample


def summarize(
    samples: Sequence[dict[str, Any]], order: Sequence[str] = ()
) -> list[tuple[str, list[float], list[float] | None]]:
    """Rows of (label, own times, runner's step times): every node that ran (in `order`, the graph's, then
    any other), then the per-turn figures."""
    rows: list[tuple[str, list[float], list[float] | None]] = []
    seen = {node for sample in samples for node in sample["own"]}
    for node in [*order, *sorted(seen - set(order))]:
        ran = [s for s in samples if node in s["own"]]
        if ran:
            rows.append((node, [s["own"][node] for s in ran], [s["step"].get(node, 0.0) for s in ran]))
    rows.append(("framework", [s["framework"] for s in samples], None))
    rows.append(("total per turn", [s["total"] for s in samples], None))
    rows.append((f"total - {MODEL_NODE}", [s["without_model_node"] for s in samples], None))
    rows.append(("total - model calls", [s["without_model_calls"] for s in samples], None))
    rows.append(("GC pauses (in total)", [s["gc"] for s in samples], None))
    rows.append(("wait for own writes", [s.get("wait", 0.0) for s in samples], None))
    return rows


def checkpoint_size(graph: Any, instance_id: int) -> tuple[int, dict[str, int], int]:
    """Bytes of the instance's latest checkpoint as serialized, of its biggest channels, and the number of
    checkpoints the thread has."""
    saver = graph.checkpointer
    config = turn_config(instance_id)
    latest = saver.get_tuple(config)
    if latest is None:
        return 0, {}, 0
    channels = {
        name: len(saver.serde.dumps_typed(value)[1]) for name, value in latest.checkpoint["channel_values"].items()
    }
    biggest = dict(sorted(channels.items(), key=lambda item: -item[1])[:4])
    return len(saver.serde.dumps_typed(latest.checkpoint)[1]), biggest, sum(1 for _ in saver.list(config))


@contextmanager
def bench_environment(data_dir: Path) -> Iterator[None]:
    """The embedded SQLite and Chroma of `data_dir`, the offline scripted model; the old environment after."""
    keys = ("PERSONALAB_DATA_DIR", "PERSONALAB_DATABASE_URL", "PERSONALAB_CHROMA_HOST", "PERSONALAB_LLM")
    saved = {key: os.environ.get(key) for key in keys}
    os.environ["PERSONALAB_DATA_DIR"] = str(data_dir)
    os.environ["PERSONALAB_LLM"] = "scripted"
    os.environ.pop("PERSONALAB_DATABASE_URL", None)
    os.environ.pop("PERSONALAB_CHROMA_HOST", None)
    try:
        yield
    finally:
        flush_event_writes()
        dispose_engines()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _ms(values: Sequence[float] | None) -> str:
    if not values:
        return f"{'':>9}{'':>9}"
    return f"{nearest_rank(values, 50):>9.1f}{nearest_rank(values, 95):>9.1f}"


def measure(args: argparse.Namespace, data_dir: Path) -> int:
    started = time.perf_counter()
    instance_id = create_sample_instance()
    with session_scope() as session:
        save = get_save(session, instance_id)
        role = session.get(Role, save.role_id)
        character = (save.role_id or -1, save.background_id or -1, role.name if role else "角色")
    played = build_history(instance_id, args.history_turns)
    history_s = time.perf_counter() - started
    rows = event_rows(instance_id, character, played, args.events)
    add_events(rows, args.event_pool, instance_id)
    fixture_s = time.perf_counter() - started
    mine = sum(1 for _, _, meta in rows if meta["instance_id"] == instance_id)

    consolidations = ConsolidationTimer()
    rng = random.Random(97)
    facts_rng = random.Random(41)  # its own stream: the synthetic turns stay those of a run without --facts
    block = max(args.facts, 1)
    city: str | None = None
    samples: list[dict[str, Any]] = []
    rss: list[int] = []  # KiB: after the warm-up turn, every RSS_EVERY turns, after the last turn
    quiet = logging.getLogger("nodes")  # the scripted model's deliberate bad markers would be logged each cycle
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with turn_graph(Context()) as (graph, ctx), consolidations:
            outline = load_sample("wasteland.json")["background"]["outline"]
            graph.update_state(
                turn_config(instance_id),
                {"turn": args.history_turns, "plot_state": mid_story_plot(outline, args.history_turns)},
                as_node="maintenance",
            )
            for index in range(args.turns):
                message, _ = synthetic_turn(rng)
                fact = args.facts > 0 and index % args.facts == 0
                if fact:
                    told, city = fact_sentence(facts_rng, city)
                    message += told
                # the compared sides alternate by blocks (one fact turn in each): the off side first
                on = (index // block) % 2 == 1 if args.compare_consolidation else ctx.consolidation
                turn_ctx = dataclasses.replace(ctx, consolidation=on)
                state, sample = timed_turn(graph, turn_ctx, instance_id, message)
                if state.get("error"):
                    raise RuntimeError(f"turn {index + 1} failed: {state['error']}")
                sample.update(consolidation=on, fact=fact)
                if not args.back_to_back:
                    flushed = time.perf_counter()
                    flush_event_writes()
                    sample["writes"] = (time.perf_counter() - flushed) * 1000
                    sample["consolidate"] = consolidations.take()
                if index > 0:  # the first turn warms caches up
                    samples.append(sample)
                if index == 0:
                    release_freed_memory()  # the baseline without the fixture's freed memory (see the docstring)
                if index == 0 or index % RSS_EVERY == 0 or index == args.turns - 1:
                    rss.append(rss_kib())
            size, channels, stored = checkpoint_size(graph, instance_id)
            order = [node for node in graph.nodes if not node.startswith("__")]
    finally:
        quiet.setLevel(level)

    pool = "every event embedded" if args.event_pool <= 0 else f"{min(args.event_pool, len(rows))} texts embedded"
    print(
        f"turn benchmark: {args.history_turns:,}-turn history, {args.events:,} archived events "
        f"({mine:,} of this instance), {len(samples)} measured turns (+1 warm-up)"
    )
    print(f"  data dir {data_dir}; fixture built in {fixture_s:.1f} s (history {history_s:.1f} s; {pool})")
    print(f"  model: {state.get('model')}")
    print("  own = the node's run; step = run_turn's timings_ms (the node + the framework's work before it)")
    print(f"  {'':<22}{'':>5}{'own':>18}{'step':>18}")
    print(f"  {'node':<22}{'runs':>5}{'p50 ms':>9}{'p95 ms':>9}{'p50 ms':>9}{'p95 ms':>9}")
    table = summarize(samples, order)
    for label, own, step in table:
        if label == "framework":
            print("  " + "-" * 63)
        print(f"  {label:<22}{len(own):>5}{_ms(own)}{_ms(step)}")
    if not args.back_to_back:
        writes = [s["writes"] for s in samples]
        print(f"  {'writes after the turn':<22}{len(writes):>5}{_ms(writes)}")
    p95 = nearest_rank(dict((label, own) for label, own, _ in table)[f"total - {MODEL_NODE}"], 95)
    verdict = "met" if p95 <= GOAL_MS else "NOT met"
    print(f"goal: p95 at most {GOAL_MS:.0f} ms excluding the model's time ({MODEL_NODE}): {p95:.1f} ms — {verdict}")
    if args.compare_consolidation:
        print_comparison(samples, args)
    growth = (rss[-1] - rss[0]) / rss[0] * 100
    verdict = "met" if growth < RSS_GOAL_PERCENT else "NOT met"
    print(
        f"memory (RSS): {rss[0] / 1024:,.1f} MiB after the warm-up turn, {rss[-1] / 1024:,.1f} MiB after "
        f"{len(samples)} more turns ({growth:+.1f} %; peak {max(rss) / 1024:,.1f} MiB); goal: growth under "
        f"{RSS_GOAL_PERCENT:g} %{' over back-to-back turns' if args.back_to_back else ''} — {verdict}"
    )
    biggest = ", ".join(f"{name} {bytes_ / 1024:,.0f}" for name, bytes_ in channels.items())
    print(
        f"  checkpoint: {size / 1024:,.0f} KiB serialized (biggest channels, KiB: {biggest}); "
        f"{stored:,} checkpoints stored for the thread"
    )
    return 0


def print_comparison(samples: Sequence[dict[str, Any]], args: argparse.Namespace) -> None:
    """`--compare-consolidation`: the turns with consolidation off against those with it on (issue 26)."""
    sides = {on: [s for s in samples if s["consolidation"] is on] for on in (False, True)}
    print(f"consolidation off / on (alternating blocks of {max(args.facts, 1)} turns; p50 / p95 ms):")
    print(f"  {'':<26}{'off':>24}{'on':>24}")
    print(f"  {'':<26}{'turns':>6}{'p50':>9}{'p95':>9}{'turns':>6}{'p50':>9}{'p95':>9}")

    def row(label: str, key: str, only_facts: bool = False) -> None:
        cells = ""
        for on in (False, True):
            values = [s[key] for s in sides[on] if key in s and (s["fact"] or not only_facts)]
            p50, p95 = (nearest_rank(values, 50), nearest_rank(values, 95)) if values else (math.nan, math.nan)
            cells += f"{len(values):>6}{p50:>9.1f}{p95:>9.1f}"
        print(f"  {label:<26}{cells}")

    row(f"total - {MODEL_NODE}", "without_model_node")
    if not args.back_to_back:
        row("writes after the turn", "writes")
        if args.facts:
            row("  of the fact turns", "writes", only_facts=True)
    else:
        row("wait for own writes", "wait")
    off, on = ([s["without_model_node"] for s in sides[side]] for side in (False, True))
    if not off or not on:
        print("ratio on / off: not measured (a side played no measured turn: more --turns)")
        return
    ratio = nearest_rank(on, 95) / nearest_rank(off, 95)
    verdict = "met" if ratio <= RATIO_GOAL else "NOT met"
    print(f"ratio on / off of the turn without the model at p95: {ratio:.2f} (goal at most {RATIO_GOAL:g}) — {verdict}")
    if args.back_to_back or not args.facts:
        return
    told = {side: [s["writes"] for s in sides[side] if s["fact"]] for side in (False, True)}
    if told[False] and told[True]:
        cost = nearest_rank(told[True], 50) - nearest_rank(told[False], 50)
        print(
            f"consolidation's own cost (off the reply's path): {cost:.1f} ms per fact turn (median writes on - off), "
            f"{cost / args.facts:.1f} ms per turn at one fact turn in {args.facts}"
        )
    work = [s["consolidate"] for s in sides[True] if s.get("consolidate")]
    if work:
        wall, cpu = [w for w, _ in work], [c for _, c in work]
        print(
            f"  its own work (the outbox's decisions and fact rows, {len(work)} fact turns): wall p50 / p95 "
            f"{nearest_rank(wall, 50):.1f} / {nearest_rank(wall, 95):.1f} ms, thread CPU p50 / p95 "
            f"{nearest_rank(cpu, 50):.1f} / {nearest_rank(cpu, 95):.1f} ms; per turn at one fact turn in "
            f"{args.facts}: {sum(cpu) / len(cpu) / args.facts:.1f} ms CPU"
        )


def run(args: argparse.Namespace) -> int:
    if args.turns < 2:
        raise InvalidInput(f"--turns must be at least 2 (the first is a warm-up), got {args.turns}")
    if args.history_turns < 1:
        raise InvalidInput(f"--history-turns must be at least 1, got {args.history_turns}")
    if args.events < 0 or args.event_pool < 0:
        raise InvalidInput("--events and --event-pool must not be negative")
    if args.facts < 0:
        raise InvalidInput(f"--facts must not be negative, got {args.facts}")
    with data_folder(args.data_dir, "personalab-bench-") as path, bench_environment(path):
        return measure(args, path)
