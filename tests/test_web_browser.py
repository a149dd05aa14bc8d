"""The web app in a real browser (issue 24 "Tested as a person uses it"): Debian's headless chromium driven by
Playwright against `personalab serve` started in a subprocess on a free loopback port with its own data folder
(the offline scripted model). Whole journeys: import a card → create an instance → three turns watched streaming
in → swipe → edit a user line → rewind → the panels follow the branch; two users never see each other's things; a
hostile card runs nothing. Screenshots of the main pages go to docs/web/.

`./run test` installs chromium and the CJK font with apt-get when they are missing; never `playwright install`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from served_app import serve_process

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
expect.set_options(timeout=90_000)  # a turn's first run loads the models; no timing is asserted

pytestmark = pytest.mark.browser
REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
SHOTS = REPO / "docs" / "web"
CARD = REPO / "tests" / "fixtures" / "card_v2_lantern.json"
TOKENS = {"alice": "tok-browser-alice-5e1", "bob": "tok-browser-bob-0a9"}
# counts the text pieces the streamed reply receives before the turn ends (the bubble is replaced after it)
COUNT_TOKENS = """
window.__pieces = 0;
new MutationObserver(function (records) {
  records.forEach(function (r) {
    if (r.target.closest && r.target.closest('#streaming-reply')) window.__pieces += r.addedNodes.length;
  });
}).observe(document, { childList: true, subtree: true });
"""


@contextmanager
def served(root: Path, **settings: str) -> Iterator[str]:
    """`personalab serve --port 0` with its own data folder and the given settings; yields the app's URL."""
    with serve_process(root, **settings) as (first, _pid):
        assert "http://127.0.0.1:" in first, first
        yield first.split()[3].removesuffix("/app")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is missing: ./run test installs it (apt-get install chromium fonts-wqy-microhei)")
    with playwright_api.sync_playwright() as play:
        made = play.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield made
        made.close()


@pytest.fixture(params=["sqlite", "postgres"])
def app_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        with served(tmp_path) as url:
            yield url
        return
    from conftest import postgres_test_schema

    with postgres_test_schema() as database, served(tmp_path, PERSONALAB_DATABASE_URL=database) as url:
        yield url


