"""The memory console in a real browser (issue 25 "Tested as a person uses it"): Debian's headless chromium driven
by Playwright against `personalab serve` (the same set-up as tests/test_web_browser.py, on SQLite and PostgreSQL).
Play turns → open "why this reply" and find the fact with its scores → correct the wrong memory in the inspector and
see the next reply's provenance use the corrected text → pin a memory and see "try it" retrieve it; the inspector at
375 px. Screenshots go to docs/web/memory-*.png."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("playwright.sync_api")

from test_web_browser import (  # noqa: E402 - after the skip: the module needs playwright
    CARD,
    _background,
    _import_card,
    _new_instance,
    _page,
    _send,
    _shot,
    app_url,
    browser,
    expect,
)

pytestmark = pytest.mark.browser
__all__ = ["app_url", "browser"]  # the fixtures, shared with the web app's browser tests

WRONG = "阿岚的怀表藏在码头的木箱里"
RIGHT = "阿岚的怀表藏在灯塔下面的石头里"


def _add_memory(page: Any, url: str, text: str, *, pinned: bool = False) -> None:
    page.goto(url)
    page.fill("#new-content", text)
    if pinned:
        page.check("#add-memory input[name=pinned]")
    page.click("#add-memory-button")
    expect(page.locator("#done")).to_be_visible()


def _why_of_last_reply(page: Any) -> None:
    page.locator("#lines li.assistant a.why").last.click()
    expect(page.locator("#record-memories")).to_be_visible()


def test_why_edit_pin_and_try_in_the_browser(browser: Any, app_url: str) -> None:
    page = _page(browser)
    url = f"{app_url}/app"
    _import_card(page, url, CARD)
    _background(page, url, "雾港", ["搁浅", "修船"])
    _new_instance(page, url, "怀表")
    chat = page.url
    instance_id = chat.rstrip("/").split("/")[-1]
    memories = f"{url}/instances/{instance_id}/memories"
    _send(page, "我叫阿岚，刚从海上漂到这里。")

    # a fact the character holds (wrong), then a turn that asks for it: "why" shows it with its scores
    _add_memory(page, memories, WRONG)
    page.goto(chat)
    _send(page, "你还记得我的怀表藏在哪里吗？")
    _why_of_last_reply(page)
    row = page.locator("#record-memories tr.record-memory", has_text=WRONG)
    expect(row).to_have_count(1)
    expect(row.locator(".scores")).to_contain_text("关键词")
    expect(page.locator("#rewritten-query")).not_to_be_empty()
    _shot(page, "memory-why")
    why_url = page.url

    # correct it in the inspector: the old text stays as a version, the next reply's provenance has the new text
    page.goto(memories)
    page.locator("#memories tr", has_text=WRONG).locator("td.content a").click()
    page.fill("#content", RIGHT)
    page.click("#save-memory")
    expect(page.locator("#versions")).to_contain_text(WRONG)
    page.goto(chat)
    _send(page, "我的怀表到底在哪里？")
    _why_of_last_reply(page)
    expect(page.locator("#record-memories")).to_contain_text(RIGHT)
    expect(page.locator("#record-memories")).not_to_contain_text(WRONG)

    # pin a memory: "try it" retrieves it for a message, and nothing is played
    _add_memory(page, memories, "怀表是阿岚父亲留下的遗物", pinned=True)
    page.goto(memories)
    expect(page.locator("#memories tr.pinned", has_text="父亲留下的遗物")).to_have_count(1)
    _shot(page, "memory-inspector")
    turns_before = page.locator("#memories tbody tr").count()
    page.goto(f"{url}/instances/{instance_id}/try")
    page.fill("#try-message", "那块怀表是谁留下的？")
    page.keyboard.press("Tab")  # the form is usable from the keyboard: Tab to the button, Enter
    page.keyboard.press("Enter")
    expect(page.locator("#record-memories")).to_contain_text("父亲留下的遗物")
    _shot(page, "memory-try")
    page.goto(memories)
    assert page.locator("#memories tbody tr").count() == turns_before  # trying stored nothing

    # a phone: the inspector fits 375 px (the table scrolls inside its box, the page does not)
    phone = _page(browser, width=375, height=800)
    phone.goto(memories)
    expect(phone.locator("#memories")).to_be_visible()
    assert phone.evaluate("document.documentElement.scrollWidth") <= 375
    for path in (f"{url}/instances/{instance_id}/try", why_url):
        phone.goto(path)
        assert phone.evaluate("document.documentElement.scrollWidth") <= 375, path
    assert not page.js_errors and not phone.js_errors
