"""Cards, the world book and the knowledge library over HTTP (issues 15, 23): thin over personalab.graph.api
(cards, `api.worldbook`, knowledge). Scope, where it applies: `?character_id=` (a character's), `?instance_id=`
(an instance's), neither (global). Uploads are the request's raw body, read up to the import limit (20 MB) and
refused past it without buffering the rest. Errors: InvalidInput → 422 naming the field, an unknown id → 404
(graph/http/errors.py). With auth on (graph/http/users.py) a user names a scope they may use: their own instance,
their own character (or, to read, a shared one); another user's id is a 404 naming it, and the global scope (no id)
is the operator's: 422.

| method and path | what it does |
| --- | --- |
| `POST /cards/import` (`?name=`, `?copy=true`) | a card file (PNG, V1/V2/V3 JSON) as the body → a new character and its world book |
| `GET /characters/{id}/card` (`?format=png\\|v2\\|v3`) | the character as a card file |
| `POST /worldbook/import` | a world-book file (PersonaLab, SillyTavern world info, a card's lorebook) as the body |
| `GET /worldbook/export` (`?format=personalab\\|sillytavern`) | the scope's entries as a file |
| `GET / POST /worldbook/entries` | list, add one entry |
| `GET / PATCH / DELETE /worldbook/entries/{id}` | show, edit (any field; `enabled` false disables), delete |
| `POST /worldbook/reorder` | `{"entries": [{"id": 3, "order": 200}, ...]}`: order values, all or nothing |
| `GET / PUT /worldbook/settings` | the scope's settings (set and in effect); PUT `{field: value or null, "clear": bool}` |
| `GET /knowledge` (`?visible=&tag=`), `POST /knowledge` | list, add |
| `GET / PATCH / DELETE /knowledge/{id}` | show, edit (tag, content, importance, keywords, enabled), delete |
| `POST /knowledge/{id}/tags` | `{"add": [...], "remove": [...]}` |
| `POST /knowledge/reorder` | `{"entries": [{"id": 3, "order": 2}, ...]}`: order values (lower first), all or nothing |
| `POST /knowledge/{id}/move` | `{"direction": "up" or "down"}`: one place in its scope; the scope's entries |
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request, Response, status
from personalab.graph.api import cards as cards_api
from personalab.graph.api.schemas.worldbook import EntryCreate, EntryUpdate, ReorderRequest
from personalab.graph.api.worldbook import MAX_IMPORT_BYTES, bad_character, parse_json
from personalab.graph.http.deps import Api
from personalab.graph.http.guards import LimitedBodyRoute, PathId, QueryId
from personalab.nodes.rules.errors import InvalidInput
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from starlette.concurrency import run_in_threadpool

router = APIRouter(route_class=LimitedBodyRoute)


def _check(api_: Api, character_id: int | None, instance_id: int | None, change: bool) -> None:
    """The scope is one the signed-in user may read (or `change`): graph/api/caller.Caller.check_scope."""
    api_.caller.check_scope(character_id, instance_id, change=change)


async def _body(request: Request, limit: int, what: str) -> bytes:
    """The request's raw body, at most `limit` bytes: a larger one is refused without being buffered."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise InvalidInput(f"{what}: over the import limit of {limit} bytes")
        chunks.append(chunk)
    if not size:
        raise InvalidInput(f"{what}: the request body is empty")
    return b"".join(chunks)


# ---- cards ---------------------------------------------------------------------------------------------------


@router.post("/cards/import", status_code=status.HTTP_201_CREATED, tags=["cards"])
async def import_card(
    api_: Api, request: Request, name: str = "the card", copy: bool = False
) -> cards_api.CardImported:
    """Upload a card file as the body: the new character, its world book, and every field without effect here.
    The same card again answers its character with `reused` true (issue 28) unless `?copy=true`."""
    data = await _body(request, cards_api.MAX_CARD_BYTES, name)
    return await run_in_threadpool(api_.cards.import_bytes, data, name, copy=copy)


