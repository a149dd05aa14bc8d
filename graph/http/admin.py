"""Administration over HTTP (issue 23): thin over `api.admin`. The server operator's only: with auth on, a
signed-in user gets 403 naming the operation; without auth (a local server) the caller is the operator, as on the
CLI (`personalab instance locks`, `doctor`, `db`).

| method and path | what it does |
| --- | --- |
| `GET /admin/locks` | every held turn lock: instance, holder (host:pid), since, until, expired |
| `DELETE /admin/locks/{instance_id}` | free a stuck turn lock (its holder died) |
| `GET /admin/doctor` (`?repair=true`) | the stores' health; repaired on request |
| `GET /admin/migrations` | the database's revision, the newest, whether it is up to date |
| `POST /admin/migrations/upgrade` | run the migrations the database lacks |
| `GET /admin/global/export` | the global knowledge and world book (entries, settings) as one file (issue 27) |
| `POST /admin/global/import` | add such a file's entries and settings to the global scope, all or nothing |
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from personalab.graph.api.worldbook import MAX_IMPORT_BYTES, parse_json
from personalab.graph.http.deps import Api
from personalab.graph.http.guards import LimitedBodyRoute, PathId
from personalab.graph.http.worldbook import _body
from personalab.nodes.rules.errors import InvalidInput
from pydantic import StrictBool
from starlette.concurrency import run_in_threadpool

router = APIRouter(route_class=LimitedBodyRoute, tags=["admin"])


@router.get("/admin/locks")
def list_locks(api: Api) -> list[dict[str, Any]]:
    return api.admin.locks()


@router.delete("/admin/locks/{instance_id}")
def release_lock(api: Api, instance_id: PathId) -> dict[str, Any]:
    return api.admin.release_lock(instance_id)


@router.get("/admin/doctor")
def doctor(api: Api, repair: StrictBool = False) -> dict[str, Any]:
    return api.admin.doctor(repair=repair)


@router.get("/admin/migrations")
def migrations(api: Api) -> dict[str, Any]:
    return api.admin.migration_state()


@router.post("/admin/migrations/upgrade")
def upgrade(api: Api) -> dict[str, Any]:
    return api.admin.upgrade()


@router.get("/admin/global/export")
def export_global(api: Api) -> dict[str, Any]:
    return api.admin.export_global()


@router.post("/admin/global/import")
async def import_global(api: Api, request: Request) -> dict[str, Any]:
    raw = await _body(request, MAX_IMPORT_BYTES, "the global export")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInput("the global export is not UTF-8 JSON text") from None

    def run() -> dict[str, Any]:
        return api.admin.import_global(parse_json(text, "the global export"))

    return await run_in_threadpool(run)
