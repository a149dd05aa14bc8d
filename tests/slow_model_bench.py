"""Figures of issue 30's slow-model turns against the stub's slow CPU server (tests/openai_stub.py `SlowServer`):
turns within the deadline, the prompt cache's reuse from the second turn on, what the rewrite did. Not a test.

    nice -n 10 .venv/bin/python tests/slow_model_bench.py --turns 12 --deadline 30 --prompt-per-s 58 --gen-per-s 5.5

`--scale k` divides the deadline and multiplies both speeds by k (the same turn, k times faster; the engine's own
milliseconds then weigh k times more). `--rewrite` sets PERSONALAB_QUERY_REWRITE. One JSON line of figures, and
one line per turn before it.

`--scenario PATH --condition full|recent|history` plays a batch-evaluation scenario instead (`personalab eval run
--model openai` against the stub's extractive reader on a fast slow-server: its prompt cache, not its time, is what
counts) with the 1.5B model's settings of docs/real-models.md, and prints the reply prompts' cache reuse from the
second turn on: the same figure the model server's log gives, without the model."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from openai_stub import OpenAIStub, SlowServer, StubReply  # noqa: E402

MESSAGES = [
    "雷娜，我们从哪里开始？",
    "去据点看看。",
    "那里安全吗？",
    "你还记得那次冲突吗？",
    "我们需要找到背叛者留下的线索。",
    "据点的守卫换班是什么时候？",
    "你觉得老三会背叛我们吗？",
    "先去找点水和弹药。",
    "今晚就潜进去。",
    "小心点，别被发现了。",
    "你的伤还疼吗？",
    "继续前进。",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--deadline", type=float, default=30.0)
    parser.add_argument("--prompt-per-s", type=float, nargs=2, default=(50.0, 66.0), metavar=("LOW", "HIGH"))
    parser.add_argument("--gen-per-s", type=float, nargs=2, default=(5.0, 6.0), metavar=("LOW", "HIGH"))
    parser.add_argument("--reply-chars", type=int, default=60, help="each reply's length (one character a token)")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--rewrite", choices=("auto", "model", "rules"), default="auto")
    parser.add_argument("--context-tokens", type=int, default=8192)
    parser.add_argument("--scenario", help="a batch-evaluation scenario to play instead of the sample's turns")
    parser.add_argument("--condition", default="full", help="with --scenario: full, recent or history")
    args = parser.parse_args()
    if args.scenario:
        scenario_reuse(args.scenario, args.condition, args.context_tokens)
        return
    data = tempfile.mkdtemp(prefix="slowbench-")
    stub = OpenAIStub().start()
    prompt_per_s = random.Random(1).uniform(*args.prompt_per_s)  # one speed for the run, within the range
    gen_per_s = random.Random(2).uniform(*args.gen_per_s)
    stub.slow = SlowServer(prompt_per_s=prompt_per_s * args.scale, gen_per_s=gen_per_s * args.scale)
    os.environ.update(
        PERSONALAB_DATA_DIR=data,
        OPENAI_API_KEY="local",
        OPENAI_BASE_URL=stub.base_url,
        PERSONALAB_LLM="openai",
        PERSONALAB_TURN_DEADLINE=str(args.deadline / args.scale),
        PERSONALAB_QUERY_REWRITE=args.rewrite,
        PERSONALAB_CONTEXT_TOKENS=str(args.context_tokens),
        PERSONALAB_MAX_REPLY_TOKENS="400",
    )
    from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
    from personalab.nodes.context import Context

    url = f"sqlite:///{data}/bench.db"
    instance = create_sample_instance(url)
    reply = "【平静】" + ("风沙很大，我们沿着废墟往北走，据点就在前面，小心脚下的碎玻璃。" * 4)[: args.reply_chars - 4]
    within, rows = 0, []
    with turn_graph(Context(database_url=url)) as (graph, ctx):
        for number in range(args.turns):
            stub.queue_for("reply", StubReply(reply, chunk=2))
            started = time.monotonic()
            state = run_turn(graph, ctx, instance, MESSAGES[number % len(MESSAGES)])
            wall = (time.monotonic() - started) * args.scale
            ok = state["error"] is None and wall <= args.deadline
            within += ok
            server = state["debug"].get("server") or {}
            row = {
                "turn": number + 1,
                "wall_s": round(wall, 1),
                "ok": ok,
                "error": (state["error"] or "")[:80],
                "rewrite": (state["debug"].get("query_rewrite") or {}).get("status", "")[:60],
                "prompt_tokens": server.get("prompt_tokens"),
                "cached_tokens": server.get("cached_tokens"),
            }
            rows.append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
    stub.stop()
    replies = [r for r in stub.slow.log if r.purpose == "reply"][1:]
    total = sum(r.prompt_tokens for r in replies)
    figures = {
        "turns": args.turns,
        "within_deadline": within,
        "deadline_s": args.deadline,
        "prompt_per_s": round(prompt_per_s, 1),
        "gen_per_s": round(gen_per_s, 2),
        "scale": args.scale,
        "rewrite": args.rewrite,
        "requests": [r.purpose for r in stub.slow.log].count("query_rewrite") + len(replies) + 1,
        "rewrite_requests": [r.purpose for r in stub.slow.log].count("query_rewrite"),
        "cancelled": sum(1 for r in stub.slow.log if r.cancelled),
        "reply_cache_reuse_from_turn_2": round(sum(r.cached for r in replies) / total, 3) if total else None,
        "mean_reply_prompt_tokens": round(total / len(replies)) if replies else None,
    }
    print(json.dumps(figures, ensure_ascii=False))


def scenario_reuse(scenario: str, condition: str, context_tokens: int) -> None:
    """`--scenario`: the scenario's reply prompts' cache reuse (module doc)."""
    import subprocess

    stub = OpenAIStub().start()
    stub.reader = True
    stub.slow = SlowServer(prompt_per_s=5000, gen_per_s=2000)
    env = dict(
        os.environ,
        OPENAI_API_KEY="local",
        OPENAI_BASE_URL=stub.base_url,
        PERSONALAB_LLM="openai",
        PERSONALAB_TURN_DEADLINE="30",
        PERSONALAB_QUERY_REWRITE="rules",
        PERSONALAB_CONTEXT_TOKENS=str(context_tokens),
        PERSONALAB_MAX_REPLY_TOKENS="256",
        PERSONALAB_RECALL_TURNS="10",
        PERSONALAB_RECALL_STEP="5",
        PERSONALAB_MAINTENANCE_EVERY="10",
    )
    with tempfile.TemporaryDirectory(prefix="slowbench-scenario-") as data:
        command = [sys.executable, "-m", "personalab.evals", "eval", "run", scenario, "--conditions", condition]
        command += ["--model", "openai", "--no-judge", "--parallel", "1", "--no-progress"]
        command += ["--out", str(Path(data) / "out"), "--data-dir", str(Path(data) / "stores")]
        played = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    stub.stop()
    replies = [r for r in stub.slow.log if r.purpose == "reply"][1:]
    total = sum(r.prompt_tokens for r in replies)
    figures = {
        "scenario": scenario,
        "condition": condition,
        "eval_exit_code": played.returncode,
        "reply_requests": len(replies) + 1,
        "other_requests": sum(1 for r in stub.slow.log if r.purpose != "reply"),
        "reply_cache_reuse_from_turn_2": round(sum(r.cached for r in replies) / total, 3) if total else None,
        "mean_reply_prompt_tokens": round(total / len(replies)) if replies else None,
    }
    print(json.dumps(figures, ensure_ascii=False))


if __name__ == "__main__":
    main()
