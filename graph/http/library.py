"""Characters, backgrounds and instances over HTTP (seed 002 角色/背景/会话实例, seed 004 导出): thin over
personalab.graph.api.library. JSON bodies are the API's pydantic models; an avatar is sent as base64 in
`avatar_base64` or as the raw image (`PUT /characters/{id}/avatar`). Routes are plain functions: FastAPI runs them
in its thread pool, so the blocking database and Chroma calls never stall the server's event loop. Every route acts
for the request's user (`Owner`, graph/http/users.py; None without auth): another user's id is a 404 naming it.

| method and path | what it does |
| --- | --- |
| `GET /characters`, `POST /characters` | list, create |
| `GET / PATCH / DELETE /characters/{id}` (`?cascade=true`) | show, edit, delete |
| `GET / PUT / DELETE /characters/{id}/avatar` | the avatar image: read, upload (raw bytes), remove |
| `GET /backgrounds`, `POST /backgrounds` | list, create |
| `GET / PATCH / DELETE /backgrounds/{id}` (`?cascade=true`) | show, edit (`apply_to_instances`), delete |
| `GET /instances` (`?character_id=&background_id=`), `POST /instances` | list, create |
| `GET / PATCH / DELETE /instances/{id}` | show, rename (`{"title": …}`), delete with everything of it |
| `GET /instances/{id}/export`, `POST /instances/import` | the instance as one JSON document, and back |
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response, status
from personalab.graph.api import library as api
from personalab.graph.http.guards import (
    BODY_LIMIT_KEY,
    MAX_CHARACTER_BODY_BYTES,
    LimitedBodyRoute,
    PathId,
    QueryId,
)
from personalab.graph.http.users import Owner
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InvalidInput
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema
from starlette.concurrency import run_in_threadpool

router = APIRouter(route_class=LimitedBodyRoute)


def _url() -> str | None:
    return Context().database_url


class CharacterBody(api.CharacterInput):
    """A new character; the avatar as base64 (`avatar_base64`)."""

    avatar: SkipJsonSchema[bytes | None] = Field(default=None, exclude=True)
    avatar_base64: str | None = None


class CharacterEditBody(api.CharacterEdit):
    """Changes to a character; a new avatar as base64 (`avatar_base64`), `remove_avatar` to drop it."""

    avatar: SkipJsonSchema[bytes | None] = Field(default=None, exclude=True)
    avatar_base64: str | None = None


class RenameBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str


def _with_avatar(body: CharacterBody | CharacterEditBody) -> dict[str, Any]:
    data = body.model_dump(exclude_unset=True, exclude={"avatar", "avatar_base64"})
    if body.avatar_base64 is not None:
        data["avatar"] = api.avatar_from_base64(body.avatar_base64)
    return data


# ---- characters ----------------------------------------------------------------------------------------------


@router.get("/characters", tags=["characters"])
def list_characters(owner: Owner) -> list[api.Character]:
    return api.list_characters(owner=owner, database_url=_url())


@router.post(
    "/characters",
    status_code=status.HTTP_201_CREATED,
    tags=["characters"],
    openapi_extra={BODY_LIMIT_KEY: MAX_CHARACTER_BODY_BYTES},
)
def create_character(owner: Owner, body: CharacterBody) -> api.Character:
    return api.create_character(_with_avatar(body), owner=owner, database_url=_url())


@router.get("/characters/{character_id}", tags=["characters"])
def get_character(owner: Owner, character_id: PathId) -> api.Character:
    return api.get_character(character_id, owner=owner, database_url=_url())


@router.patch(
    "/characters/{character_id}", tags=["characters"], openapi_extra={BODY_LIMIT_KEY: MAX_CHARACTER_BODY_BYTES}
)
def edit_character(owner: Owner, character_id: PathId, body: CharacterEditBody) -> api.Character:
    return api.edit_character(character_id, _with_avatar(body), owner=owner, database_url=_url())


@router.delete("/characters/{character_id}", tags=["characters"])
def delete_character(owner: Owner, character_id: PathId, cascade: bool = False) -> api.Deleted:
    return api.delete_character(character_id, cascade=cascade, owner=owner, database_url=_url())


@router.get(
    "/characters/{character_id}/avatar",
    tags=["characters"],
    response_class=Response,
    responses={200: {"content": {"image/*": {}}, "description": "the avatar image"}},
)
def get_avatar(owner: Owner, character_id: PathId) -> Response:
    data, mime = api.character_avatar(character_id, owner=owner, database_url=_url())
    return Response(content=data, media_type=mime)


@router.put("/characters/{character_id}/avatar", tags=["characters"])
async def put_avatar(owner: Owner, character_id: PathId, request: Request) -> api.Character:
    """Upload the avatar as the request's raw body (any image type Pillow reads), at most `MAX_AVATAR_BYTES`."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():  # read no more than the limit: a huge body is refused, not buffered
        size += len(chunk)
        if size > api.MAX_AVATAR_BYTES:
            raise InvalidInput(f"avatar: over the limit of {api.MAX_AVATAR_BYTES} bytes")
        chunks.append(chunk)
    return await run_in_threadpool(
        api.edit_character, character_id, {"avatar": b"".join(chunks)}, owner=owner, database_url=_url()
    )


