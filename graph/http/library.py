"""Characters, backgrounds and instances over HTTP (seed 002 角色/背景/会话实例, seed 004 导出): thin over
the API's characters, backgrounds and instances (`Api`, graph/http/deps.py). JSON bodies are the API's pydantic models; an avatar is sent as base64 in
`avatar_base64` or as the raw image (`PUT /characters/{id}/avatar`). Routes are plain functions: FastAPI runs them
in its thread pool, so the blocking database and Chroma calls never stall the server's event loop. Every route acts
for the request's user (`Api` is bound to it; None without auth): another user's id is a 404 naming it.

| method and path | what it does |
| --- | --- |
| `GET /characters`, `POST /characters` | list, create |
| `GET / PATCH / DELETE /characters/{id}` (`?cascade=true`) | show, edit, delete |
| `GET / PUT / DELETE /characters/{id}/avatar` | the avatar image: read, upload (raw bytes), remove |
| `GET /backgrounds`, `POST /backgrounds` | list, create |
| `GET / PATCH / DELETE /backgrounds/{id}` (`?cascade=true`) | show, edit (`apply_to_instances`), delete |
| `GET /instances` (`?character_id=&background_id=`), `POST /instances` | list, create |
| `GET / PATCH / DELETE /instances/{id}` | show, rename (`{"title": …}`), delete with everything of it |
| `PUT /instances/{id}/language` | the prompt's scaffolding language (`{"language": "en"}`, issue 28) |
| `GET /instances/{id}/export`, `POST /instances/import` | the instance as one JSON document, and back |
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response, status
from personalab.graph.api.library import avatar_from_base64
from personalab.graph.api.schemas import library as schemas
from personalab.graph.http.deps import Api
from personalab.graph.http.guards import (
    BODY_LIMIT_KEY,
    MAX_CHARACTER_BODY_BYTES,
    LimitedBodyRoute,
    PathId,
    QueryId,
)
from personalab.nodes.rules.errors import InvalidInput
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema
from starlette.concurrency import run_in_threadpool

router = APIRouter(route_class=LimitedBodyRoute)


class CharacterBody(schemas.CharacterInput):
    """A new character; the avatar as base64 (`avatar_base64`)."""

    avatar: SkipJsonSchema[bytes | None] = Field(default=None, exclude=True)
    avatar_base64: str | None = None


class CharacterEditBody(schemas.CharacterEdit):
    """Changes to a character; a new avatar as base64 (`avatar_base64`), `remove_avatar` to drop it."""

    avatar: SkipJsonSchema[bytes | None] = Field(default=None, exclude=True)
    avatar_base64: str | None = None


class RenameBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str  # checked by the API (`InstanceTitle`), naming the field


def _with_avatar(body: CharacterBody | CharacterEditBody) -> dict[str, Any]:
    data = body.model_dump(exclude_unset=True, exclude={"avatar", "avatar_base64"})
    if body.avatar_base64 is not None:
        data["avatar"] = avatar_from_base64(body.avatar_base64)
    return data


# ---- characters ----------------------------------------------------------------------------------------------


@router.get("/characters", tags=["characters"])
def list_characters(api: Api) -> list[schemas.Character]:
    return api.characters.list()


@router.post(
    "/characters",
    status_code=status.HTTP_201_CREATED,
    tags=["characters"],
    openapi_extra={BODY_LIMIT_KEY: MAX_CHARACTER_BODY_BYTES},
)
def create_character(api: Api, body: CharacterBody) -> schemas.Character:
    return api.characters.create(_with_avatar(body))


@router.get("/characters/{character_id}", tags=["characters"])
def get_character(api: Api, character_id: PathId) -> schemas.Character:
    return api.characters.get(character_id)


@router.patch(
    "/characters/{character_id}", tags=["characters"], openapi_extra={BODY_LIMIT_KEY: MAX_CHARACTER_BODY_BYTES}
)
def edit_character(api: Api, character_id: PathId, body: CharacterEditBody) -> schemas.Character:
    return api.characters.edit(character_id, _with_avatar(body))


@router.delete("/characters/{character_id}", tags=["characters"])
def delete_character(api: Api, character_id: PathId, cascade: bool = False) -> schemas.Deleted:
    return api.characters.delete(character_id, cascade=cascade)


@router.get(
    "/characters/{character_id}/avatar",
    tags=["characters"],
    response_class=Response,
    responses={200: {"content": {"image/*": {}}, "description": "the avatar image"}},
)
def get_avatar(api: Api, character_id: PathId) -> Response:
    data, mime = api.characters.avatar(character_id)
    return Response(content=data, media_type=mime)


@router.put("/characters/{character_id}/avatar", tags=["characters"])
async def put_avatar(api: Api, character_id: PathId, request: Request) -> schemas.Character:
    """Upload the avatar as the request's raw body (any image type Pillow reads), at most `MAX_AVATAR_BYTES`."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():  # read no more than the limit: a huge body is refused, not buffered
        size += len(chunk)
        if size > schemas.MAX_AVATAR_BYTES:
            raise InvalidInput(f"avatar: over the limit of {schemas.MAX_AVATAR_BYTES} bytes")
        chunks.append(chunk)
    return await run_in_threadpool(api.characters.edit, character_id, {"avatar": b"".join(chunks)})


