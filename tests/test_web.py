"""The web app's pages in-process (issue 24), through FastAPI's TestClient on the real app, SQLite and the real graph
with the offline scripted model: pages render in both languages, forms store what they say, bad input is one
message on the page with nothing stored, a turn streams as server-sent events without raw tags or markers, users
are kept apart. The whole journeys in a real browser are tests/test_web_browser.py."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from personalab.graph.api import dialogue, library
from personalab.graph.web.i18n import EN, ZH, pick_language
from personalab.graph.web.stream import EmotionSplitter

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TOKENS = {"alice": "tok-web-alice-31f", "bob": "tok-web-bob-8c2"}


def _png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 4), (200, 80, 60)).save(out, format="PNG")
    return out.getvalue()


PNG_1PX = _png()


@pytest.fixture
def client(data_dir: Path) -> Iterator[TestClient]:
    from personalab.graph.http.app import app

    with TestClient(app, follow_redirects=True) as made:
        yield made


def _events(body: str) -> list[tuple[str, dict]]:
    found = []
    for frame in body.split("\n\n"):
        event = re.search(r"^event: (.+)$", frame, re.M)
        data = re.search(r"^data: (.+)$", frame, re.M)
        if event and data:
            found.append((event.group(1), json.loads(data.group(1))))
    return found


def _instance(client: TestClient) -> int:
    client.post("/app/characters", data={"name": "雷娜", "description": "废土上的佣兵", "greetings": "你来了。"})
    client.post("/app/backgrounds", data={"name": "废土", "world_setting": "核战后", "outline": ["相遇", "出发"]})
    character = library.list_characters()[-1].id
    background = library.list_backgrounds()[-1].id
    page = client.post("/app/instances", data={"character_id": character, "background_id": background})
    assert page.status_code == 200
    return int(str(page.url).rstrip("/").split("/")[-1])


def test_the_catalogs_have_the_same_keys_and_the_language_follows_the_browser_then_the_cookie() -> None:
    assert set(EN) == set(ZH)
    assert pick_language(None, "en-US,en;q=0.9") == "en"
    assert pick_language(None, "fr-FR, en;q=0.5, zh-CN;q=0.8") == "zh"
    assert pick_language(None, None) == "zh"
    assert pick_language("en", "zh-CN") == "en"
    assert pick_language("xx", "en") == "en"


def test_every_main_page_renders_in_both_languages_and_the_switch_sticks(client: TestClient) -> None:
    for path in (
        "/app/instances",
        "/app/characters",
        "/app/characters/new",
        "/app/backgrounds",
        "/app/backgrounds/new",
    ):
        zh = client.get(path, headers={"Accept-Language": "zh-CN"})
        assert zh.status_code == 200 and "会话实例" in zh.text, path
        assert "离线脚本模型" in zh.text  # no model configured: the page says the replies are scripted
        en = client.get(path, headers={"Accept-Language": "en"})
        assert en.status_code == 200 and "Instances" in en.text, path
    client.post("/app/language", data={"lang": "en", "back": "/app/characters"})
    assert "New character" in client.get("/app/characters", headers={"Accept-Language": "zh-CN"}).text
    assert client.get("/").url.path == "/app/instances"
    assert client.get("/app/static/htmx.min.js").status_code == 200
    assert client.get("/app/static/..%2Fpages.py").status_code == 404


def test_a_character_is_created_edited_with_every_field_and_deleted(client: TestClient) -> None:
    fields = {
        "name": "灯守",
        "description": "守灯人",
        "persona": "沉默",
        "traits": "可靠、寡言",
        "backstory": "雾港长大",
        "motives": "守住灯",
        "example_dialogue": "<START>",
        "system_prompt": "只用中文",
        "post_history_instructions": "保持角色",
        "greetings": "你醒了。\n---\n喝杯茶吧。",
    }
    page = client.post("/app/characters", data=fields, files={"avatar": ("a.png", PNG_1PX, "image/png")})
    assert page.status_code == 200 and "灯守" in page.text
    (made,) = library.list_characters()
    assert made.greetings == ["你醒了。", "喝杯茶吧。"] and made.avatar_mime == "image/png"
    assert all(getattr(made, key) == value for key, value in fields.items() if key not in ("greetings",))
    assert client.get(f"/app/characters/{made.id}/avatar").content == PNG_1PX
    edit = client.get(f"/app/characters/{made.id}/edit")
    assert "雾港长大" in edit.text and "喝杯茶吧。" in edit.text
    client.post(f"/app/characters/{made.id}", data={**fields, "persona": "温和", "remove_avatar": "1"})
    changed = library.get_character(made.id)
    assert changed.persona == "温和" and changed.avatar_mime is None
    confirm = client.get(f"/app/characters/{made.id}/delete")
    assert "灯守" in confirm.text
    client.post(f"/app/characters/{made.id}/delete")
    assert library.list_characters() == []


def test_a_bad_avatar_is_one_message_naming_it_and_nothing_is_stored(client: TestClient) -> None:
    page = client.post("/app/characters", data={"name": "X"}, files={"avatar": ("a.png", b"not an image", "image/png")})
    assert page.status_code == 422 and "avatar" in page.text
    huge = client.post(
        "/app/characters", data={"name": "X"}, files={"avatar": ("a.png", b"\0" * (6 << 20), "image/png")}
    )
    assert huge.status_code == 422 and "over the limit" in huge.text
    assert library.list_characters() == []
    empty_name = client.post("/app/characters", data={"name": ""})
    assert empty_name.status_code == 422 and library.list_characters() == []


def test_a_card_is_imported_with_its_lorebook_and_exported_and_a_broken_one_refused(client: TestClient) -> None:
    card = (FIXTURES / "card_v2_lantern.json").read_bytes()
    page = client.post("/app/characters/import", files={"card": ("lantern.json", card, "application/json")})
    assert page.status_code == 200 and "灯守" in page.text
    assert "world book" in page.text  # the page says the card's lorebook came with it
    (made,) = library.list_characters()
    exported = client.get(f"/app/characters/{made.id}/card?format=v2")
    assert exported.status_code == 200 and json.loads(exported.content)["data"]["name"] == "灯守"
    png = client.get(f"/app/characters/{made.id}/card?format=png")
    assert png.content.startswith(b"\x89PNG")
    broken = client.post("/app/characters/import", files={"card": ("x.json", b"{not json", "application/json")})
    assert broken.status_code == 422 and "x.json" in broken.text
    assert len(library.list_characters()) == 1


def test_a_background_outline_is_added_reordered_and_edited(client: TestClient) -> None:
    client.post("/app/backgrounds", data={"name": "雾港", "world_setting": "雾", "outline": ["一", "二", "三"]})
    (made,) = library.list_backgrounds()
    assert made.outline == ["一", "二", "三"]
    client.post(
        f"/app/backgrounds/{made.id}", data={"name": "雾港", "world_setting": "雾", "outline": ["三", "一", "四", ""]}
    )
    assert library.get_background(made.id).outline == ["三", "一", "四"]
    none = client.post(f"/app/backgrounds/{made.id}", data={"name": "雾港", "outline": [""]})
    assert none.status_code == 422 and library.get_background(made.id).outline == ["三", "一", "四"]


def test_a_turn_streams_tokens_and_emotions_without_raw_tags_or_markers(client: TestClient) -> None:
    instance = _instance(client)
    chat = client.get(f"/app/instances/{instance}")
    assert chat.status_code == 200 and "你来了。" in chat.text and "相遇" in chat.text
    reply = client.post(f"/app/instances/{instance}/turn", data={"action": "send", "message": "你好，我们出发吧"})
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = _events(reply.text)
    kinds = [kind for kind, _ in events]
    assert "token" in kinds and kinds[-1] == "done", events
    streamed = "".join(data["text"] for kind, data in events if kind == "token")
    assert streamed.strip() and "[PROGRESS" not in streamed and "【" not in streamed
    page = client.get(f"/app/instances/{instance}")
    assert "你好，我们出发吧" in page.text and "[PROGRESS" not in page.text and "【" not in page.text
    assert library.get_instance(instance).turns == 1
    # the turn input's other parts: a narration line before the user's, a time gap and a picked choice
    more = {
        "message": "好",
        "host_speaker": ["", "", ""],
        "host_text": ["雨停了。", "", ""],
        "time_gap": "hours",
        "choice_text": "同行",
        "choice_level": "important",
    }
    assert _events(client.post(f"/app/instances/{instance}/turn", data=more).text)[-1][0] == "done"
    assert "雨停了。" in client.get(f"/app/instances/{instance}").text
    # a new session (a pause): the next turn's done event carries the recap the page shows
    client.post(f"/app/instances/{instance}/sessions")
    after = _events(client.post(f"/app/instances/{instance}/turn", data={"message": "我回来了"}).text)
    assert after[-1][0] == "done" and after[-1][1]["recap"], after[-1]


def test_host_lines_of_a_scene_go_before_the_users_line_in_order(client: TestClient) -> None:
    """Seed 000's example 2: narration and other characters of the scene spoken by the host, then the user."""
    instance = _instance(client)
    chat = client.get(f"/app/instances/{instance}")
    assert chat.text.count('name="host_text"') == 3 and '<option value="旁白">' in chat.text
    turn = {
        "message": "赶紧穿上啦，我回避一下！",
        "user_name": "莱姆",
        "host_speaker": ["", "白小喵", "雷娜"],
        "host_text": ["圣诞节到了，莱姆来到了钦灵的家里", "喵？有客人来了。", "我衣服还没换好呢，不要看啦！"],
    }
    assert _events(client.post(f"/app/instances/{instance}/turn", data=turn).text)[-1][0] == "done"
    lines = dialogue.history(instance, offset=0, limit=20)["lines"]
    said = [(line["attribute"], line["speaker"], line["content"]) for line in lines]
    character = library.get_instance(instance).character_id
    assert said[1:5] == [
        ("assistant", "旁白", "圣诞节到了，莱姆来到了钦灵的家里"),
        ("assistant", "白小喵", "喵？有客人来了。"),
        ("assistant", "雷娜", "我衣服还没换好呢，不要看啦！"),
        ("user", "莱姆", "赶紧穿上啦，我回避一下！"),
    ], said
    assert lines[1]["role_id"] is None and lines[2]["role_id"] is None and lines[3]["role_id"] == character
    assert said[5:] and all(line[:2] == ("assistant", "雷娜") for line in said[5:])  # the reply (one line or more)
    page = client.get(f"/app/instances/{instance}").text
    # the scene's speakers are offered next time
    assert "喵？有客人来了。" in page and '<option value="白小喵">' in page
    # rows without text are skipped; a speaker over the limit or rows that do not pair up store nothing
    before = dialogue.line_count(instance)
    long_name = client.post(
        f"/app/instances/{instance}/turn",
        data={"message": "好", "host_speaker": ["名" * 101, ""], "host_text": ["台词", ""]},
    )
    assert long_name.status_code == 422 and "host_speaker" in long_name.text
    unpaired = client.post(
        f"/app/instances/{instance}/turn", data={"message": "好", "host_speaker": ["a", "b"], "host_text": ["台词"]}
    )
    assert unpaired.status_code == 422 and "host_speaker" in unpaired.text
    nul = client.post(
        f"/app/instances/{instance}/turn", data={"message": "好", "host_speaker": [""], "host_text": ["a\x00b"]}
    )
    assert "lines_before" in nul.text
    assert dialogue.line_count(instance) == before


