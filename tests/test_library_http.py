"""The library's HTTP routes (issue 13) as a client sees them: mounted in a real `langgraph dev` (langgraph.json
`http.app`), started once for the module, next to the served graph; plus the same app in-process (fastapi's test
client) for what needs no server. Bad input is a 4xx naming the field or id; a deleted instance is gone from every
store, its checkpoints included."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from personalab.evals.served import graph_server
from PIL import Image

REPO = Path(__file__).resolve().parents[1]


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (6, 6), "green").save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`langgraph dev` on a free port with its own data directory, for the whole module; this process sees the
    same data directory (to check the stores after a delete)."""
    root = tmp_path_factory.mktemp("library_http")
    data = root / "data"
    data.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PERSONALAB_DATA_DIR", str(data))
        patch.delenv("PERSONALAB_DATABASE_URL", raising=False)
        try:
            with graph_server(REPO, root / "server", {"PERSONALAB_DATA_DIR": str(data)}) as url:
                yield url, data
        finally:
            from personalab.stores.db import dispose_engines

            dispose_engines()
            log = root / "server" / "server.log"
            print(f"--- langgraph dev log ({log}) ---\n{log.read_text(errors='replace') if log.exists() else ''}")


@pytest.fixture
def http(served: tuple[str, Path]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served[0], timeout=60.0) as client:
        yield client


def created(response: httpx.Response) -> Any:
    assert response.status_code == 201, response.text
    return response.json()


def test_the_openapi_description_is_served_through_langgraph_dev(http: httpx.Client) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    for path in ("/characters", "/characters/{character_id}/avatar", "/backgrounds", "/instances/{instance_id}/export"):
        assert path in paths, sorted(paths)


