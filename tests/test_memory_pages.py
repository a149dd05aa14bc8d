"""The memory console's pages (issue 25, first part) in-process through FastAPI's TestClient on the real app and
the real graph with the offline scripted model, on SQLite and PostgreSQL: the inspector lists, filters, edits (with
versions), pins, deletes, bulk-edits, exports and imports an instance's memories; "why this reply" shows the stored
provenance of a reply; "try it" shows the retrieval for a message and stores nothing. Bad input is one message and
nothing changes; another user's instance is never reachable. The journeys in a real browser are
tests/test_memory_browser.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from personalab.graph.api import PersonaLab
from personalab.graph.api.schemas.memory import MemoryCreate
from web_pages import new_instance

FACT = "我的怀表藏在灯塔下面的第三块石头里"
TOKENS = {"alice": "tok-mem-alice-7d1", "bob": "tok-mem-bob-2e9"}


@pytest.fixture
def client(db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    from personalab.graph.http.app import app

    with TestClient(app, follow_redirects=True) as made:
        yield made


def _turn(client: TestClient, instance_id: int, message: str) -> None:
    body = client.post(f"/app/instances/{instance_id}/turn", data={"message": message}).text
    assert "event: done" in body, body[-500:]
    from personalab.stores.background import wait_for_writes

    wait_for_writes(instance_id)  # the turn's memories are written after its reply (issue 14): all in before checks


def _snapshot(instance_id: int) -> list[dict]:
    rows = PersonaLab().memories.export_json(instance_id)
    return sorted(
        ({k: v for k, v in row.items() if k not in ("activity", "activity_turn")} for row in rows),
        key=lambda row: str(row.get("id")),
    )


def test_the_inspector_lists_filters_edits_pins_and_deletes_memories(client: TestClient) -> None:
    instance_id = new_instance(client)
    _turn(client, instance_id, FACT)
    api = PersonaLab()
    page = client.get(f"/app/instances/{instance_id}/memories", headers={"Accept-Language": "zh-CN"})
    assert page.status_code == 200 and "记忆" in page.text
    made = api.memories.add(instance_id, MemoryCreate(content="雷娜讨厌下雨 <b>天</b>", type="trait", layer="archive"))
    en = client.get(f"/app/instances/{instance_id}/memories", headers={"Accept-Language": "en"})
    assert "Memories" in en.text and "雷娜讨厌下雨 &lt;b&gt;天&lt;/b&gt;" in en.text and "<b>天</b>" not in en.text
    # filters: layer, type, text (keyword), turn range, branch
    only = client.get(f"/app/instances/{instance_id}/memories", params={"layer": "archive", "type": "trait"}).text
    assert f'id="memory-{made.id}"' in only
    assert (
        f'id="memory-{made.id}"'
        not in client.get(f"/app/instances/{instance_id}/memories", params={"layer": "active"}).text
    )
    assert (
        f'id="memory-{made.id}"'
        in client.get(f"/app/instances/{instance_id}/memories", params={"q": "下雨", "branch": "all"}).text
    )
    assert (
        f'id="memory-{made.id}"'
        not in client.get(f"/app/instances/{instance_id}/memories", params={"q": "不存在的字"}).text
    )
    assert (
        f'id="memory-{made.id}"'
        not in client.get(f"/app/instances/{instance_id}/memories", params={"turn_from": 5, "turn_to": 9}).text
    )
    semantic = client.get(f"/app/instances/{instance_id}/memories", params={"q": "怀表在哪", "mode": "semantic"})
    assert semantic.status_code == 200 and "怀表" in semantic.text
    # the memory made from the turn shows where it came from (turn and line, linked)
    told = [m for m in api.memories.list(instance_id, limit=100, include_record=True).items if "怀表" in m.content]
    assert told and told[0].line_id is not None
    detail = client.get(f"/app/instances/{instance_id}/memories/{told[0].id}").text
    assert f"#line-{told[0].line_id}" in detail
    # edit: a version is kept and shown
    client.post(
        f"/app/instances/{instance_id}/memories/{made.id}",
        data={"content": "雷娜喜欢下雨", "type": "trait", "layer": "archive", "importance": "0.7"},
    )
    detail = client.get(f"/app/instances/{instance_id}/memories/{made.id}").text
    assert "雷娜喜欢下雨" in detail and "雷娜讨厌下雨 &lt;b&gt;天&lt;/b&gt;" in detail  # the old text as a version
    assert api.memories.get(instance_id, made.id).content == "雷娜喜欢下雨"
    # pin / unpin (the toggle)
    client.post(f"/app/instances/{instance_id}/memories/{made.id}/pin")
    assert api.memories.get(instance_id, made.id).pinned
    client.post(f"/app/instances/{instance_id}/memories/{made.id}/pin")
    assert not api.memories.get(instance_id, made.id).pinned
    # add from the page, then delete with a confirmation naming it
    client.post(f"/app/instances/{instance_id}/memories", data={"content": "新的记忆：钥匙在抽屉", "type": "event"})
    added = [m for m in api.memories.list(instance_id, limit=100).items if "钥匙在抽屉" in m.content][0]
    confirm = client.get(f"/app/instances/{instance_id}/memories/{added.id}/delete").text
    assert "钥匙在抽屉" in confirm
    client.post(f"/app/instances/{instance_id}/memories/{added.id}/delete")
    assert not [m for m in api.memories.list(instance_id, limit=100).items if m.id == added.id]


def test_an_edit_that_empties_a_memory_is_refused_and_nothing_changes(client: TestClient) -> None:
    instance_id = new_instance(client)
    made = PersonaLab().memories.add(instance_id, MemoryCreate(content="灯塔的钥匙在雷娜手里"))
    before = _snapshot(instance_id)
    page = client.post(f"/app/instances/{instance_id}/memories/{made.id}", data={"content": "   ", "type": "event"})
    assert page.status_code == 422 and "empty" in page.text and 'id="error-message"' in page.text
    assert _snapshot(instance_id) == before
    bad = client.post(f"/app/instances/{instance_id}/memories/{made.id}", data={"content": "x", "importance": "7"})
    assert bad.status_code == 422 and _snapshot(instance_id) == before


def test_a_bulk_edit_acts_on_this_instances_ids_only(client: TestClient) -> None:
    first, second = new_instance(client), new_instance(client)
    api = PersonaLab()
    mine = [api.memories.add(first, MemoryCreate(content=f"记忆{n}")).id for n in range(3)]
    theirs = api.memories.add(second, MemoryCreate(content="别的实例的记忆")).id
    before_first, before_second = _snapshot(first), _snapshot(second)
    page = client.post(
        f"/app/instances/{first}/memories/bulk", data={"action": "pin", "ids": [str(mine[0]), str(theirs)]}
    )
    assert page.status_code == 422 and str(theirs) in page.text and "nothing was changed" in page.text
    assert _snapshot(first) == before_first and _snapshot(second) == before_second
    gone = client.post(f"/app/instances/{first}/memories/bulk", data={"action": "delete", "ids": [str(theirs)]})
    assert gone.status_code == 422 and _snapshot(second) == before_second
    client.post(f"/app/instances/{first}/memories/bulk", data={"action": "pin", "ids": [str(i) for i in mine[:2]]})
    assert [api.memories.get(first, i).pinned for i in mine] == [True, True, False]
    moved = client.post(
        f"/app/instances/{first}/memories/bulk", data={"action": "layer", "layer": "archive", "ids": [str(mine[0])]}
    )
    assert moved.status_code == 422 and "pinned" in moved.text  # a pinned memory stays as it is
    client.post(
        f"/app/instances/{first}/memories/bulk", data={"action": "layer", "layer": "archive", "ids": [str(mine[2])]}
    )
    assert api.memories.get(first, mine[2]).layer == "archive"
    client.post(f"/app/instances/{first}/memories/bulk", data={"action": "delete", "ids": [str(mine[2])]})
    assert mine[2] not in {m.id for m in api.memories.list(first, limit=100).items}


def test_export_then_import_round_trips_and_a_broken_file_changes_nothing(client: TestClient) -> None:
    first, second = new_instance(client), new_instance(client)
    PersonaLab().memories.add(first, MemoryCreate(content="导出的记忆", type="goal", tags=["港口"]))
    exported = client.get(f"/app/instances/{first}/memories/export")
    assert exported.status_code == 200 and "attachment" in exported.headers["content-disposition"]
    data = exported.json()
    assert any(row["content"] == "导出的记忆" for row in data)
    before = _snapshot(second)
    broken = client.post(
        f"/app/instances/{second}/memories/import", files={"document": ("m.json", b'[{"content": ', "application/json")}
    )
    assert broken.status_code == 422 and _snapshot(second) == before
    done = client.post(
        f"/app/instances/{second}/memories/import",
        files={"document": ("m.json", json.dumps(data).encode(), "application/json")},
    )
    assert done.status_code == 200 and "imported-" in str(done.url)
    assert any(m.content == "导出的记忆" for m in PersonaLab().memories.list(second, limit=100).items)


def test_why_this_reply_shows_the_stored_provenance_with_scores(client: TestClient) -> None:
    instance_id = new_instance(client)
    _turn(client, instance_id, FACT)
    # a fact told earlier, out of the recent dialogue (which the prompt holds anyway): a memory
    told = PersonaLab().memories.add(instance_id, MemoryCreate(content="阿岚的怀表藏在灯塔下面", type="event"))
    assert told.last_used_turn is None
    _turn(client, instance_id, "你还记得我的怀表藏在哪里吗？")
    # "last used": the reply's prompt held it, written with the reply's provenance
    assert PersonaLab().memories.get(instance_id, told.id).last_used_turn == 2
    row = client.get(f"/app/instances/{instance_id}/memories").text.split(f'id="memory-{told.id}"')[1]
    assert re.search(r'class="last-used">\S+ 2', row)
    chat = client.get(f"/app/instances/{instance_id}").text
    links = re.findall(rf"/app/instances/{instance_id}/lines/(\d+)/why", chat)
    assert len(links) >= 2  # a "why" link on every reply line
    page = client.get(f"/app/instances/{instance_id}/lines/{links[-1]}/why", headers={"Accept-Language": "en"})
    assert page.status_code == 200 and "Why this reply" in page.text
    assert "阿岚的怀表藏在灯塔下面" in page.text and "keyword" in page.text and "Rewritten query" in page.text
    zh = client.get(f"/app/instances/{instance_id}/lines/{links[-1]}/why", headers={"Accept-Language": "zh-CN"})
    assert "为什么这样回复" in zh.text and "关键词" in zh.text
    user_line = re.findall(r'class="line user" id="line-(\d+)"', chat)[0]
    assert client.get(f"/app/instances/{instance_id}/lines/{user_line}/why").status_code == 404
    other = new_instance(client)
    assert client.get(f"/app/instances/{other}/lines/{links[-1]}/why").status_code == 404


def test_try_it_shows_the_retrieval_and_stores_nothing(client: TestClient) -> None:
    instance_id = new_instance(client)
    _turn(client, instance_id, FACT)
    api = PersonaLab()
    pinned = api.memories.add(instance_id, MemoryCreate(content="怀表是父亲留下的", pinned=True))
    before_memories = _snapshot(instance_id)
    before_lines = api.dialogue.history(instance_id, limit=1000)
    page = client.post(f"/app/instances/{instance_id}/try", data={"message": "我的怀表在哪里？"})
    assert page.status_code == 200 and 'id="record-memories"' in page.text and "怀表" in page.text
    assert f'data-memory-id="{pinned.id}"' in page.text
    pinned_row = page.text.split(f'data-memory-id="{pinned.id}"')[1].split("</tr>")[0]
    assert 'class="badge pin"' in pinned_row  # the pin shows beside its scores
    assert _snapshot(instance_id) == before_memories
    assert api.dialogue.history(instance_id, limit=1000) == before_lines
    empty = client.post(f"/app/instances/{instance_id}/try", data={"message": "  "})
    assert empty.status_code == 422


def test_another_users_instance_is_never_reachable(
    db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    monkeypatch.setenv("PERSONALAB_AUTH", "tokens")
    monkeypatch.setenv("PERSONALAB_AUTH_TOKENS", ",".join(f"{token}:{user}" for user, token in TOKENS.items()))
    from personalab.graph.http.app import app

    with TestClient(app, follow_redirects=True) as alice, TestClient(app, follow_redirects=True) as bob:
        alice.post("/app/login", data={"token": TOKENS["alice"]})
        bob.post("/app/login", data={"token": TOKENS["bob"]})
        instance_id = new_instance(alice)
        memory = PersonaLab(owner="alice").memories.add(instance_id, MemoryCreate(content="爱丽丝的秘密"))
        _turn(alice, instance_id, "你还记得爱丽丝的秘密吗？")
        reply = re.findall(
            rf"/app/instances/{instance_id}/lines/(\d+)/why", alice.get(f"/app/instances/{instance_id}").text
        )
        assert reply and "爱丽丝的秘密" in alice.get(f"/app/instances/{instance_id}/lines/{reply[-1]}/why").text
        before = _snapshot(instance_id)
        for path in (
            f"/app/instances/{instance_id}/memories",
            f"/app/instances/{instance_id}/memories/{memory.id}",
            f"/app/instances/{instance_id}/memories/export",
            f"/app/instances/{instance_id}/try",
            f"/app/instances/{instance_id}/lines/{reply[-1]}/why",
        ):
            page = bob.get(path)
            assert page.status_code in (403, 404) and "爱丽丝的秘密" not in page.text, path
        for path, data in (
            (f"/app/instances/{instance_id}/memories/{memory.id}", {"content": "改掉"}),
            (f"/app/instances/{instance_id}/memories/{memory.id}/pin", {}),
            (f"/app/instances/{instance_id}/memories/{memory.id}/delete", {}),
            (f"/app/instances/{instance_id}/memories/bulk", {"action": "delete", "ids": [str(memory.id)]}),
            (f"/app/instances/{instance_id}/try", {"message": "秘密"}),
        ):
            page = bob.post(path, data=data)
            assert page.status_code in (403, 404) and "爱丽丝的秘密" not in page.text, path
        assert _snapshot(instance_id) == before
        assert "爱丽丝的秘密" in alice.get(f"/app/instances/{instance_id}/memories").text


def test_the_pages_data_is_reachable_through_the_http_api(client: TestClient) -> None:
    first, second = new_instance(client), new_instance(client)
    api = PersonaLab()
    mine = api.memories.add(first, MemoryCreate(content="码头的钥匙在雷娜手里", type="event")).id
    theirs = api.memories.add(second, MemoryCreate(content="别处的记忆")).id
    listed = client.get(f"/instances/{first}/memories", params={"text": "钥匙", "newest_first": True}).json()
    assert [item["id"] for item in listed["items"]] == [mine] and "last_used_turn" in listed["items"][0]
    refused = client.post(f"/instances/{first}/memories/bulk", json={"ids": [mine, theirs], "action": "pin"})
    assert refused.status_code == 422 and str(theirs) in refused.text
    assert not api.memories.get(first, mine).pinned
    done = client.post(f"/instances/{first}/memories/bulk", json={"ids": [mine], "action": "pin"})
    assert done.json() == {"changed": [mine]} and api.memories.get(first, mine).pinned
    record = client.post(f"/instances/{first}/memories/preview", json={"message": "钥匙在哪里？"}).json()
    assert any(item["id"] == mine and item["pinned"] for item in record["memories"])
