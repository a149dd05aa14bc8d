"""`personalab eval probes-cn PATH`: evidence recall of the product's memory retrieval on Chinese companion chat.

Material not written for the engine (issue 11: the offline embeddings chosen by measurement): MemoryBank cn (Zhong
et al., AAAI 2024, arXiv:2305.10250; repository zhongwanjun/MemoryBank-SiliconFriend, MIT): 15 users, each 10 days
of Chinese chat with an AI companion (query / response pairs), and 100 probing questions about earlier days without
answers or evidence. The data is read by path (a folder with `memory_bank_cn.json` and
`probing_questions_cn.jsonl`), never shipped.

- Labels (`probes_cn_labels.json` beside this module, or `--labels FILE`): ours, made by hand — for each question
  the exchanges (`<day>#<n>`: the n-th query/response pair of that day, from 1) that hold its answer. Each label
  carries the first 10 hex digits of the SHA-1 of its question, so a label never scores another question.
- Ingestion, as the product ingests dialogue (the way `evals.locomo` does): each user is one instance of a real
  `MemoryStore` (SQLite + Chroma in a temporary folder unless `--data-dir`); each line (the user's query, the
  companion's response) is one memory made by `nodes.rules.dialogue_memory.dialogue_memories` (`[day] speaker:
  text`, the `CONTEXT_LINES` lines before as context), all of a user's in one `add_memories` call.
- Each labelled question is asked through `nodes.rules.retrieval.retrieve` on its user's instance with
  `RetrievalConfig.for_recall()`; a retrieved memory stands for its exchange. R@k = the share of a question's
  evidence exchanges among the exchanges of the first k memories, averaged over questions.
- Baseline in the same run: rank_bm25's `BM25Okapi` with its defaults over one document per line, the product's
  tokeniser. Time per retrieval: the whole `retrieve` call, query embedding included, p50 / p95.
- `--embeddings offline|e5|fused` sets `PERSONALAB_EMBEDDINGS` for the run (USE, multilingual-e5-small, both).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from personalab.evals.data_dir import data_folder
from personalab.evals.locomo import percentile
from personalab.nodes.rules.dialogue_memory import CONTEXT_LINES, DialogueLine, dialogue_memories
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.keywords import tokenize
from personalab.nodes.rules.retrieval import RetrievalConfig, retrieve

KS = (5, 10)
LABELS = Path(__file__).with_name("probes_cn_labels.json")
LABELS_FORMAT = "personalab.probes-cn-labels"
DIALOGUE_FILE = "memory_bank_cn.json"
QUESTIONS_FILE = "probing_questions_cn.jsonl"
COMPANION = "AI伴侣"  # the companion's speaker name in the memories (the data names only the user)
EMBEDDINGS = ("offline", "e5", "fused")


@dataclass(frozen=True)
class Exchange:
    key: str  # "<day>#<n>"
    day: str
    query: str
    response: str


@dataclass(frozen=True)
class Probe:
    user: str
    question: str
    evidence: tuple[str, ...]


def question_sha1(question: str) -> str:
    return hashlib.sha1(question.encode("utf-8")).hexdigest()[:10]  # noqa: S324 - a label's check, not security


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: not JSON ({exc})") from None


def load_dialogues(folder: Path) -> dict[str, list[Exchange]]:
    """Each user's exchanges in day order (`memory_bank_cn.json`: {user: {"history": {day: [{query, response}]}}})."""
    data = _read_json(folder / DIALOGUE_FILE)
    if not isinstance(data, dict) or not data:
        raise InvalidInput(f"{folder / DIALOGUE_FILE}: expected an object of users")
    users: dict[str, list[Exchange]] = {}
    for user, record in data.items():
        history = record.get("history") if isinstance(record, dict) else None
        if not isinstance(history, dict):
            raise InvalidInput(f"{DIALOGUE_FILE}: user {user!r} has no 'history' object")
        exchanges = []
        for day in sorted(history):
            for number, pair in enumerate(history[day], start=1):
                if not isinstance(pair, dict) or not isinstance(pair.get("query"), str):
                    raise InvalidInput(f"{DIALOGUE_FILE}: {user} {day} #{number} has no query")
                response = pair.get("response")
                exchanges.append(
                    Exchange(f"{day}#{number}", day, pair["query"], response if isinstance(response, str) else "")
                )
        users[user] = exchanges
    return users


