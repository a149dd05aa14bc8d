"""`personalab eval locomo PATH`: turn-level evidence recall of the product's memory retrieval on LoCoMo.

LoCoMo (Maharana et al., ACL 2024, arXiv:2402.17753; CC BY-NC 4.0, internal evaluation only — the file is read
by path, never shipped) holds 10 long two-person conversations and questions annotated with the dialog ids of
the turns that hold the evidence.

- Ingestion, as the product ingests dialogue: each conversation is one instance of a real `MemoryStore` (SQLite +
  Chroma in a temporary data directory unless `--data-dir`), each turn one memory made by
  `nodes.rules.dialogue_memory.dialogue_memories` (speaker, text, the image caption, the session date, the two previous
  turns as context), all of a conversation added in one `add_memories` call (offline embeddings by default).
- Questions of categories 1–4 (multi-hop, temporal, open-domain, single-hop; category 5, adversarial, has no
  answer in the dialogue) that have evidence are asked through `nodes.rules.retrieval.retrieve` on their own
  conversation's instance with `RetrievalConfig.for_recall()` (`--scene-weights`: the turn's scene weights).
- Score: turn-level evidence recall@k = the share of a question's evidence turns among the first k memories,
  averaged over questions; overall and per category. Evidence ids are normalised (``"D8:6; D9:17"`` is two ids,
  ``D:11:26`` → ``D11:26``, ``D30:05`` → ``D30:5``); ids that are no turn of the conversation are dropped and
  counted.
- Baseline in the same run: rank_bm25's `BM25Okapi` with its defaults over one document per turn
  (``speaker: text``), tokenised with the product's tokeniser (the benchmark documents no tokenisation).
- Time per retrieval: the whole `retrieve` call, query embedding included, p50 / p95 (nearest rank).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from personalab.evals.data_dir import data_folder
from personalab.nodes.rules.dialogue_memory import DialogueLine, dialogue_memories
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.keywords import tokenize
from personalab.nodes.rules.retrieval import RetrievalConfig, retrieve

KS = (5, 10, 20)
GOAL_R10 = 0.75  # issue 11, all conversations
GOAL_R10_HELD_OUT = 0.72  # issue 11, the conversations not used to choose the knobs
# The few ingestion/retrieval choices (own words twice the context's in BM25, the session date in the memory, two
# lines of context, the recall's keyword expansion, its time and speaker bonuses) were chosen on the first five
# conversations of locomo10.json; the report shows both halves.
TUNING_CONVERSATIONS = 5
CATEGORIES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_SESSION = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")
_SEPARATORS = re.compile(r"[;,\s]+")


@dataclass(frozen=True)
class LocomoTurn:
    dia_id: str
    speaker: str
    text: str
    caption: str  # BLIP caption of the image the speaker shared, "" without one
    session: int
    date: str  # the session's date and time as written in the file


@dataclass(frozen=True)
class LocomoQuestion:
    question: str
    category: int
    evidence: tuple[str, ...]  # normalised dialog ids that exist in the conversation
    answer: str = ""  # the file's answer (category 5 has none: its `adversarial_answer` is no answer to find)


@dataclass(frozen=True)
class LocomoConversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: tuple[LocomoTurn, ...]
    questions: tuple[LocomoQuestion, ...]
    dropped_evidence: int  # malformed ids, or ids of turns the conversation does not have


def normalise_dia_id(text: str) -> str | None:
    """``D30:05`` → ``D30:5``, ``D:11:26`` → ``D11:26``; None when it is no dialog id (``D``)."""
    match = _DIA_ID.fullmatch(text.strip())
    return f"D{int(match.group(1))}:{int(match.group(2))}" if match else None


def normalise_evidence(items: Sequence[Any]) -> list[str]:
    """Evidence strings split on ``;``/``,``/spaces (``"D8:6; D9:17"`` holds two ids), normalised, malformed
    pieces left out, order kept, no repeats."""
    ids: list[str] = []
    for item in items:
        for piece in _SEPARATORS.split(str(item)):
            dia_id = normalise_dia_id(piece) if piece else None
            if dia_id and dia_id not in ids:
                ids.append(dia_id)
    return ids


def _parse_conversation(raw: Any, where: str) -> LocomoConversation:
    if not isinstance(raw, dict) or not isinstance(raw.get("conversation"), dict):
        raise InvalidInput(f"{where}: not a LoCoMo conversation (no 'conversation' object)")
    conversation = raw["conversation"]
    sample_id = str(raw.get("sample_id") or where)
    speakers = (str(conversation.get("speaker_a", "")), str(conversation.get("speaker_b", "")))
    # Sessions by the lists that exist: conv-26 has date keys for sessions it has no turns of.
    sessions = sorted(int(m.group(1)) for key in conversation if (m := _SESSION.fullmatch(key)))
    turns: list[LocomoTurn] = []
    for number in sessions:
        date = str(conversation.get(f"session_{number}_date_time", ""))
        for index, turn in enumerate(conversation[f"session_{number}"]):
            if not isinstance(turn, dict) or not isinstance(turn.get("text"), str):
                raise InvalidInput(f"{sample_id}: session {number}, turn {index + 1} has no text")
            dia_id = normalise_dia_id(str(turn.get("dia_id", "")))
            if dia_id is None:
                raise InvalidInput(
                    f"{sample_id}: session {number}, turn {index + 1}: bad dia_id {turn.get('dia_id')!r}"
                )
            caption = turn.get("blip_caption")
            turns.append(
                LocomoTurn(
                    dia_id=dia_id,
                    speaker=str(turn.get("speaker", "")),
                    text=turn["text"],
                    caption=caption if isinstance(caption, str) else "",
                    session=number,
                    date=date,
                )
            )
    known = {turn.dia_id for turn in turns}
    questions: list[LocomoQuestion] = []
    dropped = 0
    for index, item in enumerate(raw.get("qa") or []):
        if not isinstance(item, dict) or not isinstance(item.get("question"), str):
            raise InvalidInput(f"{sample_id}: question {index + 1} has no text")
        category = item.get("category")
        if isinstance(category, bool) or not isinstance(category, int):
            raise InvalidInput(f"{sample_id}: question {index + 1} has no category")
        raw_evidence = item.get("evidence") or []
        evidence = normalise_evidence(raw_evidence)
        kept = tuple(e for e in evidence if e in known)
        pieces = [piece for e in raw_evidence for piece in _SEPARATORS.split(str(e)) if piece]
        dropped += sum(1 for piece in pieces if normalise_dia_id(piece) not in known)
        answer = item.get("answer")
        questions.append(LocomoQuestion(item["question"], category, kept, "" if answer is None else str(answer)))
    return LocomoConversation(sample_id, speakers, tuple(turns), tuple(questions), dropped)


def load_locomo(path: str | Path) -> list[LocomoConversation]:
    """The conversations of a LoCoMo file (``locomo10.json`` layout). `ValueError` naming the bad item."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, list) or not data:
        raise InvalidInput(f"{path}: expected a JSON array of conversations")
    return [_parse_conversation(raw, f"{path.name}[{index}]") for index, raw in enumerate(data)]


