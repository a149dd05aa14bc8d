"""The memory console's pages (issue 25, first part; seed 001 用户可编辑性, seed 004 记忆可视化界面): the memory
inspector of an instance, "why this reply" for a character's reply, and "try it". Each route is a thin layer over
`personalab.graph.api.PersonaLab` (areas `memories`, `replies`, `dialogue`, `instances`) acting for the page's user;
another user's instance is a 404 page as if it did not exist. Forms post and redirect (they work without
JavaScript); bad input is one message on the page and nothing changes."""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, File, Form, Query, Request, UploadFile
from fastapi.responses import RedirectResponse, Response
from personalab.graph.api import PersonaLab
from personalab.graph.api.schemas.memory import MemoryCreate, MemoryUpdate
from personalab.graph.api.support import parse_json
from personalab.graph.http.guards import PathId
from personalab.graph.web.pages import PREFIX, WebRoute, WebUser, render, web_user
from personalab.graph.web.routes import _read_upload
from personalab.nodes.rules.errors import InvalidInput, NotFound
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

router = APIRouter(prefix=PREFIX, route_class=WebRoute, include_in_schema=False)
User = Annotated[WebUser, Depends(web_user)]
INTEGER_MAX = 2_147_483_647
PAGE_SIZE = 50
COUNT_LIMIT = 2000  # a filtered view counts its matches up to here ("2000+")
LAYERS = ("active", "situational", "event_log", "archive", "record")  # seed 001's layers and the dialogue record
TYPES = (
    "conversation",
    "action",
    "observation",
    "event",
    "emotion",
    "relationship",
    "internal",
    "trait",
    "goal",
)
BULK_ACTIONS = ("pin", "unpin", "delete", "layer")
MAX_IMPORT_BYTES = 20 * 1024 * 1024
Turn = Annotated[int | None, Query(ge=0, le=INTEGER_MAX)]


def _api(user: WebUser) -> PersonaLab:
    return PersonaLab(owner=user.owner)