def test_a_client_manages_the_library_and_plays_an_instance(http: httpx.Client, served: tuple[str, Path]) -> None:
    character = created(
        http.post(
            "/characters",
            json={
                "name": "雷娜",
                "traits": "冷静",
                "greetings": ["{{user}}，你来了。"],
                "system_prompt": "{{char}}说话简短。",
                "avatar_base64": base64.b64encode(png()).decode(),
            },
        )
    )
    assert character["avatar_mime"] == "image/png"
    avatar = http.get(f"/characters/{character['id']}/avatar")
    assert avatar.status_code == 200 and avatar.content == png() and avatar.headers["content-type"] == "image/png"
    background = created(
        http.post("/backgrounds", json={"name": "废土", "world_setting": "核战后", "outline": ["一", "二", "三"]})
    )
    instance = created(
        http.post("/instances", json={"character_id": character["id"], "background_id": background["id"]})
    )
    assert (instance["title"], instance["plot"]["total"]) == ("雷娜 · 废土", 3)

    # a turn through the served graph, on the instance's thread
    from langgraph_sdk import get_sync_client
    from personalab.stores.checkpoints import thread_id_for

    client = get_sync_client(url=str(http.base_url), timeout=httpx.Timeout(60.0, connect=5.0))
    thread_id = thread_id_for(instance["id"])
    client.threads.create(thread_id=thread_id)
    result = client.runs.wait(thread_id, "personalab", input={"instance_id": instance["id"], "message": "出发吧。"})
    assert isinstance(result, dict) and not result.get("error"), result
    head = result["prompt"][0]["content"]
    assert "雷娜说话简短。" in head and "冷静" in head

    shown = http.get(f"/instances/{instance['id']}").json()
    assert shown["turns"] == 1 and shown["last_turn_at"]
    assert [i["id"] for i in http.get("/instances", params={"character_id": character["id"]}).json()] == [
        instance["id"]
    ]
    renamed = http.patch(f"/instances/{instance['id']}", json={"title": "复仇之路"})
    assert renamed.status_code == 200 and renamed.json()["title"] == "复仇之路"
    edited = http.patch(f"/characters/{character['id']}", json={"backstory": "前二把手", "remove_avatar": True})
    assert edited.json()["backstory"] == "前二把手" and edited.json()["avatar_bytes"] == 0
    assert http.put(f"/characters/{character['id']}/avatar", content=png()).json()["avatar_bytes"] == len(png())
    applied = http.patch(f"/backgrounds/{background['id']}", json={"outline": ["甲", "乙"], "apply_to_instances": True})
    assert applied.json()["outline"] == ["甲", "乙"]

    # export and import over HTTP: the copy has the same dialogue and turns
    document = http.get(f"/instances/{instance['id']}/export").json()
    assert document["format"] == "personalab-instance" and document["tables"]["line"]
    copy = created(http.post("/instances/import", json=document))["instance"]
    assert (copy["title"], copy["turns"]) == ("复仇之路", 1)

    # deletes: refused while in use (409, naming the instances), then cascade; nothing of them is left
    refused = http.delete(f"/characters/{character['id']}")
    assert refused.status_code == 409 and str(instance["id"]) in refused.json()["detail"]
    deleted = http.delete(f"/instances/{instance['id']}")
    assert deleted.status_code == 200 and deleted.json()["rows_deleted"]["line"] == len(document["tables"]["line"])
    assert http.get(f"/instances/{instance['id']}").status_code == 404
    assert client.threads.get_state(thread_id)["values"] in ({}, [], None)  # its checkpoints are gone

    from personalab.stores import library as store
    from personalab.stores.db import session_scope

    with session_scope() as session:
        assert not any(store.instance_row_counts(session, instance["id"]).values())
    assert not store.has_checkpoints(instance["id"])
    cascade = http.delete(f"/characters/{character['id']}", params={"cascade": "true"})
    assert cascade.status_code == 200 and cascade.json()["instances_deleted"] == [copy["id"]]
    assert http.delete(f"/backgrounds/{background['id']}").status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "words"),
    [
        ("post", "/characters", {"name": ""}, 422, "name"),
        (
            "post",
            "/characters",
            {"name": "x", "avatar_base64": base64.b64encode(b"nope").decode()},
            422,
            "avatar: not an image",
        ),
        ("post", "/characters", {"name": "x", "avatar_base64": "***"}, 422, "avatar_base64: not base64"),
        ("post", "/backgrounds", {"name": "b", "outline": []}, 422, "outline"),
        ("post", "/backgrounds", {"name": "b", "outline": ["p"] * 51}, 422, "outline"),
        ("get", "/characters/99999", None, 404, "character 99999 does not exist"),
        ("get", "/backgrounds/99999", None, 404, "background 99999 does not exist"),
        ("get", "/instances/99999", None, 404, "instance 99999 does not exist"),
        ("delete", "/instances/99999", None, 404, "instance 99999 does not exist"),
        ("post", "/instances", {"character_id": 99999, "background_id": 99999}, 404, "character 99999"),
        ("post", "/instances/import", {"format": "other"}, 422, "file.format"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field_or_id(
    http: httpx.Client, method: str, path: str, body: Any, status: int, words: str
) -> None:
    before = [http.get(p).json() for p in ("/characters", "/backgrounds", "/instances")]
    response = http.request(method.upper(), path, json=body)
    assert response.status_code == status, response.text
    assert words in json.dumps(response.json(), ensure_ascii=False)
    assert [http.get(p).json() for p in ("/characters", "/backgrounds", "/instances")] == before


def test_the_http_app_imports_no_evaluation_code() -> None:
    code = "import sys, personalab.graph.http.app; sys.exit(any(m.startswith('personalab.evals') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_the_routes_in_process(data_dir: Path) -> None:
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app

    client = TestClient(app)
    character = client.post("/characters", json={"name": "A"}).json()
    background = client.post("/backgrounds", json={"name": "B", "outline": ["x"]}).json()
    assert (
        client.post("/instances", json={"character_id": character["id"], "background_id": background["id"]}).status_code
        == 201
    )
    assert client.delete(f"/backgrounds/{background['id']}").status_code == 409
    assert client.put(f"/characters/{character['id']}/avatar", content=b"zz").status_code == 422
    assert client.get(f"/characters/{character['id']}/avatar").status_code == 404
    huge = client.put(f"/characters/{character['id']}/avatar", content=b"\0" * (6 * 1024 * 1024))
    assert huge.status_code == 422 and "over the limit" in huge.json()["detail"]
