"""The statistics page in a real browser (issue 25 "Statistics and pictures"): Debian's headless chromium driven by
Playwright against `personalab serve` (as tests/test_web_browser.py, whose server and page helpers it uses). Before
any turn the page says there is nothing yet; after a few turns from the chat (and two memories added through the
HTTP API, so that retrieval has something to find) the chat's link opens the page, every picture loads as an image
the browser decodes, and the page is photographed for docs/web/stats.png."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from test_web_browser import _background, _import_card, _new_instance, _page, _send, _shot, browser, expect, served

pytestmark = pytest.mark.browser
CARD = "card_v2_lantern.json"
MEMORIES = ("左臂有一道旧伤，是在灯塔边留下的。", "答应过要带用户去看海。")
__all__ = ["browser"]  # the module's chromium, shared with tests/test_web_browser.py


def _post_json(url: str, body: dict[str, Any]) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - the test's own loopback server
        return int(answer.status)


def test_the_statistics_page_after_turns_shows_every_chart(browser: Any, tmp_path: Any) -> None:
    from test_web_browser import REPO

    with served(tmp_path) as app_url:
        url = f"{app_url}/app"
        page = _page(browser)
        _import_card(page, url, REPO / "tests" / "fixtures" / CARD)
        _background(page, url, "雾港", ["搁浅", "修船", "起航"])
        _new_instance(page, url, "雾夜统计")
        instance = int(page.url.rstrip("/").split("/")[-1])

        page.click("#stats-link")
        expect(page.locator("#stats-empty")).to_be_visible()
        page.go_back()
        expect(page.locator("#composer")).to_be_visible()

        for text in MEMORIES:
            body = {"content": text, "type": "event", "layer": "active", "tags": ["灯塔"]}
            assert _post_json(f"{app_url}/instances/{instance}/memories", body) == 201
        for text in ("你好，我们出发吧", "灯塔那边有什么？", "你的旧伤还疼吗？", "我们一起去看海吧"):
            _send(page, text)

        page.click("#stats-link")
        expect(page.locator("#stats-counts")).to_be_visible()
        assert page.locator("#stats-empty").count() == 0
        charts = page.locator("figure.chart img")
        assert charts.count() == 7
        for number in range(charts.count()):
            image = charts.nth(number)
            image.scroll_into_view_if_needed()
            # decoded by the browser: a broken picture has no natural width
            page.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=image.element_handle())
        expect(page.locator("#chart-growth figcaption")).to_contain_text("记忆增长")
        assert page.js_errors == []
        _shot(page, "stats")
        page.context.close()