def _go(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


def _one_line(exc: ValidationError) -> str:
    """A pydantic error as one message naming the field."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first.get("loc", ())) or "input"
    return f"field {field!r}: {first.get('msg', 'invalid')}"


def _base(instance_id: int) -> str:
    return f"{PREFIX}/instances/{instance_id}/memories"


# --- the inspector ------------------------------------------------------------------------------------------------


@router.get("/instances/{instance_id:int}/memories")
def inspector(
    request: Request,
    user: User,
    instance_id: PathId,
    layer: str = "",
    type: str = "",  # noqa: A002 - the query's name
    branch: str = "current",
    scene: str = "",
    turn_from: Turn = None,
    turn_to: Turn = None,
    q: str = "",
    mode: str = "keyword",
    pinned: str = "",
    page: Annotated[int, Query(ge=1, le=INTEGER_MAX)] = 1,
    done: str = "",
) -> Response:
    """Every memory of the instance, one page of `PAGE_SIZE`, newest first, filtered on the server (layer, type,
    branch, scene, turns, text; `mode=semantic`: the turn's own retrieval ranks them for `q`)."""
    api = _api(user)
    instance = api.instances.get(instance_id)
    if branch not in ("current", "all"):
        raise InvalidInput(f"field 'branch': {branch!r} is not current or all")
    if mode not in ("keyword", "semantic"):
        raise InvalidInput(f"field 'mode': {mode!r} is not keyword or semantic")
    if pinned not in ("", "yes", "no"):
        raise InvalidInput(f"field 'pinned': {pinned!r} is not yes or no")
    filters = {
        "layer": layer,
        "type": type,
        "branch": branch,
        "scene": scene,
        "turn_from": "" if turn_from is None else turn_from,
        "turn_to": "" if turn_to is None else turn_to,
        "q": q,
        "mode": mode,
        "pinned": pinned,
    }
    hits = None
    total = 0
    capped = False
    items: list[Any] = []
    if q.strip() and mode == "semantic":
        found = api.memories.search(instance_id, q.strip(), k=PAGE_SIZE, all_branches=branch == "all")
        hits = [hit for hit in found.items if hit.kind == "memory"]
        by_id = {int(hit.id): hit for hit in hits}
        items = [
            m
            for m in (api.memories.get(instance_id, memory_id) for memory_id in by_id)
            # the other filters hold for the ranked ones too
            if (not layer or m.layer == layer)
            and (not type or m.type == type)
            and (not scene or m.location == scene)
            and (turn_from is None or m.turn >= turn_from)
            and (turn_to is None or m.turn <= turn_to)
            and (not pinned or m.pinned == (pinned == "yes"))
        ]
        total = len(items)
        pages = 1
    else:
        listed = api.memories.list(
            instance_id,
            layer=layer or None,
            type=type or None,
            all_branches=branch == "all",
            include_record=True,  # every memory: the dialogue record is what a turn retrieves the told facts from
            turn_from=turn_from,
            turn_to=turn_to,
            scene=scene or None,
            text=q or None,
            pinned=None if not pinned else pinned == "yes",
            offset=(page - 1) * PAGE_SIZE,
            limit=PAGE_SIZE,
            newest_first=True,
            # no index serves a text, scene or turn filter: count the matches only up to COUNT_LIMIT
            count_limit=COUNT_LIMIT if (q or scene or turn_from is not None or turn_to is not None) else None,
        )
        items, total, capped = listed.items, listed.total, listed.total_capped
        if capped:
            total = COUNT_LIMIT
        pages = max(1, -(-total // PAGE_SIZE))
        if capped:
            pages = max(pages, page + (1 if len(items) == PAGE_SIZE else 0))
    query = urlencode({key: value for key, value in filters.items() if value != ""})
    return render(
        request,
        "memory_inspector.html",
        user=user,
        instance=instance,
        items=items,
        hits={int(hit.id): hit for hit in hits} if hits is not None else None,
        total=total,
        capped=capped,
        page_number=page,
        pages=pages,
        filters=filters,
        query=query,
        layers=LAYERS,
        types=TYPES,
        done=done,
    )


@router.post("/instances/{instance_id:int}/memories")
def add_memory(
    user: User,
    instance_id: PathId,
    content: Annotated[str, Form()] = "",
    type: Annotated[str, Form()] = "event",  # noqa: A002 - the form's name
    layer: Annotated[str, Form()] = "active",
    importance: Annotated[str, Form()] = "",
    tags: Annotated[str, Form()] = "",
    pinned: Annotated[str, Form()] = "",
) -> Response:
    if not content.strip():
        raise InvalidInput("field 'content': a memory needs its text")
    try:
        made = MemoryCreate(
            content=content.strip(),
            type=type,
            layer=layer,
            importance=float(importance) if importance.strip() else None,
            tags=[tag.strip() for tag in tags.split(",") if tag.strip()],
            pinned=bool(pinned),
        )
    except ValueError as exc:
        raise InvalidInput(
            _one_line(exc) if isinstance(exc, ValidationError) else f"field 'importance': {exc}"
        ) from None
    memory = _api(user).memories.add(instance_id, made)
    return _go(f"{_base(instance_id)}/{memory.id}?done=added")


@router.get("/instances/{instance_id:int}/memories/export")
def export_memories(user: User, instance_id: PathId) -> Response:
    """Every memory of the instance (all branches, every field) as one JSON array (seed 004 记忆导出和备份)."""
    data = _api(user).memories.export_json(instance_id)
    body = json.dumps(data, ensure_ascii=False, indent=1, default=str).encode("utf-8")
    disposition = f'attachment; filename="instance-{instance_id}-memories.json"'
    return Response(body, media_type="application/json", headers={"Content-Disposition": disposition})


@router.post("/instances/{instance_id:int}/memories/import")
async def import_memories(
    user: User, instance_id: PathId, document: Annotated[UploadFile | None, File()] = None
) -> Response:
    """Memories from a file the export wrote (a JSON array, or JSON Lines): all or nothing."""
    data = await _read_upload(document, MAX_IMPORT_BYTES, "field 'document'")
    if data is None:
        raise InvalidInput("field 'document': choose a memories file (JSON)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("field 'document': not UTF-8 text") from None
    # a JSON array is parsed here; JSON Lines text goes as it is (the API parses it line by line)
    memories: Any = parse_json(text, "field 'document'") if text.lstrip().startswith("[") else text
    done = await run_in_threadpool(_api(user).memories.import_, instance_id, memories, source="document")
    return _go(f"{_base(instance_id)}?done=imported-{done.imported}")


@router.post("/instances/{instance_id:int}/memories/bulk")
async def bulk(request: Request, user: User, instance_id: PathId) -> Response:
    """One action over the selected rows: pin, unpin, delete or move to a layer; only this instance's ids (an id
    of another instance is one message, and nothing changes)."""
    form = await request.form()
    action = str(form.get("action") or "")
    layer = str(form.get("layer") or "") or None
    ids: list[int] = []
    for value in form.getlist("ids"):
        text = str(value).strip()
        if not text.isdigit() or int(text) > INTEGER_MAX:
            raise InvalidInput(f"field 'ids': {text!r} is not a memory id")
        ids.append(int(text))
    if action not in BULK_ACTIONS:
        raise InvalidInput(f"field 'action': {action!r} is not one of {', '.join(BULK_ACTIONS)}")
    changed = await run_in_threadpool(_api(user).memories.bulk, instance_id, ids, action, layer=layer)
    back = str(form.get("back") or "")
    target = back if back.startswith(f"{_base(instance_id)}?") and "//" not in back else _base(instance_id) + "?"
    return _go(f"{target}&done={action}-{len(changed)}")


# --- one memory ---------------------------------------------------------------------------------------------------


@router.get("/instances/{instance_id:int}/memories/{memory_id:int}")
def memory_page(request: Request, user: User, instance_id: PathId, memory_id: PathId, done: str = "") -> Response:
    """One memory: edit form, its earlier versions, where it came from, when it was last used."""
    api = _api(user)
    instance = api.instances.get(instance_id)
    detail = api.memories.show(instance_id, memory_id)
    return render(
        request,
        "memory_detail.html",
        user=user,
        instance=instance,
        detail=detail,
        memory=detail.memory,
        layers=LAYERS,
        types=TYPES,
        done=done,
    )


@router.post("/instances/{instance_id:int}/memories/{memory_id:int}")
def edit_memory(
    user: User,
    instance_id: PathId,
    memory_id: PathId,
    content: Annotated[str, Form()] = "",
    type: Annotated[str, Form()] = "",  # noqa: A002 - the form's name
    layer: Annotated[str, Form()] = "",
    importance: Annotated[str, Form()] = "",
    tags: Annotated[str, Form()] = "",
    notes: Annotated[str, Form()] = "",
) -> Response:
    """Save an edit; the fields as they were are kept as a version. An empty text is refused, nothing changes."""
    content = content.replace("\r\n", "\n")
    if not content.strip():
        raise InvalidInput(f"memory {memory_id}: the text is empty; nothing was changed (delete the memory instead)")
    try:
        changes = MemoryUpdate(
            content=content.strip(),
            type=type or None,
            layer=layer or None,
            importance=float(importance) if importance.strip() else None,
            tags=[tag.strip() for tag in tags.split(",") if tag.strip()],
            notes=notes.replace("\r\n", "\n"),
        )
    except ValueError as exc:
        raise InvalidInput(
            _one_line(exc) if isinstance(exc, ValidationError) else f"field 'importance': {exc}"
        ) from None
    _api(user).memories.edit(instance_id, memory_id, changes)
    return _go(f"{_base(instance_id)}/{memory_id}?done=saved")


@router.post("/instances/{instance_id:int}/memories/{memory_id:int}/pin")
def pin_memory(user: User, instance_id: PathId, memory_id: PathId, back: Annotated[str, Form()] = "") -> Response:
    api = _api(user)
    current = api.memories.get(instance_id, memory_id)
    api.memories.pin(instance_id, memory_id, not current.pinned)
    target = back if back.startswith(f"{_base(instance_id)}") and "//" not in back else _base(instance_id)
    return _go(target)


@router.get("/instances/{instance_id:int}/memories/{memory_id:int}/delete")
def delete_memory_page(request: Request, user: User, instance_id: PathId, memory_id: PathId) -> Response:
    api = _api(user)
    instance = api.instances.get(instance_id)
    memory = api.memories.get(instance_id, memory_id)
    return render(request, "memory_delete.html", user=user, instance=instance, memory=memory)


@router.post("/instances/{instance_id:int}/memories/{memory_id:int}/delete")
def delete_memory(user: User, instance_id: PathId, memory_id: PathId) -> Response:
    _api(user).memories.delete(instance_id, memory_id)
    return _go(f"{_base(instance_id)}?done=deleted-1")


# --- why this reply -----------------------------------------------------------------------------------------------


@router.get("/instances/{instance_id:int}/lines/{line_id:int}/why")
def why(request: Request, user: User, instance_id: PathId, line_id: PathId) -> Response:
    """What the reply's prompt held, from the provenance stored with it (works for old replies, after a
    restart)."""
    api = _api(user)
    instance = api.instances.get(instance_id)
    provenance = api.replies.provenance(line_id)
    if provenance.instance_id != instance_id:
        raise NotFound(f"line {line_id} does not exist in instance {instance_id}")
    return render(
        request,
        "memory_why.html",
        user=user,
        instance=instance,
        provenance=provenance,
        record={**provenance.record, "weights": api.replies.scene_weights(provenance.record.get("scene"))},
        line_id=line_id,
    )


# --- try it -------------------------------------------------------------------------------------------------------


@router.get("/instances/{instance_id:int}/try")
def try_page(request: Request, user: User, instance_id: PathId) -> Response:
    instance = _api(user).instances.get(instance_id)
    return render(request, "memory_try.html", user=user, instance=instance, message="", record=None)


@router.post("/instances/{instance_id:int}/try")
async def try_it(request: Request, user: User, instance_id: PathId, message: Annotated[str, Form()] = "") -> Response:
    """What the turn's retrieval would find and inject for `message` now; no turn is played, nothing changes."""
    api = _api(user)
    instance = await run_in_threadpool(api.instances.get, instance_id)
    record = await run_in_threadpool(api.memories.preview, instance_id, message)
    return render(request, "memory_try.html", user=user, instance=instance, message=message, record=record)