@router.delete("/characters/{character_id}/avatar", tags=["characters"])
def delete_avatar(owner: Owner, character_id: PathId) -> api.Character:
    return api.edit_character(character_id, {"remove_avatar": True}, owner=owner, database_url=_url())


# ---- backgrounds ---------------------------------------------------------------------------------------------


@router.get("/backgrounds", tags=["backgrounds"])
def list_backgrounds(owner: Owner) -> list[api.BackgroundOut]:
    return api.list_backgrounds(owner=owner, database_url=_url())


@router.post("/backgrounds", status_code=status.HTTP_201_CREATED, tags=["backgrounds"])
def create_background(owner: Owner, body: api.BackgroundInput) -> api.BackgroundOut:
    return api.create_background(body, owner=owner, database_url=_url())


@router.get("/backgrounds/{background_id}", tags=["backgrounds"])
def get_background(owner: Owner, background_id: PathId) -> api.BackgroundOut:
    return api.get_background(background_id, owner=owner, database_url=_url())


@router.patch("/backgrounds/{background_id}", tags=["backgrounds"])
def edit_background(owner: Owner, background_id: PathId, body: api.BackgroundEdit) -> api.BackgroundOut:
    return api.edit_background(background_id, body, owner=owner, database_url=_url())


@router.delete("/backgrounds/{background_id}", tags=["backgrounds"])
def delete_background(owner: Owner, background_id: PathId, cascade: bool = False) -> api.Deleted:
    return api.delete_background(background_id, cascade=cascade, owner=owner, database_url=_url())


# ---- instances -----------------------------------------------------------------------------------------------


@router.get("/instances", tags=["instances"])
def list_instances(owner: Owner, character_id: QueryId = None, background_id: QueryId = None) -> list[api.Instance]:
    return api.list_instances(character_id=character_id, background_id=background_id, owner=owner, database_url=_url())


@router.post("/instances", status_code=status.HTTP_201_CREATED, tags=["instances"])
def create_instance(owner: Owner, body: api.InstanceInput) -> api.Instance:
    return api.create_instance(body, owner=owner, database_url=_url())


@router.post(
    "/instances/import",
    status_code=status.HTTP_201_CREATED,
    tags=["instances"],
    openapi_extra={BODY_LIMIT_KEY: api.MAX_EXPORT_BYTES},
)
def import_instance(owner: Owner, document: dict[str, Any]) -> api.ImportResult:
    """A new instance from a document of `GET /instances/{id}/export`."""
    return api.import_instance_data(document, owner=owner, database_url=_url())


@router.get("/instances/{instance_id}", tags=["instances"])
def get_instance(owner: Owner, instance_id: PathId) -> api.Instance:
    return api.get_instance(instance_id, owner=owner, database_url=_url())


@router.patch("/instances/{instance_id}", tags=["instances"])
def rename_instance(owner: Owner, instance_id: PathId, body: RenameBody) -> api.Instance:
    return api.rename_instance(instance_id, body.title, owner=owner, database_url=_url())


@router.delete("/instances/{instance_id}", tags=["instances"])
def delete_instance(owner: Owner, instance_id: PathId) -> api.Deleted:
    return api.delete_instance(instance_id, owner=owner, database_url=_url())


@router.get("/instances/{instance_id}/export", tags=["instances"])
def export_instance(owner: Owner, instance_id: PathId) -> dict[str, Any]:
    """The instance as one JSON document (seed 004 记忆导出和备份)."""
    return api.export_instance_data(instance_id, owner=owner, database_url=_url())
