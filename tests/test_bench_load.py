"""`bench load` (issue 14 Load): users playing at once through `langgraph dev` on PostgreSQL and a Chroma server.

A small run (2 users x 2 instances x 2 turns, each user with their own bearer token) of the same command README's
figures come from: every turn answered, none lost, each user sees only their own instances, every stored line
recorded in memory exactly once and on its own instance. The figures themselves are not asserted (timing)."""

from __future__ import annotations

import argparse
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from personalab.evals import bench_load
from personalab.nodes.rules.errors import InvalidInput

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


def test_a_load_cut_at_its_deadline_stops_its_clients_and_servers_and_drops_its_schema(
    postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--deadline`: a load far longer than its deadline (the server still starting, or the users playing, when it
    comes) ends at it with exit code 1 and one line saying so and what was played; the server is stopped, the
    clients' threads end, and the schema made for the load is dropped (issue 27: a stuck server or client must
    not hang `bench load` forever)."""
    made: list[str] = []
    real_schema = bench_load.postgres_schema

    @contextmanager
    def recorded_schema(base_url: str) -> Iterator[str]:
        with real_schema(base_url) as url:
            made.append(url.rsplit("%3D", 1)[1])
            yield url

    monkeypatch.setattr(bench_load, "postgres_schema", recorded_schema)
    parser = argparse.ArgumentParser()
    bench_load.register(parser.add_subparsers())
    out = tmp_path / "load.json"
    base = postgres_url.split("?")[0]
    args = parser.parse_args(
        [
            "load",
            "--users", "2",
            "--instances", "2",
            "--turns", "200",
            "--chroma", "embedded",
            "--postgres-url", base,
            "--repo", str(REPO),
            "--data-dir", str(tmp_path / "load"),
            "--json", str(out),
            "--deadline", "3",
        ]
    )  # fmt: skip
    code = args.handler(args)
    printed = capsys.readouterr().out
    assert code == 1, printed
    cut = [line for line in printed.splitlines() if line.startswith("bench load: cut at the deadline (3 s)")]
    assert len(cut) == 1 and "800 planned under load" in cut[0], printed
    assert json.loads(out.read_text(encoding="utf-8"))["cut_at_deadline"] == cut[0]
    # the server, when it had been started, is stopped (its process group gone) and the clients' threads end
    pid_file = tmp_path / "load" / "langgraph-dev-1" / "server" / "server.pid"
    if pid_file.exists():
        with pytest.raises(ProcessLookupError):
            os.killpg(int(pid_file.read_text()), 0)
    for client in [thread for thread in threading.enumerate() if thread.name.startswith("load-")]:
        client.join(timeout=30)
        assert not client.is_alive()
    # the load's schema is dropped
    assert len(made) == 1
    with psycopg.connect(base.replace("postgresql+psycopg://", "postgresql://", 1)) as conn:
        left = conn.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (made[0],))
        assert left.fetchone() is None


@pytest.mark.parametrize("deadline", ["0", "-5", "nan"])
def test_a_deadline_that_is_not_a_positive_number_of_seconds_is_refused_before_anything_starts(deadline: str) -> None:
    parser = argparse.ArgumentParser()
    bench_load.register(parser.add_subparsers())
    args = parser.parse_args(["load", "--postgres-url", "", "--deadline", deadline])
    with pytest.raises(InvalidInput, match="--deadline must be a positive number of seconds"):
        args.handler(args)
