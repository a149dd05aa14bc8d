"""The statistics charts' data over HTTP (issue 25): thin over `api.statistics.series` (graph/api/statistics.py),
acting for the request's user (`Api`): another user's instance is a 404 naming it, like one that does not exist.

| method and path | what it does |
| --- | --- |
| `GET /instances/{id}/statistics/series` | per stored turn of the current branch: memories made and totals by layer, retrieval and use, prompt tokens per region, graph and node times, relationship, plot; the memory timeline |
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from personalab.graph.api.schemas.memory import ChartSeries
from personalab.graph.http.deps import Api
from personalab.graph.http.guards import PathId

router = APIRouter()
TAGS: list[str | Any] = ["statistics"]


@router.get("/instances/{instance_id}/statistics/series", tags=TAGS)
def statistics_series(api: Api, instance_id: PathId) -> ChartSeries:
    return api.statistics.series(instance_id)
