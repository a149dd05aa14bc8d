"""Single world-book entries changed in place (issue 23) through the API, the CLI and HTTP: edit any field
(keywords, secondary keys, content, position, order, probability, enabled, the time window), enable / disable,
reorder, delete; a bad value is refused naming the entry and the field and nothing changes; a user changes only
their own scopes' entries. The knowledge library through the façade. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import cli, one_line
from personalab.graph.api import library
from personalab.graph.api.facade import PersonaLab
from personalab.nodes.rules.errors import InvalidInput, NotFound


def _instance(url: str | None, owner: str | None = None) -> int:
    character = library.create_character({"name": "雷娜"}, owner=owner, database_url=url)
    background = library.create_background({"name": "废土", "outline": ["一"]}, owner=owner, database_url=url)
    return library.create_instance(
        {"character_id": character.id, "background_id": background.id}, owner=owner, database_url=url
    ).id


def test_edit_enable_reorder_delete(db_url: str) -> None:
    instance = _instance(db_url)
    book = PersonaLab(database_url=db_url).worldbook
    lighthouse = book.add("灯塔由守夜人看管。", keywords=["灯塔"], instance_id=instance)
    signal = book.add("暗号是三短一长。", keywords=["暗号"], instance_id=instance, priority=50)
    edited = book.edit(
        lighthouse["id"],
        keywords=["灯塔", "塔"],
        secondary_keywords=["夜"],
        selective_logic="and_any",
        content="灯塔由老守夜人看管。",
        position="user",
        priority=300,
        probability=40,
        temporal={"min_turn": 2},
    )
    assert edited["keywords"] == ["灯塔", "塔"] and edited["secondary_keywords"] == ["夜"]
    assert edited["content"] == "灯塔由老守夜人看管。" and edited["position"] == "user" and edited["priority"] == 300
    assert edited["probability"] == 40 and edited["temporal"] == {"min_turn": 2}
    assert book.edit(lighthouse["id"], temporal={"max_turn": 9})["temporal"] == {"min_turn": 2, "max_turn": 9}
    assert book.edit(lighthouse["id"], position=None)["position"] is None
    # bad values: named, nothing written (the good field of the same call neither)
    for changes, field in (
        ({"content": "新", "priority": "high"}, "priority"),
        ({"keywords": []}, "keywords"),  # a keyword entry needs one
        ({"position": "footer"}, "position"),
        ({"probability": 150}, "probability"),
        ({"owner": "x"}, "owner"),
        ({"content": "a\x00b"}, "content"),
    ):
        with pytest.raises(InvalidInput, match=field):
            book.edit(lighthouse["id"], **changes)
    assert book.get(lighthouse["id"])["content"] == "灯塔由老守夜人看管。"
    assert book.disable(signal["id"])["enabled"] is False
    assert book.enable(signal["id"])["enabled"] is True
    reordered = book.reorder({signal["id"]: 500, lighthouse["id"]: 10})
    assert [(e["id"], e["priority"]) for e in reordered] == [(signal["id"], 500), (lighthouse["id"], 10)]
    with pytest.raises(NotFound, match="world-book entry 99999"):
        book.reorder({signal["id"]: 1, 99999: 2})
    assert book.get(signal["id"])["priority"] == 500  # all or nothing
    assert book.delete(signal["id"]) == {"deleted": "world-book entry", "id": signal["id"]}
    with pytest.raises(NotFound, match=f"world-book entry {signal['id']}"):
        book.get(signal["id"])
    assert [e["id"] for e in book.list(instance_id=instance)] == [lighthouse["id"]]
    exported = book.export("sillytavern", instance_id=instance)
    (only,) = exported["entries"].values()
    assert only["probability"] == 40 and only["useProbability"] is True


def test_a_disabled_entry_leaves_the_next_turn(db_url: str) -> None:
    from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
    from personalab.nodes.context import Context

    instance = create_sample_instance(db_url)
    book = PersonaLab(database_url=db_url).worldbook
    entry = book.add("灯塔的暗号是三短一长。", keywords=["灯塔"], instance_id=instance)

    def prompt(state: dict[str, object]) -> str:
        # the retrieval's status (a cut by the cap, a failure) rides along, so a failure says why
        debug = state["debug"]["retrieval"]  # type: ignore[index]
        status = {key: debug.get(key) for key in ("status", "ms", "warm_up_ms", "worldbook_prepare_ms")}
        return "\n".join(message["content"] for message in state["prompt"]) + f"\n{status}"  # type: ignore[attr-defined]

    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        assert "三短一长" in prompt(run_turn(graph, ctx, instance, "说说灯塔。"))
        book.disable(entry["id"])
        assert "三短一长" not in prompt(run_turn(graph, ctx, instance, "说说灯塔。"))
        book.edit(entry["id"], enabled=True, keywords=["海港"])
        assert "三短一长" not in prompt(run_turn(graph, ctx, instance, "说说灯塔。"))
        assert "三短一长" in prompt(run_turn(graph, ctx, instance, "说说海港。"))


def test_a_user_changes_only_their_own_entries(db_url: str) -> None:
    alice_instance = _instance(db_url, owner="alice")
    bob_instance = _instance(db_url, owner="bob")
    alice = PersonaLab(owner="alice", database_url=db_url).worldbook
    bob = PersonaLab(owner="bob", database_url=db_url).worldbook
    theirs = alice.add("只属于爱丽丝。", keywords=["爱丽丝"], instance_id=alice_instance)
    mine = bob.add("鲍勃的。", keywords=["鲍勃"], instance_id=bob_instance)
    glob = PersonaLab(database_url=db_url).worldbook.add("全局。", keywords=["全局"])
    for entry_id in (theirs["id"], glob["id"]):
        for call in (
            lambda entry_id=entry_id: bob.get(entry_id),
            lambda entry_id=entry_id: bob.edit(entry_id, content="改"),
            lambda entry_id=entry_id: bob.disable(entry_id),
            lambda entry_id=entry_id: bob.delete(entry_id),
            lambda entry_id=entry_id: bob.reorder({mine["id"]: 1, entry_id: 2}),
        ):
            with pytest.raises(NotFound, match=f"world-book entry {entry_id}"):
                call()
    assert alice.get(theirs["id"])["content"] == "只属于爱丽丝。"
    assert bob.get(mine["id"])["priority"] == 100  # the reorder changed nothing
    assert bob.edit(mine["id"], content="鲍勃改的。")["content"] == "鲍勃改的。"


def test_knowledge_through_the_facade(db_url: str) -> None:
    instance = _instance(db_url, owner="alice")
    knowledge = PersonaLab(owner="alice", database_url=db_url).knowledge
    entry = knowledge.add("往事", "她曾是兵。", instance_id=instance)
    assert knowledge.disable(entry["id"])["enabled"] is False
    assert knowledge.tag(entry["id"], add=["军旅"])["tags"] == ["往事", "军旅"]
    assert [e["id"] for e in knowledge.list(instance_id=instance)] == [entry["id"]]
    exported = knowledge.export(instance_id=instance)
    assert knowledge.import_data(exported, instance_id=instance)["duplicates"] == 1  # the same entry again
    with pytest.raises(NotFound):
        PersonaLab(owner="bob", database_url=db_url).knowledge.get(entry["id"])
    assert knowledge.delete(entry["id"])["id"] == entry["id"]


def test_cli_edit_enable_disable_reorder_delete(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    code, out, _ = cli(capsys, "worldbook", "add", "灯塔由守夜人看管。", "--keyword", "灯塔")
    assert code == 0
    first = out.split()[3]
    code, out, _ = cli(capsys, "worldbook", "add", "暗号是三短一长。", "--keyword", "暗号")
    second = out.split()[3]
    code, out, err = cli(
        capsys, "worldbook", "edit", first, "--keyword", "灯塔", "--keyword", "塔", "--secondary", "夜",
        "--order", "250", "--probability", "30", "--position", "user", "--json",
    )  # fmt: skip
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["keywords"], shown["secondary_keywords"], shown["priority"]) == (["灯塔", "塔"], ["夜"], 250)
    assert (shown["probability"], shown["position"]) == (30, "user")
    code, _, err = cli(capsys, "worldbook", "edit", first, "--no-keyword")
    assert code == 2 and "keywords" in one_line(err)
    code, _, err = cli(capsys, "worldbook", "edit", first, "--probability", "101")
    assert code == 2 and "probability" in one_line(err)
    code, _, err = cli(capsys, "worldbook", "edit", "99999", "--content", "x")
    assert code == 2 and "world-book entry 99999" in one_line(err)
    code, out, _ = cli(capsys, "worldbook", "disable", second)
    assert code == 0 and f"disabled world-book entry {second}" in out
    code, out, _ = cli(capsys, "worldbook", "list")
    assert "disabled" in out and "probability 30%" in out
    code, out, _ = cli(capsys, "worldbook", "enable", second)
    assert code == 0 and "enabled" in out
    code, out, _ = cli(capsys, "worldbook", "reorder", f"{second}=900", f"{first}=5")
    assert code == 0 and f"#{second} priority 900" in out
    code, _, err = cli(capsys, "worldbook", "reorder", f"{second}=high")
    assert code == 2 and "ID=ORDER" in one_line(err)
    code, out, _ = cli(capsys, "worldbook", "delete", second)
    assert code == 0 and f"deleted world-book entry {second}" in out
    code, _, err = cli(capsys, "worldbook", "delete", second)
    assert code == 2 and f"world-book entry {second} does not exist" in one_line(err)


def test_http_entries(data_dir: Path) -> None:
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app

    instance = _instance(None)
    http = TestClient(app)
    made = http.post(f"/worldbook/entries?instance_id={instance}", json={"content": "灯塔。", "keywords": ["灯塔"]})
    assert made.status_code == 201, made.text
    entry_id = made.json()["id"]
    done = http.patch(f"/worldbook/entries/{entry_id}", json={"enabled": False, "priority": 7})
    assert done.status_code == 200 and done.json()["enabled"] is False and done.json()["priority"] == 7
    bad = http.patch(f"/worldbook/entries/{entry_id}", json={"selective_logic": "maybe"})
    assert bad.status_code == 422 and "selective_logic" in bad.json()["detail"]
    assert http.get(f"/worldbook/entries/{entry_id}").json()["enabled"] is False
    assert [e["id"] for e in http.get(f"/worldbook/entries?instance_id={instance}").json()] == [entry_id]
    moved = http.post("/worldbook/reorder", json={"entries": [{"id": entry_id, "order": 42}]})
    assert moved.status_code == 200 and moved.json()[0]["priority"] == 42
    assert http.delete(f"/worldbook/entries/{entry_id}").status_code == 200
    assert http.get(f"/worldbook/entries/{entry_id}").status_code == 404
