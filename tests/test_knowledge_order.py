"""The knowledge library's order (issue 25: the knowledge editor reorders, as the world book's does): every entry has
an order value (lower first; older rows get their id from migration 0014), set through the API, the CLI and HTTP,
one place up or down or as values, all or nothing; the entries a turn injects come in that order, whichever scored
higher. Bad input (an unknown id, another user's entry, an order that is not a whole number) is one clear message
and changes nothing. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli, one_line
from openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.api import library
from personalab.graph.api.facade import PersonaLab
from personalab.graph.runner import run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.stores import migrate
from personalab.stores.db import dispose_engines
from sqlalchemy import create_engine, text


def _instance(url: str | None, owner: str | None = None) -> int:
    character = library.create_character({"name": "雷娜"}, owner=owner, database_url=url)
    background = library.create_background({"name": "废土", "outline": ["一"]}, owner=owner, database_url=url)
    return library.create_instance(
        {"character_id": character.id, "background_id": background.id}, owner=owner, database_url=url
    ).id


def _ids(entries: list[dict[str, Any]]) -> list[int]:
    return [entry["id"] for entry in entries]


def test_entries_move_and_reorder_through_the_api(db_url: str) -> None:
    instance = _instance(db_url)
    knowledge = PersonaLab(database_url=db_url).knowledge
    a, b, c = (knowledge.add("地点", text, instance_id=instance)["id"] for text in ("北门。", "南门。", "地铁。"))
    listed = knowledge.list(instance_id=instance)
    assert _ids(listed) == [a, b, c]
    assert [e["order"] for e in listed] == sorted(e["order"] for e in listed)  # a new entry goes last
    assert _ids(knowledge.move(c, "up")) == [a, c, b]
    assert _ids(knowledge.move(a, "up")) == [a, c, b]  # at the top already: nothing changes
    assert _ids(knowledge.move(a, "down")) == [c, a, b]
    assert _ids(knowledge.list(instance_id=instance)) == [c, a, b]
    assert knowledge.get(a)["user_edited"] is True and knowledge.get(a)["content"] == "北门。"
    done = knowledge.reorder({b: -5, c: 100})
    assert [(e["id"], e["order"]) for e in done] == [(b, -5), (c, 100)]
    assert _ids(knowledge.list(instance_id=instance)) == [b, a, c]
    # equal values: the move still moves (the scope's values are dealt out again, strictly increasing)
    knowledge.reorder({a: 7, b: 7, c: 7})
    assert _ids(knowledge.move(c, "up")) == [a, c, b]

    before = knowledge.list(instance_id=instance)
    with pytest.raises(NotFound, match="knowledge entry 99999"):
        knowledge.reorder({a: 1, 99999: 2})
    with pytest.raises(InvalidInput, match="'order'"):
        knowledge.reorder({a: 1, b: "2"})  # type: ignore[dict-item]
    with pytest.raises(InvalidInput, match="'order'"):
        knowledge.reorder({a: True})
    with pytest.raises(InvalidInput, match="'order'"):
        knowledge.reorder({a: 1.5})  # type: ignore[dict-item]
    with pytest.raises(InvalidInput, match="orders"):
        knowledge.reorder({})
    with pytest.raises(InvalidInput, match="direction"):
        knowledge.move(a, "sideways")
    with pytest.raises(NotFound, match="knowledge entry 99999"):
        knowledge.move(99999, "up")
    assert knowledge.list(instance_id=instance) == before  # nothing changed


def test_another_users_entries_cannot_be_reordered(db_url: str) -> None:
    alice_instance = _instance(db_url, owner="alice")
    bob_instance = _instance(db_url, owner="bob")
    alice = PersonaLab(owner="alice", database_url=db_url).knowledge
    bob = PersonaLab(owner="bob", database_url=db_url).knowledge
    first = alice.add("地点", "北门。", instance_id=alice_instance)["id"]
    second = alice.add("地点", "南门。", instance_id=alice_instance)["id"]
    own = bob.add("地点", "地铁。", instance_id=bob_instance)["id"]
    before = alice.list(instance_id=alice_instance)
    with pytest.raises(NotFound, match=f"knowledge entry {second}"):
        bob.move(second, "up")
    with pytest.raises(NotFound, match=f"knowledge entry {first}"):
        bob.reorder({own: 1, first: 99})
    assert alice.list(instance_id=alice_instance) == before
    assert bob.get(own)["order"] == own  # the refused call wrote nothing of its own entries either


@pytest.fixture
def served_db(db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The CLI and HTTP against `db_url` (SQLite or PostgreSQL), as a deployment names its database."""
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    yield db_url
    dispose_engines()


