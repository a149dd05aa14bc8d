"""A turn over HTTP (`langgraph dev`) on an instance that does not exist is a 404 naming it, before any run exists
(issue 28: it was a 200 with "An internal error occurred" and tracebacks in the log); a real instance plays a turn
on the thread `GET /instances/{id}` gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from personalab.evals.served import graph_server

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("cards_served")
    data = root / "data"
    data.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PERSONALAB_DATA_DIR", str(data))
        patch.delenv("PERSONALAB_DATABASE_URL", raising=False)
        try:
            with graph_server(REPO, root / "server", {"PERSONALAB_DATA_DIR": str(data)}) as url:
                yield url
        finally:
            from personalab.stores.db import dispose_engines

            dispose_engines()


def test_a_turn_on_an_unknown_instance_is_a_404_naming_it(served: str) -> None:
    with httpx.Client(base_url=served, timeout=120.0) as http:
        answer = http.post(
            "/runs/wait", json={"assistant_id": "personalab", "input": {"instance_id": 4242, "message": "hello"}}
        )
        assert answer.status_code == 404, answer.text
        assert "input.instance_id: instance 4242 does not exist" in answer.text
        character = http.post("/characters", json={"name": "Mira"}).json()
        background = http.post("/backgrounds", json={"name": "Harbour", "outline": ["arrive"]}).json()
        made = http.post("/instances", json={"character_id": character["id"], "background_id": background["id"]})
        instance = http.get(f"/instances/{made.json()['id']}").json()
        thread = instance["thread_id"]
        assert http.post("/threads", json={"thread_id": thread, "if_exists": "do_nothing"}).status_code == 200
        played = http.post(
            f"/threads/{thread}/runs/wait",
            json={"assistant_id": "personalab", "input": {"instance_id": instance["id"], "message": "hello"}},
        )
        assert played.status_code == 200, played.text
        assert played.json()["reply"]