# --------------------------------------------------------------------------------------------------
# Scoring


def recall_at(ranked: Sequence[str], evidence: Sequence[str], k: int) -> float:
    """The share of `evidence` turns among the first `k` of `ranked` (turn-level evidence recall)."""
    if not evidence:
        raise InvalidInput("a question without evidence has no recall")
    wanted = set(evidence)
    return len(wanted & set(ranked[:k])) / len(wanted)


@dataclass
class RecallTable:
    """Recall@k per question, kept by conversation and category, for one retriever."""

    ks: tuple[int, ...] = KS
    rows: list[tuple[str, int, tuple[float, ...]]] = field(default_factory=list)

    def add(self, conversation: str, category: int, ranked: Sequence[str], evidence: Sequence[str]) -> None:
        self.rows.append((conversation, category, tuple(recall_at(ranked, evidence, k) for k in self.ks)))

    def mean(
        self, category: int | None = None, conversations: Sequence[str] | None = None
    ) -> tuple[int, tuple[float, ...]]:
        """(questions, mean recall@k for each k) over all rows, or one category's, or some conversations'."""
        rows = [
            r
            for name, c, r in self.rows
            if (category is None or c == category) and (conversations is None or name in conversations)
        ]
        if not rows:
            return 0, tuple(0.0 for _ in self.ks)
        return len(rows), tuple(sum(r[i] for r in rows) / len(rows) for i in range(len(self.ks)))


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile (`share` in (0, 1])."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


# --------------------------------------------------------------------------------------------------
# The run


