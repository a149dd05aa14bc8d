"""The statistics page and its pictures (issue 25 "Statistics and pictures"), in-process through FastAPI's TestClient
on the real app and the real graph with the offline scripted model, on SQLite and PostgreSQL: after a few turns the
data series have one point per turn (as JSON through the API and HTTP too) with the turn's figures recorded (node
times, prompt tokens per region), every picture is a valid SVG and PNG, an instance without turns shows the
empty-state message, another user's instance is a 404 page, an unknown instance a 404 page."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from xml.etree import ElementTree

import pytest
from fastapi.testclient import TestClient
from personalab.graph.api import PersonaLab
from personalab.graph.api.schemas.memory import ChartSeries, TimelineMemory, TurnFigures
from personalab.graph.web.stats_charts import CHARTS
from web_pages import new_instance, scripted_client

TOKENS = {"alice": "tok-stats-alice-7d1", "bob": "tok-stats-bob-2f4"}
MESSAGES = ("你好，我们出发吧", "灯塔那边有什么？", "我信任你。")


@pytest.fixture
def client(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    yield from scripted_client(db_url, monkeypatch)


def _play(client: TestClient, instance: int, messages: tuple[str, ...] = MESSAGES) -> None:
    for message in messages:
        reply = client.post(f"/app/instances/{instance}/turn", data={"action": "send", "message": message})
        frames = re.findall(r"^event: (.+)$", reply.text, re.M)
        assert frames and frames[-1] == "done", reply.text[-500:]


def _valid_svg(data: bytes) -> ElementTree.Element:
    root = ElementTree.fromstring(data)
    assert root.tag.endswith("svg")
    return root


def _valid_png(data: bytes) -> tuple[int, int]:
    from PIL import Image

    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    with Image.open(io.BytesIO(data)) as image:
        image.verify()
        return image.size


def test_after_turns_the_series_has_one_point_per_turn_and_every_picture_is_valid(client: TestClient) -> None:
    instance = new_instance(client)
    _play(client, instance)
    series = PersonaLab().statistics.series(instance)
    assert [point.turn for point in series.turns] == [1, 2, 3]
    for point in series.turns:
        # the turn's figures, stored with its record: tokens per region summing to the prompt, each node's time
        assert point.region_tokens and sum(point.region_tokens.values()) == point.prompt_tokens
        assert {"history_fetch", "generate", "write_back"} <= set(point.node_ms)
        assert point.graph_ms is not None and all(ms >= 0 for ms in point.node_ms.values())
        assert point.relationship is not None and set(point.relationship) == {"trust", "affection", "familiarity"}
        assert point.plot_points == 2
    totals = [sum(point.memories_total.values()) for point in series.turns]
    assert totals == sorted(totals) and totals[-1] > 0  # the dialogue record grows with every turn
    assert series.timeline and all(m.branch in {"current", "other", "no_line"} for m in series.timeline)

    # the same data as JSON over HTTP
    served = client.get(f"/instances/{instance}/statistics/series")
    assert served.status_code == 200
    body = served.json()
    assert [point["turn"] for point in body["turns"]] == [1, 2, 3]
    assert body["turns"][0]["region_tokens"] == series.turns[0].region_tokens

    page = client.get(f"/app/instances/{instance}/stats")
    assert page.status_code == 200 and "记忆增长" in page.text and "stats-empty" not in page.text
    for name in CHARTS:
        assert f"/app/instances/{instance}/stats/{name}.svg" in page.text
        svg = client.get(f"/app/instances/{instance}/stats/{name}.svg")
        assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
        _valid_svg(svg.content)
        png = client.get(f"/app/instances/{instance}/stats/{name}.png")
        assert png.status_code == 200 and png.headers["content-type"] == "image/png"
        width, height = _valid_png(png.content)
        assert width >= 500 and height >= 200
    # the chat links to the page
    assert f"/app/instances/{instance}/stats" in client.get(f"/app/instances/{instance}").text


def test_after_a_regenerate_the_series_follows_the_branch_and_the_timeline_shows_both(client: TestClient) -> None:
    instance = new_instance(client)
    _play(client, instance, MESSAGES[:2])
    reply = client.post(f"/app/instances/{instance}/turn", data={"action": "regenerate"})
    assert re.findall(r"^event: (.+)$", reply.text, re.M)[-1] == "done", reply.text[-500:]
    series = PersonaLab().statistics.series(instance)
    # the replaced reply's turn is on another branch now: still one point per turn of the current one
    assert [point.turn for point in series.turns] == [1, 2]
    assert {m.branch for m in series.timeline} >= {"current", "other"}
    _valid_svg(client.get(f"/app/instances/{instance}/stats/timeline.svg").content)


def test_the_page_and_pictures_follow_the_language(client: TestClient) -> None:
    instance = new_instance(client)
    _play(client, instance, MESSAGES[:1])
    client.post("/app/language", data={"lang": "en", "back": f"/app/instances/{instance}/stats"})
    page = client.get(f"/app/instances/{instance}/stats")
    assert "Memory growth" in page.text and "Back to the chat" in page.text
    # labels are drawn as glyph paths; the SVG keeps each text as a comment-free <g id="text_…"> group, so compare
    # the two languages' pictures: different labels, different drawings
    english = client.get(f"/app/instances/{instance}/stats/growth.svg").content
    client.post("/app/language", data={"lang": "zh", "back": f"/app/instances/{instance}/stats"})
    chinese = client.get(f"/app/instances/{instance}/stats/growth.svg").content
    assert english != chinese
    assert "记忆增长" in client.get(f"/app/instances/{instance}/stats").text


def test_an_instance_without_turns_shows_the_empty_state(client: TestClient) -> None:
    instance = new_instance(client)
    assert PersonaLab().statistics.series(instance).turns == []
    page = client.get(f"/app/instances/{instance}/stats")
    assert page.status_code == 200 and 'id="stats-empty"' in page.text and "还没有对话轮次" in page.text
    # a picture asked for anyway says the same, and is still a valid picture
    _valid_svg(client.get(f"/app/instances/{instance}/stats/tokens.svg").content)
    assert client.get(f"/instances/{instance}/statistics/series").json()["turns"] == []


def test_unknown_instance_chart_or_format_is_a_404_page(client: TestClient) -> None:
    missing = client.get("/app/instances/999999/stats")
    assert missing.status_code == 404 and 'id="error-message"' in missing.text and "999999" in missing.text
    assert client.get("/app/instances/999999/stats/growth.svg").status_code == 404
    assert client.get("/instances/999999/statistics/series").status_code == 404
    instance = new_instance(client)
    assert client.get(f"/app/instances/{instance}/stats/nothing.svg").status_code == 404
    assert client.get(f"/app/instances/{instance}/stats/growth.gif").status_code == 404


def test_with_auth_on_another_users_statistics_are_not_reachable(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_AUTH", "tokens")
    monkeypatch.setenv("PERSONALAB_AUTH_TOKENS", ",".join(f"{token}:{user}" for user, token in TOKENS.items()))
    client.post("/app/login", data={"token": TOKENS["alice"]})
    instance = new_instance(client)
    _play(client, instance, MESSAGES[:1])
    assert client.get(f"/app/instances/{instance}/stats").status_code == 200
    client.cookies.clear()
    assert client.get(f"/app/instances/{instance}/stats").url.path == "/app/login"
    client.post("/app/login", data={"token": TOKENS["bob"]})
    for path in (f"/app/instances/{instance}/stats", f"/app/instances/{instance}/stats/timeline.svg"):
        page = client.get(path)
        assert page.status_code == 404, path
        assert "雷娜" not in page.text
    bob = {"Authorization": f"Bearer {TOKENS['bob']}"}
    assert client.get(f"/instances/{instance}/statistics/series", headers=bob).status_code == 404
    alice = {"Authorization": f"Bearer {TOKENS['alice']}"}
    owned = client.get(f"/instances/{instance}/statistics/series", headers=alice)
    assert owned.status_code == 200 and len(json.loads(owned.text)["turns"]) == 1


def test_the_cjk_font_is_found_through_the_font_manager(caplog: pytest.LogCaptureFixture) -> None:
    from personalab.graph.web import stats_charts

    font = stats_charts.cjk_font()
    if not Path(stats_charts.CJK_FONT_FILE).exists():
        pytest.skip("fonts-wqy-microhei is not installed here (./run test installs it)")
    assert Path(str(font.get_file())).name.startswith("wqy")


def _synthetic_series() -> ChartSeries:
    """A series as `api.statistics.series` gives it, without a database: five turns of every figure."""
    turns = [
        TurnFigures(
            turn=n,
            memories_made={"active": 1, "record": 3},
            memories_made_by_type={"event": 1, "record": 3},
            memories_total={"active": n, "record": 3 * n},
            retrieved=n,
            used=max(0, n - 1),
            retrieved_by_trigger={"bm25": n, "vector": 1},
            prompt_tokens=1000 + n,
            region_tokens={"head": 800, "middle": 100 + n, "retrieved": 90, "tail": 10},
            graph_ms=50.0,
            node_ms={"history_fetch": 5.0, "rag_retrieve": 20.0, "generate": 10.0, "write_back": 8.0},
            relationship={"trust": n, "affection": 0, "familiarity": 2 * n},
            plot_index=1 + n // 3,
            plot_completed=n // 3,
            plot_points=3,
        )
        for n in range(1, 6)
    ]
    timeline = [
        TimelineMemory(id=n, turn=n % 6, layer="record" if n % 2 else "active", type="event", branch=branch)
        for n, branch in enumerate(["current", "other", "no_line"] * 4)
    ]
    return ChartSeries(instance_id=1, turns=turns, timeline=timeline, timeline_limit=2000)


def test_pictures_drawn_in_parallel_threads_are_the_pictures_drawn_one_by_one() -> None:
    """Each picture is its own Figure on an Agg canvas (no pyplot state): drawn side by side in worker threads they
    come out exactly as drawn alone."""
    from personalab.graph.web.i18n import translator
    from personalab.graph.web.stats_charts import render_chart

    series, t = _synthetic_series(), translator("zh")
    alone = {name: render_chart(name, series, t, "png") for name in CHARTS}
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(lambda name: (name, render_chart(name, series, t, "png")), list(CHARTS) * 3))
    for name, data in together:
        assert data == alone[name], name
    for name in CHARTS:
        _valid_svg(render_chart(name, series, translator("en"), "svg"))


@pytest.mark.filterwarnings("ignore:Glyph .* missing from font")  # matplotlib's own, one per Chinese glyph
def test_without_a_cjk_font_the_pictures_still_draw_and_a_warning_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    from personalab.graph.web import stats_charts
    from personalab.graph.web.i18n import translator

    monkeypatch.setattr(stats_charts, "CJK_FONT_NAMES", ("No Such Font Sans",))
    monkeypatch.setattr(stats_charts, "CJK_FONT_FILE", str(tmp_path / "missing.ttc"))
    stats_charts.cjk_font.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger=stats_charts.__name__):
            data = stats_charts.render_chart("growth", _synthetic_series(), translator("zh"), "png")
        _valid_png(data)
        assert any("fonts-wqy-microhei" in record.getMessage() for record in caplog.records)
    finally:
        stats_charts.cjk_font.cache_clear()