def test_an_empty_message_a_stale_page_and_a_bad_action_are_one_message_and_store_nothing(client: TestClient) -> None:
    instance = _instance(client)
    before = dialogue.line_count(instance)
    empty = client.post(f"/app/instances/{instance}/turn", data={"action": "send", "message": "   "})
    assert empty.status_code == 422 and "请先输入内容" in empty.text
    bad = client.post(f"/app/instances/{instance}/turn", data={"action": "nuke", "message": "x"})
    assert bad.status_code == 422 and "action" in bad.text
    assert dialogue.line_count(instance) == before
    client.post(f"/app/instances/{instance}/delete")
    for path, data in (
        (f"/app/instances/{instance}/turn", {"action": "send", "message": "还在吗"}),
        (f"/app/instances/{instance}/swipe", {"line_id": "1"}),
        (f"/app/instances/{instance}/rewind", {"line_id": "1"}),
        (f"/app/instances/{instance}/rename", {"title": "x"}),
    ):
        stale = client.post(path, data=data)
        assert stale.status_code == 404 and str(instance) in stale.text, path
    assert client.get(f"/app/instances/{instance}").status_code == 404


def test_hostile_text_is_shown_as_text(client: TestClient) -> None:
    hostile = '<script>window.pwned=1</script><img src=x onerror="alert(1)">'
    client.post("/app/characters", data={"name": hostile, "description": hostile})
    page = client.get("/app/characters")
    assert "<script>window.pwned" not in page.text and "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page.text
    assert 'onerror="alert(1)"' not in page.text


