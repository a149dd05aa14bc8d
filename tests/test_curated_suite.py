"""The curated-memory scenario suite (issue 26) and what it plays through: `eval run` scores changing facts, repeated
facts, private thoughts and who witnessed what (goals in the scenario file; a missed one exits 1), in process and
through one-shot CLI processes; NPC recall and the consolidation's undo on the one door (API and CLI), bad input
one line and nothing lost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli, one_line
from personalab.evals.entry import main as eval_main
from personalab.graph.api import PersonaLab
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.stores.background import flush_event_writes
from personalab.stores.consolidation import consolidate_message
from personalab.stores.memory import MemoryStore

# small copies of the shipped suite's four kinds (evals/scenarios/curated/), with a recent window of 2 turns
CHANGING = """
name: changing
character: {sample: wasteland}
background: {sample: wasteland}
user_name: 莱姆
settings: {consolidation: true}
goals: {probe_checks_min_percent: 100, duplicates_max: 0}
turns:
  - user: 我是一名护士，在医院上夜班。
  - {filler: 3, seed: 31}
  - user: 对了，我是一名老师了，不当护士了。
  - {filler: 3, seed: 32}
  - probe: 我现在做什么工作？
    expect: {retrieved: [老师], prompt_lacks: [在医院上夜班]}
  - probe: 我以前做什么工作？
    expect: {retrieved: [护士, 已过时], order: [我是一名老师, 在医院上夜班]}
"""
REPEATED = """
name: repeated
character: {sample: wasteland}
background: {sample: wasteland}
user_name: 莱姆
goals: {probe_checks_min_percent: 100, duplicates_max: 0}
turns:
  - user: 我的狗叫豆包。
  - {filler: 3, seed: 41}
  - user: 我的狗叫豆包。
  - {filler: 1, seed: 42}
  - probe: 我的狗叫什么名字？
    expect: {retrieved: [豆包]}
"""
PRIVATE = """
name: private
character: {sample: wasteland}
background: {sample: wasteland}
user_name: 莱姆
memories:
  - {content: 雷娜内心其实害怕黑暗，从不告诉别人, type: internal, importance: 0.9}
goals: {probe_checks_min_percent: 100, private_sayable_max: 0}
turns:
  - user: 天黑了，我们点个火吧。
  - probe: 雷娜，你害怕黑暗吗？
    expect: {private: [害怕黑暗]}
"""
WITNESSED = """
name: witnessed
character: {sample: wasteland}
background: {sample: wasteland}
user_name: 莱姆
goals: {probe_checks_min_percent: 100, unwitnessed_max: 0}
turns:
  - user: 老陈，你怎么也在这儿？
    lines_before:
      - {display_name: 老陈, script_role_id: laochen, content: 进据点的暗号是“铁锅炖大鹅”。我先走了。}
  - {filler: 4, seed: 61}
  - user: 雷娜，只告诉你：金库的钥匙我藏在了水塔顶上。
  - {filler: 2, seed: 62}
  - probe: 金库的钥匙藏在哪里？
    expect: {retrieved: [水塔顶上]}
  - recall: 金库的钥匙藏在哪里？
    npc: laochen
    expect: {lacks: [水塔]}
  - recall: 进据点的暗号是什么？
    npc: laochen
    expect: {retrieved: [铁锅炖大鹅]}
