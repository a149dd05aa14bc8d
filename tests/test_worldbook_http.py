"""Cards, the world book and the knowledge library over HTTP (issue 15), in-process with fastapi's test client: a
card uploaded and exported back, a lorebook imported and exported, settings set and shown, knowledge CRUD; bad
input is a 422 naming the field and changes nothing."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from PIL.PngImagePlugin import PngInfo

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def http(data_dir: Path) -> Any:
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app

    return TestClient(app)


def card_png() -> bytes:
    card = json.loads((FIXTURES / "card_v2_lantern.json").read_text(encoding="utf-8"))
    info = PngInfo()
    info.add_text("chara", base64.b64encode(json.dumps(card, ensure_ascii=False).encode("utf-8")).decode("ascii"))
    out = io.BytesIO()
    Image.new("RGBA", (8, 12), (10, 120, 200, 255)).save(out, format="PNG", pnginfo=info)
    return out.getvalue()


def test_a_card_uploaded_becomes_a_character_and_comes_back_as_a_card(http: Any) -> None:
    made = http.post("/cards/import?name=lantern.png", content=card_png())
    assert made.status_code == 201, made.text
    done = made.json()
    assert done["name"] == "灯守" and done["book"]["imported"] == 3
    character_id = done["character_id"]
    book = http.get(f"/worldbook/export?character_id={character_id}&format=sillytavern").json()
    assert len(book["entries"]) == 3
    as_png = http.get(f"/characters/{character_id}/card")
    assert as_png.headers["content-type"] == "image/png" and as_png.content.startswith(b"\x89PNG")
    as_v3 = http.get(f"/characters/{character_id}/card?format=v3").json()
    assert as_v3["spec"] == "chara_card_v3" and as_v3["data"]["name"] == "灯守"
    again = http.post("/cards/import", content=as_png.content)
    assert again.status_code == 201 and again.json()["name"] == "灯守"
    bad = http.post("/cards/import?name=x.png", content=b"\x89PNG\r\n\x1a\nnot really")
    assert bad.status_code == 422 and "x.png" in bad.json()["detail"]
    assert http.get(f"/characters/{character_id}/card?format=v9").status_code == 422
    assert http.get("/characters/999/card").status_code == 404
    assert http.post("/cards/import", content=b"").status_code == 422


def test_a_lorebook_in_and_out_and_the_settings(http: Any) -> None:
    world_info = {"entries": {"0": {"uid": 0, "key": ["灯塔"], "content": "灯塔建于百年前。", "sticky": 2}}}
    done = http.post("/worldbook/import", content=json.dumps(world_info, ensure_ascii=False).encode("utf-8"))
    assert done.status_code == 200, done.text
    assert done.json()["imported"] == 1 and done.json()["scope"] == "global"
    exported = http.get("/worldbook/export?format=sillytavern").json()
    assert exported["entries"]["0"]["sticky"] == 2
    bad = http.post("/worldbook/import", content=b'{"entries": [{"key": ["/(/"], "content": "x"}]}')
    # issue 28: an entry whose key is not a valid regular expression is named and skipped, the rest imported
    assert bad.status_code == 200 and bad.json()["imported"] == 0
    assert "entry 1" in bad.json()["skipped"][0] and "regular expression" in bad.json()["skipped"][0]
    assert len(http.get("/worldbook/export").json()["entries"]) == 1  # nothing stored of the bad entry
    assert http.post("/worldbook/import", content=b"not json").status_code == 422

    put = http.put("/worldbook/settings", json={"budget_share": 0.1, "recursive": False})
    assert put.status_code == 200 and put.json()["effective"]["budget_share"] == 0.1
    shown = http.get("/worldbook/settings").json()
    assert shown["set"]["recursive"] is False and shown["effective"]["scan_depth"] == 4
    wrong = http.put("/worldbook/settings", json={"scan_depth": 500})
    assert wrong.status_code == 422 and "scan_depth" in wrong.json()["detail"]
    unknown = http.put("/worldbook/settings", json={"depth": 3})
    assert unknown.status_code == 422 and "depth" in json.dumps(unknown.json())
    assert http.get("/worldbook/settings?instance_id=77").status_code == 404
    cleared = http.put("/worldbook/settings", json={"clear": True}).json()
    assert cleared["set"]["budget_share"] is None


def test_knowledge_crud(http: Any) -> None:
    made = http.post("/knowledge", json={"tag": "天气", "content": "荒原上常年刮着沙尘暴。"})
    assert made.status_code == 201
    entry_id = made.json()["id"]
    edited = http.patch(f"/knowledge/{entry_id}", json={"importance": 0.9, "enabled": False}).json()
    assert (edited["importance"], edited["enabled"], edited["user_edited"]) == (0.9, False, True)
    tagged = http.post(f"/knowledge/{entry_id}/tags", json={"add": ["环境"]}).json()
    assert tagged["tags"] == ["天气", "环境"]
    assert [e["id"] for e in http.get("/knowledge?tag=环境").json()] == [entry_id]
    bad = http.patch(f"/knowledge/{entry_id}", json={"importance": 5})
    assert bad.status_code == 422 and "importance" in bad.json()["detail"]
    assert http.patch(f"/knowledge/{entry_id}", json={"content": None}).status_code == 422
    assert http.get(f"/knowledge/{entry_id}").json()["importance"] == 0.9
    assert http.post("/knowledge", json={"tag": "x"}).status_code == 422  # no content: FastAPI names the field
    assert http.delete(f"/knowledge/{entry_id}").status_code == 200
    assert http.get(f"/knowledge/{entry_id}").status_code == 404


# --- through langgraph dev ------------------------------------------------------------------------------------


def test_the_routes_through_langgraph_dev(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The same routes mounted in a real `langgraph dev` (langgraph.json `http.app`): listed in the OpenAPI
    description, a card uploaded, its character's settings shown, knowledge added and found by tag."""
    import httpx
    from test_library_http import served

    server = served.__wrapped__(tmp_path_factory)  # the fixture's generator: start, then stop at the end
    url, _data = next(server)
    try:
        with httpx.Client(base_url=url, timeout=60.0) as client:
            paths = client.get("/openapi.json").json()["paths"]
            for path in ("/cards/import", "/worldbook/settings", "/knowledge/{entry_id}/tags"):
                assert path in paths, sorted(paths)
            done = client.post("/cards/import?name=lantern.png", content=card_png())
            assert done.status_code == 201, done.text
            character_id = done.json()["character_id"]
            shown = client.get(f"/worldbook/settings?character_id={character_id}").json()
            assert shown["set"]["max_tokens"] == 500  # the card book's token budget
            made = client.post(f"/knowledge?character_id={character_id}", json={"tag": "灯", "content": "灯从未熄灭。"})
            assert made.status_code == 201
            assert [e["content"] for e in client.get(f"/knowledge?character_id={character_id}&tag=灯").json()] == [
                "灯从未熄灭。"
            ]
            bad = client.put("/worldbook/settings", json={"budget_share": 7})
            assert bad.status_code == 422 and "budget_share" in bad.json()["detail"]
    finally:
        server.close()
