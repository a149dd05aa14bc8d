"""User personas (issue 28, SillyTavern's personas) as a user relies on them, on SQLite and PostgreSQL: managed
through the API, the CLI and HTTP like characters and owned per user (another user's persona is `NotFound` naming
it); one chosen per instance (changeable), whose name `{{user}}` becomes in the greeting, the card's fields, the
stored user line, the session recap and an edit's turn, and whose description reaches the prompt's head. Without a
persona nothing changes (用户, or the name given per turn)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli, one_line
from personalab.graph.api import PersonaLab
from personalab.graph.runner import run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InstanceNotFound, InvalidInput, NotFound
from PIL import Image


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (6, 6), "green").save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture
def env_db(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`db_url` as the configured database (for the CLI and the HTTP app, which use the configured one)."""
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    yield db_url


def _story(api: PersonaLab, greeting: str = "{{user}}，你来了。") -> tuple[int, int]:
    character = api.characters.create(
        {"name": "雷娜", "description": "{{char}}认识{{user}}很多年了。", "greetings": [greeting]}
    )
    background = api.backgrounds.create({"name": "废土", "outline": ["重逢", "追查"]})
    return character.id, background.id


def _play(url: str, instance_id: int, *messages: str, **extra: Any) -> list[dict[str, Any]]:
    with turn_graph(Context(database_url=url)) as (graph, ctx):
        return [run_turn(graph, ctx, instance_id, message, **extra) for message in messages]


def _head(state: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in state["prompt"] if m["region"] == "head")


# ---- the API -----------------------------------------------------------------------------------------------------


def test_personas_are_managed_like_characters_and_owned_per_user(db_url: str) -> None:
    alice, bob = PersonaLab(owner="alice", database_url=db_url), PersonaLab(owner="bob", database_url=db_url)
    made = alice.personas.create({"name": "  Alex ", "description": "a travelling medic", "avatar": png()})
    assert (made.name, made.description, made.avatar_mime, made.owner) == (
        "Alex",
        "a travelling medic",
        "image/png",
        "alice",
    )
    assert [p.id for p in alice.personas.list()] == [made.id] and bob.personas.list() == []
    assert alice.personas.avatar(made.id)[1] == "image/png"
    edited = alice.personas.edit(made.id, {"description": "a retired medic", "remove_avatar": True})
    assert (edited.name, edited.description, edited.avatar_bytes) == ("Alex", "a retired medic", 0)
    with pytest.raises(NotFound, match=f"persona {made.id} has no avatar"):
        alice.personas.avatar(made.id)
    # another user's persona is exactly one that does not exist
    for call in (
        lambda: bob.personas.get(made.id),
        lambda: bob.personas.edit(made.id, {"name": "x"}),
        lambda: bob.personas.delete(made.id),
    ):
        with pytest.raises(NotFound, match=f"persona {made.id} does not exist"):
            call()
    character_id, background_id = _story(bob)
    with pytest.raises(NotFound, match=f"persona {made.id} does not exist"):
        bob.instances.create({"character_id": character_id, "background_id": background_id, "persona_id": made.id})
    instance = bob.instances.create({"character_id": character_id, "background_id": background_id})
    with pytest.raises(NotFound, match=f"persona {made.id} does not exist"):
        bob.personas.use(instance.id, made.id)
    with pytest.raises(InstanceNotFound, match=f"instance {instance.id}"):
        alice.personas.use(instance.id, made.id)
    assert bob.instances.get(instance.id).persona_id is None
    # bad input names the field, and nothing is stored
    for data, field in (
        ({"name": " "}, "persona.name"),
        ({"name": "x", "description": "x" * 20_001}, "persona.description"),
        ({"name": "x", "avatar": b"<svg/>"}, "avatar"),
        ({"name": "x", "owner": "bob"}, "persona.owner"),
    ):
        with pytest.raises(InvalidInput, match=field):
            alice.personas.create(data)
    assert len(alice.personas.list()) == 1
    assert alice.personas.delete(made.id).id == made.id and alice.personas.list() == []