@router.get(
    "/characters/{character_id}/card",
    tags=["cards"],
    response_class=Response,
    responses={200: {"content": {"image/png": {}, "application/json": {}}, "description": "the card file"}},
)
def export_card(api_: Api, character_id: PathId, format: str = "png") -> Response:  # noqa: A002 - the query's name
    data, media_type = cards_api.export_card_bytes(
        character_id, format, owner=api_.owner, database_url=api_.database_url
    )
    return Response(content=data, media_type=media_type)


# ---- world book ----------------------------------------------------------------------------------------------


@router.post("/worldbook/import", tags=["worldbook"])
async def import_book(
    api_: Api, request: Request, character_id: QueryId = None, instance_id: QueryId = None
) -> dict[str, Any]:
    """Import a world-book file (the body, JSON) into the scope, all or nothing; the import report."""
    await run_in_threadpool(_check, api_, character_id, instance_id, True)
    raw = await _body(request, MAX_IMPORT_BYTES, "the world-book file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInput("the world-book file is not UTF-8 JSON text") from None

    def run() -> dict[str, Any]:
        data = parse_json(text, "the world-book file")
        return api_.worldbook.import_data(data, character_id=character_id, instance_id=instance_id)

    return await run_in_threadpool(run)


@router.get("/worldbook/export", tags=["worldbook"])
def export_book(
    api_: Api,
    format: str = "personalab",  # noqa: A002 - the query's name
    character_id: QueryId = None,
    instance_id: QueryId = None,
) -> dict[str, Any]:
    """The scope's entries as a PersonaLab export or a SillyTavern world-info file."""
    return api_.worldbook.export(format, character_id=character_id, instance_id=instance_id)


# ---- single world-book entries (issue 23) -------------------------------------------------------------------


@router.get("/worldbook/entries", tags=["worldbook"])
def list_entries(
    api_: Api, character_id: QueryId = None, instance_id: QueryId = None, visible: StrictBool = False
) -> list[dict[str, Any]]:
    """The scope's entries (`visible`: all it sees, global + character + own), oldest first."""
    return api_.worldbook.list(character_id=character_id, instance_id=instance_id, visible=visible)


@router.post("/worldbook/entries", status_code=status.HTTP_201_CREATED, tags=["worldbook"])
def add_entry(
    api_: Api, body: EntryCreate, character_id: QueryId = None, instance_id: QueryId = None
) -> dict[str, Any]:
    fields = body.model_dump(exclude_unset=True)
    content = fields.pop("content")
    return api_.worldbook.add(content, character_id=character_id, instance_id=instance_id, **fields)


@router.get("/worldbook/entries/{entry_id}", tags=["worldbook"])
def get_entry(api_: Api, entry_id: PathId) -> dict[str, Any]:
    return api_.worldbook.get(entry_id)


@router.patch("/worldbook/entries/{entry_id}", tags=["worldbook"])
def edit_entry(api_: Api, entry_id: PathId, body: EntryUpdate) -> dict[str, Any]:
    """Change the fields the body names (`{"enabled": false}` disables the entry); validated as the whole entry."""
    return api_.worldbook.edit(entry_id, **body.model_dump(exclude_unset=True))


@router.delete("/worldbook/entries/{entry_id}", tags=["worldbook"])
def delete_entry(api_: Api, entry_id: PathId) -> dict[str, Any]:
    return api_.worldbook.delete(entry_id)


@router.post("/worldbook/reorder", tags=["worldbook"])
def reorder_entries(api_: Api, body: ReorderRequest) -> list[dict[str, Any]]:
    """Order values (priority, higher first) for several entries at once, all or nothing."""
    return api_.worldbook.reorder({item.id: item.order for item in body.entries})


class SettingsBody(BaseModel):
    """Settings to set (a value) or unset (null); `clear` unsets all of the scope's first."""

    model_config = ConfigDict(extra="forbid")
    budget_share: float | None = Field(default=None, description="share of the context window, (0, 1]")
    max_tokens: int | None = Field(default=None, description="token cap of the world book")
    scan_depth: int | None = Field(default=None, description="recent lines scanned for keys")
    recursive: StrictBool | None = None
    max_recursion_steps: int | None = None
    case_sensitive: StrictBool | None = None
    match_whole_words: StrictBool | None = None
    clear: StrictBool = False


@router.get("/worldbook/settings", tags=["worldbook"])
def get_settings(api_: Api, character_id: QueryId = None, instance_id: QueryId = None) -> dict[str, Any]:
    return api_.worldbook.settings(character_id=character_id, instance_id=instance_id)


@router.put("/worldbook/settings", tags=["worldbook"])
def put_settings(
    api_: Api, body: SettingsBody, character_id: QueryId = None, instance_id: QueryId = None
) -> dict[str, Any]:
    changes = body.model_dump(exclude_unset=True, exclude={"clear"})
    return api_.worldbook.set_settings(changes, character_id=character_id, instance_id=instance_id, clear=body.clear)


# ---- knowledge -----------------------------------------------------------------------------------------------


class KnowledgeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: str
    content: str
    importance: float = 0.5
    keywords: list[str] = Field(default_factory=list)
    enabled: StrictBool = True


class KnowledgeEditBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: str | None = None
    content: str | None = None
    importance: float | None = None
    keywords: list[str] | None = None
    enabled: StrictBool | None = None


class MoveBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    direction: Literal["up", "down"]


class TagsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    add: list[str] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list)


