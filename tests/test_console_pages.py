"""The memory console's pages (issue 25: trigger configuration, world-book and knowledge editors, core memory,
director and review) through FastAPI's TestClient on the real app, on SQLite and PostgreSQL: what a form stores,
every bad input one message naming the field with nothing stored, both languages, escaped text, and another
user's instance never reachable with auth on. The journeys in a real browser are tests/test_console_browser.py."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from personalab.graph.api import PersonaLab

TOKENS = {"alice": "tok-console-alice-7d1", "bob": "tok-console-bob-2f9"}
HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def client(db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    from personalab.graph.http.app import app

    with TestClient(app, follow_redirects=True) as made:
        yield made


def _instance(owner: str | None = None, outline: tuple[str, ...] = ("相遇", "同行", "离别")) -> tuple[int, int]:
    api = PersonaLab(owner=owner)
    character = api.characters.create({"name": "雷娜", "traits": "冷静、警惕", "greetings": ["你来了。"]})
    background = api.backgrounds.create({"name": "废土", "outline": list(outline)})
    instance = api.instances.create({"character_id": character.id, "background_id": background.id})
    return character.id, instance.id


# --- trigger configuration ----------------------------------------------------------------------------------------


def test_the_configuration_pages_show_every_field_its_effective_value_and_source(client: TestClient) -> None:
    character, instance = _instance()
    for path in ("/app/config", f"/app/characters/{character}/config", f"/app/instances/{instance}/config"):
        for lang, word in (("zh-CN", "触发配置"), ("en", "Trigger configuration")):
            page = client.get(path, headers={"Accept-Language": lang})
            assert page.status_code == 200 and word in page.text
            for field in (
                "semantic_similarity",
                "max_per_type.goal",
                "relevance_threshold",
                "template",
                "wb.scan_depth",
            ):
                assert f'name="{field}"' in page.text
            assert 'data-source="default"' in page.text
    assert 'href="/app/config"' in client.get("/app/instances").text  # the operator's nav link
    assert f'href="/app/characters/{character}/config"' in client.get("/app/characters").text
    assert f'href="/app/instances/{instance}/core"' in client.get(f"/app/instances/{instance}").text
    PersonaLab().trigger_config.set({"relevance_threshold": 0.4})
    PersonaLab().trigger_config.set({"max_total_length": 300}, character_id=character)
    page = client.get(f"/app/instances/{instance}/config").text
    assert 'data-effective="relevance_threshold">0.4<' in page and 'data-source="global"' in page
    assert 'data-effective="max_total_length">300<' in page and f'data-source="character {character}"' in page


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("relevance_threshold", "2", "relevance_threshold"),
        ("relevance_threshold", "abc", "relevance_threshold"),
        ("max_total_length", "-5", "max_total_length"),
        ("max_per_type.goal", "500", "max_per_type.goal"),
        ("template", "{nope}", "template"),
        ("semantic_similarity", "maybe", "semantic_similarity"),
        ("inject_position", "sideways", "inject_position"),
        ("wb.budget_share", "5", "budget_share"),
        ("wb.scan_depth", "x", "scan_depth"),
    ],
)
def test_a_bad_value_is_named_as_you_type_and_on_save_nothing_is_saved(
    client: TestClient, field: str, value: str, named: str
) -> None:
    _character, instance = _instance()
    base = f"/app/instances/{instance}/config"
    typed = client.post(
        f"{base}/validate", data={field: value}, headers={"HX-Request": "true", "HX-Trigger-Name": field}
    )
    assert typed.status_code == 200 and named in typed.text and 'class="error"' in typed.text
    saved = client.post(base, data={field: value, "keyword_matching": "false"})
    assert saved.status_code == 400 and named in saved.text
    shown = PersonaLab().trigger_config.get(instance_id=instance)
    assert shown.set == {}  # nothing saved, the good field of the same form neither
    assert PersonaLab().worldbook.settings(instance_id=instance)["set"] == {k: None for k in shown_settings()}


def shown_settings() -> tuple[str, ...]:
    from personalab.graph.api.worldbook import SETTING_FIELDS

    return SETTING_FIELDS


def test_a_good_value_validates_quietly_saves_is_live_and_resets(client: TestClient) -> None:
    character, instance = _instance()
    base = f"/app/instances/{instance}/config"
    ok = client.post(
        f"{base}/validate", data={"relevance_threshold": "0.3"}, headers={"HX-Trigger-Name": "relevance_threshold"}
    )
    assert ok.status_code == 200 and ok.text == ""
    page = client.post(
        base,
        data={
            "semantic_similarity": "false",
            "max_per_type.goal": "1",
            "wb.scan_depth": "4",
            "template": "· {content}",
        },
    )
    assert page.status_code == 200 and "下一轮起生效" in page.text
    effective = PersonaLab().trigger_config.effective(instance)
    assert effective.effective["semantic_similarity"] is False
    assert effective.sources["semantic_similarity"] == f"instance {instance}"
    assert effective.effective["max_per_type"]["goal"] == 1 and effective.sources["max_per_type.episodic"] == "default"
    settings = PersonaLab().worldbook.settings(instance_id=instance)
    assert settings["effective"]["scan_depth"] == 4 and settings["sources"]["scan_depth"] == f"instance {instance}"
    # the character's page does not show the instance's value as its own
    assert PersonaLab().trigger_config.get(character_id=character).set == {}
    client.post(f"{base}/reset")
    assert PersonaLab().trigger_config.get(instance_id=instance).set == {}
    assert PersonaLab().worldbook.settings(instance_id=instance)["sources"]["scan_depth"] == "default"


# --- world book ---------------------------------------------------------------------------------------------------


def _entry(instance: int, content: str = "北方的废墟埋着旧城。", keys: tuple[str, ...] = ("废墟",)) -> int:
    return int(PersonaLab().worldbook.add(content, keywords=list(keys), instance_id=instance)["id"])


def test_world_book_entries_are_added_edited_reordered_and_deleted(client: TestClient) -> None:
    _character, instance = _instance()
    base = f"/app/instances/{instance}/worldbook"
    page = client.post(base, data={"content": HOSTILE, "keywords": "灯塔，港口", "trigger_type": "keyword"})
    assert page.status_code == 200 and HOSTILE not in page.text and "&lt;script&gt;" in page.text
    first = PersonaLab().worldbook.list(instance_id=instance)[0]
    assert first["keywords"] == ["灯塔", "港口"]
    second = _entry(instance)
    form = {
        "title": "旧城",
        "content": "北方的废墟下是旧城的地铁。",
        "keywords": "废墟, 旧城",
        "secondary_keywords": "地铁",
        "position": "user",
        "trigger_type": "keyword",
        "priority": "50",
        "probability": "80",
        "sticky": "2",
        "cooldown": "3",
        "delay": "4",
        "min_turn": "1",
        "max_turn": "9",
        "enabled": "on",
    }
    assert client.post(f"/app/worldbook/entries/{second}", data=form).status_code == 200
    got = PersonaLab().worldbook.get(second)
    assert got["content"] == form["content"] and got["keywords"] == ["废墟", "旧城"]
    assert got["secondary_keywords"] == ["地铁"] and got["position"] == "user" and got["priority"] == 50
    assert (got["probability"], got["sticky"], got["cooldown"], got["delay"]) == (80, 2, 3, 4)
    assert got["temporal"] == {"min_turn": 1, "max_turn": 9} and got["enabled"] is True
    client.post(f"/app/worldbook/entries/{second}", data={**form, "enabled": ""})
    assert PersonaLab().worldbook.get(second)["enabled"] is False
    # order: `first` (100) above `second` (50); move second up
    client.post(f"/app/worldbook/entries/{second}/move", data={"direction": "up"})
    ordered = sorted(PersonaLab().worldbook.list(instance_id=instance), key=lambda e: -e["priority"])
    assert [e["id"] for e in ordered] == [second, first["id"]]
    client.post(f"/app/worldbook/entries/{second}/move", data={"direction": "down"})
    ordered = sorted(PersonaLab().worldbook.list(instance_id=instance), key=lambda e: -e["priority"])
    assert [e["id"] for e in ordered] == [first["id"], second]
    client.post(f"/app/worldbook/entries/{first['id']}/delete")
    assert [e["id"] for e in PersonaLab().worldbook.list(instance_id=instance)] == [second]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("probability", "150"),
        ("priority", "abc"),
        ("sticky", "-1"),
        ("cooldown", "x"),
        ("content", "  "),
        ("position", "nowhere"),
    ],
)
def test_a_bad_entry_value_names_the_field_and_changes_nothing(client: TestClient, field: str, value: str) -> None:
    _character, instance = _instance()
    entry = _entry(instance)
    before = PersonaLab().worldbook.get(entry)
    page = client.post(f"/app/worldbook/entries/{entry}", data={"content": "新内容", "keywords": "废墟", field: value})
    assert page.status_code == 400 and field in page.text
    assert PersonaLab().worldbook.get(entry) == before


def test_adding_an_entry_without_content_is_one_message(client: TestClient) -> None:
    _character, instance = _instance()
    page = client.post(f"/app/instances/{instance}/worldbook", data={"content": "", "keywords": "废墟"})
    assert page.status_code == 400 and "content" in page.text
    assert PersonaLab().worldbook.list(instance_id=instance) == []


LOREBOOK = {
    "entries": {
        "0": {
            "uid": 0,
            "key": ["灯塔"],
            "keysecondary": [],
            "content": "灯塔每夜亮起。",
            "order": 10,
            "probability": 60,
        },
        "1": {"uid": 1, "key": ["港口"], "keysecondary": [], "content": "港口停着旧船。", "order": 20, "sticky": 2},
    }
}


def test_a_sillytavern_lorebook_is_imported_and_exported_from_the_page(client: TestClient) -> None:
    character, _instance_id = _instance()
    base = f"/app/characters/{character}/worldbook"
    page = client.post(
        f"{base}/import",
        files={"lorebook": ("lore.json", json.dumps(LOREBOOK, ensure_ascii=False), "application/json")},
    )
    assert page.status_code == 200 and 'id="imported"' in page.text
    entries = PersonaLab().worldbook.list(character_id=character)
    assert sorted(e["content"] for e in entries) == ["港口停着旧船。", "灯塔每夜亮起。"]
    assert {e["content"]: e["probability"] for e in entries}["灯塔每夜亮起。"] == 60
    assert {e["content"]: e["sticky"] for e in entries}["港口停着旧船。"] == 2
    exported = client.get(f"{base}/export?format=sillytavern")
    assert exported.status_code == 200 and "attachment" in exported.headers["content-disposition"]
    data = exported.json()
    assert sorted(entry["content"] for entry in data["entries"].values()) == ["港口停着旧船。", "灯塔每夜亮起。"]


@pytest.mark.parametrize(
    "content",
    [
        *(b"{not json", b"[1, 2]", json.dumps({"entries": {"0": {"key": "x"}}}).encode(), b"", b"\xff\xfe\x00"),
        b"[" * 5000 + b"]" * 5000,  # nested deeper than any lorebook: one message, not a server error
        b'{"entries": {"0": {"key": ["x"], "content": "a\\u0000b"}}}',  # a NUL the databases refuse
    ],
)
def test_a_broken_lorebook_is_one_message_and_nothing_changes(client: TestClient, content: bytes) -> None:
    _character, instance = _instance()
    entry = _entry(instance)
    page = client.post(
        f"/app/instances/{instance}/worldbook/import",
        files={"lorebook": ("broken.json", io.BytesIO(content), "application/json")},
    )
    assert page.status_code == 400 and 'id="console-error"' in page.text and "lorebook" in page.text.lower()
    assert [e["id"] for e in PersonaLab().worldbook.list(instance_id=instance)] == [entry]


# --- knowledge ----------------------------------------------------------------------------------------------------


def test_knowledge_entries_are_added_edited_imported_and_deleted(client: TestClient) -> None:
    _character, instance = _instance()
    base = f"/app/instances/{instance}/knowledge"
    assert (
        client.post(
            base, data={"tag": "地理", "content": "北方是雪原。", "importance": "0.8", "keywords": "北方"}
        ).status_code
        == 200
    )
    entry = PersonaLab().knowledge.list(instance_id=instance)[0]
    assert entry["importance"] == 0.8 and entry["keywords"] == ["北方"]
    page = client.post(
        f"/app/knowledge/entries/{entry['id']}", data={"tag": "地理", "content": "北方是冻土。", "importance": "7"}
    )
    assert page.status_code == 400 and "importance" in page.text
    assert PersonaLab().knowledge.get(entry["id"])["content"] == "北方是雪原。"
    client.post(
        f"/app/knowledge/entries/{entry['id']}", data={"tag": "地理", "content": "北方是冻土。", "importance": "0.6"}
    )
    assert PersonaLab().knowledge.get(entry["id"])["content"] == "北方是冻土。"
    exported = client.get(f"{base}/export").json()
    broken = client.post(f"{base}/import", files={"file": ("k.json", b"{oops", "application/json")})
    assert broken.status_code == 400 and len(PersonaLab().knowledge.list(instance_id=instance)) == 1
    client.post(f"/app/knowledge/entries/{entry['id']}/delete")
    assert PersonaLab().knowledge.list(instance_id=instance) == []
    again = client.post(
        f"{base}/import", files={"file": ("k.json", json.dumps(exported, ensure_ascii=False), "application/json")}
    )
    assert again.status_code == 200 and len(PersonaLab().knowledge.list(instance_id=instance)) == 1


# --- core memory --------------------------------------------------------------------------------------------------


def _turns(instance: int, messages: list[str]) -> dict[str, Any]:
    from personalab.graph.runner import run_turn, turn_graph
    from personalab.nodes.context import Context

    state: dict[str, Any] = {}
    with turn_graph(Context()) as (graph, ctx):
        for message in messages:
            state = run_turn(graph, ctx, instance, message)
    return state


def test_core_memory_versions_diff_and_rollback(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONALAB_MAINTENANCE_EVERY", "1")
    _character, instance = _instance()
    base = f"/app/instances/{instance}/core"
    assert client.get(base).status_code == 200
    _turns(instance, ["出发。", "继续。"])
    page = client.get(base, headers={"Accept-Language": "en"})
    assert page.status_code == 200 and 'id="version-3"' in page.text and "turn" in page.text
    diff = client.get(f"{base}?a=1&b=3")
    assert diff.status_code == 200 and 'id="diff"' in diff.text
    versions = PersonaLab().core_memory.versions(instance)
    missing = client.post(f"{base}/rollback", data={"to": "99"})
    assert missing.status_code == 404 and "version 99 is not kept" in missing.text
    assert client.post(f"{base}/rollback", data={"to": "v1"}).status_code == 400
    assert client.get(f"{base}?a=99").status_code == 404
    assert PersonaLab().core_memory.versions(instance) == versions  # nothing changed
    back = client.post(f"{base}/rollback", data={"to": "1"})
    assert back.status_code == 200 and 'id="rolled-back"' in back.text
    assert PersonaLab().core_memory.show(instance)["core"] == PersonaLab().core_memory.version(instance, 1)["core"]


def test_the_diff_rows_mark_what_was_added_and_removed() -> None:
    from personalab.graph.web.console_pages import diff_rows

    rows = diff_rows({"traits": ["冷静"]}, {"traits": ["冷静", "<b>温柔</b>"]}, "v1", "v2")
    assert ("add", '+    "<b>温柔</b>"') in rows and rows[0][0] == "hunk"
    assert diff_rows({"a": 1}, {"a": 1}, "v1", "v2") == []


# --- director and review ------------------------------------------------------------------------------------------


def _suggestion(instance: int, turn: int = 1) -> int:
    from personalab.nodes.rules.review.effects import worldbook_suggestion_from_turn
    from personalab.stores.db import session_scope
    from personalab.stores.review import create_suggestion

    with session_scope(None) as s:
        made = create_suggestion(
            s, instance, **worldbook_suggestion_from_turn("去北方的废墟。", "好。", {"level": "turning_point"}, turn)
        )
        return int(made.id)


def test_suggestions_are_approved_or_rejected_and_the_point_set_by_hand(client: TestClient) -> None:
    _character, instance = _instance()
    base = f"/app/instances/{instance}/director"
    first, second = _suggestion(instance), _suggestion(instance, 2)
    page = client.get(base)
    assert page.status_code == 200 and f'id="suggestion-{first}"' in page.text
    done = client.post(
        f"{base}/suggestions/{first}", data={"decision": "approve", "content": "北方废墟有旧城。", "keywords": "废墟"}
    )
    assert done.status_code == 200
    assert PersonaLab().suggestions.get(first)["status"] == "approved"
    assert any(
        e["content"] == "北方废墟有旧城。" for e in PersonaLab().worldbook.list(instance_id=instance, visible=True)
    )
    again = client.post(f"{base}/suggestions/{first}", data={"decision": "reject"})
    assert again.status_code == 400  # already decided: one message
    bad = client.post(f"{base}/suggestions/{second}", data={"decision": "maybe"})
    assert (
        bad.status_code == 400
        and "decision" in bad.text
        and PersonaLab().suggestions.get(second)["status"] == "pending"
    )
    client.post(f"{base}/suggestions/{second}", data={"decision": "reject"})
    assert PersonaLab().suggestions.get(second)["status"] == "rejected"
    assert client.post(f"{base}/point", data={"index": "2"}).status_code == 200
    assert PersonaLab().plot.outline(instance)["current_plot_index"] == 2
    for index in ("9", "x"):
        page = client.post(f"{base}/point", data={"index": index})
        assert page.status_code == 400 and "point" in page.text
    assert PersonaLab().plot.outline(instance)["current_plot_index"] == 2


def test_a_suggestion_of_another_instance_is_not_decided_from_this_page(client: TestClient) -> None:
    _c1, one = _instance()
    _c2, two = _instance()
    other = _suggestion(two)
    page = client.post(f"/app/instances/{one}/director/suggestions/{other}", data={"decision": "approve"})
    assert page.status_code == 404 and PersonaLab().suggestions.get(other)["status"] == "pending"


# --- users --------------------------------------------------------------------------------------------------------


def test_another_users_instance_is_never_reachable(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONALAB_AUTH", "tokens")
    monkeypatch.setenv("PERSONALAB_AUTH_TOKENS", ",".join(f"{token}:{user}" for user, token in TOKENS.items()))
    character, instance = _instance(owner="alice")
    entry = int(
        PersonaLab(owner="alice").worldbook.add("爱丽丝的秘密。", keywords=["秘密"], instance_id=instance)["id"]
    )
    knowledge = int(PersonaLab(owner="alice").knowledge.add("秘密", "只有爱丽丝知道。", instance_id=instance)["id"])
    suggestion = _suggestion(instance)
    assert (
        client.get(f"/app/instances/{instance}/config").status_code == 303
        or "login" in client.get(f"/app/instances/{instance}/config").url.path
    )
    client.post("/app/login", data={"token": TOKENS["alice"]})
    assert client.get(f"/app/instances/{instance}/core").status_code == 200
    client.post("/app/logout")
    client.post("/app/login", data={"token": TOKENS["bob"]})
    gets = [
        f"/app/instances/{instance}/config",
        f"/app/characters/{character}/config",
        f"/app/instances/{instance}/worldbook",
        f"/app/instances/{instance}/knowledge",
        f"/app/instances/{instance}/core",
        f"/app/instances/{instance}/director",
        f"/app/worldbook/entries/{entry}",
        f"/app/knowledge/entries/{knowledge}",
        f"/app/instances/{instance}/worldbook/export",
    ]
    for path in gets:
        page = client.get(path)
        assert page.status_code == 404, path
        assert "爱丽丝" not in page.text
    posts = [
        (f"/app/instances/{instance}/config", {"semantic_similarity": "false"}),
        (f"/app/instances/{instance}/config/validate", {"relevance_threshold": "0.2"}),
        (f"/app/instances/{instance}/config/reset", {}),
        (f"/app/instances/{instance}/worldbook", {"content": "鲍勃的条目", "keywords": "x"}),
        (f"/app/worldbook/entries/{entry}", {"content": "鲍勃改的", "keywords": "x"}),
        (f"/app/worldbook/entries/{entry}/delete", {}),
        (f"/app/worldbook/entries/{entry}/move", {"direction": "up"}),
        (f"/app/knowledge/entries/{knowledge}/delete", {}),
        (f"/app/instances/{instance}/core/rollback", {"to": "1"}),
        (f"/app/instances/{instance}/director/suggestions/{suggestion}", {"decision": "approve"}),
        (f"/app/instances/{instance}/director/point", {"index": "2"}),
    ]
    for path, data in posts:
        assert client.post(path, data=data).status_code == 404, path
    assert 'href="/app/config"' not in client.get("/app/instances").text  # no global console link for a user
    refused = client.get("/app/config")  # the global scope is the operator's
    assert refused.status_code == 422 and "global scope" in refused.text
    alice = PersonaLab(owner="alice")
    assert (
        alice.worldbook.get(entry)["content"] == "爱丽丝的秘密。"
        and len(alice.worldbook.list(instance_id=instance)) == 1
    )
    assert alice.knowledge.get(knowledge)["content"] == "只有爱丽丝知道。"
    assert alice.trigger_config.get(instance_id=instance).set == {}
    assert alice.suggestions.get(suggestion)["status"] == "pending"
    assert alice.plot.outline(instance)["current_plot_index"] == 1


def test_the_field_error_escapes_what_was_typed(client: TestClient) -> None:
    _character, instance = _instance()
    typed = client.post(
        f"/app/instances/{instance}/config/validate",
        data={"wb.recursive": HOSTILE},
        headers={"HX-Trigger-Name": "wb.recursive"},
    )
    assert "recursive" in typed.text and "<script>" not in typed.text and "&lt;script&gt;" in typed.text
