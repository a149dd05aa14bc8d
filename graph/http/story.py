"""Where an instance's story stands, over HTTP (issue 23): thin over `api.core_memory`, `api.plot`,
`api.relations` and `api.suggestions`.

| method and path | what it does |
| --- | --- |
| `GET /instances/{id}/core-memory` | the current core memory (before the first turn: the initial one) |
| `GET /instances/{id}/core-memory/versions` | the kept versions with the turn that made each |
| `GET /instances/{id}/core-memory/versions/{version}` | one version whole |
| `GET /instances/{id}/core-memory/diff?from=&to=` | per field, from one version to another (default: current) |
| `POST /instances/{id}/core-memory/rollback` | `{"to": version or null}`: a new version equal to it |
| `GET /instances/{id}/plot` | the outline, each point's status, the current point |
| `PUT /instances/{id}/plot/current` | `{"index": n}`: the story is at point n now (statuses follow) |
| `GET /instances/{id}/plot/nodes?all_branches=` | the review's plot nodes of the branch (or all) |
| `GET /instances/{id}/relations?npc=` | the character's relations on the branch: with the user and each other participant (issue 26); `npc`: only that one |
| `GET /suggestions?instance_id=&status=&all_branches=` | the review's world-book suggestions |
| `GET /suggestions/{id}`, `POST /suggestions/{id}/approve`, `POST /suggestions/{id}/reject` | show, decide |

Another user's id → 404; a version or point that does not exist → 404 / 422 naming it; an NPC not in the scene → 422
naming it; a turn running → 409.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from personalab.graph.api.schemas.story import ApproveRequest, CurrentPointRequest, RollbackRequest
from personalab.graph.http.deps import Api
from personalab.graph.http.guards import LimitedBodyRoute, PathId, QueryId
from pydantic import StrictBool

router = APIRouter(route_class=LimitedBodyRoute)

CORE = "/instances/{instance_id}/core-memory"


@router.get(CORE, tags=["core memory"])
def core_memory(api: Api, instance_id: PathId) -> dict[str, Any]:
    return api.core_memory.show(instance_id)


@router.get(CORE + "/versions", tags=["core memory"])
def core_memory_versions(api: Api, instance_id: PathId) -> list[dict[str, Any]]:
    return api.core_memory.versions(instance_id)


@router.get(CORE + "/versions/{version}", tags=["core memory"])
def core_memory_version(api: Api, instance_id: PathId, version: PathId) -> dict[str, Any]:
    return api.core_memory.version(instance_id, version)


@router.get(CORE + "/diff", tags=["core memory"])
def core_memory_diff(
    api: Api,
    instance_id: PathId,
    since: Annotated[int, Query(alias="from", ge=0, le=2**31 - 1)],
    to: Annotated[int | None, Query(ge=0, le=2**31 - 1)] = None,
) -> dict[str, Any]:
    return api.core_memory.diff(instance_id, since, to)


@router.post(CORE + "/rollback", tags=["core memory"])
def core_memory_rollback(api: Api, instance_id: PathId, body: RollbackRequest) -> dict[str, Any]:
    return api.core_memory.rollback(instance_id, body.to)


@router.get("/instances/{instance_id}/plot", tags=["plot"])
def plot(api: Api, instance_id: PathId) -> dict[str, Any]:
    return api.plot.outline(instance_id)


@router.put("/instances/{instance_id}/plot/current", tags=["plot"])
def plot_current(api: Api, instance_id: PathId, body: CurrentPointRequest) -> dict[str, Any]:
    return api.plot.set_current_point(instance_id, body.index)


@router.get("/instances/{instance_id}/plot/nodes", tags=["plot"])
def plot_nodes(api: Api, instance_id: PathId, all_branches: StrictBool = False) -> list[dict[str, Any]]:
    return api.plot.nodes(instance_id, all_branches=all_branches)


@router.get("/instances/{instance_id}/relations", tags=["relations"])
def relations(
    api: Api, instance_id: PathId, npc: Annotated[str | None, Query(min_length=1, max_length=200)] = None
) -> dict[str, Any]:
    """The character's relations on the current branch (seed 003; issue 26): `user` and `participants`. An `npc`
    with no relation on the branch (never in the scene) → 422 naming it."""
    return api.relations.list(instance_id, npc=npc)


@router.get("/suggestions", tags=["suggestions"])
def suggestions(
    api: Api, instance_id: QueryId = None, status: str | None = None, all_branches: StrictBool = False
) -> list[dict[str, Any]]:
    return api.suggestions.list(instance_id=instance_id, status=status, all_branches=all_branches)


@router.get("/suggestions/{suggestion_id}", tags=["suggestions"])
def suggestion(api: Api, suggestion_id: PathId) -> dict[str, Any]:
    return api.suggestions.get(suggestion_id)


@router.post("/suggestions/{suggestion_id}/approve", tags=["suggestions"])
def approve(api: Api, suggestion_id: PathId, body: ApproveRequest) -> dict[str, Any]:
    return api.suggestions.approve(suggestion_id, content=body.content, keywords=body.keywords)


@router.post("/suggestions/{suggestion_id}/reject", tags=["suggestions"])
def reject(api: Api, suggestion_id: PathId) -> dict[str, Any]:
    return api.suggestions.reject(suggestion_id)