"""


def write(folder: Path, name: str, text: str) -> str:
    path = folder / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def run_eval(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = eval_main(["eval", "run", *argv, "--no-progress"])
    out, err = capsys.readouterr()
    return code, out + err


def curated(out: Path) -> dict[str, dict[str, Any]]:
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return {s["name"]: s["curated"] for s in report["scenarios"]}


def test_the_shipped_suite_sets_a_goal_for_each_kind() -> None:
    from personalab.evals.scenario import expand_turns, load_scenarios

    suite = {s.name: s for s in load_scenarios(["shipped/curated"])}
    goals = {name: s.goals.model_dump(exclude_none=True) for name, s in suite.items() if s.goals}
    assert goals["curated_changing_facts"]["probe_checks_min_percent"] == 100
    assert suite["curated_changing_facts"].settings and suite["curated_changing_facts"].settings.consolidation
    assert goals["curated_repeated_facts"]["duplicates_max"] == 0
    assert goals["curated_private_thoughts"]["private_sayable_max"] == 0
    assert any(m.type == "internal" for m in suite["curated_private_thoughts"].memories)
    assert goals["curated_multi_character"]["unwitnessed_max"] == 0
    assert any(step.kind == "recall" and step.npc for step in expand_turns(suite["curated_multi_character"]))


def test_the_suite_meets_its_goals_in_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_RECALL_TURNS", "2")  # facts leave the recent dialogue after 2 turns
    paths = [write(tmp_path, n, t) for n, t in (("c", CHANGING), ("r", REPEATED), ("p", PRIVATE), ("w", WITNESSED))]
    out = tmp_path / "out"
    _code, text = run_eval(capsys, *paths, "--out", str(out), "--parallel", "2")
    # every goal is met but the duplicates goal (0 user lines shown twice), which issue 26 still has open
    # (docs/benchmarks/2026-11-27-curated.md): the exit code is 1 for that alone
    missed = [line for line in text.splitlines() if line.startswith("GOAL MISSED")]
    assert all("user lines shown twice in a prompt" in line for line in missed), text
    figures = curated(out)
    # the current job first, the old one only for a question about the past, after it and marked no longer true
    assert figures["changing"]["probe_checks"] == {"passed": 5, "total": 5, "percent": 100.0}
    assert figures["repeated"]["probe_checks"]["percent"] == 100.0
    assert figures["private"]["private_sayable"] == 0 and figures["private"]["probe_checks"]["passed"] == 1
    # the NPC was not there when the key was hidden: it recalls the password, not the key
    assert figures["witnessed"]["unwitnessed"] == 0 and figures["witnessed"]["witness_checked"] > 0
    assert figures["witnessed"]["probe_checks"] == {"passed": 3, "total": 3, "percent": 100.0}
    report = (out / "report.md").read_text(encoding="utf-8")
    curated_rows = report.split("## Curated memory")[1].splitlines()
    assert [row for row in curated_rows if "**NO**" in row and "shown twice" not in row] == []


def test_a_missed_curated_goal_exits_1_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_RECALL_TURNS", "2")
    path = write(
        tmp_path,
        "miss",
        PRIVATE.replace("name: private", "name: miss").replace("private: [害怕黑暗]", "private: [从未说过的事]"),
    )
    code, text = run_eval(capsys, path, "--out", str(tmp_path / "out"))
    assert code == 1, text
    assert "GOAL MISSED miss: probe checks on the prompt passed (%): 0 (0/1) (goal ≥ 100)" in text


def test_the_npc_recall_through_one_shot_cli_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # one filler turn fewer (each is a process) and a recent window of one turn: the probe's turn 8 shows turn 7 in
    # its recent dialogue, so the key told at turn 6 comes from memory (as with two fillers and a window of two)
    monkeypatch.setenv("PERSONALAB_RECALL_TURNS", "1")
    path = write(tmp_path, "w", WITNESSED.replace("{filler: 2, seed: 62}", "{filler: 1, seed: 62}"))
    out = tmp_path / "out"
    code, text = run_eval(capsys, path, "--out", str(out), "--via", "cli")
    assert code == 0, text
    figures = curated(out)["witnessed"]
    assert figures["unwitnessed"] == 0 and figures["probe_checks"]["percent"] == 100.0


# --- the one door: recall and undo --------------------------------------------------------------------------------


def play(instance: int, message: str, **extra: Any) -> None:
    with turn_graph(Context(recall_turns=2, rag_timeout_s=30.0, consolidation=True)) as (graph, context):
        run_turn(graph, context, instance, message, user_name="莱姆", **extra)
    flush_event_writes()


def test_npc_recall_on_the_api_and_the_cli(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    instance = create_sample_instance(None)
    npc_line = {
        "attribute": "assistant",
        "display_name": "老陈",
        "script_role_id": "laochen",
        "content": "外面全是沙。",
    }
    play(instance, "老陈，你来了", lines_before=[npc_line])
    for filler in ("今天风好大", "我们去看看水井", "先休息一下吧"):
        play(instance, filler)
    play(instance, "雷娜，金库的钥匙我藏在了水塔顶上")
    api = PersonaLab()
    npc = api.memories.recall(instance, "金库的钥匙藏在哪里？", npc="laochen")
    assert npc["witness"] == "npc:laochen" and not any("水塔" in i["content"] for i in npc["items"])
    assert any("水塔" in i["content"] for i in api.memories.recall(instance, "金库的钥匙藏在哪里？")["items"])
    code, out, _ = cli(capsys, "memory", "recall", "--instance", str(instance), "--npc", "laochen", "--json", "沙")
    assert code == 0 and any("外面全是沙" in i["content"] for i in json.loads(out)["items"])
    with pytest.raises(InvalidInput, match="xiaomiao"):
        api.memories.recall(instance, "钥匙", npc="xiaomiao")
    code, _, err = cli(capsys, "memory", "recall", "--instance", str(instance), "--npc", "xiaomiao", "钥匙")
    assert code == 2 and "'xiaomiao' is not in the scene" in one_line(err)


def test_undo_on_the_api_and_the_cli_and_a_step_naming_nothing_loses_nothing(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instance = create_sample_instance(None)
    store = MemoryStore()
    (add,) = consolidate_message(store, instance, message="我住在北京。", user_name="莱姆", turn=1)
    (update,) = consolidate_message(store, instance, message="我搬到上海了", user_name="莱姆", turn=30)
    api = PersonaLab()
    assert [s["action"] for s in api.memories.steps(instance)] == ["add", "update"]
    before = [m.id for m in api.memories.list(instance).items]
    code, _, err = cli(capsys, "memory", "undo", "--instance", str(instance), "9999")
    assert code == 2 and "consolidation step 9999 not found" in one_line(err)
    with pytest.raises(NotFound, match="9999"):
        api.memories.undo(instance, 9999)
    assert [m.id for m in api.memories.list(instance).items] == before  # nothing lost
    code, out, err = cli(capsys, "memory", "undo", "--instance", str(instance), str(update["id"]))
    assert code == 0, err
    assert f"step {update['id']} undone" in out
    reopened = store.get_memory(instance, add["memory_id"])
    assert reopened.valid_to_turn is None and reopened.superseded_by is None
    code, out, _ = cli(capsys, "memory", "steps", "--instance", str(instance))
    assert "(undone)" in out


def test_recall_and_undo_over_http(sqlite_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi.testclient import TestClient

    monkeypatch.setenv("PERSONALAB_DATABASE_URL", sqlite_url)
    from personalab.graph.http.app import app

    instance = create_sample_instance(sqlite_url)
    store = MemoryStore(db_url=sqlite_url)
    consolidate_message(store, instance, message="我住在北京。", user_name="莱姆", turn=1)
    (update,) = consolidate_message(store, instance, message="我搬到上海了", user_name="莱姆", turn=30)
    with TestClient(app) as client:
        steps = client.get(f"/instances/{instance}/consolidation-steps")
        assert steps.status_code == 200 and [s["action"] for s in steps.json()] == ["add", "update"]
        missing = client.post(f"/instances/{instance}/consolidation-steps/9999/undo")
        assert missing.status_code == 404 and "9999" in missing.text
        undone = client.post(f"/instances/{instance}/consolidation-steps/{update['id']}/undo")
        assert undone.status_code == 200 and undone.json()["undone_at"]
        stranger = client.post(f"/instances/{instance}/memories/recall", json={"query": "钥匙", "npc": "xiaomiao"})
        assert stranger.status_code == 422 and "xiaomiao" in stranger.text
        mine = client.post(f"/instances/{instance}/memories/recall", json={"query": "住在哪里"})
        assert mine.status_code == 200 and mine.json()["witness"].startswith("role:")


def test_an_entry_quoting_a_presented_line_or_quoted_by_one_is_a_duplicate() -> None:
    from personalab.nodes.rules.curation import drop_repeated_exchanges

    echo = {"kind": "memory", "id": 1, "turn": 30, "type": "record", "line_id": 60}
    echo["content"] = "雷娜：我想起来了——第2轮：莱姆说「我最爱吃红烧肉。」"
    old = {"kind": "memory", "id": 2, "turn": 2, "type": "record", "line_id": 3, "content": "莱姆：我最爱吃红烧肉。"}
    # the window has the line: a memory quoting it is a duplicate
    kept, dups, _ = drop_repeated_exchanges([echo], turn=50, window_turns=2, window_lines=["莱姆：我最爱吃红烧肉。"])
    assert not kept and dups[0]["of"] == "recall_window"
    # a reply in the window quoted it: the old line is a duplicate too
    kept, dups, _ = drop_repeated_exchanges([old], turn=50, window_turns=2, window_lines=[echo["content"]])
    assert not kept and dups[0]["id"] == 2
    # a line a later fact closed is never another entry's context
    reply = {**echo, "id": 3, "content": "莱姆：我是一名护士，在医院上夜班。\n雷娜：好的。"}
    kept, _, _ = drop_repeated_exchanges(
        [reply], turn=50, window_turns=2, closed_lines=["莱姆：我是一名护士，在医院上夜班。"]
    )
    assert kept[0]["content"] == "雷娜：好的。"


def test_a_turn_memory_is_no_duplicate_of_its_own_reply_in_the_window_but_is_of_a_quoted_line() -> None:
    """A turn memory whose reply pieces the recall window shows again (the character said the same words since) is
    what tells the model what the user said then: no duplicate. The turn just before this one is in the recent
    dialogue itself (a one-turn window shows it whole). A turn memory whose reply quotes another speaker's line
    already presented (a memory it echoes) still is a duplicate."""
    from personalab.nodes.rules.curation import drop_repeated_exchanges

    turn = {"kind": "memory", "id": 7, "turn": 2, "type": "conversation", "line_id": None}
    turn["content"] = (
        "第2轮：用户说「我妹妹叫林小禾，住在银杏镇。」；雷娜回应「【惊讶】关于「妹妹叫林小禾」，我记在心里了。【平静】走吧。」"
    )
    window = ["雷娜：【平静】走吧。", "用户：她住在哪？"]  # turn 3's reply said "走吧" again; turn 4's line
    kept, dups, _ = drop_repeated_exchanges([turn], turn=4, window_turns=1, window_lines=window)
    assert [item["id"] for item in kept] == [7] and not dups
    kept, dups, in_window = drop_repeated_exchanges([turn], turn=3, window_turns=1, window_lines=window)
    assert not kept and not dups and in_window == [7]
    echo = {**turn, "id": 9, "turn": 30}
    echo["content"] = "第30轮：用户说「还记得吗」；雷娜回应「我想起来了——莱姆说「我最爱吃红烧肉。」」"
    kept, dups, _ = drop_repeated_exchanges([echo], turn=50, window_turns=2, window_lines=["莱姆：我最爱吃红烧肉。"])
    assert not kept and dups[0]["of"] == "recall_window"