def load_questions(folder: Path) -> dict[str, list[str]]:
    """{user: [question, ...]} from `probing_questions_cn.jsonl` (one object per line)."""
    path = folder / QUESTIONS_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such file") from None
    questions: dict[str, list[str]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{path}: line {number} is not JSON ({exc})") from None
        if not isinstance(item, dict):
            raise InvalidInput(f"{path}: line {number} is not an object")
        for user, asked in item.items():
            if not isinstance(asked, list) or not all(isinstance(q, str) for q in asked):
                raise InvalidInput(f"{path}: line {number}: {user!r} needs a list of questions")
            questions.setdefault(user, []).extend(asked)
    return questions


def load_probes(
    labels_path: Path, questions: dict[str, list[str]], dialogues: dict[str, list[Exchange]]
) -> list[Probe]:
    """The labelled questions. A label naming a question, user or exchange the data does not have, or whose
    question's SHA-1 differs, is an error (the data changed, or the labels are for other data)."""
    data = _read_json(labels_path)
    if not isinstance(data, dict) or data.get("format") != LABELS_FORMAT or not isinstance(data.get("labels"), list):
        raise InvalidInput(f"{labels_path}: not a {LABELS_FORMAT} file (format and a 'labels' list)")
    probes: list[Probe] = []
    for number, label in enumerate(data["labels"], start=1):
        where = f"{labels_path.name}: label {number}"
        if not isinstance(label, dict):
            raise InvalidInput(f"{where}: not an object")
        user, index, evidence = label.get("user"), label.get("index"), label.get("evidence")
        asked = questions.get(user) if isinstance(user, str) else None
        if asked is None or user not in dialogues:
            raise InvalidInput(f"{where}: no user {user!r} in the data")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(asked):
            raise InvalidInput(f"{where}: {user} has no question {index!r}")
        question = asked[index]
        if label.get("question_sha1") != question_sha1(question):
            raise InvalidInput(f"{where}: question {index} of {user} is not the one labelled (SHA-1 differs)")
        keys = {exchange.key for exchange in dialogues[user]}
        if not isinstance(evidence, list) or not evidence or not all(e in keys for e in evidence):
            raise InvalidInput(f"{where}: evidence must be a non-empty list of {user}'s exchanges, got {evidence!r}")
        probes.append(Probe(user, question, tuple(evidence)))
    return probes


def recall_at(ranked: Sequence[str], evidence: Sequence[str], k: int) -> float:
    """The share of `evidence` exchanges among the exchanges of the first `k` ranked memories."""
    return len(set(evidence) & set(ranked[:k])) / len(set(evidence))


def user_lines(user: str, exchanges: Sequence[Exchange]) -> tuple[list[DialogueLine], list[str]]:
    """The user's dialogue as lines (query, then response, each dated by its day) and each line's exchange."""
    lines: list[DialogueLine] = []
    keys: list[str] = []
    for exchange in exchanges:
        lines.append(DialogueLine(speaker=user, text=exchange.query, when=exchange.day))
        keys.append(exchange.key)
        if exchange.response.strip():
            lines.append(DialogueLine(speaker=COMPANION, text=exchange.response, when=exchange.day))
            keys.append(exchange.key)
    return lines, keys


def run_eval(dialogues: dict[str, list[Exchange]], probes: Sequence[Probe], data: Path) -> dict[str, Any]:
    """Ingest each probed user's dialogue into its own instance, ask its probes, score product and BM25."""
    from personalab.stores.db import session_scope
    from personalab.stores.memory import MemoryStore
    from personalab.stores.saves import create_save
    from rank_bm25 import BM25Okapi

    url = f"sqlite:///{data / 'probes_cn.db'}"
    store = MemoryStore(db_url=url, chroma_path=str(data / "chroma"))
    config = RetrievalConfig.for_recall()
    k = max(KS)
    product: list[tuple[float, ...]] = []
    baseline: list[tuple[float, ...]] = []
    times: list[float] = []
    ingest_s = 0.0
    memories = 0
    for user in dict.fromkeys(p.user for p in probes):
        lines, keys = user_lines(user, dialogues[user])
        started = time.perf_counter()
        with session_scope(url) as session:
            instance = int(create_save(session, None, None, title=user).id)  # type: ignore[arg-type]
        entries = store.add_memories(instance, dialogue_memories(lines))
        ingest_s += time.perf_counter() - started
        memories += len(entries)
        exchange_of: dict[Any, str] = {entry.id: key for entry, key in zip(entries, keys, strict=True)}
        bm25 = BM25Okapi([tokenize(f"{line.speaker}: {line.text}") for line in lines])
        for probe in (p for p in probes if p.user == user):
            started = time.perf_counter()
            result = retrieve(store, instance, probe.question, k=k, config=config)
            times.append(time.perf_counter() - started)
            ranked = [exchange_of[item.id] for item in result.items]
            product.append(tuple(recall_at(ranked, probe.evidence, n) for n in KS))
            scores = bm25.get_scores(tokenize(probe.question))
            order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
            baseline.append(tuple(recall_at([keys[i] for i in order], probe.evidence, n) for n in KS))
    return {
        "product": product,
        "baseline": baseline,
        "times_s": times,
        "ingest_s": ingest_s,
        "memories": memories,
    }


def _means(rows: Sequence[tuple[float, ...]]) -> tuple[float, ...]:
    return tuple(sum(r[i] for r in rows) / len(rows) for i in range(len(KS))) if rows else tuple(0.0 for _ in KS)


def run(args: argparse.Namespace) -> int:
    """`personalab eval probes-cn PATH [--labels FILE] [--embeddings offline|e5|fused]`."""
    folder = Path(args.path)
    if folder.is_file():  # the dialogue file named: its folder holds the questions too
        folder = folder.parent
    if args.embeddings is not None:
        if args.embeddings not in EMBEDDINGS:
            raise InvalidInput(f"--embeddings must be one of {', '.join(EMBEDDINGS)}, got {args.embeddings!r}")
        os.environ["PERSONALAB_EMBEDDINGS"] = args.embeddings
    from personalab.stores.db import dispose_engines
    from personalab.stores.embeddings import get_embeddings

    get_embeddings.cache_clear()  # the setting may have changed above
    dialogues = load_dialogues(folder)
    probes = load_probes(Path(args.labels) if args.labels else LABELS, load_questions(folder), dialogues)
    users = len({p.user for p in probes})
    print(
        f"MemoryBank cn probes: {len(probes)} labelled questions of {users} users, "
        f"{sum(len(p.evidence) for p in probes)} evidence exchanges"
    )
    print(
        f"memories: one per line ([day] speaker: text, the {CONTEXT_LINES} lines before as context); "
        f"embeddings: {type(get_embeddings()).__name__}; retrieval: RetrievalConfig.for_recall(), k={max(KS)}"
    )
    with data_folder(args.data_dir, "personalab-probes-cn-") as data:
        try:
            report = run_eval(dialogues, probes, data)
        finally:
            dispose_engines()
    times = [t * 1000 for t in report["times_s"]]
    print(
        f"ingest: {report['memories']:,} memories in {report['ingest_s']:.1f} s "
        f"({1000 * report['ingest_s'] / max(1, report['memories']):.1f} ms per memory, embedding included)"
    )
    head = "".join(f"{'R@' + str(k):>8}" for k in KS)
    print(f"  {'':<10}{'n':>5}{head}")
    for name in ("product", "baseline"):
        means = _means(report[name])
        label = "product" if name == "product" else "BM25"
        print(f"  {label:<10}{len(report[name]):>5}" + "".join(f"  {m:6.3f}" for m in means))
    print(
        f"time per retrieval (query embedding included): p50 {percentile(times, 0.5):.1f} ms, "
        f"p95 {percentile(times, 0.95):.1f} ms over {len(times):,} retrievals"
    )
    return 0
