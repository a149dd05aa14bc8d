"""User personas over HTTP (issue 28, SillyTavern's personas): thin over `PersonaLab(...).personas` (`Api`,
graph/http/deps.py), acting for the request's user: another user's persona is a 404 naming it.

| method and path | what it does |
| --- | --- |
| `GET /personas`, `POST /personas` | list, create (`avatar_base64` for the avatar) |
| `GET / PATCH / DELETE /personas/{id}` | show, edit (`remove_avatar`), delete |
| `GET / DELETE /personas/{id}/avatar` | the avatar image: read, remove |
| `GET / PUT /instances/{id}/persona` | the persona an instance plays with (`{"persona_id": N}`, null: none) |
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response, status
from personalab.graph.api.library import avatar_from_base64
from personalab.graph.api.schemas import library as library_schemas
from personalab.graph.api.schemas import personas as schemas
from personalab.graph.http.deps import Api
from personalab.graph.http.guards import BODY_LIMIT_KEY, MAX_CHARACTER_BODY_BYTES, LimitedBodyRoute, PathId
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

router = APIRouter(route_class=LimitedBodyRoute)


class PersonaBody(schemas.PersonaInput):
    """A new persona; the avatar as base64 (`avatar_base64`)."""

    avatar: SkipJsonSchema[bytes | None] = Field(default=None, exclude=True)
    avatar_base64: str | None = None


class PersonaEditBody(schemas.PersonaEdit):
    """Changes to a persona; a new avatar as base64 (`avatar_base64`), `remove_avatar` to drop it."""

    avatar: SkipJsonSchema[bytes | None] = Field(default=None, exclude=True)
    avatar_base64: str | None = None


class PersonaChoiceBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    persona_id: Any = None  # checked by the API (`PersonaChoice`), naming the field


def _with_avatar(body: PersonaBody | PersonaEditBody) -> dict[str, Any]:
    data = body.model_dump(exclude_unset=True, exclude={"avatar", "avatar_base64"})
    if body.avatar_base64 is not None:
        data["avatar"] = avatar_from_base64(body.avatar_base64)
    return data


@router.get("/personas", tags=["personas"])
def list_personas(api: Api) -> list[schemas.PersonaOut]:
    return api.personas.list()


@router.post(
    "/personas",
    status_code=status.HTTP_201_CREATED,
    tags=["personas"],
    openapi_extra={BODY_LIMIT_KEY: MAX_CHARACTER_BODY_BYTES},
)
def create_persona(api: Api, body: PersonaBody) -> schemas.PersonaOut:
    return api.personas.create(_with_avatar(body))


@router.get("/personas/{persona_id}", tags=["personas"])
def get_persona(api: Api, persona_id: PathId) -> schemas.PersonaOut:
    return api.personas.get(persona_id)


@router.patch("/personas/{persona_id}", tags=["personas"], openapi_extra={BODY_LIMIT_KEY: MAX_CHARACTER_BODY_BYTES})
def edit_persona(api: Api, persona_id: PathId, body: PersonaEditBody) -> schemas.PersonaOut:
    return api.personas.edit(persona_id, _with_avatar(body))


@router.delete("/personas/{persona_id}", tags=["personas"])
def delete_persona(api: Api, persona_id: PathId) -> schemas.PersonaDeleted:
    return api.personas.delete(persona_id)


@router.get(
    "/personas/{persona_id}/avatar",
    tags=["personas"],
    response_class=Response,
    responses={200: {"content": {"image/*": {}}, "description": "the avatar image"}},
)
def get_persona_avatar(api: Api, persona_id: PathId) -> Response:
    data, mime = api.personas.avatar(persona_id)
    return Response(content=data, media_type=mime)


@router.delete("/personas/{persona_id}/avatar", tags=["personas"])
def delete_persona_avatar(api: Api, persona_id: PathId) -> schemas.PersonaOut:
    return api.personas.edit(persona_id, {"remove_avatar": True})


@router.get("/instances/{instance_id}/persona", tags=["personas"])
def get_instance_persona(api: Api, instance_id: PathId) -> schemas.PersonaOut | None:
    return api.personas.of_instance(instance_id)


@router.put("/instances/{instance_id}/persona", tags=["personas"])
def put_instance_persona(api: Api, instance_id: PathId, body: PersonaChoiceBody) -> library_schemas.Instance:
    return api.personas.use(instance_id, body.persona_id)
