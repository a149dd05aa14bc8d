"""The character's persona changes archived as searchable memories (seed 002 需求2 三层记忆架构: Archival Memory =
历史人格变化事件, written only when the character changes, off the reply's path; issue 26): a maintenance run with the
offline scripted model archives its changes once, search and the CLI find them, the prompt presents them as the
character's own history, a rewind leaves them on their branch, a core-memory rollback closes (never deletes) the
changes of the versions it undoes. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cli_helpers import cli
from personalab.graph.api import library
from personalab.graph.api.facade import PersonaLab
from personalab.nodes.rules.core_memory import CoreMemoryHistory
from personalab.nodes.rules.persona_changes import (
    lineage,
    persona_change_memory,
    persona_changes,
)
from personalab.nodes.rules.prompts import PERSONA_HISTORY_HEADER
from personalab.stores.background import flush_event_writes
from personalab.stores.memory import MemoryStore
from personalab.stores.persona_changes import archive_persona_changes

CHANGE = "与用户谈到"  # the scripted model's recent_changes entry starts so (nodes/scripted_llm.py)


def _instance(url: str) -> int:
    character = library.create_character(
        {"name": "雷娜", "traits": "冷静、警惕", "motives": "找到失散的妹妹"}, database_url=url
    )
    background = library.create_background({"name": "废土", "outline": ["相遇", "同行", "离别"]}, database_url=url)
    return library.create_instance({"character_id": character.id, "background_id": background.id}, database_url=url).id


def _turns(url: str, instance: int, messages: list[str], every: int = 2) -> dict[str, Any]:
    from personalab.graph.runner import run_turn, turn_graph
    from personalab.nodes.context import Context

    state: dict[str, Any] = {}
    with turn_graph(Context(database_url=url, maintenance_every=every)) as (graph, ctx):
        for message in messages:
            state = run_turn(graph, ctx, instance, message)
    flush_event_writes()
    return state


def _changes(url: str, instance: int, **options: Any) -> list[Any]:
    return PersonaLab(database_url=url).memories.list(instance, type="persona_change", **options).items


# --- what counts as a change (pure) -----------------------------------------------------------------------------


def _core(**fields: Any) -> dict[str, Any]:
    core = {
        "name": "雷娜",
        "identity": "废土上的拾荒者",
        "traits": ["冷静"],
        "binary_oppositions": [{"a": "信任", "b": "戒备", "balance": 0.5, "note": ""}],
        "ternary_tensions": [],
        "values": ["自由"],
        "goals": ["找到妹妹"],
        "speech_style": "",
        "recent_changes": [{"turn": 10, "change": "开始信任用户"}],
    }
    return {**core, **fields}


def test_what_counts_as_a_persona_change() -> None:
    old = _core()
    assert persona_changes(old, _core(), 20) == []
    # a drifting balance and a new trait are not archived: they stay in the core memory's versions
    drift = _core(traits=["冷静", "倔强"], binary_oppositions=[{"a": "戒备", "b": "信任", "balance": 0.55, "note": ""}])
    assert persona_changes(old, drift, 20) == []
    new = _core(
        values=["自由", "同伴"],
        goals=[],
        binary_oppositions=[],
        ternary_tensions=[{"poles": ["忠诚", "背叛", "中立"], "weights": [0.4, 0.3, 0.3], "note": ""}],
        recent_changes=[{"turn": 10, "change": "开始信任用户"}, {"turn": 18, "change": "不再独自行动"}],
    )
    texts = [(change.turn, change.text) for change in persona_changes(old, new, 20)]
    assert texts == [
        (18, "不再独自行动"),
        (20, "开始看重「同伴」"),
        (20, "放下了目标「找到妹妹」"),
        (20, "信任与戒备之间的矛盾已经化解"),
        (20, "内心出现了新的张力：忠诚、背叛、中立"),
    ]
    english = persona_changes(old, _core(goals=["find the well"]), 30, "en")
    assert [c.text for c in english] == ['took up a new goal: "find the well"', 'gave up the goal "找到妹妹"']
    item = persona_change_memory(english[0], version=3, line_id=7, role_id=2, language="en")
    assert item["content"] == '[Persona change] turn 30: took up a new goal: "find the well"'
    assert (item["type"], item["layer"], item["line_id"], item["witnesses"]) == (
        "persona_change",
        "archive",
        7,
        ["role:2"],
    )


def test_a_rollback_carries_the_changes_of_the_restored_versions_lineage() -> None:
    history = CoreMemoryHistory()
    for turn in (0, 10, 20):
        history = history.push(_core(identity=f"第{turn}轮"), turn=turn, reason=f"maintenance at turn {turn}")
    history = history.rollback(2, turn=25)  # version 4 = version 2
    assert lineage(history.versions, 4) == ({4, 2, 1}, 1)
    history = history.push(_core(identity="第30轮"), turn=30, reason="maintenance at turn 30")  # version 5
    assert lineage(history.versions, 5) == ({5, 4, 2, 1}, 1)  # version 3 was undone before 5 was made


# --- archived by maintenance, found, listed, presented ----------------------------------------------------------


def test_maintenance_archives_the_change_and_search_finds_it(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = _instance(db_url)
    state = _turns(db_url, instance, ["我们去找水源吧。", "你害怕黑暗吗？"])
    assert state["debug"]["maintenance"]["persona_changes"]["status"] == "queued"
    archived = _changes(db_url, instance)
    assert archived, "the maintenance at turn 2 archived nothing"
    assert all(item.layer == "archive" and item.turn == 2 and item.kind == "trait" for item in archived)
    assert all(item.line_id == state["debug"]["reply_line_ids"][-1] for item in archived)  # on the turn's branch
    growth = [item for item in archived if CHANGE in item.content]
    assert len(growth) == 1 and growth[0].content.startswith("【人格变化】第2轮：")

    found = PersonaLab(database_url=db_url).memories.search(instance, "你的性格有什么变化？", k=5)
    assert growth[0].id in [item.id for item in found.items]

    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    code, out, _err = cli(capsys, "memory", "list", "--instance", str(instance), "--type", "persona_change")
    assert code == 0 and "persona_change" in out and CHANGE in out
    code, out, _err = cli(capsys, "memory", "list", "--instance", str(instance), "--type", "persona_change", "--json")
    assert {row["id"] for row in json.loads(out)} == {item.id for item in archived}

    # the next turn's prompt presents them as the character's own history, not among what was said
    state = _turns(db_url, instance, ["你这段时间性格有什么变化？"])
    system = "\n".join(message["content"] for message in state["prompt"] if message["role"] == "system")
    assert PERSONA_HISTORY_HEADER in system
    block = system.split(PERSONA_HISTORY_HEADER, 1)[1].split("\n\n", 1)[0]
    assert "不是用户说过的话" in block and growth[0].content in block
    related = system.split("=== 相关记忆 ===", 1)[1].split("\n\n", 1)[0] if "=== 相关记忆 ===" in system else ""
    assert growth[0].content not in related


def test_a_change_is_archived_once(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replayed archive write adds nothing; a maintenance whose rewrite changes nothing archives nothing."""
    instance = _instance(db_url)
    state = _turns(db_url, instance, ["我们去找水源吧。", "你害怕黑暗吗？"])
    before = _changes(db_url, instance)
    versions = state["core_memory_versions"]
    old, new = versions[-2]["core"], versions[-1]["core"]
    items = [
        persona_change_memory(change, version=versions[-1]["version"], line_id=before[0].line_id, role_id=None)
        for change in persona_changes(old, new, 2)
    ]
    assert len(items) == len(before)
    assert archive_persona_changes(MemoryStore(db_url=db_url), instance, items) == []  # the same maintenance again
    assert [item.id for item in _changes(db_url, instance)] == [item.id for item in before]

    # the next maintenance's model keeps the persona as it is: an accepted rewrite, no change, nothing archived
    def same_core(_model: Any, request: list[dict[str, str]], _deadline: Any, _count: Any = None) -> tuple[str, Any]:
        return "```json\n" + json.dumps(new, ensure_ascii=False) + "\n```", None

    monkeypatch.setattr("personalab.nodes.maintenance.stream_answer", same_core)
    state = _turns(db_url, instance, ["继续走。", "天黑了。"])
    assert state["debug"]["maintenance"]["status"] == "core memory rewritten"
    assert state["debug"]["maintenance"]["persona_changes"] == {"status": "no change", "count": 0}
    assert [item.id for item in _changes(db_url, instance)] == [item.id for item in before]