@router.delete("/characters/{character_id}/avatar", tags=["characters"])
def delete_avatar(api: Api, character_id: PathId) -> schemas.Character:
    return api.characters.edit(character_id, {"remove_avatar": True})


# ---- backgrounds ---------------------------------------------------------------------------------------------


@router.get("/backgrounds", tags=["backgrounds"])
def list_backgrounds(api: Api) -> list[schemas.BackgroundOut]:
    return api.backgrounds.list()


@router.post("/backgrounds", status_code=status.HTTP_201_CREATED, tags=["backgrounds"])
def create_background(api: Api, body: schemas.BackgroundInput) -> schemas.BackgroundOut:
    return api.backgrounds.create(body)


@router.get("/backgrounds/{background_id}", tags=["backgrounds"])
def get_background(api: Api, background_id: PathId) -> schemas.BackgroundOut:
    return api.backgrounds.get(background_id)


@router.patch("/backgrounds/{background_id}", tags=["backgrounds"])
def edit_background(api: Api, background_id: PathId, body: schemas.BackgroundEdit) -> schemas.BackgroundOut:
    return api.backgrounds.edit(background_id, body)


@router.delete("/backgrounds/{background_id}", tags=["backgrounds"])
def delete_background(api: Api, background_id: PathId, cascade: bool = False) -> schemas.Deleted:
    return api.backgrounds.delete(background_id, cascade=cascade)


# ---- instances -----------------------------------------------------------------------------------------------


@router.get("/instances", tags=["instances"])
def list_instances(api: Api, character_id: QueryId = None, background_id: QueryId = None) -> list[schemas.Instance]:
    return api.instances.list(character_id=character_id, background_id=background_id)


@router.post("/instances", status_code=status.HTTP_201_CREATED, tags=["instances"])
def create_instance(api: Api, body: schemas.InstanceInput) -> schemas.Instance:
    return api.instances.create(body)


@router.post(
    "/instances/import",
    status_code=status.HTTP_201_CREATED,
    tags=["instances"],
    openapi_extra={BODY_LIMIT_KEY: schemas.MAX_EXPORT_BYTES},
)
def import_instance(api: Api, document: dict[str, Any]) -> schemas.ImportResult:
    """A new instance from a document of `GET /instances/{id}/export`."""
    return api.instances.import_data(document)


@router.get("/instances/{instance_id}", tags=["instances"])
def get_instance(api: Api, instance_id: PathId) -> schemas.Instance:
    return api.instances.get(instance_id)


@router.patch("/instances/{instance_id}", tags=["instances"])
def rename_instance(api: Api, instance_id: PathId, body: RenameBody) -> schemas.Instance:
    return api.instances.rename(instance_id, body.title)


class LanguageBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    language: str  # checked by the API, naming the field and the supported languages


@router.put("/instances/{instance_id}/language", tags=["instances"])
def set_instance_language(api: Api, instance_id: PathId, body: LanguageBody) -> schemas.Instance:
    """The prompt scaffolding's language of the instance (issue 28: zh, en), from its next turn on."""
    return api.instances.set_language(instance_id, body.language)


@router.delete("/instances/{instance_id}", tags=["instances"])
def delete_instance(api: Api, instance_id: PathId) -> schemas.Deleted:
    return api.instances.delete(instance_id)


@router.get("/instances/{instance_id}/export", tags=["instances"])
def export_instance(api: Api, instance_id: PathId) -> dict[str, Any]:
    """The instance as one JSON document (seed 004 记忆导出和备份)."""
    return api.instances.export_data(instance_id)
