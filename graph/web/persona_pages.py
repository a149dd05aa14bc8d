"""The web app's persona pages (issue 28, SillyTavern's personas): `/app/personas` lists the user's personas,
creates, edits and deletes them; `/app/instances/{id}/persona` (a form of the chat page) changes the persona an
instance plays with. Everything goes through the façade `PersonaLab` bound to the page's user: another user's
persona is a 404 page naming it, like one that does not exist. Forms post and redirect (no JavaScript needed)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import RedirectResponse, Response
from personalab.graph.api import PersonaLab
from personalab.graph.api.schemas.library import MAX_AVATAR_BYTES
from personalab.graph.http.guards import PathId
from personalab.graph.web.pages import PREFIX, WebRoute, WebUser, render, web_user
from personalab.graph.web.routes import _read_upload
from personalab.nodes.rules.errors import InvalidInput
from starlette.concurrency import run_in_threadpool

router = APIRouter(prefix=PREFIX, route_class=WebRoute, include_in_schema=False)
User = Annotated[WebUser, Depends(web_user)]


def _go(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


async def _avatar(upload: UploadFile | None) -> bytes | None:
    """The uploaded avatar's bytes, at most `MAX_AVATAR_BYTES` (the character pages' upload reading)."""
    return await _read_upload(upload, MAX_AVATAR_BYTES, "avatar")


async def _fields(request: Request, upload: UploadFile | None, *, new: bool) -> dict[str, Any]:
    form = await request.form()
    name, description = form.get("name"), form.get("description")
    data: dict[str, Any] = {
        "name": name if isinstance(name, str) else "",
        "description": (description if isinstance(description, str) else "").replace("\r\n", "\n"),
    }
    image = await _avatar(upload)
    if image is not None:
        data["avatar"] = image
    elif form.get("remove_avatar") and not new:
        data["remove_avatar"] = True
    return data


@router.get("/personas")
def personas_page(request: Request, user: User) -> Response:
    return render(request, "personas.html", user=user, personas=PersonaLab(owner=user.owner).personas.list())


@router.get("/personas/new")
def new_persona_page(request: Request, user: User) -> Response:
    return render(request, "persona_form.html", user=user, persona=None)


@router.post("/personas")
async def create_persona(request: Request, user: User, avatar: Annotated[UploadFile | None, File()] = None) -> Response:
    data = await _fields(request, avatar, new=True)
    made = await run_in_threadpool(PersonaLab(owner=user.owner).personas.create, data)
    return _go(f"{PREFIX}/personas#persona-{made.id}")


@router.get("/personas/{persona_id:int}/edit")
def edit_persona_page(request: Request, user: User, persona_id: PathId) -> Response:
    item = PersonaLab(owner=user.owner).personas.get(persona_id)
    return render(request, "persona_form.html", user=user, persona=item)


@router.post("/personas/{persona_id:int}")
async def edit_persona(
    request: Request, user: User, persona_id: PathId, avatar: Annotated[UploadFile | None, File()] = None
) -> Response:
    data = await _fields(request, avatar, new=False)
    await run_in_threadpool(PersonaLab(owner=user.owner).personas.edit, persona_id, data)
    return _go(f"{PREFIX}/personas#persona-{persona_id}")


@router.get("/personas/{persona_id:int}/avatar")
def persona_avatar(user: User, persona_id: PathId) -> Response:
    data, mime = PersonaLab(owner=user.owner).personas.avatar(persona_id)
    # the stored type was checked from the bytes at upload (library.check_avatar); nosniff keeps it an image
    return Response(data, media_type=mime, headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"})


@router.get("/personas/{persona_id:int}/delete")
def delete_persona_page(request: Request, user: User, persona_id: PathId) -> Response:
    api = PersonaLab(owner=user.owner)
    item = api.personas.get(persona_id)
    uses = [instance for instance in api.instances.list() if instance.id in item.instances]
    return render(request, "persona_delete.html", user=user, persona=item, uses=uses)


@router.post("/personas/{persona_id:int}/delete")
def delete_persona(user: User, persona_id: PathId) -> Response:
    PersonaLab(owner=user.owner).personas.delete(persona_id)
    return _go(f"{PREFIX}/personas")


@router.post("/instances/{instance_id:int}/persona")
def change_persona(user: User, instance_id: PathId, persona_id: Annotated[str, Form()] = "") -> Response:
    """The chat page's persona select: "" plays with none."""
    chosen = persona_id.strip()
    if chosen and not chosen.isdigit():
        raise InvalidInput(f"persona_id: {chosen[:40]!r} is not a persona id")
    PersonaLab(owner=user.owner).personas.use(instance_id, int(chosen) if chosen else None)
    return _go(f"{PREFIX}/instances/{instance_id}")
