"""An instance's memories, what fed each reply, and memory statistics over HTTP (issue 23): thin over `api.memories`,
`api.replies` and `api.statistics` (graph/api/memory.py, replies.py, statistics.py). Every route acts for the
request's user (`Api`): another user's instance or line is a 404 naming it, a memory of another instance a 404 naming
the memory; a bad value a 422 naming the field. Routes are plain functions (FastAPI's thread pool).

| method and path | what it does |
| --- | --- |
| `GET /instances/{id}/memories` (`?layer=&type=&kind=&character_id=&all_branches=&include_record=&offset=&limit=`) | list, paged |
| `POST /instances/{id}/memories` | add |
| `POST /instances/{id}/memories/search` | the turn's retrieval for a query, with every score |
| `GET /instances/{id}/memories/export`, `POST /instances/{id}/memories/import` | every memory as JSON, and back |
| `POST /instances/{id}/memories/maintain` (`?turn=`) | one step of the layer flow |
| `GET / PATCH / DELETE /instances/{id}/memories/{memory_id}` | show (scores, source, versions), edit, delete |
| `PUT / DELETE /instances/{id}/memories/{memory_id}/pin` | pin, unpin |
| `GET /instances/{id}/memory-statistics` (`?all_branches=`) | counts, retrieval use, growth |
| `GET /lines/{line_id}/provenance` | what fed the reply the line belongs to |
| `POST /instances/{id}/memories/recall` | what a script NPC (`npc`) or the character witnessed, for a query (issue 26) |
| `GET /instances/{id}/consolidation-steps`, `POST …/consolidation-steps/{step_id}/undo` | consolidation steps, undo |
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status
from personalab.graph.api.schemas.memory import (
    ImportResult,
    MaintenanceResult,
    MemoryCreate,
    MemoryDetail,
    MemoryPage,
    MemoryPublic,
    MemoryStatistics,
    MemoryUpdate,
    Provenance,
    SearchRequest,
    SearchResult,
)
from personalab.graph.http.deps import Api
from personalab.graph.http.guards import LimitedBodyRoute, PathId, QueryId
from pydantic import BaseModel, ConfigDict, Field

router = APIRouter(route_class=LimitedBodyRoute)
TAGS: list[str | Any] = ["memory"]
Name = Annotated[str | None, Query(max_length=40)]


class ImportBody(BaseModel):
    """Memories to add, all or nothing: objects as `GET …/memories/export` gives them."""

    model_config = ConfigDict(extra="forbid")
    memories: list[dict[str, Any]] = Field(max_length=10_000)


@router.get("/instances/{instance_id}/memories", tags=TAGS)
def list_memories(
    api: Api,
    instance_id: PathId,
    layer: Name = None,
    type: Name = None,
    kind: Name = None,
    character_id: QueryId = None,
    all_branches: bool = False,
    include_record: bool = False,
    offset: Annotated[int, Query(ge=0, le=2_147_483_647)] = 0,
    limit: Annotated[int, Query(ge=0, le=1000)] = 50,
    turn_from: QueryId = None,
    turn_to: QueryId = None,
    scene: Annotated[str | None, Query(max_length=200)] = None,
    text: Annotated[str | None, Query(max_length=500)] = None,
    pinned: bool | None = None,
    newest_first: bool = False,
) -> MemoryPage:
    return api.memories.list(
        instance_id,
        layer=layer,
        type=type,
        kind=kind,
        character_id=character_id,
        all_branches=all_branches,
        include_record=include_record,
        offset=offset,
        limit=limit,
        turn_from=turn_from,
        turn_to=turn_to,
        scene=scene,
        text=text,
        pinned=pinned,
        newest_first=newest_first,
    )


class BulkBody(BaseModel):
    """One action over several memories of the instance (issue 25): all or nothing."""

    model_config = ConfigDict(extra="forbid")
    ids: list[int] = Field(max_length=1000)
    action: str = Field(max_length=10)
    layer: str | None = Field(default=None, max_length=40)


class PreviewBody(BaseModel):
    """A message to try (issue 25 "try it")."""

    model_config = ConfigDict(extra="forbid")
    message: str = Field(max_length=4000)


@router.post("/instances/{instance_id}/memories/bulk", tags=TAGS)
def bulk_memories(api: Api, instance_id: PathId, body: BulkBody) -> dict[str, Any]:
    """Pin, unpin, delete or move (`layer`) the memories `ids` of the instance; an id of another instance → 422
    naming it, nothing changed."""
    return {"changed": api.memories.bulk(instance_id, body.ids, body.action, layer=body.layer)}


@router.post("/instances/{instance_id}/memories/preview", tags=TAGS)
def preview_memories(api: Api, instance_id: PathId, body: PreviewBody) -> dict[str, Any]:
    """What the turn's retrieval would find and inject for `message` now (a provenance-shaped record); no turn is
    played, nothing is stored."""
    return api.memories.preview(instance_id, body.message)


class RecallBody(BaseModel):
    """What to recall, and who recalls it (a script NPC's script_role_id; none: the instance's character)."""

    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=4000)
    npc: str | None = Field(None, min_length=1, max_length=64)
    k: int = Field(10, ge=1, le=100)


@router.post("/instances/{instance_id}/memories/recall", tags=TAGS)
def recall_memories(api: Api, instance_id: PathId, body: RecallBody) -> dict[str, Any]:
    """Issue 26: only the memories the NPC (or the character) witnessed; an NPC not in the scene → 422 naming it."""
    return api.memories.recall(instance_id, body.query, npc=body.npc, k=body.k)


@router.get("/instances/{instance_id}/consolidation-steps", tags=TAGS)
def consolidation_steps(api: Api, instance_id: PathId) -> list[dict[str, Any]]:
    """The consolidation's steps (issue 26), oldest first, undone ones too."""
    return api.memories.steps(instance_id)


