"""`bench load` (issue 14 Load): users playing at once through `langgraph dev` on PostgreSQL and a Chroma server.

A small run (2 users x 2 instances x 2 turns, each user with their own bearer token) of the same command README's
figures come from: every turn answered, none lost, each user sees only their own instances, every stored line
recorded in memory exactly once and on its own instance. The figures themselves are not asserted (timing)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from personalab.evals import bench_load

REPO = Path(__file__).resolve().parents[1]


def test_users_playing_at_once_through_the_served_graph_lose_nothing(
    postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    bench_load.register(parser.add_subparsers())
    out = tmp_path / "load.json"
    args = parser.parse_args(
        [
            "load",
            "--users", "2",
            "--instances", "2",
            "--turns", "2",
            "--postgres-url", postgres_url.split("?")[0],
            "--repo", str(REPO),
            "--data-dir", str(tmp_path / "load"),
            "--json", str(out),
            "--auth",
        ]
    )  # fmt: skip
    code = args.handler(args)
    printed = capsys.readouterr().out
    summary = json.loads(out.read_text(encoding="utf-8"))
    assert code == 0, (
        printed + "\n" + (tmp_path / "load" / "langgraph-dev-1" / "server" / "server.log").read_text(errors="replace")
    )
    assert summary["errors"] == [] and summary["turns_lost"] == 0
    assert summary["database"] == "postgresql" and summary["chroma"] == "server"
    assert summary["auth"] and summary["crossed"] == 0  # each user lists their own instances only
    # the stored dialogue, line by line: nothing lost, stored twice, crossed or half-written
    assert summary["integrity"] == {
        "lost": 0, "duplicated": 0, "crossed_lines": 0, "half_written": 0, "stored_after_error": 0
    }  # fmt: skip
    # the memories, after the outbox caught up: every stored line recorded exactly once, on its own instance
    remembered = summary["memory_integrity"]
    assert remembered["memories"] > 0
    assert {key: remembered[key] for key in ("missing", "duplicated", "crossed")} == {
        "missing": 0, "duplicated": 0, "crossed": 0
    }  # fmt: skip
    assert "memories checked after the load: memories" in printed
    assert "2 users x 2 instances x 2 turns = 8 turns under load" in printed
    # the server-side per-turn time came back with every turn (the graph's own, and without the model's call)
    overhead, graph = summary["overhead_ms"], summary["graph_ms"]
    assert overhead["alone"] and overhead["load"] and graph["load"]
    assert 0 < overhead["load"]["p50"] <= graph["load"]["p50"] <= summary["load_ms"]["p50"]
