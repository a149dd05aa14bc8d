"""A card with a lorebook of thousands of entries plays from `instance create --character N` alone (issue 28): every
turn retrieves within the time cap (the turn's output says no cut), the entries whose keys the message names are
injected, and an edited entry takes effect from the next turn (the book prepared once per version is never stale).
English and Chinese cards (tests/bigbook_cards.py), on SQLite and PostgreSQL, through the CLI in-process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bigbook_cards import write_big_card
from cli_helpers import cli
from personalab.graph.api import PersonaLab

ENTRIES = 3_000


@pytest.fixture
def url(db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test's database, for the CLI run in-process."""
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    return db_url


def turn(capsys: pytest.CaptureFixture[str], instance: int, message: str) -> dict[str, Any]:
    code, out, err = cli(capsys, "turn", "--instance", str(instance), message, "--json")
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    assert not result["error"], result["error"]
    # never a silent cut: the output's flag and notice say the retrieval ran whole
    assert result["retrieval_cut"] is False, result["notice"]
    assert (result["retrieval_status"], result["notice"]) == ("ok", None)
    return result


def injected(result: dict[str, Any]) -> str:
    """The prompt's text, where the fired world-book entries stand."""
    return "\n".join(message["content"] for message in result["prompt"])


@pytest.mark.parametrize("language", ["en", "zh"])
def test_a_card_with_thousands_of_lorebook_entries_plays_from_its_character_alone(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], language: str
) -> None:
    path, plain = write_big_card(tmp_path, language, ENTRIES)
    code, out, err = cli(capsys, "card", "import", str(path), "--json")
    assert code == 0, err
    character = json.loads(out)["character_id"]
    code, out, err = cli(capsys, "instance", "create", "--character", str(character), "--json")
    assert code == 0, err
    instance = json.loads(out)
    assert instance["language"] == language
    named = list(plain.items())[::400][:4]
    separator = ", and " if language == "en" else "，还有"
    ask = "Tell me about " if language == "en" else "给我讲讲"
    for number, (key, content) in enumerate(named):
        other = named[(number + 1) % len(named)][0]
        result = turn(capsys, instance["id"], f"{ask}{key}{separator}{other}")
        scan = result["debug"]["retrieval"]["worldbook_scan"]
        assert scan["entries"] == ENTRIES
        fired = {item["content"] for item in result["debug"]["retrieval"]["worldbook_fired"]}
        assert content in fired and plain[other] in fired
        assert content in injected(result)
        # the three constant entries are always in; nothing else of the thousands unnamed
        assert len(fired) < 20

    # an edit made through the API (as another process would: the cached book is checked against the database)
    key, content = named[0]
    book = PersonaLab(database_url=url).worldbook.list(character_id=character)
    entry = next(item for item in book if key in item["keywords"])
    edited = f"{content} EDITED-{language}"
    PersonaLab(database_url=url).worldbook.edit(int(entry["id"]), content=edited)
    result = turn(capsys, instance["id"], f"{ask}{key}")
    fired = {item["content"] for item in result["debug"]["retrieval"]["worldbook_fired"]}
    assert edited in fired and content not in fired
    assert edited in injected(result)
    PersonaLab(database_url=url).worldbook.edit(int(entry["id"]), enabled=False)
    result = turn(capsys, instance["id"], f"{ask}{key}")
    assert edited not in {item["content"] for item in result["debug"]["retrieval"]["worldbook_fired"]}