@router.post("/instances/{instance_id}/consolidation-steps/{step_id}/undo", tags=TAGS)
def undo_consolidation_step(api: Api, instance_id: PathId, step_id: PathId) -> dict[str, Any]:
    """Take a step back; a step not of the instance → 404 naming it, nothing changed."""
    return api.memories.undo(instance_id, step_id)


@router.post("/instances/{instance_id}/memories", status_code=status.HTTP_201_CREATED, tags=TAGS)
def add_memory(api: Api, instance_id: PathId, body: MemoryCreate) -> MemoryPublic:
    return api.memories.add(instance_id, body)


@router.post("/instances/{instance_id}/memories/search", tags=TAGS)
def search_memories(api: Api, instance_id: PathId, body: SearchRequest) -> SearchResult:
    return api.memories.search(
        instance_id,
        body.query,
        k=body.k,
        context=body.context,
        turn=body.turn,
        mark_mentioned=body.mark_mentioned,
        all_branches=body.all_branches,
    )


@router.get("/instances/{instance_id}/memories/export", tags=TAGS)
def export_memories(api: Api, instance_id: PathId) -> list[dict[str, Any]]:
    return api.memories.export_json(instance_id)


@router.post("/instances/{instance_id}/memories/import", tags=TAGS)
def import_memories(api: Api, instance_id: PathId, body: ImportBody) -> ImportResult:
    return api.memories.import_(instance_id, body.memories, source="memories")


@router.post("/instances/{instance_id}/memories/maintain", tags=TAGS)
def maintain_memories(api: Api, instance_id: PathId, turn: QueryId = None) -> MaintenanceResult:
    return api.memories.maintain(instance_id, turn)


@router.get("/instances/{instance_id}/memories/{memory_id}", tags=TAGS)
def show_memory(api: Api, instance_id: PathId, memory_id: PathId) -> MemoryDetail:
    return api.memories.show(instance_id, memory_id)


@router.patch("/instances/{instance_id}/memories/{memory_id}", tags=TAGS)
def edit_memory(api: Api, instance_id: PathId, memory_id: PathId, body: MemoryUpdate) -> MemoryPublic:
    return api.memories.edit(instance_id, memory_id, body)


@router.delete("/instances/{instance_id}/memories/{memory_id}", status_code=status.HTTP_204_NO_CONTENT, tags=TAGS)
def delete_memory(api: Api, instance_id: PathId, memory_id: PathId) -> Response:
    api.memories.delete(instance_id, memory_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put("/instances/{instance_id}/memories/{memory_id}/pin", tags=TAGS)
def pin_memory(api: Api, instance_id: PathId, memory_id: PathId) -> MemoryPublic:
    return api.memories.pin(instance_id, memory_id, True)


@router.delete("/instances/{instance_id}/memories/{memory_id}/pin", tags=TAGS)
def unpin_memory(api: Api, instance_id: PathId, memory_id: PathId) -> MemoryPublic:
    return api.memories.pin(instance_id, memory_id, False)


@router.get("/instances/{instance_id}/memory-statistics", tags=TAGS)
def memory_statistics(api: Api, instance_id: PathId, all_branches: bool = False) -> MemoryStatistics:
    return api.statistics.memory(instance_id, all_branches=all_branches)


@router.get("/lines/{line_id}/provenance", tags=TAGS)
def line_provenance(api: Api, line_id: PathId) -> Provenance:
    return api.replies.provenance(line_id)