def test_an_instance_plays_with_its_persona_and_goes_on_without_it_when_deleted(db_url: str) -> None:
    api = PersonaLab(database_url=db_url)
    character_id, background_id = _story(api)
    alex = api.personas.create({"name": "Alex", "description": "{{user}}是{{char}}的旧友，一名游医。"})
    instance = api.instances.create(
        {"character_id": character_id, "background_id": background_id, "persona_id": alex.id}
    )
    assert instance.persona_id == alex.id and api.personas.get(alex.id).instances == [instance.id]
    assert api.dialogue.history(instance.id)["lines"][0]["content"] == "Alex，你来了。"  # the greeting

    (turn,) = _play(db_url, instance.id, "好久不见。")
    head = _head(turn)
    assert "【用户设定】（Alex）\nAlex是雷娜的旧友，一名游医。" in head  # the description, in the head
    assert "雷娜认识Alex很多年了。" in head  # {{user}} in the card's fields
    lines = api.dialogue.history(instance.id)["lines"]
    assert [line["display_name"] for line in lines if line["attribute"] == "user"] == ["Alex"]
    # a name given with the turn still wins over the persona
    (named,) = _play(db_url, instance.id, "我换了个名字。", user_name="小林")
    assert "雷娜认识小林很多年了。" in _head(named)

    # changeable: another persona from the next turn, and none after it is deleted
    sam = api.personas.create({"name": "Sam"})
    assert api.personas.use(instance.id, sam.id).persona_id == sam.id
    (third,) = _play(db_url, instance.id, "又是我。")
    assert "雷娜认识Sam很多年了。" in _head(third) and "【用户设定】" not in _head(third)  # no description: no block
    assert api.personas.delete(sam.id).instances_cleared == [instance.id]
    assert api.instances.get(instance.id).persona_id is None
    (fourth,) = _play(db_url, instance.id, "还在吗？")
    assert "雷娜认识用户很多年了。" in _head(fourth)  # today's behaviour without a persona


def test_an_english_instance_shows_the_persona_in_english(db_url: str) -> None:
    api = PersonaLab(database_url=db_url)
    character = api.characters.create(
        {"name": "Mira", "description": "{{char}} has known {{user}} for years.", "greetings": ["Hello, {{user}}."]}
    )
    alex = api.personas.create({"name": "Alex", "description": "{{user}} is a travelling medic."})
    instance = api.instances.create({"character_id": character.id, "language": "en", "persona_id": alex.id})
    assert api.dialogue.history(instance.id)["lines"][0]["content"] == "Hello, Alex."
    (turn,) = _play(db_url, instance.id, "Hi there.")
    assert "[User persona] (Alex)\nAlex is a travelling medic." in _head(turn)
    assert "Mira has known Alex for years." in _head(turn)


def test_without_a_persona_the_user_is_still_用户(db_url: str) -> None:
    api = PersonaLab(database_url=db_url)
    character_id, background_id = _story(api)
    instance = api.instances.create({"character_id": character_id, "background_id": background_id})
    assert api.dialogue.history(instance.id)["lines"][0]["content"] == "用户，你来了。"
    (turn,) = _play(db_url, instance.id, "你好。")
    assert "雷娜认识用户很多年了。" in _head(turn) and "【用户设定】" not in _head(turn)


def test_the_persona_names_the_user_in_session_recaps_and_edits(db_url: str) -> None:
    api = PersonaLab(database_url=db_url)
    character_id, background_id = _story(api)
    alex = api.personas.create({"name": "Alex", "description": "游医"})
    instance = api.instances.create(
        {"character_id": character_id, "background_id": background_id, "persona_id": alex.id}
    )
    (one,) = _play(db_url, instance.id, "我们去找水源")
    api.dialogue.new_session(instance.id)
    (two,) = _play(db_url, instance.id, "我回来了")
    assert two["session_recap"] and two["session_recap"][0].startswith("第1轮 Alex：我们去找水源")
    edited = api.dialogue.edit(instance.id, two["user_line_id"], "我带着水回来了", context=Context(database_url=db_url))
    assert "雷娜认识Alex很多年了。" in _head(edited)
    user_lines = [line for line in api.dialogue.history(instance.id)["lines"] if line["attribute"] == "user"]
    assert user_lines[-1]["content"] == "我带着水回来了" and user_lines[-1]["display_name"] == "Alex"


# ---- the CLI -----------------------------------------------------------------------------------------------------


