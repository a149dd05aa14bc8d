"""`personalab bench turn` with tiny sizes: the fixture it builds and the shape of its report (no timings)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from personalab.evals.__main__ import main

NUMBER = r"\d+\.\d"
NODES_EVERY_TURN = ("history_fetch", "memory_build", "query_rewrite", "rag_retrieve", "generate", "write_back")


def test_bench_turn_reports_nodes_totals_and_the_goal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "bench"
    argv = ["bench", "turn", "--history-turns", "20", "--events", "100", "--turns", "3", "--data-dir", str(data)]
    assert main(argv) == 0
    out = capsys.readouterr().out

    assert "20-turn history, 100 archived events (20 of this instance), 2 measured turns (+1 warm-up)" in out
    assert "model: scripted (offline" in out
    for node in NODES_EVERY_TURN:  # skipped warm-up: every node row counts the 2 measured turns
        assert re.search(rf"^  {node} +2 +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}$", out, re.M), node
    for row in ("framework", "total per turn", "total - generate", "total - model calls", "GC pauses \\(in total\\)"):
        assert re.search(rf"^  {row} +2 +{NUMBER} +{NUMBER} *$", out, re.M), row
    assert re.search(
        rf"^goal: p95 at most 100 ms excluding the model's time \(generate\): {NUMBER} ms — (met|NOT met)$", out, re.M
    )
    assert re.search(r"^  checkpoint: [\d,]+ KiB serialized \(biggest channels, KiB: \w+ ", out, re.M)

    # the fixture is where --data-dir says: the history chain plus the measured turns, the events in Chroma
    from personalab.stores.db import dispose_engines, session_scope
    from personalab.stores.history import get_chat_history
    from personalab.stores.vectors import get_collection

    engine_url = f"sqlite:///{data / 'personalab.db'}"
    with session_scope(engine_url) as session:
        history = get_chat_history(session, 1)
    dispose_engines()
    users = [line for line in history if line.attribute == "user"]
    assert len(users) == 23 and len(history) >= 2 * 23
    assert all(line.parent_line_id == previous.id for previous, line in zip(history, history[1:], strict=False))
    client = get_collection("events_1_1", path=str(data / "chroma"))._client
    stories = [c for c in client.list_collections() if c.name.startswith("events_")]
    assert sum(c.count() for c in stories) == 100 + 3  # one archived event per measured turn


def test_bench_turn_compares_consolidation_off_and_on_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26: `--facts 2 --compare-consolidation` alternates blocks of two turns (one telling where the user lives
    now) between consolidation off and on; the report compares the sides and gives the consolidation's own cost."""
    data = tmp_path / "bench"
    argv = ["bench", "turn", "--history-turns", "20", "--events", "100", "--turns", "5", "--data-dir", str(data)]
    assert main([*argv, "--facts", "2", "--compare-consolidation"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^  writes after the turn +4 +{NUMBER} +{NUMBER}$", out, re.M), out
    assert "consolidation off / on (alternating blocks of 2 turns; p50 / p95 ms):" in out
    for label in ("total - generate", "writes after the turn"):  # measured turns 1 and 4 off, 2 and 3 on
        assert re.search(rf"^  {label} +2 +{NUMBER} +{NUMBER} +2 +{NUMBER} +{NUMBER}$", out, re.M), label
    assert re.search(rf"^    of the fact turns +1 +{NUMBER} +{NUMBER} +1 +{NUMBER} +{NUMBER}$", out, re.M), out
    assert re.search(
        r"^ratio on / off of the turn without the model at p95: \d+\.\d\d \(goal at most 1\.1\) — ", out, re.M
    )
    assert re.search(
        r"^  its own work \(the outbox's decisions and fact rows, 1 fact turns\): wall p50 / p95 ", out, re.M
    )
    assert re.search(r"^consolidation's own cost \(off the reply's path\): -?\d+\.\d ms per fact turn ", out, re.M)

    # of the three fact turns (0 and 4 off, 2 on) only the one played with consolidation on stored its fact
    from personalab.stores.consolidation import consolidation_steps
    from personalab.stores.db import dispose_engines

    steps = consolidation_steps(f"sqlite:///{data / 'personalab.db'}", 1)
    dispose_engines()
    assert [(step["action"], step["slot"], step["turn"]) for step in steps] == [("add", "住处", 23)]


def test_bench_turn_needs_a_measured_turn_after_the_warm_up(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "turn", "--turns", "1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "personalab-evals: error: --turns must be at least 2 (the first is a warm-up), got 1"


def test_a_benchmark_keeps_its_data_dir_and_removes_its_temporary_one(tmp_path: Path) -> None:
    from personalab.evals.data_dir import data_folder

    with data_folder(str(tmp_path / "kept" / "here"), "unused-") as kept:
        (kept / "f").write_text("x")
    assert (tmp_path / "kept" / "here" / "f").read_text() == "x"
    with data_folder(None, "personalab-test-") as temporary:
        assert temporary.is_dir() and temporary.name.startswith("personalab-test-")
    assert not temporary.exists()