def test_a_post_from_another_site_is_refused(client: TestClient) -> None:
    refused = client.post("/app/characters", data={"name": "X"}, headers={"Origin": "https://evil.example"})
    assert refused.status_code == 403 and library.list_characters() == []
    same = client.post("/app/characters", data={"name": "X"}, headers={"Origin": "http://testserver"})
    assert same.status_code == 200 and len(library.list_characters()) == 1


def test_with_auth_on_the_app_asks_for_a_token_and_users_never_see_each_others_things(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_AUTH", "tokens")
    monkeypatch.setenv("PERSONALAB_AUTH_TOKENS", ",".join(f"{token}:{user}" for user, token in TOKENS.items()))
    assert client.get("/app/instances").url.path == "/app/login"
    wrong = client.post("/app/login", data={"token": "tok-forged"})
    assert wrong.status_code == 401
    client.post("/app/login", data={"token": TOKENS["alice"]})
    assert "alice" in client.get("/app/instances").text
    instance = _instance(client)
    client.cookies.clear()
    client.post("/app/login", data={"token": TOKENS["bob"]})
    assert "bob" in client.get("/app/instances").text
    for path in ("/app/instances", "/app/characters", "/app/backgrounds"):
        assert "雷娜" not in client.get(path).text and "废土" not in client.get(path).text
    assert client.get(f"/app/instances/{instance}").status_code == 404
    sent = client.post(f"/app/instances/{instance}/turn", data={"action": "send", "message": "偷看"})
    assert sent.status_code == 404
    assert dialogue.line_count(instance) == 1  # the greeting only


def test_with_jwt_auth_the_sign_in_page_takes_a_jwt_and_says_why_one_is_refused(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    import jwt

    secret = "web-jwt-secret-0123456789abcdef0123456789"
    monkeypatch.setenv("PERSONALAB_AUTH", "jwt")
    monkeypatch.setenv("PERSONALAB_JWT_SECRET", secret)
    later = int(time.time()) + 3600
    alice = jwt.encode({"sub": "alice", "exp": later}, secret, algorithm="HS256")
    bob = jwt.encode({"sub": "bob", "exp": later}, secret, algorithm="HS256")
    page = client.get("/app/instances")
    assert page.url.path == "/app/login" and "JWT" in page.text
    for token, why in (
        (jwt.encode({"sub": "alice", "exp": int(time.time()) - 60}, secret, algorithm="HS256"), "expired"),
        (
            jwt.encode({"sub": "alice", "exp": later}, "another-secret-0123456789abcdef0123", algorithm="HS256"),
            "not valid",
        ),
        (jwt.encode({"exp": later}, secret, algorithm="HS256"), "lacks the claim"),
    ):
        refused = client.post("/app/login", data={"token": token})
        assert refused.status_code == 401 and why in refused.text and token not in refused.text, refused.text
    client.post("/app/login", data={"token": alice})
    assert "alice" in client.get("/app/instances").text
    instance = _instance(client)
    client.cookies.clear()
    client.post("/app/login", data={"token": bob})
    assert "bob" in client.get("/app/instances").text and "雷娜" not in client.get("/app/characters").text
    assert client.get(f"/app/instances/{instance}").status_code == 404


def test_the_emotion_splitter_holds_a_tag_split_over_tokens() -> None:
    splitter = EmotionSplitter()
    out = []
    for token in ("【开", "心】你", "好【", "平静】再见", "【不是标签"):
        out += splitter.feed(token)
    out += splitter.flush()
    assert ("emotion", "开心") in out and ("emotion", "平静") in out
    text = "".join(value for kind, value in out if kind == "token")
    assert text == "你好再见【不是标签"


def test_serve_prints_the_url_and_a_taken_port_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    from personalab.graph.cli import main

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        assert main(["serve", "--port", str(taken.getsockname()[1])]) == 2
    finally:
        taken.close()
    assert "cannot listen" in capsys.readouterr().err
    assert main(["serve", "--port", "70000"]) == 2


def test_an_instance_is_exported_imported_and_renamed(client: TestClient) -> None:
    instance = _instance(client)
    exported = client.get(f"/app/instances/{instance}/export")
    assert exported.status_code == 200
    page = client.post(
        "/app/instances/import", files={"document": ("i.json", io.BytesIO(exported.content), "application/json")}
    )
    assert page.status_code == 200
    assert len(library.list_instances()) == 2
    client.post(f"/app/instances/{instance}/rename", data={"title": "新的标题"})
    assert library.get_instance(instance).title == "新的标题"
    broken = client.post("/app/instances/import", files={"document": ("b.json", b"[1,2", "application/json")})
    assert broken.status_code == 422 and len(library.list_instances()) == 2


def test_a_second_tab_sending_while_a_turn_runs_gets_a_clear_message_and_nothing_is_doubled(
    client: TestClient,
) -> None:
    from personalab.stores.turns import acquire_turn_lock, release_turn_lock

    instance = _instance(client)
    before = dialogue.line_count(instance)
    token = acquire_turn_lock(instance, 60.0)  # the other tab's turn, running
    try:
        reply = client.post(f"/app/instances/{instance}/turn", data={"action": "send", "message": "我也说一句"})
    finally:
        release_turn_lock(instance, token)
    events = _events(reply.text)
    assert events[-1][0] == "error" and "另一轮" in events[-1][1]["message"], events
    assert dialogue.line_count(instance) == before
    done = _events(client.post(f"/app/instances/{instance}/turn", data={"message": "现在可以了"}).text)
    assert done[-1][0] == "done" and dialogue.line_count(instance) > before


def test_a_tab_closed_mid_stream_lets_the_turn_finish_and_frees_the_instance(client: TestClient) -> None:
    import time

    instance = _instance(client)
    with client.stream("POST", f"/app/instances/{instance}/turn", data={"message": "我先走了"}) as response:
        for line in response.iter_lines():
            if line.startswith("event: token"):
                break  # the reader goes away after the first token
    for _ in range(120):  # the turn goes on in its thread; then the instance takes the next turn
        if library.get_instance(instance).turns == 1:
            break
        time.sleep(0.5)
    assert library.get_instance(instance).turns == 1
    for _ in range(120):
        events = _events(client.post(f"/app/instances/{instance}/turn", data={"message": "我回来了"}).text)
        if events[-1][1].get("kind") != "InstanceBusy":
            break
        time.sleep(0.5)
    assert events[-1][0] == "done", events
    assert library.get_instance(instance).turns == 2


def test_a_long_instance_list_is_paged(client: TestClient) -> None:
    first = _instance(client)
    character, background = library.get_instance(first).character_id, library.get_instance(first).background_id
    for number in range(54):
        library.create_instance({"character_id": character, "background_id": background, "title": f"第{number}号"})
    page = client.get("/app/instances")
    assert page.text.count('<tr id="instance-') == 50 and "1 / 2 · 55" in page.text
    second = client.get("/app/instances?page=2")
    assert second.text.count('<tr id="instance-') == 5 and f'id="instance-{first}"' in second.text
    assert client.get("/app/instances?page=99").text.count('<tr id="instance-') == 5
    # the API's page: cut in SQL, newest first, with the total; a user's page counts only their own
    listed, total = library.list_instances_page(offset=50, limit=50)
    assert total == 55 and [item.id for item in listed] == sorted((item.id for item in listed), reverse=True)
    assert listed[-1].id == first and listed[-1].character_name == "雷娜" and listed[-1].plot is not None
    assert library.list_instances_page(offset=0, limit=50, owner="somebody-else") == ([], 0)
    # the character's delete confirmation names how many go and lists the newest 50
    confirm = client.get(f"/app/characters/{character}/delete").text
    assert confirm.count("<li>") == 50 and "还有 5 个" in confirm and "第53号" in confirm


def test_the_history_pages_back_to_the_first_line(client: TestClient) -> None:
    from personalab.stores.db import session_scope
    from personalab.stores.saves import append_lines

    instance = _instance(client)
    rows = [{"attribute": "user" if n % 2 else "assistant", "content": f"第{n}句话"} for n in range(1, 60)]
    with session_scope() as session:
        append_lines(session, instance, rows)
    page = client.get(f"/app/instances/{instance}")
    assert "第59句话" in page.text and "第19句话" not in page.text
    older = re.search(r'hx-get="([^"]+/lines\?before=(\d+))"', page.text)
    assert older and older.group(2) == "20"
    first = client.get(older.group(1).replace("&amp;", "&"))
    assert "你来了。" in first.text and "第19句话" in first.text and "第20句话" not in first.text
    assert "hx-get" not in first.text  # the first line reached: no older page
    assert client.get(f"/app/instances/{instance}/lines?before=0").status_code == 422