def test_the_persona_commands(env_db: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    image = tmp_path / "me.png"
    image.write_bytes(png())
    code, out, _ = cli(capsys, "persona", "create", "--name", "Alex", "--description", "游医", "--avatar", str(image))
    assert code == 0
    persona_id = int(out.strip())
    code, out, _ = cli(capsys, "persona", "list")
    assert code == 0 and "Alex" in out
    code, out, _ = cli(capsys, "persona", "edit", str(persona_id), "--description", "退役游医", "--json")
    assert code == 0 and json.loads(out)["description"] == "退役游医"
    code, out, _ = cli(capsys, "persona", "show", str(persona_id))
    assert code == 0 and "image/png" in out and "退役游医" in out
    # bad input: exit 2, one line naming it
    code, _, err = cli(capsys, "persona", "create", "--name", " ")
    assert code == 2 and "persona.name" in one_line(err)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    code, _, err = cli(capsys, "persona", "create", "--name", "x", "--avatar", str(bad))
    assert code == 2 and "avatar" in one_line(err)
    code, _, err = cli(capsys, "persona", "show", "999")
    assert code == 2 and "persona 999 does not exist" in one_line(err)

    api = PersonaLab(database_url=env_db)
    character_id, background_id = _story(api)
    code, out, _ = cli(
        capsys, "instance", "create", "--character", str(character_id), "--background", str(background_id),
        "--persona", str(persona_id),
    )  # fmt: skip
    instance_id = int(out.strip())
    assert api.instances.get(instance_id).persona_id == persona_id
    code, out, _ = cli(capsys, "instance", "persona", "--instance", str(instance_id), "--none")
    assert code == 0 and api.instances.get(instance_id).persona_id is None
    code, out, _ = cli(capsys, "instance", "persona", "--instance", str(instance_id), "--persona", str(persona_id))
    assert code == 0 and f"persona {persona_id}" in out
    code, _, err = cli(capsys, "instance", "persona", "--instance", str(instance_id), "--persona", "999")
    assert code == 2 and "persona 999 does not exist" in one_line(err)
    code, out, _ = cli(capsys, "persona", "delete", str(persona_id))
    assert code == 0 and f"instance(s) {instance_id}" in out
    assert api.instances.get(instance_id).persona_id is None


# ---- HTTP --------------------------------------------------------------------------------------------------------


def test_the_persona_routes(env_db: str) -> None:
    import base64

    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app

    client = TestClient(app)
    made = client.post("/personas", json={"name": "Alex", "avatar_base64": base64.b64encode(png()).decode()})
    assert made.status_code == 201, made.text
    persona = made.json()
    assert client.get(f"/personas/{persona['id']}/avatar").headers["content-type"] == "image/png"
    bad = client.post("/personas", json={"name": "x", "description": 7})
    assert bad.status_code == 422 and "description" in bad.text
    assert client.patch(f"/personas/{persona['id']}", json={"description": "游医"}).json()["description"] == "游医"
    api = PersonaLab(database_url=env_db)
    character_id, background_id = _story(api)
    instance = client.post(
        "/instances", json={"character_id": character_id, "background_id": background_id, "persona_id": persona["id"]}
    ).json()
    assert instance["persona_id"] == persona["id"]
    assert client.get(f"/instances/{instance['id']}/persona").json()["name"] == "Alex"
    assert client.put(f"/instances/{instance['id']}/persona", json={"persona_id": None}).json()["persona_id"] is None
    assert client.get(f"/instances/{instance['id']}/persona").json() is None
    missing = client.put(f"/instances/{instance['id']}/persona", json={"persona_id": 999})
    assert missing.status_code == 404 and "persona 999" in missing.text
    assert client.delete(f"/personas/{persona['id']}").status_code == 200
    assert client.get(f"/personas/{persona['id']}").status_code == 404


def test_the_persona_pages(env_db: str) -> None:
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app

    client = TestClient(app, follow_redirects=True)
    page = client.post("/app/personas", data={"name": "Alex", "description": "游医"})
    assert page.status_code == 200 and "Alex" in page.text and 'id="persona-list"' in page.text
    persona = PersonaLab(database_url=env_db).personas.list()[0]
    assert "游医" in client.get(f"/app/personas/{persona.id}/edit").text
    assert client.post("/app/personas", data={"name": " "}).status_code == 422
    api = PersonaLab(database_url=env_db)
    character_id, background_id = _story(api)
    assert f'<option value="{persona.id}">Alex</option>' in client.get("/app/instances").text
    chat = client.post(
        "/app/instances",
        data={"character_id": character_id, "background_id": background_id, "persona_id": str(persona.id)},
    )
    assert chat.status_code == 200 and "Alex，你来了。" in chat.text
    instance = api.instances.list()[0]
    assert instance.persona_id == persona.id
    client.post(f"/app/instances/{instance.id}/persona", data={"persona_id": ""})
    assert api.instances.get(instance.id).persona_id is None
    client.post(f"/app/personas/{persona.id}", data={"name": "Sam", "description": ""})
    assert api.personas.get(persona.id).name == "Sam"
    client.post(f"/app/personas/{persona.id}/delete")
    assert api.personas.list() == []


# ---- in a real browser (Debian's chromium, `personalab serve`; tests/test_web_browser.py's pattern) -----------------
# its fixtures (`browser`, `app_url`: SQLite and PostgreSQL) and steps, imported; without Playwright that module
# skips itself, and this test with it
try:
    from test_web_browser import CARD, _background, _import_card, _page, _send, app_url, browser, expect  # noqa: F401
except pytest.skip.Exception:  # pragma: no cover - Playwright is a test dependency
    pass


@pytest.mark.browser
def test_a_user_makes_a_persona_and_plays_as_it_in_the_browser(browser: Any, app_url: str) -> None:  # noqa: F811
    page = _page(browser)
    url = f"{app_url}/app"
    page.goto(f"{url}/personas")
    expect(page.locator("main")).to_contain_text("还没有人设")
    page.click("text=新建人设")
    page.fill("#p-name", "阿蓝")
    page.fill("#p-description", "{{user}}是一名游医，认识{{char}}很多年了。")
    page.click("#persona-form button[type=submit]")
    expect(page.locator("#persona-list")).to_contain_text("阿蓝")
    _import_card(page, url, CARD)
    _background(page, url, "雾港", ["搁浅", "修船"])
    page.goto(f"{url}/instances")
    page.select_option("#n-persona", label="阿蓝")
    page.fill("#n-title", "雾夜")
    page.click(".new-instance button[type=submit]")
    expect(page.locator("#composer")).to_be_visible()
    expect(page.locator("#chat-persona")).to_have_value(
        page.locator("#chat-persona option", has_text="阿蓝").get_attribute("value") or ""
    )
    _send(page, "我回来了。")
    expect(page.locator("#lines")).to_contain_text("阿蓝")  # the user's line under the persona's name
    # change it on the chat page: none
    page.select_option("#chat-persona", value="")
    page.click("#persona-choice button[type=submit]")
    expect(page.locator("#chat-persona")).to_have_value("")
    # another user's persona is a page saying it does not exist
    page.goto(f"{url}/personas/999/edit")
    expect(page.locator("main")).to_contain_text("persona 999 does not exist")
    assert page.js_errors == []


def test_the_persona_goes_with_its_instance_into_another_users_account(db_url: str) -> None:
    """Issue 28: `instance export` carries the persona (name, description, avatar); importing it makes the
    importing user's own persona (an identical one of theirs is reused), never a link to the exporter's."""
    alice, bob = PersonaLab(owner="alice", database_url=db_url), PersonaLab(owner="bob", database_url=db_url)
    character_id, background_id = _story(alice)
    alex = alice.personas.create({"name": "Alex", "description": "{{user}}是一名游医。", "avatar": png()})
    instance = alice.instances.create(
        {"character_id": character_id, "background_id": background_id, "persona_id": alex.id}
    )
    _play(db_url, instance.id, "好久不见。")
    document = alice.instances.export_data(instance.id)
    assert document["persona"]["name"] == "Alex" and document["persona"]["avatar_mime"] == "image/png"
    assert "id" not in document["persona"] and "owner" not in document["persona"]

    imported = bob.instances.import_data(json.loads(json.dumps(document))).instance
    (copy,) = bob.personas.list()
    assert copy.id != alex.id and copy.owner == "bob" and copy.description == "{{user}}是一名游医。"
    assert bob.personas.avatar(copy.id) == alice.personas.avatar(alex.id)
    assert bob.instances.get(imported.id).persona_id == copy.id
    (turn,) = _play(db_url, imported.id, "我回来了。")
    assert "雷娜认识Alex很多年了。" in _head(turn)
    # imported again: bob's identical persona is matched, not copied; back into alice's account: hers
    again = bob.instances.import_data(document).instance
    assert bob.instances.get(again.id).persona_id == copy.id and len(bob.personas.list()) == 1
    back = alice.instances.import_data(document).instance
    assert alice.instances.get(back.id).persona_id == alex.id and len(alice.personas.list()) == 1
    # a file's persona with a bad avatar is one clear error naming it, and nothing is imported
    broken = {**document, "persona": {**document["persona"], "avatar_image": "not base64!"}}
    with pytest.raises(InvalidInput, match="file.persona.avatar_image"):
        bob.instances.import_data(broken)
    assert len(bob.instances.list()) == 2