def test_a_rewind_leaves_the_change_on_its_branch(db_url: str) -> None:
    instance = _instance(db_url)
    first = _turns(db_url, instance, ["我们去找水源吧。"])
    second = _turns(db_url, instance, ["你害怕黑暗吗？"])
    archived = _changes(db_url, instance)
    assert archived
    api = PersonaLab(database_url=db_url)
    api.dialogue.rewind(instance, first["debug"]["reply_line_ids"][-1])  # back before the maintenance turn
    assert _changes(db_url, instance) == []
    assert {item.id for item in _changes(db_url, instance, all_branches=True)} == {item.id for item in archived}
    found = api.memories.search(instance, "性格变化 变得更加倔强", k=10)
    assert not {item.id for item in archived} & {item.id for item in found.items}
    api.dialogue.swipe(instance, second["user_line_id"])  # the branch again: its changes with it
    assert {item.id for item in _changes(db_url, instance)} == {item.id for item in archived}


def test_a_rollback_closes_the_undone_changes_and_deletes_none(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = _instance(db_url)
    _turns(db_url, instance, ["我们去找水源吧。", "你害怕黑暗吗？", "继续走。", "天黑了。"])
    core = PersonaLab(database_url=db_url).core_memory
    assert [item["version"] for item in core.versions(instance)] == [1, 2, 3]
    archived = _changes(db_url, instance)
    at_2 = {item.id for item in archived if item.turn == 2}
    at_4 = {item.id for item in archived if item.turn == 4}
    assert at_2 and at_4

    core.rollback(instance, 2)  # version 4 = version 2: the changes of version 3 are undone
    after = {item.id: item for item in _changes(db_url, instance)}
    assert set(after) == at_2 | at_4  # nothing deleted
    assert {i for i, item in after.items() if item.valid_to_turn is not None} == at_4
    assert all(after[i].valid_to_turn == 4 for i in at_4)
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    code, out, _err = cli(capsys, "memory", "list", "--instance", str(instance), "--type", "persona_change")
    assert code == 0 and out.count("until turn 4") == len(at_4)
    state = _turns(db_url, instance, ["你的性格有什么变化？"])  # the undone change is not presented as current
    system = "\n".join(message["content"] for message in state["prompt"] if message["role"] == "system")
    assert any(after[i].content in system for i in at_2)
    assert not any(after[i].content in system for i in at_4)

    core.rollback(instance, 3)  # version 5 = version 3: its changes hold again
    assert all(item.valid_to_turn is None for item in _changes(db_url, instance))


def test_an_english_instance_archives_and_presents_its_changes_in_english(sqlite_url: str) -> None:
    from pathlib import Path

    card = Path(__file__).parent / "fixtures" / "card_v2_lighthouse_en.json"
    lab = PersonaLab(database_url=sqlite_url)
    instance = lab.instances.create({"character_id": lab.cards.import_bytes(card.read_bytes(), card.name).character_id})
    _turns(sqlite_url, instance.id, ["Where am I? What happened to my boat?", "Is the fog dangerous tonight?"])
    archived = _changes(sqlite_url, instance.id)
    assert archived and all(item.content.startswith("[Persona change] turn 2: ") for item in archived)
    state = _turns(sqlite_url, instance.id, ["How have you changed lately? Did the fog change you?"])
    system = "\n".join(message["content"] for message in state["prompt"] if message["role"] == "system")
    assert "=== How you have changed (your own growth) ===" in system and PERSONA_HISTORY_HEADER not in system
    assert "not things the user said" in system