@router.get("/knowledge", tags=["knowledge"])
def list_knowledge(
    api_: Api,
    character_id: QueryId = None,
    instance_id: QueryId = None,
    visible: bool = False,
    tag: str | None = None,
) -> list[dict[str, Any]]:
    bad = bad_character(tag) if tag is not None else None
    if bad:
        raise InvalidInput(f"field 'tag' contains {bad}")
    return api_.knowledge.list(character_id=character_id, instance_id=instance_id, visible=visible, tag=tag)


@router.post("/knowledge", status_code=status.HTTP_201_CREATED, tags=["knowledge"])
def add_knowledge(
    api_: Api, body: KnowledgeBody, character_id: QueryId = None, instance_id: QueryId = None
) -> dict[str, Any]:
    fields = body.model_dump()
    tag, content = fields.pop("tag"), fields.pop("content")
    return api_.knowledge.add(tag, content, character_id=character_id, instance_id=instance_id, **fields)


@router.post("/knowledge/reorder", tags=["knowledge"])
def reorder_knowledge(api_: Api, body: ReorderRequest) -> list[dict[str, Any]]:
    """Order values (lower is injected first, issue 25) for several entries at once, all or nothing."""
    return api_.knowledge.reorder({item.id: item.order for item in body.entries})


@router.post("/knowledge/{entry_id}/move", tags=["knowledge"])
def move_knowledge(api_: Api, entry_id: PathId, body: MoveBody) -> list[dict[str, Any]]:
    """One place up or down among its scope's entries; the scope's entries in their new order."""
    return api_.knowledge.move(entry_id, body.direction)


@router.get("/knowledge/{entry_id}", tags=["knowledge"])
def get_knowledge(api_: Api, entry_id: PathId) -> dict[str, Any]:
    return api_.knowledge.get(entry_id)


@router.patch("/knowledge/{entry_id}", tags=["knowledge"])
def edit_knowledge(api_: Api, entry_id: PathId, body: KnowledgeEditBody) -> dict[str, Any]:
    changes = {name: value for name, value in body.model_dump(exclude_unset=True).items()}
    for name, value in changes.items():
        if value is None:
            raise InvalidInput(f"knowledge entry {entry_id}: field {name!r} cannot be null")
    return api_.knowledge.edit(entry_id, **changes)


@router.delete("/knowledge/{entry_id}", tags=["knowledge"])
def delete_knowledge(api_: Api, entry_id: PathId) -> dict[str, Any]:
    return api_.knowledge.delete(entry_id)


@router.post("/knowledge/{entry_id}/tags", tags=["knowledge"])
def tag_knowledge(api_: Api, entry_id: PathId, body: TagsBody) -> dict[str, Any]:
    return api_.knowledge.tag(entry_id, add=body.add, remove=body.remove)
