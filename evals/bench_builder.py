"""`personalab bench builder`: memory-builder throughput next to a floor measured in the same run.

The floor is one pass that only concatenates every line's content: no builder can beat reading every
line once, so the ratio builder/floor says how much the rules cost on top of that.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from personalab.evals.synthetic import synthetic_lines
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.memory_builder import build_memory


def _floor(lines: list[dict[str, Any]]) -> int:
    return len("".join([line["content"] for line in lines]))


def _best_of(repeats: int, fn: Any, *args: Any, **kwargs: Any) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args, **kwargs)
        best = min(best, time.perf_counter() - start)
    return best


def run(args: argparse.Namespace) -> int:
    if args.lines < 1:
        raise InvalidInput(f"--lines must be at least 1, got {args.lines}")
    lines = synthetic_lines(args.lines)
    floor = _best_of(args.repeats, _floor, lines)
    built = _best_of(args.repeats, build_memory, lines, role_id=1)
    messages = len(build_memory(lines, role_id=1))
    print(
        f"memory builder, {args.lines:,} synthetic multi-character lines → {messages:,} messages (best of {args.repeats})"
    )
    print(f"  floor (concatenate contents): {floor * 1000:8.1f} ms  {args.lines / floor:12,.0f} lines/s")
    print(f"  build_memory:                 {built * 1000:8.1f} ms  {args.lines / built:12,.0f} lines/s")
    print(f"  ratio build/floor: {built / floor:.2f}x  (goal: within 3x)")
    return 0
