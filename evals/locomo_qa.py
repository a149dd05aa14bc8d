"""`personalab eval locomo-qa PATH`: LoCoMo's questions answered by the run's model, with and without memory (issue 30).

`eval locomo` scores what retrieval finds; this scores what a model answers from it, the same questions under named
conditions in the same run, so the difference memory makes is a figure:

- `memory`: the notes are PersonaLab's memory of the conversation, the first `--k` memories that
  `nodes.rules.retrieval.retrieve` ranks for the question (each conversation ingested as `eval locomo` ingests it);
- `recent`: the notes are the conversation's last `--recent-turns` exchanges (two lines each), what a recent-dialogue
  window alone would give;
- `none`: no notes; the model answers from the question alone.

Questions: categories 1–4 with an answer (category 5 has none), `--questions` per conversation spread evenly over
the file's order. Score: LoCoMo's token F1 (lower case, punctuation and the articles a/an/the dropped, Porter-free;
for multi-hop questions, category 1, the answer's comma-separated parts are each matched with the best part of the
reply and averaged, as the benchmark does) and the share of questions whose F1 is at least `HIT_F1`. The report keeps
every question's reply per condition (`--out DIR/report.json`). LoCoMo (CC BY-NC 4.0) is read by path, never shipped.
"""

from __future__ import annotations

import argparse
import json
import re
import string
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from personalab.evals.data_dir import data_folder
from personalab.evals.locomo import (
    CATEGORIES,
    LocomoConversation,
    LocomoQuestion,
    conversation_lines,
    create_instance,
    load_locomo,
    percentile,
)
from personalab.evals.play import EMOTION_PREFIX_RE
from personalab.evals.prompts import locomo_qa_system
from personalab.nodes.rules.dialogue_memory import CONTEXT_LINES, dialogue_memories
from personalab.nodes.rules.errors import InvalidInput

CONDITIONS = ("memory", "recent", "none")
DEFAULT_CONDITIONS = ("memory", "none")
HIT_F1 = 0.5  # a reply with at least this F1 counts as answered
ANSWER_TOKENS = 48  # the answer is a short phrase
DEFAULT_QUESTIONS = 20
DEFAULT_RECENT_TURNS = 20  # PersonaLab's recent-dialogue window (PERSONALAB_RECALL_TURNS)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_CJK = re.compile(r"([\u3400-\u9fff\uf900-\ufaff])")

Ask = Callable[[str, str], str]  # (system, question) → the model's answer


# --------------------------------------------------------------------------------------------------
# Scoring (LoCoMo's token F1)


def normalise_answer(text: str) -> list[str]:
    """Lower case, punctuation and articles dropped, split on white space (SQuAD's normalisation, as LoCoMo's);
    each CJK character is a token of its own (Chinese QA's character-level F1)."""
    text = _CJK.sub(r" \1 ", EMOTION_PREFIX_RE.sub("", text).lower())
    text = "".join(" " if ch in string.punctuation or ch in "，。！？；：“”‘’（）" else ch for ch in text)
    return _ARTICLES.sub(" ", text).split()


def token_f1(reply: str, answer: str) -> float:
    """Token F1 of `reply` against `answer` (0 when either has no token)."""
    got, want = normalise_answer(reply), normalise_answer(answer)
    common = sum((Counter(got) & Counter(want)).values())
    if not got or not want or common == 0:
        return 0.0
    precision, recall = common / len(got), common / len(want)
    return 2 * precision * recall / (precision + recall)


def answer_f1(reply: str, answer: str, category: int) -> float:
    """A question's F1: for multi-hop questions (category 1) each comma-separated part of the answer is matched
    with its best part of the reply and the parts' F1 averaged; otherwise the token F1 of the whole."""
    if category != 1 or "," not in answer:
        return token_f1(reply, answer)
    replies = [part for part in reply.split(",") if part.strip()] or [reply]
    parts = [part for part in answer.split(",") if part.strip()]
    return sum(max(token_f1(r, part) for r in replies) for part in parts) / len(parts)


# --------------------------------------------------------------------------------------------------
# The run


def chosen_questions(conversation: LocomoConversation, count: int | None) -> list[LocomoQuestion]:
    """The conversation's questions of categories 1–4 with an answer; `count` of them spread evenly over the
    file's order (all when None or more than there are)."""
    usable = [q for q in conversation.questions if q.category in CATEGORIES and q.answer.strip()]
    if count is None or count >= len(usable):
        return usable
    step = len(usable) / count
    return [usable[int(i * step)] for i in range(count)]


