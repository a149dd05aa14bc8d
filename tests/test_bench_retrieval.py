"""`personalab bench retrieval` with tiny sizes: the fixture it builds and the shape of its report (no timings)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from personalab.evals.__main__ import main

NUMBER = r"\d+\.\d"


def test_bench_retrieval_reports_latency_steps_memory_growth_and_the_goals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "bench"
    argv = ["bench", "retrieval", "--memories", "300", "--instances", "3", "--pool", "20"]
    argv += ["--retrievals", "6", "--inserts", "4", "--after-insert", "2", "--data-dir", str(data)]
    assert main(argv) == 0
    out = capsys.readouterr().out

    # a play-through's proportion: per turn one curated memory beside 2.5 record lines (100 an instance: 29 + 71)
    assert "300 memories over 3 instances (213 of them dialogue-record entries, the rest curated); 20 distinct" in out
    assert re.search(r"RetrievalConfig\(\) \(scene weights, marks mentioned\): 6 retrievals$", out, re.M)
    for row in ("total", "embed", "bm25", "vector", "load", "score", "mark"):
        assert re.search(rf"^  {row} +{NUMBER} +{NUMBER} +{NUMBER}$", out, re.M), row
    assert re.search(rf"^goal: p95 at most 30 ms: {NUMBER} ms — (met|NOT met) \(seed 004: under 100 ms", out, re.M)
    assert re.search(
        rf"^insert \(add_memory, its embedding included\): p50 {NUMBER} ms, p95 {NUMBER} ms over 4$", out, re.M
    )
    assert re.search(rf"^retrieval right after an insert .*: p50 {NUMBER} ms, p95 {NUMBER} ms over 2$", out, re.M)
    assert re.search(
        rf"^memory \(RSS\): baseline [\d,]+\.\d MiB after the warm-up; after 6 retrievals [\d,]+\.\d MiB "
        rf"\([+-]{NUMBER} %\); after 4 more inserts [\d,]+\.\d MiB \([+-]{NUMBER} %\)$",
        out,
        re.M,
    )
    assert re.search(rf"^goal: growth under 5 %: [+-]{NUMBER} % — (met|NOT met)$", out, re.M)

    # the fixture is where --data-dir says: the memories spread over the instances, the inserts on top
    from personalab.stores.db import dispose_engines
    from personalab.stores.memory import MemoryStore

    store = MemoryStore(db_url=f"sqlite:///{data / 'personalab.db'}", chroma_path=str(data / "chroma"))
    counts = [store.count(instance) for instance in (1, 2, 3)]
    mentioned = sum(m.mention_count > 0 for instance in (1, 2, 3) for m in store.list_memories(instance))
    record = [store.list_memories(instance, type="record") for instance in (1, 2, 3)]
    curated = store.list_memories(1)
    dispose_engines()
    assert counts == [100 + 2 + 1, 100 + 1 + 1, 100 + 1]  # 4 inserts and 2 insert + retrieval pairs, round-robin
    assert [len(entries) for entries in record] == [71, 71, 71]
    assert all(m.layer == "record" and m.line_id for entries in record for m in entries)
    assert sum("\n" in m.content for m in record[0]) >= 69  # each line with the lines before it as context
    # the fixture's 29 curated memories (the inserts come after them) in the layers the flow keeps: the newest 10
    # active, the older ones situational
    layers = [m.layer for m in curated[:29]]
    assert layers == ["situational"] * 19 + ["active"] * 10

    # a second run in the same folder measures on the fixture the first left (no second fixture)
    again = [
        "bench",
        "retrieval",
        "--retrievals",
        "3",
        "--inserts",
        "0",
        "--after-insert",
        "0",
        "--data-dir",
        str(data),
    ]
    assert main(again) == 0
    out = capsys.readouterr().out
    assert (
        f"306 memories over 3 instances (213 of them dialogue-record entries, the rest curated), the fixture of an earlier run kept in {data}"
        in out
    )
    assert re.search(r"RetrievalConfig\(\) \(scene weights, marks mentioned\): 3 retrievals$", out, re.M)
    assert mentioned > 0  # the retrievals ran the turn's path, marking what they found


def test_bench_retrieval_rejects_impossible_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "retrieval", "--memories", "5", "--instances", "10"]) == 2
    assert (
        capsys.readouterr().err.strip() == "personalab-evals: error: --memories (5) must be at least --instances (10)"
    )
    assert main(["bench", "retrieval", "--retrievals", "0"]) == 2
    assert capsys.readouterr().err.strip() == "personalab-evals: error: --retrievals must be at least 1, got 0"
