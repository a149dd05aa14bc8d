"""The memory console in a real browser (issue 25 "Tested as a person uses it"): Debian's headless chromium driven
by Playwright against `personalab serve` (the offline scripted model, maintenance every turn so core memory gets
versions), on SQLite and PostgreSQL. One journey: an instance's world-book entry fires → the semantic strategy
switched off in the instance's configuration → the next turn's injection changes (the reply's provenance, read
through `PersonaLab.replies`, has no semantic hit) → core memory rolled back, the page and the next prompt follow
→ a review suggestion approved → a world-book entry edited and seen firing on the next turn; a knowledge entry
moved up in the editor comes first in the library's order; after a rewind the director shows each branch's plot
nodes. Screenshots go to
docs/web/console-*.png. The server and browser helpers are tests/test_web_browser.py's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from personalab.graph.api import PersonaLab
from test_web_browser import CARD, _background, _import_card, _new_instance, _page, _send, _shot, browser, served

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect
pytestmark = pytest.mark.browser
__all__ = ["browser"]  # the module-scoped chromium fixture, shared with tests/test_web_browser.py


@pytest.fixture(params=["sqlite", "postgres"])
def app_and_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The served app's URL and its database URL (the test reads what fed each reply through the API)."""
    if request.param == "sqlite":
        database = f"sqlite:///{tmp_path / 'console.db'}"
        with served(tmp_path, PERSONALAB_DATABASE_URL=database, PERSONALAB_MAINTENANCE_EVERY="1") as url:
            yield url, database
        return
    from conftest import postgres_test_schema

    with (
        postgres_test_schema() as database,
        served(tmp_path, PERSONALAB_DATABASE_URL=database, PERSONALAB_MAINTENANCE_EVERY="1") as url,
    ):
        yield url, database


def _last_reply(page: Any) -> int:
    return int(page.locator("#lines li.assistant").last.get_attribute("data-line-id"))


def _fed(api: PersonaLab, page: Any) -> dict[str, Any]:
    """What fed the reply now last on the page (its stored provenance record)."""
    return dict(api.replies.provenance(_last_reply(page)).record)


