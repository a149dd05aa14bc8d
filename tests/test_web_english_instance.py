"""The web app's pages for an English instance (issue 28): an English card's instance (its `language` "en", taken
from the card's text) names its unnamed speakers in English on every page that shows them — the dialogue view, the
history pages back, the memory console (the list, each record entry, why a reply said what it did, the search page,
core memory, the director) and the statistics page: User, Narrator and the character's name, never 用户 / 旁白 /
角色. A narration row of the chat form (no speaker, or "Narrator") is stored as the instance's narration, named in
its language. Real app (FastAPI's TestClient), the offline scripted model, SQLite and PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from personalab.graph.api import PersonaLab, dialogue
from web_pages import scripted_client

FIXTURES = Path(__file__).parent / "fixtures"
EN_CARD = FIXTURES / "card_v2_lighthouse_en.json"  # Mira, keeper of a lighthouse: an English card
CHINESE_NAMES = ("用户", "旁白", "角色")
NARRATION = "Thunder rolls over the lamp room."
LATER = "The storm is over by dawn."


@pytest.fixture
def client(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    yield from scripted_client(db_url, monkeypatch)


def _turn(client: TestClient, instance: int, data: dict[str, object]) -> None:
    body = client.post(f"/app/instances/{instance}/turn", data=data).text
    assert "event: done" in body, body[-1000:]


def test_an_english_instances_pages_name_its_speakers_in_english(client: TestClient) -> None:
    client.post("/app/language", data={"lang": "en", "back": "/app/instances"})
    card = EN_CARD.read_bytes()
    imported = client.post("/app/characters/import", files={"card": ("lighthouse.json", card, "application/json")})
    assert imported.status_code == 200, imported.text[-1000:]
    character = PersonaLab().characters.list()[-1]
    made = client.post("/app/instances", data={"character_id": character.id})  # no background, no language
    instance = int(str(made.url).rstrip("/").split("/")[-1])
    assert PersonaLab().instances.get(instance).language == "en"

    # no user name, a narration row without a speaker and another character; then narration named "Narrator"
    _turn(
        client,
        instance,
        {"message": "Where am I?", "host_speaker": ["", "Old Tom"], "host_text": [NARRATION, "Storm's coming."]},
    )
    _turn(client, instance, {"message": "Is it over?", "host_speaker": ["Narrator"], "host_text": [LATER]})

    lines = dialogue.history(instance, offset=0, limit=50)["lines"]
    said = {(line["speaker"], line["content"]) for line in lines}
    assert {("Narrator", NARRATION), ("Old Tom", "Storm's coming."), ("User", "Where am I?")} <= said, said
    assert ("Narrator", LATER) in said, said
    assert {line["speaker"] for line in lines if line["attribute"] == "assistant"} == {
        character.name,
        "Narrator",
        "Old Tom",
    }

    chat = client.get(f"/app/instances/{instance}").text
    for speaker in ("Narrator", "User", character.name):
        assert f'<span class="speaker">{speaker}</span>' in chat, speaker
    # the chat form's speaker rows suggest narration in the instance's language
    assert '<option value="Narrator">' in chat and 'placeholder="Narrator"' in chat

    memories = client.get(f"/app/instances/{instance}/memories?type=record").text
    assert f"Narrator: {NARRATION}" in memories and "User: Where am I?" in memories, memories[-3000:]
    entries = sorted(set(re.findall(rf"/app/instances/{instance}/memories/(\d+)", memories)))
    assert entries
    reply = [line["id"] for line in lines if line["attribute"] == "assistant"][-1]
    pages = [
        f"/app/instances/{instance}",
        f"/app/instances/{instance}/main",
        f"/app/instances/{instance}/lines?before={len(lines)}",
        f"/app/instances/{instance}/memories",
        f"/app/instances/{instance}/memories?type=record",
        *[f"/app/instances/{instance}/memories/{entry}" for entry in entries],
        f"/app/instances/{instance}/lines/{reply}/why",
        f"/app/instances/{instance}/try",
        f"/app/instances/{instance}/core",
        f"/app/instances/{instance}/director",
        f"/app/instances/{instance}/stats",
    ]
    for page in pages:
        shown = client.get(page)
        assert shown.status_code == 200, (page, shown.text[-1000:])
        found = [name for name in CHINESE_NAMES if name in shown.text]
        assert not found, (page, found)
    history = client.get(f"/app/instances/{instance}/lines?before={len(lines)}").text
    assert '<span class="speaker">Narrator</span>' in history and '<span class="speaker">User</span>' in history
