"""The web app in-process for page tests (issue 24/25): FastAPI's TestClient on the real app, and an instance made
through the pages as a user makes one (a character, a background, then the instance form)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from personalab.graph.api import PersonaLab


def scripted_client(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The app on `db_url` with the offline scripted model, following redirects; for a test module's `client`
    fixture."""
    from personalab.graph.http.app import app

    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    monkeypatch.setenv("PERSONALAB_LLM", "scripted")
    with TestClient(app, follow_redirects=True) as made:
        yield made


def new_instance(client: TestClient) -> int:
    """Makes a character, a background and an instance of the two through the pages; returns the instance's id."""
    client.post("/app/characters", data={"name": "雷娜", "description": "废土上的佣兵", "greetings": "你来了。"})
    client.post("/app/backgrounds", data={"name": "废土", "world_setting": "核战后", "outline": ["相遇", "出发"]})
    api = PersonaLab()
    character = api.characters.list()[-1].id
    background = api.backgrounds.list()[-1].id
    page = client.post("/app/instances", data={"character_id": character, "background_id": background})
    assert page.status_code == 200
    return int(str(page.url).rstrip("/").split("/")[-1])
