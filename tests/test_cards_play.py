"""Playing a card (issue 28): a retrieval cut by its time cap is said in the turn's output, a long message comes
from standard input, the turn's debug has the world-book scan, a V3 export has `group_only_greetings`."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli
from personalab.nodes import rag_retrieve
from personalab.stores.cards import export_v3, parse_card_bytes


def sample_instance(capsys: pytest.CaptureFixture[str]) -> str:
    code, out, _ = cli(capsys, "instance", "create", "--sample")
    assert code == 0
    return out.strip()


def test_a_retrieval_cut_by_its_time_cap_is_said_in_one_line(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = sample_instance(capsys)
    monkeypatch.setenv("PERSONALAB_RAG_TIMEOUT", "0.05")
    slow = rag_retrieve.gather

    def stuck(*args: Any) -> Any:
        time.sleep(0.5)  # a search that overruns the cap, whatever the machine
        return slow(*args)

    monkeypatch.setattr(rag_retrieve, "gather", stuck)
    code, out, _ = cli(capsys, "turn", "--instance", instance, "雷娜，出发吧。")
    assert code == 0
    notices = [line for line in out.splitlines() if "retrieval" in line]
    assert notices == ["  — retrieval timed out after 0.05 s: the turn goes on without retrieved memory"]
    code, out, _ = cli(capsys, "turn", "--instance", instance, "再往前走走。", "--json")
    result = json.loads(out)
    assert result["retrieval_status"].startswith("timed out after 0.05 s")
    assert result["notice"] == f"retrieval {result['retrieval_status']}"


def test_a_first_turn_builds_its_keyword_index_before_the_cap_and_keeps_its_retrieval(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process's first turn on an instance with many memories (a one-shot `personalab turn`, a server's first turn
    after a start) reads and indexes all of them: that happens before the time cap, as the world book's load does, so
    the cap cannot cut the turn's retrieval at start-up. The slow build is forced here; one build, not one per
    thread that wants the index."""
    from personalab.stores import memory
    from personalab.stores.memory_index import clear_index_cache

    instance = sample_instance(capsys)
    assert cli(capsys, "turn", "--instance", instance, "我的狗叫豆包。")[0] == 0
    clear_index_cache()  # as a new process: no index kept
    builds: list[int] = []
    rows = memory.index_rows

    def slow_rows(*args: Any) -> Any:
        builds.append(1)
        time.sleep(3.0)  # indexing many memories on a slow machine, longer than the cap below
        return rows(*args)

    monkeypatch.setattr(memory, "index_rows", slow_rows)
    # the cap well above what the search itself takes even on a loaded machine, below the forced build
    monkeypatch.setenv("PERSONALAB_RAG_TIMEOUT", "2.5")
    code, out, _ = cli(capsys, "turn", "--instance", instance, "还记得我的狗叫什么吗？", "--json")
    assert code == 0
    result = json.loads(out)
    retrieval = result["debug"]["retrieval"]
    assert (result["retrieval_status"], result["notice"]) == ("ok", None), retrieval.get("status")
    assert retrieval["index_prepare_ms"] >= 3000 and len(builds) == 1


def test_a_turn_that_retrieved_says_nothing_more_and_reports_the_scan(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instance = sample_instance(capsys)
    code, out, _ = cli(capsys, "turn", "--instance", instance, "你好", "--json")
    result = json.loads(out)
    assert (result["retrieval_status"], result["notice"]) == ("ok", None)
    scan = result["debug"]["retrieval"]["worldbook_scan"]
    assert set(scan) == {"entries", "fired", "load_ms", "scan_ms"}
    code, out, _ = cli(capsys, "turn", "--instance", instance, "你好")
    assert "retrieval" not in out


def test_turn_reads_the_message_from_standard_input(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = sample_instance(capsys)
    message = "第一段：我们到了废墟边上。\n\n第二段：" + "风很大。" * 300
    monkeypatch.setattr("sys.stdin", io.StringIO(message))
    code, out, _ = cli(capsys, "turn", "--instance", instance, "-", "--json")
    assert code == 0
    result = json.loads(out)
    assert message in result["prompt"][-1]["content"]


def test_a_v3_export_always_has_group_only_greetings() -> None:
    v2 = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": "Mira", "description": "A courier."}}
    card = parse_card_bytes(json.dumps(v2).encode(), "mira.json")
    assert export_v3(card)["data"]["group_only_greetings"] == []


def test_get_instance_gives_the_thread_of_its_turns(data_dir: Path) -> None:
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app
    from personalab.graph.runner import turn_config

    client = TestClient(app)
    character = client.post("/characters", json={"name": "Mira"}).json()
    background = client.post("/backgrounds", json={"name": "Harbour", "outline": ["arrive"]}).json()
    made = client.post("/instances", json={"character_id": character["id"], "background_id": background["id"]})
    instance = client.get(f"/instances/{made.json()['id']}").json()
    assert instance["thread_id"] == turn_config(instance["id"])["configurable"]["thread_id"]
    assert made.json()["thread_id"] == instance["thread_id"]
