"""The statistics page of an instance (issue 25 "Statistics and pictures"; seed 004 提供记忆统计信息, 记忆可视化界面):
`/app/instances/{id}/stats` shows the memory counts and the pictures of `api.statistics.series` drawn on the server
(graph/web/stats_charts.py), each at `/app/instances/{id}/stats/{chart}.svg` (or `.png`). Everything goes through
the façade `PersonaLab` bound to the page's user: another user's instance is a 404 page, like one that does not
exist. The routes are plain functions, so FastAPI runs them (the queries and the drawing) in its worker threads,
never on the event loop; matplotlib is imported by the first page or picture asked for,
not when the app starts (it adds more than a second)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from personalab.graph.api import PersonaLab
from personalab.graph.http.guards import PathId
from personalab.graph.web.i18n import translator
from personalab.graph.web.pages import PREFIX, WebRoute, WebUser, language, render, web_user
from personalab.nodes.rules.errors import NotFound

router = APIRouter(prefix=PREFIX, route_class=WebRoute, include_in_schema=False)
User = Annotated[WebUser, Depends(web_user)]


@router.get("/instances/{instance_id:int}/stats")
def stats_page(request: Request, user: User, instance_id: PathId) -> Response:
    """The page: the instance's memory counts, and one picture per chart (an empty-state message before the first
    turn)."""
    from personalab.graph.web.stats_charts import CHARTS

    api = PersonaLab(owner=user.owner)
    instance = api.instances.get(instance_id)
    series = api.statistics.series(instance_id)
    counts = api.statistics.memory(instance_id)
    return render(
        request,
        "stats_page.html",
        user=user,
        instance=instance,
        series=series,
        counts=counts,
        charts=list(CHARTS),
        titles={name: title for name, (title, _, _) in CHARTS.items()},
    )


@router.get("/instances/{instance_id:int}/stats/{name}.{fmt}")
def stats_chart(request: Request, user: User, instance_id: PathId, name: str, fmt: str) -> Response:
    """One picture of the page, drawn from the series in a worker thread (matplotlib's Agg, no shared state)."""
    from personalab.graph.web.stats_charts import CHARTS, FORMATS, render_chart

    if name not in CHARTS:
        raise NotFound(f"chart {name!r} does not exist (one of {', '.join(CHARTS)})")
    if fmt not in FORMATS:
        raise NotFound(f"chart format {fmt!r} does not exist (svg or png)")
    api = PersonaLab(owner=user.owner)
    series = api.statistics.series(instance_id)
    data = render_chart(name, series, translator(language(request)), fmt)
    # the picture follows the instance's turns: the browser asks again each time the page is opened
    return Response(
        data, media_type=FORMATS[fmt], headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    )