def notes_for(condition: str, lines: Sequence[str], retrieved: Sequence[str], recent_turns: int) -> list[str] | None:
    """The notes a condition gives the model (None: none at all)."""
    if condition == "memory":
        return list(retrieved)
    if condition == "recent":
        return list(lines[-2 * recent_turns :])
    return None


def run_qa(
    conversations: Sequence[LocomoConversation],
    data: Path,
    ask: Ask,
    *,
    conditions: Sequence[str] = DEFAULT_CONDITIONS,
    questions: int | None = DEFAULT_QUESTIONS,
    k: int = 10,
    recent_turns: int = DEFAULT_RECENT_TURNS,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Ask the chosen questions of every conversation under each condition; returns every question's replies and
    F1 per condition, and the model's time."""
    from personalab.nodes.rules.retrieval import RetrievalConfig, retrieve
    from personalab.stores.memory import MemoryStore

    url = f"sqlite:///{data / 'locomo.db'}"
    store = MemoryStore(db_url=url, chroma_path=str(data / "chroma"))
    config = RetrievalConfig.for_recall()
    rows: list[dict[str, Any]] = []
    for conversation in conversations:
        chosen = chosen_questions(conversation, questions)
        if not chosen:
            continue
        items = dialogue_memories(conversation_lines(conversation), context_lines=CONTEXT_LINES)
        texts = [str(item["content"]) for item in items]
        instance = create_instance(url, conversation.sample_id)
        if "memory" in conditions:
            store.add_memories(instance, items)
        a, b = conversation.speakers
        for question in chosen:
            retrieved: list[str] = []
            if "memory" in conditions:
                result = retrieve(store, instance, question.question, k=k, config=config)
                retrieved = [item.content for item in result.items]
            row: dict[str, Any] = {
                "conversation": conversation.sample_id,
                "category": question.category,
                "question": question.question,
                "answer": question.answer,
                "conditions": {},
            }
            for condition in conditions:
                notes = notes_for(condition, texts, retrieved, recent_turns)
                started = time.perf_counter()
                error = None
                try:
                    reply = ask(locomo_qa_system(a, b, notes), question.question).strip()
                except Exception as exc:  # noqa: BLE001 - a model error is this question's result, not the run's end
                    reply, error = "", f"{type(exc).__name__}: {exc}"
                row["conditions"][condition] = {
                    "reply": reply,
                    "f1": round(answer_f1(reply, question.answer, question.category), 4),
                    "model_s": round(time.perf_counter() - started, 3),
                    **({"error": error} if error else {}),
                }
            rows.append(row)
            if progress is not None:
                progress(
                    f"  {conversation.sample_id} {len(rows)}: "
                    + ", ".join(f"{c} {row['conditions'][c]['f1']:.2f}" for c in conditions)
                )
    return {"conditions": list(conditions), "rows": rows, "summary": summarise(rows, conditions)}


def summarise(rows: Sequence[dict[str, Any]], conditions: Sequence[str]) -> dict[str, Any]:
    """Per condition: questions, mean F1, the share answered (F1 ≥ HIT_F1), per category, the model's p50/p95 s."""
    out: dict[str, Any] = {}
    for condition in conditions:
        scores = [row["conditions"][condition]["f1"] for row in rows]
        times = [row["conditions"][condition]["model_s"] for row in rows]
        by_category: dict[str, Any] = {}
        for category, name in CATEGORIES.items():
            picked = [row["conditions"][condition]["f1"] for row in rows if row["category"] == category]
            if picked:
                by_category[name] = {"questions": len(picked), "f1": round(sum(picked) / len(picked), 4)}
        out[condition] = {
            "questions": len(scores),
            "f1": round(sum(scores) / len(scores), 4) if scores else 0.0,
            "answered": round(sum(1 for s in scores if s >= HIT_F1) / len(scores), 4) if scores else 0.0,
            "by_category": by_category,
            "model_errors": sum(1 for row in rows if row["conditions"][condition].get("error")),
            "model_p50_s": round(percentile(times, 0.5), 3),
            "model_p95_s": round(percentile(times, 0.95), 3),
        }
    return out


def model_asker() -> Ask:
    """The run's model (`evals.judge.endpoint_model`), asked one question at a time, its answer capped short."""
    from personalab.evals.judge import endpoint_model

    model = endpoint_model("eval locomo-qa", max_tokens=ANSWER_TOKENS)

    def ask(system: str, question: str) -> str:
        return str(model.invoke([("system", system), ("human", question)]).content)

    return ask


def parse_conditions(text: str) -> tuple[str, ...]:
    """`memory,none` → ("memory", "none"); `InvalidInput` naming an unknown or repeated condition."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    for name in names:
        if name not in CONDITIONS:
            raise InvalidInput(f"--conditions: unknown condition {name!r} (known: {', '.join(CONDITIONS)})")
    if not names or len(set(names)) != len(names):
        raise InvalidInput(f"--conditions: give each of {', '.join(CONDITIONS)} at most once, got {text!r}")
    return names


def run(args: argparse.Namespace) -> int:
    """`personalab eval locomo-qa PATH`."""
    conditions = parse_conditions(args.conditions)
    for flag, value, least in (
        ("--questions", args.questions, 1),
        ("--k", args.k, 1),
        ("--recent-turns", args.recent_turns, 1),
    ):
        if value is not None and value < least:
            raise InvalidInput(f"{flag} must be at least {least}, got {value}")
    conversations = load_locomo(args.path)
    if args.conversations is not None:
        if args.conversations < 1:
            raise InvalidInput(f"--conversations must be at least 1, got {args.conversations}")
        conversations = conversations[: args.conversations]
    ask = model_asker()
    from personalab.stores.db import dispose_engines
    from personalab.stores.settings import settings

    model = settings().model
    print(
        f"LoCoMo QA: {len(conversations)} conversation(s), up to {args.questions} question(s) each, conditions "
        f"{', '.join(conditions)}; model {model}; memory: the first {args.k} memories retrieve() ranks; recent: the "
        f"last {args.recent_turns} exchanges",
        flush=True,
    )
    started = time.perf_counter()
    with data_folder(args.data_dir, "personalab-locomo-qa-") as data:
        try:
            report = run_qa(
                conversations,
                data,
                ask,
                conditions=conditions,
                questions=args.questions,
                k=args.k,
                recent_turns=args.recent_turns,
                progress=print if args.verbose else None,
            )
        finally:
            dispose_engines()
    report["model"] = model
    report["wall_s"] = round(time.perf_counter() - started, 1)
    summary = report["summary"]
    print()
    print(f"  {'condition':<10}{'questions':>10}{'F1':>8}{'answered':>10}{'errors':>8}{'model p50 s':>13}{'p95 s':>8}")
    for condition in conditions:
        s = summary[condition]
        print(
            f"  {condition:<10}{s['questions']:>10}{s['f1']:>8.3f}{s['answered']:>10.3f}{s['model_errors']:>8}"
            f"{s['model_p50_s']:>13.2f}{s['model_p95_s']:>8.2f}"
        )
    for other in conditions[1:]:
        if conditions[0] == "memory":
            gain = 100 * (summary["memory"]["f1"] - summary[other]["f1"])
            print(f"memory − {other}: {gain:+.1f} F1 points")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")
        print(f"report: {out / 'report.json'} (every question's reply per condition)")
    return 0


def register(kinds: Any) -> None:
    """The `eval locomo-qa` command."""
    parser = kinds.add_parser(
        "locomo-qa", help="LoCoMo questions answered by the run's model with and without memory (token F1)"
    )
    parser.add_argument("path", help="the LoCoMo file (locomo10.json layout); read, never copied")
    parser.add_argument("--conversations", type=int, help="only the first N conversations (default: all)")
    parser.add_argument(
        "--questions",
        type=int,
        default=DEFAULT_QUESTIONS,
        help=f"questions per conversation, spread over the file (default {DEFAULT_QUESTIONS})",
    )
    parser.add_argument(
        "--conditions",
        default=",".join(DEFAULT_CONDITIONS),
        help=f"comma-separated, of {', '.join(CONDITIONS)} (default {','.join(DEFAULT_CONDITIONS)})",
    )
    parser.add_argument("--k", type=int, default=10, help="memories given under `memory` (default 10)")
    parser.add_argument(
        "--recent-turns",
        type=int,
        default=DEFAULT_RECENT_TURNS,
        help=f"exchanges given under `recent` (default {DEFAULT_RECENT_TURNS})",
    )
    parser.add_argument("--data-dir", help="build the memory store here (default: a temporary directory)")
    parser.add_argument("--out", help="write report.json with every reply here")
    parser.add_argument("--verbose", action="store_true", help="a line per question as it is answered")
    parser.set_defaults(handler=run)
