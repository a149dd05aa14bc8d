"""The per-node turn-time chart (issue 25 "per-node turn time"): nodes the turn graph runs side by side (the memory
retrieval and the director) are not summed. The series splits each turn's wall time along its critical path: the
path's nodes (of a parallel step, the longest) plus the time outside the nodes add up to the graph's time, the
shorter parallel node is apart. Checked on the split itself and on the data the chart is drawn from, through HTTP
(`/instances/{id}/statistics/series`) after real turns, on SQLite and PostgreSQL; the picture still draws."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from personalab.graph.api import PersonaLab
from personalab.graph.api.statistics import PARALLEL_STEPS, split_node_time
from personalab.graph.web.i18n import translator
from personalab.graph.web.stats_charts import render_chart
from web_pages import new_instance, scripted_client


def test_parallel_nodes_are_not_added_up() -> None:
    nodes = {"history_fetch": 10.0, "query_rewrite": 5.0, "rag_retrieve": 40.0, "director": 30.0, "generate": 100.0}
    path, beside, other = split_node_time(nodes, 170.0)
    assert beside == {"director": 30.0} and "director" not in path
    assert sum(nodes.values()) > 170.0  # summed, the stack would be taller than the turn took
    assert other == pytest.approx(15.0) and sum(path.values()) + other == pytest.approx(170.0)
    # the clocks' rounding: a path a little over the graph's time is scaled to it, nothing left outside
    path, _, other = split_node_time({"generate": 100.2}, 100.0)
    assert other == 0.0 and sum(path.values()) == pytest.approx(100.0)
    # no graph time recorded: the rest is unknown, the path is as measured
    assert split_node_time({"generate": 5.0}, None) == ({"generate": 5.0}, {}, None)


@pytest.fixture
def client(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    yield from scripted_client(db_url, monkeypatch)


def test_each_turns_stack_is_its_graph_time(client: TestClient) -> None:
    instance = new_instance(client)
    api = PersonaLab()
    for message in ("你好，我们出发吧", "灯塔那边有什么？"):
        reply = client.post(f"/app/instances/{instance}/turn", data={"action": "send", "message": message})
        assert re.findall(r"^event: (.+)$", reply.text, re.M)[-1] == "done"
    served = client.get(f"/instances/{instance}/statistics/series")
    assert served.status_code == 200
    turns = served.json()["turns"]
    assert len(turns) == 2
    for point in turns:
        assert point["graph_ms"] is not None and point["node_path_ms"], point
        stacked = sum(point["node_path_ms"].values()) + point["other_ms"]
        assert stacked == pytest.approx(point["graph_ms"], abs=0.01), point
        for step in PARALLEL_STEPS:
            ran = [name for name in step if name in point["node_ms"]]
            on_path = [name for name in ran if name in point["node_path_ms"]]
            assert len(on_path) == min(1, len(ran)), point  # one node of a parallel step is stacked
            assert {*on_path, *point["node_parallel_ms"]} >= set(ran)
        assert set(point["node_path_ms"]).isdisjoint(point["node_parallel_ms"])
    svg = render_chart("time", api.statistics.series(instance), translator("zh"), "svg")
    assert svg.startswith(b"<?xml") or b"<svg" in svg[:500]
