"""The memory console over HTTP (issue 23), in-process (fastapi's test client) on SQLite and PostgreSQL: memories
(list, add, search, show, edit, pin, delete, export, import, maintain), memory statistics after played turns, and
what fed a reply (`GET /lines/{id}/provenance`). Bad input is a 4xx naming the field or id, and nothing changes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.stores.background import flush_event_writes


@pytest.fixture
def client(db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    from personalab.graph.http.app import app

    with TestClient(app) as made:
        yield made


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json() if response.content else None


def test_memories_over_http(db_url: str, client: TestClient) -> None:
    instance = create_sample_instance(db_url)
    base = f"/instances/{instance}/memories"
    memory = ok(client.post(base, json={"content": "莱姆把金色怀表藏在旧仓库", "type": "event", "tags": ["怀表"]}), 201)
    ok(client.post(base, json={"content": "想要离开废土", "type": "goal"}), 201)
    page = ok(client.get(base, params={"kind": "goal"}))
    assert page["total"] == 1 and page["items"][0]["type"] == "goal"
    found = ok(client.post(f"{base}/search", json={"query": "怀表藏在哪里"}))
    assert found["items"][0]["id"] == memory["id"] and "paths" in found["items"][0]["breakdown"]
    edited = ok(client.patch(f"{base}/{memory['id']}", json={"content": "莱姆把怀表交给了商人"}))
    assert edited["user_edited"]
    detail = ok(client.get(f"{base}/{memory['id']}"))
    assert detail["versions"][0]["content"] == "莱姆把金色怀表藏在旧仓库" and detail["source"]["turn"] == 0
    assert ok(client.put(f"{base}/{memory['id']}/pin"))["pinned"]
    answer = client.patch(f"{base}/{memory['id']}", json={"content": "再改"})
    assert answer.status_code == 422 and "is pinned" in answer.json()["detail"]
    assert not ok(client.delete(f"{base}/{memory['id']}/pin"))["pinned"]
    exported = ok(client.get(f"{base}/export"))
    assert len(exported) == 2
    other = create_sample_instance(db_url)
    assert ok(client.post(f"/instances/{other}/memories/import", json={"memories": exported}))["imported"] == 2
    ok(client.post(f"{base}/maintain", params={"turn": 50}))
    ok(client.delete(f"{base}/{memory['id']}"), 204)
    answer = client.patch(f"{base}/{memory['id']}", json={"content": "x"})
    assert answer.status_code == 404 and f"memory {memory['id']} does not exist" in answer.json()["detail"]
    for method, path, body, words in [
        ("POST", base, {"content": "  "}, "memory content is empty"),
        ("POST", base, {"content": "x", "importance": 2}, "importance 2"),
        ("POST", base, {"content": "x", "owner": "bo"}, "owner"),
        ("GET", f"{base}?kind=dream", None, "memory kind 'dream'"),
        ("POST", f"/instances/{other}/memories/import", {"memories": [{"content": "ok"}, {"content": 7}]}, "item 2"),
    ]:
        answer = client.request(method, path, json=body)
        assert answer.status_code == 422 and words in answer.text, answer.text
    assert ok(client.get(f"/instances/{other}/memories"))["total"] == 2


def test_statistics_and_provenance_after_turns(db_url: str, client: TestClient) -> None:
    instance = create_sample_instance(db_url)
    ok(
        client.post(f"/instances/{instance}/memories", json={"content": "莱姆把金色怀表藏在旧仓库", "importance": 0.9}),
        201,
    )
    with turn_graph(Context(database_url=db_url)) as (graph, context):
        first = run_turn(graph, context, instance, "怀表藏在旧仓库哪里了？")
        run_turn(graph, context, instance, "还有别的吗？")
    flush_event_writes()
    reply = first["debug"]["reply_line_ids"][0]
    provenance = ok(client.get(f"/lines/{reply}/provenance"))
    assert provenance["turn"] == first["turn"] and provenance["record"]["memories"]
    answer = client.get(f"/lines/{first['user_line_id']}/provenance")
    assert answer.status_code == 404 and "not a reply" in answer.json()["detail"]
    stats = ok(client.get(f"/instances/{instance}/memory-statistics"))
    assert stats["replies_with_provenance"] == 2
    assert stats["by_layer"].get("record", 0) >= 4  # every line of the two turns is in the dialogue record
    assert stats["by_kind"]["episodic"] == stats["total"] - stats["by_kind"].get("semantic", 0) - stats["by_kind"].get(
        "trait", 0
    ) - stats["by_kind"].get("goal", 0)
    assert stats["retrieval"]["kind"]["episodic"]["retrieved"] >= 1
    assert any(stats["retrieval"]["trigger"].values())
    assert stats["growth"][-1]["total"] == stats["total"]
    assert sum(stats["by_branch"].values()) == stats["total"]
