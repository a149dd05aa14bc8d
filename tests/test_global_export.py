"""The global knowledge and world book exported and imported as one file (issue 27: `instance export` leaves
them out, so a backup of instances lost them): `personalab global export|import`, `api.admin.export_global` /
`import_global`, `GET /admin/global/export` / `POST /admin/global/import`. Lossless: every entry's fields, the
knowledge keywords and the global world-book settings come back the same in another database; entries of a
character or an instance are not in it; a second import adds nothing twice; a bad file changes nothing.
Real SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli, one_line
from fastapi.testclient import TestClient
from personalab.graph.api.facade import PersonaLab
from personalab.graph.runner import create_sample_instance

VOLATILE = {"id", "created_at", "updated_at"}


def _same(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        ({k: v for k, v in row.items() if k not in VOLATILE} for row in rows),
        key=lambda r: json.dumps(r, sort_keys=True),
    )


def _fill(api: PersonaLab, instance: int) -> None:
    api.knowledge.add("地理", "北方的废墟曾是一座城市。", importance=0.8, keywords=["废墟", "北方"])
    api.knowledge.add("规则", "夜里不要点火。", enabled=False)
    api.knowledge.add("私事", "只属于这个实例。", instance_id=instance)
    api.worldbook.add("雷娜来自废土的东边。", keywords=["雷娜"], priority=7, constant=False)
    api.worldbook.add("铁锈城的规矩：不许带枪进城。", keywords=["铁锈城"], secondary_keywords=["枪"], enabled=False)
    api.worldbook.add("这条只属于实例。", keywords=["实例"], instance_id=instance)
    api.worldbook.set_settings({"scan_depth": 6, "recursive": True, "budget_share": 0.2})


def _state(api: PersonaLab) -> dict[str, Any]:
    return {
        "knowledge": _same(api.knowledge.list()),
        "worldbook": _same(api.worldbook.list()),
        "settings": api.worldbook.settings(),
    }


@pytest.fixture
def other_url(db_url: str, tmp_path: Path) -> Iterator[str]:
    """A second, empty database of the same kind (the restore's)."""
    if db_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'restored.db'}"
        return
    from conftest import postgres_test_schema

    with postgres_test_schema() as url:
        yield url


def test_the_global_knowledge_and_world_book_round_trip(db_url: str, other_url: str, tmp_path: Path) -> None:
    source = PersonaLab(database_url=db_url)
    _fill(source, create_sample_instance(db_url))
    data = source.admin.export_global()
    assert len(data["knowledge"]["entries"]) == 2 and len(data["worldbook"]["entries"]) == 2
    assert "只属于" not in json.dumps(data, ensure_ascii=False)  # no instance's entries

    restored = PersonaLab(database_url=other_url)
    report = restored.admin.import_global(json.loads(json.dumps(data)))
    assert report["knowledge"]["imported"] == 2 and report["worldbook"]["imported"] == 2
    assert _state(restored) == _state(source)
    assert restored.worldbook.settings()["set"]["scan_depth"] == 6
    # again: nothing twice
    again = restored.admin.import_global(data)
    assert again["knowledge"]["imported"] == 0 and again["worldbook"]["imported"] == 0
    assert _state(restored) == _state(source)
    # a bad file changes nothing (all or nothing), one error naming the field
    broken = json.loads(json.dumps(data))
    broken["worldbook"]["entries"].append({"content": 7})
    broken["knowledge"]["entries"].append({"tag": "新", "content": "新的知识。"})
    with pytest.raises(Exception, match="content"):
        restored.admin.import_global(broken)
    assert _state(restored) == _state(source)
    # the signed-in user may not: administration is the operator's
    with pytest.raises(Exception, match="operator"):
        PersonaLab(owner="alice", database_url=db_url).admin.export_global()


def test_cli_and_http(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", sqlite_url)
    source = PersonaLab()
    _fill(source, create_sample_instance())
    target = tmp_path / "global.json"
    code, out, err = cli(capsys, "global", "export", str(target))
    assert code == 0, err
    assert "2 global knowledge entries and 2 global world-book entries" in out
    code, _, err = cli(capsys, "global", "import", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json" in one_line(err)

    restored_url = f"sqlite:///{tmp_path / 'restored.db'}"
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", restored_url)
    code, out, err = cli(capsys, "global", "import", str(target))
    assert code == 0, err
    assert _state(PersonaLab(database_url=restored_url)) == _state(PersonaLab(database_url=sqlite_url))

    # over HTTP (a local server: the caller is the operator) into a third database
    third = f"sqlite:///{tmp_path / 'third.db'}"
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", third)
    from personalab.graph.http.app import app

    with TestClient(app) as client:
        done = client.post("/admin/global/import", content=target.read_bytes())
        assert done.status_code == 200, done.text
        exported = client.get("/admin/global/export")
        assert exported.status_code == 200
        assert exported.json()["worldbook_settings"] == json.loads(target.read_text())["worldbook_settings"]
        bad = client.post("/admin/global/import", content=b'{"format": "something else"}')
        assert bad.status_code == 422 and "format" in bad.text
    assert _state(PersonaLab(database_url=third)) == _state(PersonaLab(database_url=sqlite_url))