def test_the_cli_moves_and_reorders(capsys: pytest.CaptureFixture[str], served_db: str) -> None:
    instance = _instance(None)
    ids = []
    for text_ in ("北门。", "南门。"):
        code, out, _ = cli(capsys, "knowledge", "add", text_, "--tag", "地点", "--instance", str(instance))
        assert code == 0, out
        ids.append(int(out.split("entry ")[1].split()[0]))
    first, second = ids
    code, out, _ = cli(capsys, "knowledge", "move", str(second), "up")
    assert code == 0 and out.index(f"#{second}") < out.index(f"#{first}") and "←" in out
    code, out, _ = cli(capsys, "knowledge", "list", "--instance", str(instance))
    assert code == 0 and out.index(f"#{second}") < out.index(f"#{first}") and "order" in out
    code, out, _ = cli(capsys, "knowledge", "reorder", f"{first}=1", f"{second}=2")
    assert code == 0 and f"#{first} order 1" in out
    for bad, says in (
        (["reorder", f"{first}=high"], "is not ID=ORDER"),
        (["reorder", f"{first}"], "is not ID=ORDER"),
        (["reorder", "99999=1"], "knowledge entry 99999"),
        (["move", "99999", "up"], "knowledge entry 99999"),
    ):
        code, _, err = cli(capsys, "knowledge", *bad)
        assert code == 2 and says in one_line(err), err
    code, out, _ = cli(capsys, "knowledge", "list", "--instance", str(instance))
    assert out.index(f"#{first}") < out.index(f"#{second}")  # as the last good reorder left them


def test_http_moves_and_reorders(served_db: str) -> None:
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app

    instance = _instance(None)
    http = TestClient(app)
    ids = []
    for text_ in ("北门。", "南门。"):
        made = http.post(f"/knowledge?instance_id={instance}", json={"tag": "地点", "content": text_})
        assert made.status_code == 201, made.text
        ids.append(made.json()["id"])
    first, second = ids
    moved = http.post(f"/knowledge/{second}/move", json={"direction": "up"})
    assert moved.status_code == 200, moved.text
    assert _ids(moved.json()) == [second, first]
    done = http.post("/knowledge/reorder", json={"entries": [{"id": first, "order": -1}]})
    assert done.status_code == 200 and done.json()[0]["order"] == -1
    assert _ids(http.get(f"/knowledge?instance_id={instance}").json()) == [first, second]
    bad = http.post("/knowledge/reorder", json={"entries": [{"id": second, "order": "soon"}]})
    assert bad.status_code == 422 and "order" in str(bad.json()["detail"])
    bad = http.post(f"/knowledge/{first}/move", json={"direction": "left"})
    assert bad.status_code == 422 and "direction" in str(bad.json()["detail"])
    assert http.post("/knowledge/reorder", json={"entries": [{"id": 99999, "order": 1}]}).status_code == 404
    assert http.post("/knowledge/99999/move", json={"direction": "up"}).status_code == 404
    assert _ids(http.get(f"/knowledge?instance_id={instance}").json()) == [first, second]  # nothing changed


def test_a_turn_injects_knowledge_in_the_librarys_order(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    instance = _instance(sqlite_url)
    knowledge = PersonaLab(database_url=sqlite_url).knowledge
    # the pump scores higher (two keywords) and was added first; the order puts the warehouse first
    pump = knowledge.add("事件", "水泵昨夜被人拆走了。", keywords=["水泵", "拆"], instance_id=instance)["id"]
    warehouse = knowledge.add("地点", "旧仓库在据点东侧。", keywords=["旧仓库"], instance_id=instance)["id"]

    def region() -> str:
        openai_stub.queue("【认真】我去看看。")
        with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
            state = run_turn(graph, ctx, instance, "旧仓库的水泵被拆了？")
        assert state["error"] is None
        messages = openai_stub.requests[-1]["messages"]
        (found,) = [m["content"] for m in messages if m["role"] == "system" and "=== 世界知识 ===" in m["content"]]
        return str(found)

    before = region()
    assert before.index("水泵昨夜") < before.index("旧仓库在")
    knowledge.move(warehouse, "up")
    after = region()
    assert after.index("旧仓库在") < after.index("水泵昨夜")
    knowledge.reorder({pump: 0, warehouse: 1})
    last = region()
    assert last.index("水泵昨夜") < last.index("旧仓库在")


def test_the_migration_gives_older_entries_their_id_as_order(db_url: str) -> None:
    migrate.upgrade(db_url, "0013_personas")
    engine = create_engine(db_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as conn:
        for ident in (3, 1, 2):
            conn.execute(
                text(
                    "INSERT INTO knowledge_entry (id, tag, content, importance, keywords, enabled, user_edited, "
                    "created_at, updated_at) VALUES (:id, '地点', :content, 0.5, '[]', true, false, "
                    "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                ),
                {"id": ident, "content": f"第{ident}条。"},
            )
    engine.dispose()
    migrate.upgrade(db_url)
    dispose_engines()
    listed = PersonaLab(database_url=db_url).knowledge.list()
    assert [(e["id"], e["order"]) for e in listed] == [(1, 1), (2, 2), (3, 3)]