def conversation_lines(conversation: LocomoConversation, *, dates: bool = True) -> list[DialogueLine]:
    """The conversation's turns as dialogue lines: speaker, text, the image caption as attachment, and the
    session's date (the part after "on" of ``1:56 pm on 8 May, 2023``) as when."""
    return [
        DialogueLine(
            speaker=turn.speaker,
            text=turn.text,
            when=turn.date.rsplit(" on ", 1)[-1].strip() if dates else "",
            attachment=turn.caption,
        )
        for turn in conversation.turns
    ]


def bm25_baseline(conversation: LocomoConversation) -> Any:
    """rank_bm25's `BM25Okapi` with its defaults over one document per turn, ``speaker: text``, tokenised with
    the product's tokeniser (`nodes.rules.keywords.tokenize`: stop words out, lower case, light stemming)."""
    from rank_bm25 import BM25Okapi

    return BM25Okapi([tokenize(f"{turn.speaker}: {turn.text}") for turn in conversation.turns])


def bm25_ranking(model: Any, conversation: LocomoConversation, question: str, k: int) -> list[str]:
    scores = model.get_scores(tokenize(question))
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
    return [conversation.turns[i].dia_id for i in order]


def create_instance(url: str, title: str) -> int:
    """A new instance (save) titled `title` in the database at `url`; its id."""
    from personalab.stores.db import session_scope
    from personalab.stores.saves import create_save

    with session_scope(url) as session:
        save = create_save(session, None, None, title=title)
        return int(save.id)  # type: ignore[arg-type]


def run_eval(
    conversations: Sequence[LocomoConversation],
    data: Path,
    *,
    context_lines: int = 1,
    dates: bool = True,
    scene_weights: bool = False,
    progress: Any = None,
) -> dict[str, Any]:
    """Ingest every conversation into its own instance of a `MemoryStore` in `data`, ask each question of
    categories 1–4 that has evidence through `nodes.rules.retrieval.retrieve`, and score both the product and the
    BM25 baseline. Returns the tables, timings and counts."""
    from personalab.stores.memory import MemoryStore

    url = f"sqlite:///{data / 'locomo.db'}"
    store = MemoryStore(db_url=url, chroma_path=str(data / "chroma"))
    config = RetrievalConfig(mark_mentioned=False) if scene_weights else RetrievalConfig.for_recall()
    k = max(KS)
    product, baseline = RecallTable(), RecallTable()
    times: list[float] = []
    ingest_s = 0.0
    skipped = 0
    memories = 0
    for conversation in conversations:
        started = time.perf_counter()
        instance = create_instance(url, conversation.sample_id)
        items = dialogue_memories(conversation_lines(conversation, dates=dates), context_lines=context_lines)
        entries = store.add_memories(instance, items)
        ingest_s += time.perf_counter() - started
        memories += len(entries)
        dia_ids: dict[Any, str] = {
            entry.id: turn.dia_id for entry, turn in zip(entries, conversation.turns, strict=True)
        }
        model = bm25_baseline(conversation)
        for question in conversation.questions:
            if question.category not in CATEGORIES:
                continue
            if not question.evidence:
                skipped += 1
                continue
            started = time.perf_counter()
            result = retrieve(store, instance, question.question, k=k, config=config)
            times.append(time.perf_counter() - started)
            found = [dia_ids[item.id] for item in result.items]
            product.add(conversation.sample_id, question.category, found, question.evidence)
            plain = bm25_ranking(model, conversation, question.question, k)
            baseline.add(conversation.sample_id, question.category, plain, question.evidence)
        if progress is not None:
            progress(conversation, len(entries))
    return {
        "product": product,
        "baseline": baseline,
        "times_s": times,
        "ingest_s": ingest_s,
        "memories": memories,
        "skipped_no_evidence": skipped,
    }


def _table(title: str, table: RecallTable) -> list[str]:
    head = "".join(f"{'R@' + str(k):>8}" for k in table.ks)
    out = [title, f"  {'category':<16}{'n':>6}{head}"]
    rows: list[tuple[str, int | None]] = [("all (1-4)", None)] + [(f"{c} {n}", c) for c, n in CATEGORIES.items()]
    for label, category in rows:
        count, means = table.mean(category)
        out.append(f"  {label:<16}{count:>6}" + "".join(f"  {m:6.3f}" for m in means))
    return out