def _page(browser: Any, *, locale: str = "zh-CN", width: int = 1280, height: int = 900) -> Any:
    context = browser.new_context(locale=locale, viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(60_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("dialog", lambda dialog: (errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))
    page.js_errors = errors
    return page


def _shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _import_card(page: Any, url: str, card: Path) -> None:
    page.goto(f"{url}/characters")
    page.set_input_files("#card-file", str(card))
    page.click(".import button[type=submit]")
    expect(page.locator("#character-list .character").first).to_be_visible()


def _background(page: Any, url: str, name: str, points: list[str]) -> None:
    page.goto(f"{url}/backgrounds/new")
    page.fill("#f-name", name)
    page.fill("#f-world", "雾港终年有雾，灯塔是唯一的路标。")
    for number, text in enumerate(points):
        if number:
            page.click("#add-point")
        page.locator("#outline-points textarea").nth(number).fill(text)
    page.click("form.form button[type=submit]")
    expect(page.locator("#background-list")).to_contain_text(name)


def _new_instance(page: Any, url: str, title: str) -> None:
    page.goto(f"{url}/instances")
    page.fill("#n-title", title)
    page.click(".new-instance button[type=submit]")
    expect(page.locator("#composer")).to_be_visible()


def _send(page: Any, text: str) -> None:
    turns = int(page.inner_text("#turn-count"))
    page.evaluate("window.__pieces = 0")
    page.fill("#message", text)
    page.click("#send")
    expect(page.locator("#turn-count")).to_have_text(str(turns + 1))
    expect(page.locator("#message")).to_have_value("")


def _dialogue_text(page: Any) -> str:
    return str(page.inner_text("#lines"))


def test_a_whole_journey_from_a_card_to_a_rewound_branch(browser: Any, app_url: str) -> None:
    page = _page(browser)
    page.add_init_script(COUNT_TOKENS)
    url = f"{app_url}/app"
    _import_card(page, url, CARD)
    expect(page.locator("#character-list")).to_contain_text("灯守")
    _shot(page, "characters")
    _background(page, url, "雾港", ["搁浅", "修船", "起航"])
    # the outline editor: move the last point up, then save
    page.goto(f"{url}/backgrounds")
    page.click("#background-list .background >> text=编辑")
    page.locator("#outline-points li").nth(2).locator("[data-outline=up]").click()
    _shot(page, "background-edit")
    page.click("form.form button[type=submit]")
    page.click("#background-list details summary")
    expect(page.locator("#background-list ol li").nth(1)).to_have_text("起航")

    _new_instance(page, url, "雾夜")
    expect(page.locator("#lines")).to_contain_text("你醒了")  # the card's greeting opens it
    expect(page.locator("#model-notice")).to_contain_text("离线脚本模型")

    # three turns, each reply watched arriving in pieces
    for text in ("这是哪里？", "我的船还能修好吗？", "谢谢你的茶。"):
        _send(page, text)
        assert page.evaluate("window.__pieces") > 1, "the reply did not stream in pieces"
    dialogue = _dialogue_text(page)
    assert "这是哪里？" in dialogue and "谢谢你的茶。" in dialogue
    assert "【" not in dialogue and "[PROGRESS" not in dialogue
    _shot(page, "chat")

    # swipe: a second reply beside the last one, then back to the first
    page.click("#regenerate")
    expect(page.locator(".branch-pos").last).to_have_text("分支 2/2")
    page.locator(".swipe-prev").last.click()
    expect(page.locator(".branch-pos").last).to_have_text("分支 1/2")

    # edit the second user line: a new branch beside it, answered
    second = page.locator("#lines li.user").nth(1)
    second.locator("summary").click()
    second.locator("textarea").fill("算了，船不要了。")
    second.locator(".edit-line button[type=submit]").click()
    expect(page.locator("#lines")).to_contain_text("算了，船不要了。")
    expect(page.locator("#lines")).not_to_contain_text("谢谢你的茶。")
    expect(page.locator("#lines li.user").nth(1).locator(".branch-pos")).to_have_text("分支 2/2")
    assert page.inner_text("#turn-count") == "2"

    # rewind to the greeting: the panels show that branch's state (no turn yet), then continue on a new branch
    page.locator("#lines li").first.locator("button.rewind").click()
    expect(page.locator("#turn-count")).to_have_text("0")
    expect(page.locator("#core-panel")).to_contain_text("此分支还没有进行过对话轮次")
    assert page.locator("#lines li.line").count() == 1
    _send(page, "重新开始吧。")
    expect(page.locator("#lines li.user").first.locator(".branch-pos")).to_have_text("分支 2/2")
    # back to the edited branch: its turn count and plot come back with it
    page.locator("#lines li.user").first.locator(".swipe-prev").click()
    expect(page.locator("#turn-count")).to_have_text("2")
    expect(page.locator("#lines")).to_contain_text("算了，船不要了。")
    expect(page.locator("#plot-panel .point.current")).to_have_count(1)
    _shot(page, "chat-branch")
    chat_url = page.url

    # a double click on send is one turn
    page.fill("#message", "双击发送")
    page.dblclick("#send")
    expect(page.locator("#turn-count")).to_have_text("3")
    page.wait_for_timeout(500)
    assert page.locator("#lines li.user", has_text="双击发送").count() == 1

    # the instance list shows it; the phone width has no sideways scroll
    page.goto(f"{url}/instances")
    expect(page.locator("#instance-list")).to_contain_text("雾夜")
    _shot(page, "instances")
    phone = _page(browser, width=375, height=740)
    phone.goto(chat_url)
    assert phone.evaluate("document.documentElement.scrollWidth") <= 375
    _shot(phone, "chat-phone")
    # the delete confirmation names what goes
    page.goto(f"{url}/instances")
    page.click("#instance-list a.danger")
    expect(page.locator("#confirm-delete")).to_contain_text("雾夜")
    page.click("#confirm")
    expect(page.locator("#instance-list")).to_have_count(0)
    assert page.js_errors == [] and phone.js_errors == []


def test_a_hostile_card_shows_its_text_and_runs_nothing(browser: Any, tmp_path: Path) -> None:
    hostile = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2;alert(1)">'
    card = json.loads(CARD.read_text(encoding="utf-8"))
    for document in (card, card["data"]):
        document["name"] = "坏卡" + hostile
        document["description"] = hostile
        document["first_mes"] = hostile
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(card, ensure_ascii=False), encoding="utf-8")
    with served(tmp_path / "server") as app_url:
        url = f"{app_url}/app"
        page = _page(browser)
        _import_card(page, url, path)
        _background(page, url, hostile, ["<b>一</b>"])
        _new_instance(page, url, hostile)
        _send(page, hostile)
        for where in (f"{url}/characters", f"{url}/backgrounds", f"{url}/instances", f"{url}/instances/1"):
            page.goto(where)
            assert page.evaluate("window.__pwned") is None, where
            assert "<script>window.__pwned=1</script>" in page.inner_text("main"), where
        _shot(page, "hostile")
        assert page.js_errors == []


def _sees_none_of_alices_things(bob: Any, url: str, *, secret_chat: str) -> None:
    """Bob's lists show none of Alice's character, background or instance, and her chat page is an error to him."""
    for where in ("instances", "characters", "backgrounds"):
        bob.goto(f"{url}/{where}")
        text = bob.inner_text("main")
        assert "灯守" not in text and "雾港" not in text and "爱丽丝" not in text, where
    bob.goto(secret_chat)
    expect(bob.locator("#error-message")).to_be_visible()
    assert "秘密" not in bob.inner_text("body")


def test_two_users_never_see_each_others_things(browser: Any, tmp_path: Path) -> None:
    tokens = ",".join(f"{token}:{user}" for user, token in TOKENS.items())
    with served(tmp_path, PERSONALAB_AUTH="tokens", PERSONALAB_AUTH_TOKENS=tokens) as app_url:
        url = f"{app_url}/app"
        alice, bob = _page(browser), _page(browser, locale="en-US")
        for page, user in ((alice, "alice"), (bob, "bob")):
            page.goto(f"{url}/instances")
            expect(page).to_have_url(f"{url}/login")
            page.fill("#token", TOKENS[user])
            page.click("form button[type=submit]")
            expect(page.locator(".user")).to_contain_text(user)
        _shot(bob, "instances-empty-en")
        _import_card(alice, url, CARD)
        _background(alice, url, "雾港", ["搁浅"])
        _new_instance(alice, url, "爱丽丝的存档")
        # with the keyboard only: Tab to the message box, type, Ctrl+Enter sends
        for _ in range(80):
            alice.keyboard.press("Tab")
            if alice.evaluate("document.activeElement && document.activeElement.id") == "message":
                break
        assert alice.evaluate("document.activeElement.id") == "message"
        alice.keyboard.type("只有我知道的秘密")
        alice.keyboard.press("Control+Enter")
        expect(alice.locator("#turn-count")).to_have_text("1")
        expect(alice.locator("#lines")).to_contain_text("只有我知道的秘密")
        _sees_none_of_alices_things(bob, url, secret_chat=alice.url)
        alice.click("button:has-text('退出')")
        expect(alice).to_have_url(f"{url}/login")
        _shot(alice, "login")
        alice.goto(f"{url}/instances")
        expect(alice).to_have_url(f"{url}/login")


def test_two_users_signed_in_with_jwts_never_see_each_others_things(browser: Any, tmp_path: Path) -> None:
    """PERSONALAB_AUTH=jwt: the sign-in page takes a JWT (HS256 with the server's secret); an expired one is refused
    with the reason; two users in two browser contexts see only their own character, background and instance."""
    import time

    import jwt

    secret = "browser-jwt-secret-0123456789abcdef01234567"
    later = int(time.time()) + 3600
    tokens = {user: jwt.encode({"sub": user, "exp": later}, secret, algorithm="HS256") for user in ("alice", "bob")}
    with served(tmp_path, PERSONALAB_AUTH="jwt", PERSONALAB_JWT_SECRET=secret) as app_url:
        url = f"{app_url}/app"
        alice, bob = _page(browser), _page(browser, locale="en-US")
        bob.goto(f"{url}/instances")
        expect(bob).to_have_url(f"{url}/login")
        expect(bob.locator("label[for=token]")).to_have_text("JWT")
        bob.fill("#token", jwt.encode({"sub": "bob", "exp": int(time.time()) - 60}, secret, algorithm="HS256"))
        bob.click("form button[type=submit]")
        expect(bob.locator("#login-error")).to_contain_text("expired")
        for page, user in ((alice, "alice"), (bob, "bob")):
            page.goto(f"{url}/instances")
            expect(page).to_have_url(f"{url}/login")
            page.fill("#token", tokens[user])
            page.click("form button[type=submit]")
            expect(page).to_have_url(f"{url}/instances")
            expect(page.locator(".user")).to_contain_text(user)
        _import_card(alice, url, CARD)
        _background(alice, url, "雾港", ["搁浅"])
        _new_instance(alice, url, "爱丽丝的存档")
        # a host line of the scene (seed 000) before hers: it goes in first, and the row is empty after the turn
        alice.click("details.more summary")
        alice.fill("#host_speaker_1", "守卫")
        alice.fill("#host_text_1", "雾里传来脚步声。")
        _send(alice, "只有我知道的秘密")
        expect(alice.locator("#lines .line.assistant", has_text="雾里传来脚步声。")).to_contain_text("守卫")
        expect(alice.locator("#host_text_1")).to_have_value("")
        _sees_none_of_alices_things(bob, url, secret_chat=alice.url)
        alice.goto(f"{url}/instances")
        expect(alice.locator("#instance-list")).to_contain_text("爱丽丝的存档")
        assert not alice.js_errors and not bob.js_errors, (alice.js_errors, bob.js_errors)
