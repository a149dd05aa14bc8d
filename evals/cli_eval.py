"""`personalab eval …`: quality evaluations of the product on public benchmarks (figures go into README)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    evaluate = sub.add_parser("eval", help="quality evaluations on benchmarks")
    kinds = evaluate.add_subparsers(dest="eval", required=True, parser_class=type(evaluate))
    locomo = kinds.add_parser(
        "locomo", help="turn-level evidence recall@5/10/20 of memory retrieval on LoCoMo, with a BM25 baseline"
    )
    locomo.add_argument("path", help="the LoCoMo file (locomo10.json layout); read, never copied")
    locomo.add_argument("--conversations", type=int, help="only the first N conversations (default: all)")
    locomo.add_argument("--data-dir", help="build the memory store here (default: a temporary directory)")
    locomo.add_argument(
        "--context-lines", type=int, default=1, help="previous turns stored as each memory's context (0: none)"
    )
    locomo.add_argument("--no-dates", action="store_true", help="leave the session date out of the memories")
    locomo.add_argument(
        "--scene-weights", action="store_true", help="score with the scene's weights (as a turn does), not recall's"
    )
    locomo.add_argument("--verbose", action="store_true", help="a line per conversation as it is ingested")
    locomo.set_defaults(handler=lambda a: __import__("evals.locomo", fromlist=["run"]).run(a))