def test_configure_roll_back_approve_and_edit_from_the_console(browser: Any, app_and_db: tuple[str, str]) -> None:
    app_url, database = app_and_db
    api = PersonaLab(database_url=database)
    page = _page(browser)
    url = f"{app_url}/app"
    _import_card(page, url, CARD)
    _background(page, url, "雾港", ["搁浅", "修船", "起航"])
    _new_instance(page, url, "控制台")
    instance = int(page.url.rstrip("/").split("/")[-1])
    base = f"{url}/instances/{instance}"

    # the chat links to the console; an instance's world-book entry, semantic, keyed 灯塔
    page.click(".console-links >> text=世界书")
    expect(page.locator("h1")).to_have_text("世界书")
    page.fill("#new-keywords", "灯塔")
    page.fill("#new-content", "灯塔的灯油藏在地窖里。")
    page.select_option("#new-trigger", "semantic")
    page.click("#add-entry button[type=submit]")
    expect(page.locator("#entries")).to_contain_text("灯塔的灯油藏在地窖里。")
    entry = int(page.locator("#entries tbody tr").first.get_attribute("data-entry"))

    page.goto(base)
    _send(page, "灯塔还亮着吗？")
    fired = _fed(api, page)["worldbook"]
    assert any(item["id"] == str(entry) or item["id"] == entry for item in fired), fired

    # the configuration: a bad value is named as you type, nothing saved; then the semantic strategy off
    page.goto(f"{base}/config")
    page.fill("#f-relevance_threshold", "2")
    expect(page.locator("#err-f-relevance_threshold")).to_contain_text("relevance_threshold")
    page.fill("#f-relevance_threshold", "")
    expect(page.locator("#err-f-relevance_threshold")).to_be_empty()
    page.select_option("#f-semantic_similarity", "false")
    page.click("#config-save")
    expect(page.locator("[data-effective=semantic_similarity]")).to_have_text("false")
    expect(page.locator("#row-f-semantic_similarity .source")).to_have_text(f"来自 会话实例 {instance}")
    _shot(page, "console-config")
    assert api.trigger_config.effective(instance).effective["semantic_similarity"] is False

    page.goto(base)
    _send(page, "灯塔还亮着吗？")
    fired = _fed(api, page)["worldbook"]
    assert not any(str(item["id"]) == str(entry) for item in fired), fired
    assert not any("semantic" in str(item.get("reason")) for item in fired), fired

    # core memory: versions (maintenance rewrote it each turn), a diff, a rollback the page and next prompt follow
    page.click(".console-links >> text=核心记忆")
    expect(page.locator("#versions")).to_contain_text("v1")
    page.select_option("#a", "1")
    page.click("#diff-form button[type=submit]")
    expect(page.locator("#diff")).to_be_visible()
    _shot(page, "console-core")
    first = api.core_memory.version(instance, 1)["core"]
    page.fill("#to", "99")
    page.locator("form:has(#to) button[type=submit]").click()
    expect(page.locator("#console-error")).to_contain_text("version 99 is not kept")
    page.locator("#version-1 button").click()
    expect(page.locator("#rolled-back")).to_be_visible()
    rolled = api.core_memory.versions(instance)[-1]
    assert rolled["reason"] == "rollback to version 1" and api.core_memory.show(instance)["core"] == first
    expect(page.locator("#core-current h2")).to_contain_text(f"v{rolled['version']}")

    # the next turn, a turning-point choice (the review suggests a world-book entry): its prompt had the rollback
    page.goto(base)
    page.click("details.more summary")
    page.fill("#choice_text", "去北方的废墟")
    page.select_option("#choice_level", "turning_point")
    _send(page, "我们去北方的废墟吧。")
    assert _fed(api, page)["core_memory"]["version"] == rolled["version"]

    # director and review: approve the suggestion with its content edited
    page.goto(f"{base}/director")
    suggestion = page.locator("#pending form.suggestion").first
    expect(suggestion).to_be_visible()
    expect(page.locator("#plot-nodes")).to_contain_text("去北方的废墟")  # the turning point's node, this branch
    expect(page.locator("#plot-nodes")).not_to_contain_text("【")
    suggestion.locator("textarea").fill("北方的废墟下是旧城的地铁。")
    _shot(page, "console-director")
    suggestion.locator("button[value=approve]").click()
    expect(page.locator("#decided")).to_be_visible()
    expect(page.locator("#pending")).to_contain_text("没有待审核的内容")
    assert any(
        e["content"] == "北方的废墟下是旧城的地铁。" for e in api.worldbook.list(instance_id=instance, visible=True)
    )

    # edit the entry (a keyword entry keyed 地窖 now) and see it fire on the next turn
    page.goto(f"{base}/worldbook")
    page.locator(f"#entry-{entry} a").first.click()
    page.fill("#keywords", "地窖")
    page.select_option("#trigger_type", "keyword")
    page.fill("#content", "地窖里藏着灯油和一张旧地图。")
    page.fill("#sticky", "1")
    _shot(page, "console-entry")
    page.click("#entry-save")
    expect(page.locator("#entries")).to_contain_text("地窖里藏着灯油和一张旧地图。")
    _shot(page, "console-worldbook")
    page.goto(base)
    _send(page, "地窖里有什么？")
    fired = _fed(api, page)["worldbook"]
    assert any(str(item["id"]) == str(entry) and item["trigger"] == "keyword" for item in fired), fired

    # plot nodes per branch: rewound to the greeting and played on, the current branch has no turning point; the
    # branch selector brings up the old branch's nodes
    page.locator("#lines li").first.locator("button.rewind").click()
    expect(page.locator("#turn-count")).to_have_text("0")
    _send(page, "我们留在港口吧。")
    page.goto(f"{base}/director")
    expect(page.locator("#branch-title")).to_contain_text("当前分支")
    expect(page.locator("#branch-nodes")).not_to_contain_text("去北方的废墟")
    branches = api.plot.branches(instance)
    assert branches[0]["current"] and len(branches) >= 2
    (old,) = [b for b in branches if any("去北方的废墟" in n["summary"] for n in b["nodes"])]
    page.select_option("#branch", str(old["leaf"]))
    page.locator("#branch-form button[type=submit]").click()
    expect(page.locator("#branch-title")).to_have_attribute("data-leaf", str(old["leaf"]))
    expect(page.locator("#branch-nodes")).to_contain_text("去北方的废墟")
    _shot(page, "console-director-branches")
    page.goto(f"{base}/director?branch=abc")
    expect(page.locator("#console-error")).to_contain_text("branch")

    # the knowledge editor: an entry added from the page is in the table and in the instance's knowledge
    page.goto(f"{base}/knowledge")
    page.fill("#k-tag", "地理")
    page.fill("#k-content", "旧城的地铁在北方废墟之下。")
    page.fill("#k-keywords", "地铁, 旧城")
    page.locator("#add-knowledge button[type=submit]").click()
    expect(page.locator("#knowledge")).to_contain_text("旧城的地铁在北方废墟之下。")
    assert any(e["content"] == "旧城的地铁在北方废墟之下。" for e in api.knowledge.list(instance_id=instance))
    # reorder: a second entry moved up with its arrow comes first in the table and in the library's order
    page.fill("#k-tag", "地理")
    page.fill("#k-content", "北方废墟的入口在钟楼下。")
    page.locator("#add-knowledge button[type=submit]").click()
    expect(page.locator("#knowledge tbody tr").last).to_contain_text("北方废墟的入口在钟楼下。")
    second = int(page.locator("#knowledge tbody tr").last.get_attribute("data-entry"))
    page.locator(f"#knowledge-{second} button[aria-label='上移 #{second}']").click()
    expect(page.locator("#knowledge tbody tr").first).to_contain_text("北方废墟的入口在钟楼下。")
    assert api.knowledge.list(instance_id=instance)[0]["id"] == second
    _shot(page, "console-knowledge")

    # a phone: the configuration page fits 375 px without sideways scrolling
    phone = _page(browser, width=375, height=800)
    phone.goto(f"{base}/config")
    assert phone.evaluate("document.documentElement.scrollWidth") <= 375
    _shot(phone, "console-phone")
    phone.context.close()
    assert not page.js_errors and not phone.js_errors
    page.context.close()
