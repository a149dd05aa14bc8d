"""`personalab bench …`: the project's benchmark commands (figures go into README)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="benchmarks")
    kinds = bench.add_subparsers(dest="bench", required=True, parser_class=type(bench))
    builder = kinds.add_parser("builder", help="memory builder throughput vs a concatenation floor")
    builder.add_argument("--lines", type=int, default=100_000)
    builder.add_argument("--repeats", type=int, default=5)
    builder.set_defaults(handler=lambda a: __import__("evals.bench_builder", fromlist=["run"]).run(a))
    history = kinds.add_parser("history", help="recursive history fetch vs the seed's load-all walk")
    history.add_argument("--lines", type=int, default=100_000)
    history.add_argument("--depth", type=int, default=1_000)
    history.add_argument("--repeats", type=int, default=5)
    history.add_argument(
        "--postgres-url", default="postgresql://postgres@127.0.0.1:5432/test", help="empty to skip PostgreSQL"
    )
    history.set_defaults(handler=lambda a: __import__("evals.bench_history", fromlist=["run"]).run(a))
    turn = kinds.add_parser("turn", help="per-node timings of a turn on a long instance (offline scripted model)")
    turn.add_argument("--turns", type=int, default=100, help="turns measured (the first is a warm-up, left out)")
    turn.add_argument("--history-turns", type=int, default=1_000, help="turns already in the dialogue tree")
    turn.add_argument("--events", type=int, default=10_000, help="archived events in Chroma (all instances)")
    turn.add_argument("--event-pool", type=int, default=500, help="distinct texts embedded for the events; 0 = all")
    turn.add_argument("--data-dir", help="keep the fixture here (default: a temporary directory)")
    turn.set_defaults(handler=lambda a: __import__("evals.bench_turn", fromlist=["run"]).run(a))
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
    retrieval.set_defaults(handler=lambda a: __import__("evals.bench_retrieval", fromlist=["run"]).run(a))
