"""`personalab eval paraphrase-cn FILE`: top ranks of memory retrieval on Chinese paraphrase probes (issue 29).

The file (tests/fixtures/paraphrase_cn.json, format `personalab.paraphrase-cn`): one role-play instance's memories
(id, content, importance, turn) and short questions, each naming the memory that answers it, that share no word or
one rare word with it. The probes were written before the ranking was changed and are not used to tune it.

The memories go into a real `MemoryStore` (SQLite + Chroma in a temporary folder unless `--data-dir`), one instance,
as a turn's write-back stores them; each question is asked three ways in the same run:

- `seed sum`: `retrieve` with the scene's weights, relevance one additive factor and the seed's 0.6 / 0.4 blend
  (`RetrievalConfig(relevance_gate=0, character_evidence=1)`, what `memory search` and a turn did before issue 29);
- `gated`: `retrieve` as a turn and `memory search` do (`RetrievalConfig()`): the scene's weights, every factor but
  relevance gated by it (GATED_POWER, with GATE_FLOOR), and a memory sharing only single characters with the
  question keeping CHARACTER_EVIDENCE of the keyword weight (the rest to the cosine);
- `dense`: the project's embeddings alone, the memories by cosine to the question (the store's vector path).

Per way: hit@1, hit@3 (the answer is first / among the first three), R@5 and R@10 (the answer among the first 5 / 10;
one answer per question, so R@k = hit@k), and the time per retrieval p50 / p95.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from personalab.evals.data_dir import data_folder
from personalab.evals.locomo import percentile
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.retrieval import RetrievalConfig, retrieve

FORMAT = "personalab.paraphrase-cn"
KS = (1, 3, 5, 10)
WAYS = ("seed sum", "gated", "dense")


@dataclass(frozen=True)
class Memory:
    id: str
    content: str
    importance: float
    turn: int


@dataclass(frozen=True)
class Probe:
    question: str
    answer: str  # a memory's id


def load(path: Path) -> tuple[list[Memory], list[Probe]]:
    """The memories and probes of `path`; a probe naming no memory of the file is an error naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InvalidInput(f"{path}: not a {FORMAT} file")
    try:
        memories = [
            Memory(str(m["id"]), str(m["content"]), float(m["importance"]), int(m["turn"])) for m in data["memories"]
        ]
        probes = [Probe(str(p["question"]), str(p["answer"])) for p in data["probes"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(f"{path}: a memory or probe lacks a field or has a bad value ({exc})") from None
    ids = {m.id for m in memories}
    for number, probe in enumerate(probes, start=1):
        if probe.answer not in ids:
            raise InvalidInput(f"{path}: probe {number} names no memory of the file: {probe.answer!r}")
    return memories, probes


def hits(ranked: Sequence[str], answer: str) -> tuple[float, ...]:
    """1 where `answer` is among the first k of `ranked`, for each k of KS."""
    return tuple(1.0 if answer in ranked[:k] else 0.0 for k in KS)


def run_eval(memories: Sequence[Memory], probes: Sequence[Probe], data: Path) -> dict[str, Any]:
    """Store the memories in one instance and rank them for every probe the three ways."""
    from personalab.stores.db import session_scope
    from personalab.stores.memory import MemoryStore
    from personalab.stores.saves import create_save

    url = f"sqlite:///{data / 'paraphrase_cn.db'}"
    store = MemoryStore(db_url=url, chroma_path=str(data / "chroma"))
    with session_scope(url) as session:
        instance = int(create_save(session, None, None, title="paraphrase-cn").id)  # type: ignore[arg-type]
    items = [{"content": m.content, "importance": m.importance, "turn": m.turn} for m in memories]
    entries = store.add_memories(instance, items)
    name_of = {entry.id: memory.id for entry, memory in zip(entries, memories, strict=True)}
    now = max(m.turn for m in memories) + 1
    k = max(KS)
    character = store.index(instance).character_id

    def by_retrieve(config: RetrievalConfig) -> Callable[[str], list[str]]:
        def ranked(question: str) -> list[str]:
            result = retrieve(store, instance, question, k=k, turn=now, config=config)
            return [name_of[int(item.id)] for item in result.items if item.kind == "memory"]

        return ranked

    def dense(question: str) -> list[str]:
        found = store.vector_search(instance, character, store.embed_query(question), k)
        return [name_of[memory_id] for memory_id, _ in found]

    ways: dict[str, Callable[[str], list[str]]] = {
        "seed sum": by_retrieve(RetrievalConfig(relevance_gate=0.0, character_evidence=1.0, mark_mentioned=False)),
        "gated": by_retrieve(RetrievalConfig(mark_mentioned=False)),  # a turn's and `memory search`'s
        "dense": dense,
    }
    rows: dict[str, list[tuple[float, ...]]] = {way: [] for way in ways}
    times: dict[str, list[float]] = {way: [] for way in ways}
    misses: dict[str, list[dict[str, Any]]] = {way: [] for way in ways}
    for probe in probes:
        for way, ranked_by in ways.items():
            started = time.perf_counter()
            ranked = ranked_by(probe.question)
            times[way].append((time.perf_counter() - started) * 1000)
            rows[way].append(hits(ranked, probe.answer))
            if probe.answer not in ranked[:3]:
                misses[way].append({"question": probe.question, "answer": probe.answer, "top3": ranked[:3]})
    return {"rows": rows, "times_ms": times, "misses": misses, "memories": len(entries), "probes": len(probes)}


def means(rows: Sequence[tuple[float, ...]]) -> tuple[float, ...]:
    return tuple(sum(r[i] for r in rows) / len(rows) for i in range(len(KS))) if rows else tuple(0.0 for _ in KS)


def run(args: argparse.Namespace) -> int:
    """`personalab eval paraphrase-cn FILE [--data-dir DIR] [--verbose]`."""
    from personalab.stores.db import dispose_engines
    from personalab.stores.embeddings import get_embeddings

    memories, probes = load(Path(args.path))
    print(f"paraphrase probes: {len(probes)} questions over {len(memories)} memories of one instance")
    print(f"embeddings: {type(get_embeddings()).__name__}; retrieval: the scene's weights, k={max(KS)}")
    with data_folder(args.data_dir, "personalab-paraphrase-cn-") as data:
        try:
            report = run_eval(memories, probes, data)
        finally:
            dispose_engines()
    names = ("hit@1", "hit@3", "R@5", "R@10")
    print(f"  {'':<10}{'n':>4}" + "".join(f"{name:>8}" for name in names) + "   p50 ms   p95 ms")
    for way in WAYS:
        times = report["times_ms"][way]
        print(
            f"  {way:<10}{len(report['rows'][way]):>4}"
            + "".join(f"  {m:6.3f}" for m in means(report["rows"][way]))
            + f"  {percentile(times, 0.5):7.1f}  {percentile(times, 0.95):7.1f}"
        )
    if args.verbose:
        for way in WAYS:
            for miss in report["misses"][way]:
                print(f"  miss@3 {way}: {miss['question']} -> {miss['answer']} (top 3: {', '.join(miss['top3'])})")
    return 0