def run(args: argparse.Namespace) -> int:
    """`personalab eval locomo PATH`."""
    conversations = load_locomo(args.path)
    if args.conversations is not None:
        if args.conversations < 1:
            raise InvalidInput(f"--conversations must be at least 1, got {args.conversations}")
        conversations = conversations[: args.conversations]
    if args.context_lines < 0:
        raise InvalidInput(f"--context-lines must be at least 0, got {args.context_lines}")
    from personalab.stores.db import dispose_engines
    from personalab.stores.embeddings import get_embeddings

    turns = sum(len(c.turns) for c in conversations)
    dropped = sum(c.dropped_evidence for c in conversations)
    embeddings = type(get_embeddings()).__name__
    print(
        f"LoCoMo: {len(conversations)} conversation(s), {turns:,} turns, evidence ids dropped (malformed or no such "
        f"turn): {dropped}"
    )
    context = f"the {args.context_lines} previous turn(s) as context" if args.context_lines else "no context"
    print(
        f"memories: one per turn (speaker: text + image caption{' + session date' if not args.no_dates else ''}), "
        f"{context} (nodes.rules.dialogue_memory); embeddings: {embeddings}"
    )
    weights = "the scene's weights (turn default)" if args.scene_weights else "RetrievalConfig.for_recall()"
    print(f"retrieval: nodes.rules.retrieval.retrieve on stores.memory.MemoryStore, {weights}, k={max(KS)}")

    def progress(conversation: LocomoConversation, count: int) -> None:
        if args.verbose:
            print(f"  {conversation.sample_id}: {count} memories", flush=True)

    with data_folder(args.data_dir, "personalab-locomo-") as data:
        try:
            report = run_eval(
                conversations,
                data,
                context_lines=args.context_lines,
                dates=not args.no_dates,
                scene_weights=args.scene_weights,
                progress=progress,
            )
        finally:
            dispose_engines()
    product: RecallTable = report["product"]
    baseline: RecallTable = report["baseline"]
    times = [t * 1000 for t in report["times_s"]]
    count, _ = product.mean()
    print(
        f"ingest: {report['memories']:,} memories in {report['ingest_s']:.1f} s "
        f"({1000 * report['ingest_s'] / max(1, report['memories']):.1f} ms per memory, embedding included)"
    )
    print(
        f"questions: {count:,} of categories 1-4 with evidence ({report['skipped_no_evidence']} without evidence "
        f"skipped; category 5 left out)"
    )
    print()
    for line in _table("product (turn-level evidence recall):", product):
        print(line)
    print()
    for line in _table(
        "BM25 baseline (rank_bm25 BM25Okapi defaults, one document per turn 'speaker: text', the product's tokeniser):",
        baseline,
    ):
        print(line)
    print()
    at10 = KS.index(10)
    print("per conversation: questions, R@10 product / BM25")
    names = [c.sample_id for c in conversations]
    for name in names:
        count, means = product.mean(conversations=[name])
        print(f"  {name:<14}{count:>6}  {means[at10]:.3f} / {baseline.mean(conversations=[name])[1][at10]:.3f}")
    if len(names) > TUNING_CONVERSATIONS:
        tuned, rest = names[:TUNING_CONVERSATIONS], names[TUNING_CONVERSATIONS:]
        print(
            f"split: knobs were chosen on the first {TUNING_CONVERSATIONS} conversations: R@10 "
            f"{product.mean(conversations=tuned)[1][at10]:.3f} there, {product.mean(conversations=rest)[1][at10]:.3f} "
            f"on the other {len(rest)}"
        )
    print()
    print(
        f"time per retrieval (query embedding included): p50 {percentile(times, 0.5):.1f} ms, "
        f"p95 {percentile(times, 0.95):.1f} ms over {len(times):,} retrievals"
    )
    r10 = product.mean()[1][at10]
    print(f"goal: R@10 at least {GOAL_R10:.2f}: {r10:.3f} — {'met' if r10 >= GOAL_R10 else 'NOT met'}")
    if len(names) > TUNING_CONVERSATIONS:
        held = product.mean(conversations=names[TUNING_CONVERSATIONS:])[1][at10]
        print(
            f"goal: R@10 on the conversations not used for tuning at least {GOAL_R10_HELD_OUT:.2f}: {held:.3f} — "
            f"{'met' if held >= GOAL_R10_HELD_OUT else 'NOT met'}"
        )
    return 0
