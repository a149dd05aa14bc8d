"""Where an instance's story stands, through the API, the CLI and HTTP (issue 23): core memory (shown before the
first turn, versions with their turns, a diff per field, a rollback live in the next turn and in the checkpoint),
the current outline point set by hand (statuses follow, live in the next turn), plot nodes, review suggestions
decided through the API with owner checks. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli, one_line
from personalab.graph.api import library
from personalab.graph.api.facade import PersonaLab
from personalab.nodes.rules.errors import InvalidInput, NotAllowed, NotFound


def _instance(url: str | None, owner: str | None = None, outline: tuple[str, ...] = ("相遇", "同行", "离别")) -> int:
    character = library.create_character(
        {"name": "雷娜", "traits": "冷静、警惕", "motives": "找到失散的妹妹"}, owner=owner, database_url=url
    )
    background = library.create_background({"name": "废土", "outline": list(outline)}, owner=owner, database_url=url)
    return library.create_instance(
        {"character_id": character.id, "background_id": background.id}, owner=owner, database_url=url
    ).id


def _turns(url: str, instance: int, messages: list[str]) -> dict[str, Any]:
    from personalab.graph.runner import run_turn, turn_graph
    from personalab.nodes.context import Context

    state: dict[str, Any] = {}
    with turn_graph(Context(database_url=url)) as (graph, ctx):
        for message in messages:
            state = run_turn(graph, ctx, instance, message)
    return state


def _checkpoint(url: str, instance: int) -> dict[str, Any]:
    from personalab.graph.runner import turn_config, turn_graph
    from personalab.nodes.context import Context

    with turn_graph(Context(database_url=url)) as (graph, _ctx):
        return dict(graph.get_state(turn_config(instance)).values)


# --- core memory --------------------------------------------------------------------------------------------------


def test_core_memory_before_the_first_turn_is_the_initial_one(db_url: str) -> None:
    instance = _instance(db_url)
    shown = PersonaLab(database_url=db_url).core_memory.show(instance)
    assert shown["initial"] is True and shown["version"] is None
    assert shown["core"]["name"] == "雷娜" and shown["core"]["traits"] == ["冷静", "警惕"]
    assert PersonaLab(database_url=db_url).core_memory.versions(instance) == []


def test_versions_diff_and_rollback_live_in_the_next_turn(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONALAB_MAINTENANCE_EVERY", "1")
    instance = _instance(db_url)
    api = PersonaLab(database_url=db_url).core_memory
    _turns(db_url, instance, ["出发。", "继续。"])
    versions = api.versions(instance)
    assert [item["version"] for item in versions] == [1, 2, 3]
    assert all(isinstance(item["turn"], int) for item in versions)
    first = api.version(instance, 1)["core"]
    diff = api.diff(instance, 1, 3)
    assert diff["from"] == 1 and diff["to"] == 3 and isinstance(diff["changes"], dict)
    for name, change in diff["changes"].items():
        assert change["from"] == first.get(name)
    with pytest.raises(NotFound, match="version 99 is not kept"):
        api.rollback(instance, 99)
    assert len(api.versions(instance)) == 3  # nothing changed
    back = api.rollback(instance, 1)
    assert back["version"] == 4 and back["reason"] == "rollback to version 1" and back["core"] == first
    assert api.show(instance)["core"] == first and api.show(instance)["version"] == 4
    assert api.diff(instance, 1)["changes"] == {}  # the current one equals version 1
    checkpoint = _checkpoint(db_url, instance)
    assert checkpoint["core_memory"] == first and checkpoint["core_memory_versions"][-1]["version"] == 4
    state = _turns(db_url, instance, ["再走。"])  # the next turn starts from the rolled-back core memory
    assert state["core_memory_versions"][3]["version"] == 4
    assert [item["version"] for item in state["core_memory_versions"]][:4] == [1, 2, 3, 4]


# --- plot ---------------------------------------------------------------------------------------------------------


def test_the_current_outline_point_set_by_hand(db_url: str) -> None:
    instance = _instance(db_url)
    plot = PersonaLab(database_url=db_url).plot
    before = plot.outline(instance)
    assert before["current_plot_index"] == 1 and before["story_outline"][0]["status"] == "in_progress"
    with pytest.raises(InvalidInput, match="outline point 4"):
        plot.set_current_point(instance, 4)
    _turns(db_url, instance, ["你好。"])
    moved = plot.set_current_point(instance, 3)
    assert moved["current_plot_index"] == 3
    assert [p["status"] for p in moved["story_outline"]] == ["completed", "completed", "in_progress"]
    assert plot.outline(instance)["current_plot_index"] == 3
    assert _checkpoint(db_url, instance)["plot_state"]["current_plot_index"] == 3
    state = _turns(db_url, instance, ["接着说。"])  # the director of the next turn is at point 3
    assert state["plot_state"]["current_plot_index"] == 3
    assert "离别" in "\n".join(message["content"] for message in state["prompt"])
    back = plot.set_current_point(instance, 1)
    assert [p["status"] for p in back["story_outline"]] == ["in_progress", "pending", "pending"]
    assert plot.nodes(instance) == plot.nodes(instance, all_branches=True)
    with pytest.raises(NotFound):
        plot.outline(99999)


def test_a_user_reaches_only_their_own_story(db_url: str) -> None:
    alice = _instance(db_url, owner="alice")
    bob = PersonaLab(owner="bob", database_url=db_url)
    for call in (
        lambda: bob.core_memory.show(alice),
        lambda: bob.core_memory.rollback(alice, 1),
        lambda: bob.plot.outline(alice),
        lambda: bob.plot.set_current_point(alice, 2),
        lambda: bob.plot.nodes(alice),
        lambda: bob.suggestions.list(instance_id=alice),
    ):
        with pytest.raises(NotFound, match=f"instance {alice}"):
            call()
    assert PersonaLab(owner="alice", database_url=db_url).plot.outline(alice)["current_plot_index"] == 1


# --- suggestions ----------------------------------------------------------------------------------------------------


def _suggestion(url: str | None, instance: int, turn: int = 3) -> int:
    from personalab.nodes.rules.review.effects import worldbook_suggestion_from_turn
    from personalab.stores.db import session_scope
    from personalab.stores.review import create_suggestion

    with session_scope(url) as s:
        made = create_suggestion(
            s, instance, **worldbook_suggestion_from_turn("去北方的废墟。", "好。", {"level": "turning_point"}, turn)
        )
        return int(made.id)


def test_suggestions_are_decided_through_the_api(db_url: str) -> None:
    alice_instance = _instance(db_url, owner="alice")
    first, second = _suggestion(db_url, alice_instance, 3), _suggestion(db_url, alice_instance, 4)
    alice, bob = PersonaLab(owner="alice", database_url=db_url), PersonaLab(owner="bob", database_url=db_url)
    assert [s["id"] for s in alice.suggestions.list(instance_id=alice_instance)] == [first, second]
    with pytest.raises(NotFound, match=f"suggestion {first}"):
        bob.suggestions.approve(first)
    with pytest.raises(InvalidInput, match="instance_id"):
        bob.suggestions.list()
    done = alice.suggestions.approve(first, content="北方的废墟里有旧日的研究所。", keywords=["废墟"])
    assert done["status"] == "approved" and done["worldbook_entry_id"] is not None
    entry = alice.worldbook.get(done["worldbook_entry_id"])
    assert entry["keywords"] == ["废墟"] and entry["content"].startswith("北方")
    with pytest.raises(InvalidInput, match="already approved"):
        alice.suggestions.reject(first)
    assert alice.suggestions.reject(second)["status"] == "rejected"
    assert [s["id"] for s in alice.suggestions.list(instance_id=alice_instance, status="pending")] == []


# --- the CLI and HTTP -------------------------------------------------------------------------------------------------


def test_cli_core_and_plot(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    instance = str(_instance(None))
    code, out, _ = cli(capsys, "core", "show", "--instance", instance)
    assert code == 0 and json.loads(out)["name"] == "雷娜"  # not {} before the first turn
    code, out, _ = cli(capsys, "core", "versions", "--instance", instance)
    assert code == 0 and "no core memory versions yet" in out
    code, _, err = cli(capsys, "core", "rollback", "--instance", instance)
    assert code == 2 and "no earlier version" in one_line(err)
    code, _, err = cli(capsys, "core", "diff", "--instance", instance, "--from", "1")
    assert code == 2 and "version 1 is not kept" in one_line(err)
    code, out, _ = cli(capsys, "plot", "show", "--instance", instance)
    assert code == 0 and "▶  1. [in_progress] 相遇  ← current" in out
    code, out, err = cli(capsys, "plot", "set-point", "2", "--instance", instance)
    assert code == 2 and "no lines yet" in one_line(err)  # no greeting, no turn: no line to keep it with
    code, out, err = cli(capsys, "turn", "--instance", instance, "你好")
    assert code == 0, err
    code, out, err = cli(capsys, "plot", "set-point", "2", "--instance", instance)
    assert code == 0 and "✓  1. [completed] 相遇" in out and "← current" in out.splitlines()[1], err
    code, _, err = cli(capsys, "plot", "set-point", "9", "--instance", instance)
    assert code == 2 and "outline point 9" in one_line(err)
    code, out, _ = cli(capsys, "plot", "nodes", "--instance", instance, "--json")
    assert code == 0 and isinstance(json.loads(out), list)


def test_http_core_plot_suggestions(data_dir: Path) -> None:
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app

    instance = _instance(None)
    http = TestClient(app)
    assert http.get(f"/instances/{instance}/core-memory").json()["core"]["name"] == "雷娜"
    assert http.get(f"/instances/{instance}/core-memory/versions").json() == []
    missing = http.get(f"/instances/{instance}/core-memory/versions/3")
    assert missing.status_code == 404 and "version 3" in missing.json()["detail"]
    assert http.get(f"/instances/{instance}/core-memory/diff?from=1").status_code == 404
    assert http.post(f"/instances/{instance}/core-memory/rollback", json={"to": 2}).status_code == 404
    assert http.get(f"/instances/{instance}/plot").json()["current_plot_index"] == 1
    assert http.put(f"/instances/{instance}/plot/current", json={"index": 0}).status_code == 422
    assert http.put("/instances/99999/plot/current", json={"index": 1}).status_code == 404
    assert http.get(f"/instances/{instance}/plot/nodes").json() == []
    suggestion = _suggestion(None, instance)
    assert [s["id"] for s in http.get(f"/suggestions?instance_id={instance}").json()] == [suggestion]
    assert http.get(f"/suggestions/{suggestion}").json()["status"] == "pending"
    assert http.post(f"/suggestions/{suggestion}/reject").json()["status"] == "rejected"
    again = http.post(f"/suggestions/{suggestion}/approve", json={})
    assert again.status_code == 422 and "already rejected" in again.json()["detail"]


# --- administration ---------------------------------------------------------------------------------------------------


def test_admin_locks_doctor_migrations_are_the_operators(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    from personalab.stores.turns import acquire_turn_lock

    instance = _instance(None)
    acquire_turn_lock(instance, 60.0)  # a turn that holds the instance
    admin = PersonaLab().admin
    (held,) = admin.locks()
    assert held["instance_id"] == instance and held["expired"] is False
    code, out, _ = cli(capsys, "instance", "locks", "--json")
    assert code == 0 and json.loads(out)[0]["instance_id"] == instance
    assert admin.release_lock(instance)["unlocked"] is True and admin.locks() == []
    code, out, _ = cli(capsys, "instance", "locks")
    assert code == 0 and "no turn locks held" in out
    assert admin.migration_state()["head"]
    assert isinstance(admin.doctor()["findings"], list)
    user = PersonaLab(owner="alice").admin
    for call in (user.locks, lambda: user.release_lock(instance), user.doctor, user.migration_state, user.upgrade):
        with pytest.raises(NotAllowed, match="operator"):
            call()


def test_admin_over_http_is_the_local_operators(data_dir: Path) -> None:
    """Issue 23: the administration routes over HTTP. Without auth the caller is the operator (as on the CLI):
    the locks are listed and a stuck one released, doctor and the migration state answer; the hostile sweep
    (tests/test_hostile_http.py) checks a signed-in user gets 403 naming the operation."""
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app
    from personalab.stores.turns import acquire_turn_lock

    instance = _instance(None)
    acquire_turn_lock(instance, 60.0)  # a turn that holds the instance
    client = TestClient(app)
    (held,) = client.get("/admin/locks").json()
    assert held["instance_id"] == instance
    assert client.delete(f"/admin/locks/{instance}").json()["unlocked"] is True
    assert client.get("/admin/locks").json() == []
    assert client.delete("/admin/locks/999999").status_code == 404
    assert client.get("/admin/migrations").json()["head"]
    assert isinstance(client.get("/admin/doctor").json()["findings"], list)
    assert client.post("/admin/migrations/upgrade").status_code == 200
