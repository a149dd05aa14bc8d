"""`python -m personalab.evals …` (`./run bench …`, `./run eval …`, `personalab-evals …`): the project's benchmarks
and quality evaluations. Kept out of the product's `personalab` command: evaluations import the whole product,
the product imports none of them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from personalab.evals import (
    bench_builder,
    bench_cold,
    bench_console,
    bench_faults,
    bench_history,
    bench_load,
    bench_retrieval,
    bench_turn,
    bench_web,
    bench_worldbook,
    convert,
    locomo,
    locomo_qa,
    paraphrase_cn,
    probes_cn,
    runs,
    suite,
)
from personalab.graph.cli import run_command, sub_parsers
from personalab.nodes.rules.dialogue_memory import CONTEXT_LINES


def register(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="benchmarks")
    kinds = bench.add_subparsers(dest="bench", required=True, parser_class=type(bench))
    builder = kinds.add_parser("builder", help="memory builder throughput vs a concatenation floor")
    builder.add_argument("--lines", type=int, default=100_000)
    builder.add_argument("--repeats", type=int, default=5)
    builder.set_defaults(handler=bench_builder.run)
    history = kinds.add_parser("history", help="recursive history fetch vs the seed's load-all walk")
    history.add_argument("--lines", type=int, default=100_000)
    history.add_argument("--depth", type=int, default=1_000)
    history.add_argument("--repeats", type=int, default=5)
    history.add_argument(
        "--postgres-url", default="postgresql://postgres@127.0.0.1:5432/test", help="empty to skip PostgreSQL"
    )
    history.set_defaults(handler=bench_history.run)
    turn = kinds.add_parser("turn", help="per-node timings of a turn on a long instance (offline scripted model)")
    turn.add_argument("--turns", type=int, default=100, help="turns measured (the first is a warm-up, left out)")
    turn.add_argument("--history-turns", type=int, default=1_000, help="turns already in the dialogue tree")
    turn.add_argument("--events", type=int, default=10_000, help="archived events in Chroma (all instances)")
    turn.add_argument("--event-pool", type=int, default=500, help="distinct texts embedded for the events; 0 = all")
    turn.add_argument("--data-dir", help="keep the fixture here (default: a temporary directory)")
    turn.add_argument(
        "--back-to-back",
        action="store_true",
        help="no pause between turns: each turn waits for the writes the one before queued (read your writes)",
    )
    turn.add_argument(
        "--facts", type=int, default=0, metavar="N", help="one turn in N tells where the user lives now (0: none)"
    )
    turn.add_argument(
        "--compare-consolidation",
        action="store_true",
        help="turns alternate (blocks of --facts N) between consolidation off and on; the two sides compared",
    )
    turn.set_defaults(handler=bench_turn.run)
    cold = kinds.add_parser("cold", help="a one-shot `personalab turn` in a new process vs importing its modules")
    cold.add_argument("--repeats", type=int, default=3, help="rounds (import, then turn), alternating")
    cold.add_argument("--data-dir", help="keep the fixture here (default: a temporary directory)")
    cold.set_defaults(handler=bench_cold.run)
    retrieval = kinds.add_parser(
        "retrieval", help="memory retrieval latency on a large store (query embedding included) and memory growth"
    )
    retrieval.add_argument("--memories", type=int, default=100_000, help="memories in the store, all instances")
    retrieval.add_argument("--instances", type=int, default=10)
    retrieval.add_argument("--pool", type=int, default=2_000, help="distinct texts embedded for the memories")
    retrieval.add_argument("--retrievals", type=int, default=1_000, help="retrievals measured (after a warm-up)")
    retrieval.add_argument("--inserts", type=int, default=1_000, help="single inserts after the retrievals")
    retrieval.add_argument(
        "--after-insert", type=int, default=50, help="insert + retrieval pairs (the index rebuild after a write)"
    )
    retrieval.add_argument("--data-dir", help="keep the fixture here (default: a temporary directory)")
    retrieval.add_argument(
        "--book-entries",
        type=int,
        default=0,
        help="then whole turns' retrieval with a book this big and a 50-entry one",
    )
    retrieval.add_argument("--book-turns", type=int, default=30, help="turns per book (the first: warm-up)")
    retrieval.add_argument("--history-turns", type=int, default=200, help="dialogue turns of the two book instances")
    retrieval.set_defaults(handler=bench_retrieval.run)
    bench_load.register(kinds)
    bench_faults.register(kinds)
    bench_worldbook.register(kinds)
    bench_console.register(kinds)
    bench_web.register(kinds)
    evaluate = sub.add_parser("eval", help="quality evaluations on benchmarks")
    kinds = evaluate.add_subparsers(dest="eval", required=True, parser_class=type(evaluate))
    locomo_eval = kinds.add_parser(
        "locomo", help="turn-level evidence recall@5/10/20 of memory retrieval on LoCoMo, with a BM25 baseline"
    )
    locomo_eval.add_argument("path", help="the LoCoMo file (locomo10.json layout); read, never copied")
    locomo_eval.add_argument("--conversations", type=int, help="only the first N conversations (default: all)")
    locomo_eval.add_argument("--data-dir", help="build the memory store here (default: a temporary directory)")
    locomo_eval.add_argument(
        "--context-lines",
        type=int,
        default=CONTEXT_LINES,
        help=f"previous turns stored as each memory's context (0: none; default {CONTEXT_LINES})",
    )
    locomo_eval.add_argument("--no-dates", action="store_true", help="leave the session date out of the memories")
    locomo_eval.add_argument(
        "--scene-weights", action="store_true", help="score with the scene's weights (as a turn does), not recall's"
    )
    locomo_eval.add_argument("--verbose", action="store_true", help="a line per conversation as it is ingested")
    locomo_eval.set_defaults(handler=locomo.run)
    locomo_qa.register(kinds)
    probes = kinds.add_parser(
        "probes-cn",
        help="evidence recall@5/10 of memory retrieval on MemoryBank cn's probing questions (our labels), with BM25",
    )
    probes.add_argument("path", help="the MemoryBank cn folder (memory_bank_cn.json, probing_questions_cn.jsonl)")
    probes.add_argument("--labels", help="the labels file (default: evals/probes_cn_labels.json)")
    probes.add_argument(
        "--embeddings", choices=probes_cn.EMBEDDINGS, help="PERSONALAB_EMBEDDINGS for this run (default: the setting)"
    )
    probes.add_argument("--data-dir", help="build the memory store here (default: a temporary directory)")
    probes.set_defaults(handler=probes_cn.run)
    paraphrase = kinds.add_parser(
        "paraphrase-cn",
        help="hit@1/3 and R@5/10 on Chinese paraphrase probes: the seed's additive ranking, the gated one, the dense encoder",
    )
    paraphrase.add_argument("path", help="the probes file (tests/fixtures/paraphrase_cn.json)")
    paraphrase.add_argument("--data-dir", help="build the memory store here (default: a temporary directory)")
    paraphrase.add_argument("--verbose", action="store_true", help="each question a way missed in its top 3")
    paraphrase.set_defaults(handler=paraphrase_cn.run)
    runs.register(kinds)
    convert.register(kinds)
    suite.register(kinds)


def main(argv: Sequence[str] | None = None, prog: str = "personalab-evals") -> int:
    """Parse and run one evaluation command; bad input is one line on stderr and exit code 2."""
    parser, sub = sub_parsers(prog, "PersonaLab's benchmarks and evaluations")
    register(sub)
    runs.COMMAND_LINE = [prog, *(sys.argv[1:] if argv is None else argv)]
    return run_command(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
