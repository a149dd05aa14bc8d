"""The web app's pages (issue 24; seed 002 功能需求 as a SillyTavern-like app): characters, backgrounds, instances
and the chat, under `/app`. Each route is a thin layer over `personalab.graph.api` (and the runner for turns),
acting for the page's user (`pages.web_user`). Forms post and redirect (they work without JavaScript); the chat's
turn is a `fetch` reading server-sent events (graph/web/stream.py)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, File, Form, Query, Request, UploadFile
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from personalab.graph.api import PersonaLab, cards, dialogue, library
from personalab.graph.api.schemas.library import CHARACTER_TEXT
from personalab.graph.api.support import parse_json
from personalab.graph.http.guards import PathId
from personalab.graph.http.users import Unauthenticated, auth_enabled, auth_mode, verify
from personalab.graph.runner import run_turn, turn_graph
from personalab.graph.web.i18n import LANG_COOKIE, LANGUAGES, translator
from personalab.graph.web.pages import PREFIX, TOKEN_COOKIE, WebRoute, WebUser, error_page, language, render, web_user
from personalab.graph.web.stream import stream_turn
from personalab.nodes.rules.errors import InstanceBusy, InvalidInput, NotFound, PersonaLabError
from personalab.nodes.rules.prompt_catalog import EN, ZH, catalog_for
from starlette.concurrency import run_in_threadpool

router = APIRouter(prefix=PREFIX, route_class=WebRoute, include_in_schema=False)
User = Annotated[WebUser, Depends(web_user)]
INTEGER_MAX = 2_147_483_647  # an id column's range on every backend (graph/http/guards.py)
FormId = Annotated[int, Form(ge=0, le=INTEGER_MAX)]
PAGE_LINES = 40
PAGE_INSTANCES = 50
GAPS = ("minutes", "hours", "days", "long_absence")
CHOICE_LEVELS = ("normal", "important", "turning_point", "ending")  # seed 003's choice levels
STATIC = {"htmx.min.js": "text/javascript", "app.js": "text/javascript", "app.css": "text/css"}
TEXT_FIELDS = CHARACTER_TEXT  # a character's text fields, each a textarea of the edit page
GREETING_SEPARATOR = "\n---\n"
# what a host-line row may name narration by (seed 000's 旁白, in either language); it is stored under the
# instance's own name for it (issue 28: 旁白 / Narrator)
NARRATION_NAMES = frozenset({ZH.narrator_name, EN.narrator_name, "narration", "Narration"})
MAX_SPEAKER_CHARS = 100
HOST_ROWS = 3  # host-line rows in the chat form


def _go(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


async def _read_upload(upload: UploadFile | None, limit: int, field: str) -> bytes | None:
    """An uploaded file's bytes, at most `limit` (read in chunks: a huge upload is refused, not held whole)."""
    if upload is None or not upload.filename:
        return None
    chunks: list[bytes] = []
    size = 0
    while chunk := await upload.read(1 << 20):
        size += len(chunk)
        if size > limit:
            raise InvalidInput(f"{field}: the file is over the limit of {limit} bytes")
        chunks.append(chunk)
    data = b"".join(chunks)
    if not data:
        raise InvalidInput(f"{field}: the file is empty")
    return data


async def _read_json_upload(upload: UploadFile | None, limit: int, field: str) -> Any:
    """An uploaded JSON file's value: `_read_upload`'s limits, UTF-8 (a byte-order mark allowed), and the API's
    JSON checks (`graph.api.support.parse_json`: malformed, nested too deep, NUL or lone surrogate), each one
    `InvalidInput` naming `field`; a missing file too."""
    data = await _read_upload(upload, limit, field)
    if data is None:
        raise InvalidInput(f"{field}: choose a file to import")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{field}: not UTF-8 text (byte {exc.start})") from None
    return parse_json(text, field)


# --- the shell: root, static files, sign-in, language -------------------------------------------------------------


@router.get("")
@router.get("/")
def home(user: User) -> RedirectResponse:
    return _go(f"{PREFIX}/instances")


@router.get("/static/{name}")
def static(name: str) -> Response:
    """The front-end files shipped in the package (never a CDN): a fixed list, so no path reaches elsewhere."""
    if name not in STATIC:
        raise NotFound(f"static file {name!r} does not exist")
    data = resources.files("personalab.graph.web").joinpath("static", name).read_bytes()
    return Response(data, media_type=STATIC[name], headers={"Cache-Control": "public, max-age=3600"})


@router.get("/login")
def login_page(request: Request) -> Response:
    if not auth_enabled():
        return _go(f"{PREFIX}/instances")
    return render(request, "login.html", user=WebUser(owner=None, name=""), failed=None, mode=auth_mode())


@router.post("/login")
def login(request: Request, token: Annotated[str, Form()] = "") -> Response:
    """Check the token (a static token or a JWT, by `PERSONALAB_AUTH`) as the HTTP API checks its bearer header,
    then keep it in an HttpOnly, SameSite=Strict cookie; refused, the page says why (expired, wrong signature,
    unknown token: the message never contains the token). A JWT is checked again on every request, so the
    session ends when it expires."""
    if not auth_enabled():
        return _go(f"{PREFIX}/instances")
    try:
        verify(f"Bearer {token.strip()}")
    except Unauthenticated as exc:
        nobody = WebUser(owner=None, name="")
        return render(request, "login.html", status_code=401, user=nobody, failed=str(exc), mode=auth_mode())
    response = _go(f"{PREFIX}/instances")
    response.set_cookie(TOKEN_COOKIE, token.strip(), httponly=True, samesite="strict", path=PREFIX)
    return response


@router.post("/logout")
def logout() -> Response:
    response = _go(f"{PREFIX}/login")
    response.delete_cookie(TOKEN_COOKIE, path=PREFIX)
    return response


@router.post("/language")
def set_language(lang: Annotated[str, Form()], back: Annotated[str, Form()] = f"{PREFIX}/instances") -> Response:
    if lang not in LANGUAGES:
        raise InvalidInput(f"field 'lang': {lang!r} is not one of {', '.join(LANGUAGES)}")
    target = back if back.startswith(f"{PREFIX}/") and "//" not in back and "\\" not in back else PREFIX + "/"
    response = _go(target)
    response.set_cookie(LANG_COOKIE, lang, samesite="lax", path="/", max_age=365 * 24 * 3600)
    return response


# --- characters ---------------------------------------------------------------------------------------------------


@router.get("/characters")
def characters_page(request: Request, user: User) -> Response:
    items = library.list_characters(owner=user.owner)
    return render(request, "characters.html", user=user, characters=items)


def _character_form(
    name: str, texts: dict[str, str], greetings: str, shared: bool, avatar: bytes | None, remove: bool, *, new: bool
) -> dict[str, Any]:
    data: dict[str, Any] = {"name": name, **texts, "shared": shared}
    data["greetings"] = [part.strip() for part in greetings.replace("\r\n", "\n").split(GREETING_SEPARATOR)]
    data["greetings"] = [part for part in data["greetings"] if part]
    if avatar is not None:
        data["avatar"] = avatar
    elif remove and not new:
        data["remove_avatar"] = True
    return data


@router.get("/characters/new")
def new_character_page(request: Request, user: User) -> Response:
    return render(request, "character_form.html", user=user, character=None, separator=GREETING_SEPARATOR)


async def _character_fields(request: Request) -> tuple[str, dict[str, str], str, bool, bool]:
    form = await request.form()

    def text(key: str) -> str:
        value = form.get(key)
        return value if isinstance(value, str) else ""

    texts = {key: text(key).replace("\r\n", "\n") for key in TEXT_FIELDS}
    return text("name"), texts, text("greetings"), bool(form.get("shared")), bool(form.get("remove_avatar"))


@router.post("/characters")
async def create_character(
    request: Request, user: User, avatar: Annotated[UploadFile | None, File()] = None
) -> Response:
    name, texts, greetings, shared, _ = await _character_fields(request)
    image = await _read_upload(avatar, library.MAX_AVATAR_BYTES, "avatar")
    data = _character_form(name, texts, greetings, shared, image, False, new=True)
    made = await run_in_threadpool(library.create_character, data, owner=user.owner)
    return _go(f"{PREFIX}/characters#character-{made.id}")


@router.get("/characters/{character_id:int}/edit")
def edit_character_page(request: Request, user: User, character_id: PathId) -> Response:
    item = library.get_character(character_id, owner=user.owner)
    return render(request, "character_form.html", user=user, character=item, separator=GREETING_SEPARATOR)


@router.post("/characters/{character_id:int}")
async def edit_character(
    request: Request, user: User, character_id: PathId, avatar: Annotated[UploadFile | None, File()] = None
) -> Response:
    name, texts, greetings, shared, remove = await _character_fields(request)
    image = await _read_upload(avatar, library.MAX_AVATAR_BYTES, "avatar")
    data = _character_form(name, texts, greetings, shared, image, remove, new=False)
    await run_in_threadpool(library.edit_character, character_id, data, owner=user.owner)
    return _go(f"{PREFIX}/characters#character-{character_id}")


@router.get("/characters/{character_id:int}/avatar")
def character_avatar(user: User, character_id: PathId) -> Response:
    data, mime = library.character_avatar(character_id, owner=user.owner)
    # the stored type was checked from the bytes at upload (library.check_avatar); nosniff keeps it an image
    return Response(data, media_type=mime, headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"})


@router.get("/characters/{character_id:int}/card")
def export_card(user: User, character_id: PathId, format: str = "png") -> Response:  # noqa: A002 - the query's name
    data, mime = cards.export_card_bytes(character_id, format, owner=user.owner)
    name = library.get_character(character_id, owner=user.owner).name
    suffix = "png" if format == "png" else "json"
    disposition = f"attachment; filename=\"character-{character_id}.{suffix}\"; filename*=UTF-8''{quote(name)}.{suffix}"
    return Response(data, media_type=mime, headers={"Content-Disposition": disposition})


@router.post("/characters/import")
async def import_card(request: Request, user: User, card: Annotated[UploadFile | None, File()] = None) -> Response:
    data = await _read_upload(card, 32 * 1024 * 1024, "card")
    if data is None:
        raise InvalidInput("card: choose a card file (PNG or JSON)")
    done = await run_in_threadpool(
        cards.import_card_bytes, data, (card.filename if card else None) or "card", owner=user.owner
    )
    # the page itself (not a redirect) says what the import did: the world book's entries, the fields kept only
    # for export
    items = await run_in_threadpool(library.list_characters, owner=user.owner)
    return render(request, "characters.html", user=user, characters=items, imported=done.summary())


@router.get("/characters/{character_id:int}/delete")
def delete_character_page(request: Request, user: User, character_id: PathId) -> Response:
    item = library.get_character(character_id, owner=user.owner)
    uses, total = library.list_instances_page(limit=PAGE_INSTANCES, character_id=character_id, owner=user.owner)
    return render(
        request, "delete.html", user=user, kind="character", item=item, name=item.name, uses=uses, total=total
    )


@router.post("/characters/{character_id:int}/delete")
def delete_character(user: User, character_id: PathId) -> Response:
    library.delete_character(character_id, cascade=True, owner=user.owner)
    return _go(f"{PREFIX}/characters")


# --- backgrounds --------------------------------------------------------------------------------------------------


@router.get("/backgrounds")
def backgrounds_page(request: Request, user: User) -> Response:
    return render(request, "backgrounds.html", user=user, backgrounds=library.list_backgrounds(owner=user.owner))


@router.get("/backgrounds/new")
def new_background_page(request: Request, user: User) -> Response:
    return render(request, "background_form.html", user=user, background=None)


async def _background_fields(request: Request) -> dict[str, Any]:
    form = await request.form()
    outline = [value.strip() for value in form.getlist("outline") if isinstance(value, str) and value.strip()]
    name, world = form.get("name"), form.get("world_setting")
    return {
        "name": name if isinstance(name, str) else "",
        "world_setting": world.replace("\r\n", "\n") if isinstance(world, str) else "",
        "outline": outline,
        "shared": bool(form.get("shared")),
        "apply": bool(form.get("apply_to_instances")),
    }


@router.post("/backgrounds")
async def create_background(request: Request, user: User) -> Response:
    data = await _background_fields(request)
    data.pop("apply")
    made = await run_in_threadpool(library.create_background, data, owner=user.owner)
    return _go(f"{PREFIX}/backgrounds#background-{made.id}")


@router.get("/backgrounds/{background_id:int}/edit")
def edit_background_page(request: Request, user: User, background_id: PathId) -> Response:
    item = library.get_background(background_id, owner=user.owner)
    return render(request, "background_form.html", user=user, background=item)


@router.post("/backgrounds/{background_id:int}")
async def edit_background(request: Request, user: User, background_id: PathId) -> Response:
    data = await _background_fields(request)
    data["apply_to_instances"] = data.pop("apply")
    await run_in_threadpool(library.edit_background, background_id, data, owner=user.owner)
    return _go(f"{PREFIX}/backgrounds#background-{background_id}")


@router.get("/backgrounds/{background_id:int}/delete")
def delete_background_page(request: Request, user: User, background_id: PathId) -> Response:
    item = library.get_background(background_id, owner=user.owner)
    uses, total = library.list_instances_page(limit=PAGE_INSTANCES, background_id=background_id, owner=user.owner)
    return render(
        request, "delete.html", user=user, kind="background", item=item, name=item.name, uses=uses, total=total
    )


@router.post("/backgrounds/{background_id:int}/delete")
def delete_background(user: User, background_id: PathId) -> Response:
    library.delete_background(background_id, cascade=True, owner=user.owner)
    return _go(f"{PREFIX}/backgrounds")


# --- instances ----------------------------------------------------------------------------------------------------


@router.get("/instances")
def instances_page(request: Request, user: User, page: Annotated[int, Query(ge=1, le=INTEGER_MAX)] = 1) -> Response:
    """The instances, newest first, `PAGE_INSTANCES` a page (a long list is paged, not rendered whole)."""
    listed, total = library.list_instances_page(
        offset=(page - 1) * PAGE_INSTANCES, limit=PAGE_INSTANCES, owner=user.owner
    )
    pages = max(1, -(-total // PAGE_INSTANCES))
    if page > pages:  # past the last page (instances were deleted): show the last one
        page = pages
        listed, total = library.list_instances_page(
            offset=(page - 1) * PAGE_INSTANCES, limit=PAGE_INSTANCES, owner=user.owner
        )
    return render(
        request,
        "instances.html",
        user=user,
        instances=listed,
        total=total,
        page_number=page,
        pages=pages,
        characters=library.character_names(owner=user.owner),
        backgrounds=library.background_names(owner=user.owner),
        personas=PersonaLab(owner=user.owner).personas.list(),  # issue 28: the persona select
    )


@router.post("/instances")
def create_instance(
    user: User,
    character_id: FormId,
    background_id: Annotated[str, Form(max_length=20)] = "",
    title: Annotated[str, Form()] = "",
    language: Annotated[str, Form(max_length=16)] = "",
    persona_id: Annotated[str, Form()] = "",
) -> Response:
    # issue 28: no background is one made from the card's scenario; no language is the card's
    chosen: int | str | None = background_id.strip() or None
    if isinstance(chosen, str) and chosen.isdigit():
        chosen = int(chosen)
    data: dict[str, Any] = {"character_id": character_id, "background_id": chosen, "title": title.strip()}
    if language.strip():
        data["language"] = language.strip()
    if persona_id.strip():  # issue 28: the persona select ("" plays with none)
        if not persona_id.strip().isdigit():
            raise InvalidInput(f"persona_id: {persona_id.strip()[:40]!r} is not a persona id")
        data["persona_id"] = int(persona_id)
    made = library.create_instance(data, owner=user.owner)
    return _go(f"{PREFIX}/instances/{made.id}")


@router.post("/instances/import")
async def import_instance(user: User, document: Annotated[UploadFile | None, File()] = None) -> Response:
    data = await _read_upload(document, library.MAX_EXPORT_BYTES, "document")
    if data is None:
        raise InvalidInput("document: choose an exported instance file (JSON)")
    try:
        parsed = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"document: not a JSON file ({exc.__class__.__name__})") from None
    if not isinstance(parsed, dict):
        raise InvalidInput("document: not an exported instance (a JSON object)")
    done = await run_in_threadpool(library.import_instance_data, parsed, owner=user.owner)
    return _go(f"{PREFIX}/instances/{done.instance.id}")


@router.post("/instances/{instance_id:int}/rename")
def rename_instance(user: User, instance_id: PathId, title: Annotated[str, Form()] = "") -> Response:
    library.rename_instance(instance_id, title, owner=user.owner)
    return _go(f"{PREFIX}/instances#instance-{instance_id}")


@router.get("/instances/{instance_id:int}/export")
def export_instance(user: User, instance_id: PathId) -> Response:
    document = library.export_instance_data(instance_id, owner=user.owner)
    body = json.dumps(document, ensure_ascii=False, default=str).encode("utf-8")
    disposition = f'attachment; filename="instance-{instance_id}.json"'
    return Response(body, media_type="application/json", headers={"Content-Disposition": disposition})


@router.get("/instances/{instance_id:int}/delete")
def delete_instance_page(request: Request, user: User, instance_id: PathId) -> Response:
    item = library.get_instance(instance_id, owner=user.owner)
    return render(request, "delete.html", user=user, kind="instance", item=item, name=item.title, uses=[])


@router.post("/instances/{instance_id:int}/delete")
def delete_instance(user: User, instance_id: PathId) -> Response:
    library.delete_instance(instance_id, owner=user.owner)
    return _go(f"{PREFIX}/instances")


# --- the chat -----------------------------------------------------------------------------------------------------


def _panels(view: dict[str, Any]) -> dict[str, Any]:
    """What the side panels show: the story state of the current branch (plot, relationships, core memory); before
    the branch's first turn, the background's outline from its first point."""
    branch = view["branch"]
    state = branch.get("story_state") or {}
    plot = state.get("plot_state") or {}
    points = list(plot.get("story_outline") or [])
    current = plot.get("current_plot_index")
    if not points and view["outline"]:
        points = [
            {"index": n, "content": text, "status": "in_progress" if n == 1 else "pending"}
            for n, text in enumerate(view["outline"], start=1)
        ]
        current = 1
    return {
        "turn": branch.get("turn", 0),
        "points": points,
        "current": current,
        "last_progress_turn": plot.get("last_progress_turn"),
        "relationship": state.get("relationship") or {},
        # issue 26: the character's relation with each other participant of the scene, first seen first
        "relations": sorted(
            (dict(record, id=identity) for identity, record in (state.get("relations") or {}).items()),
            key=lambda item: (item.get("first_turn") or 0, item["id"]),
        ),
        "core_memory": state.get("core_memory") or {},
        "leaf": branch.get("leaf"),
    }


def _chat_context(instance_id: PathId, owner: str | None) -> dict[str, Any]:
    """The chat page's content, from one API call (one database session, a few queries)."""
    view = dialogue.view(instance_id, offset=-PAGE_LINES, limit=PAGE_LINES, owner=owner)
    page, character = view["page"], view["character"]
    narrator = catalog_for(view["instance"].language).narrator_name  # issue 28: in the instance's language
    return {
        "instance": view["instance"],
        "character": character,
        "page": page,
        "lines": page["lines"],
        "panels": _panels(view),
        "gaps": GAPS,
        "choice_levels": CHOICE_LEVELS,
        "host_rows": HOST_ROWS,
        "narrator": narrator,
        # the speakers the host-line rows suggest: narration, the character, who else spoke in the lines shown
        "scene_speakers": list(
            dict.fromkeys(
                [narrator, *([character.name] if character else [])]
                + [line["speaker"] for line in page["lines"] if line["attribute"] == "assistant"]
            )
        ),
        "last_line_id": page["leaf"],
        "personas": PersonaLab(owner=owner).personas.list(),  # issue 28: the persona select
    }


@router.get("/instances/{instance_id:int}")
def chat_page(request: Request, user: User, instance_id: PathId) -> Response:
    return render(request, "chat.html", user=user, **_chat_context(instance_id, user.owner))


@router.get("/instances/{instance_id:int}/main")
def chat_main(request: Request, user: User, instance_id: PathId) -> Response:
    """The dialogue and the panels, as the page swaps them in after a turn or a move."""
    return render(request, "chat_main.html", user=user, **_chat_context(instance_id, user.owner))


@router.get("/instances/{instance_id:int}/lines")
def older_lines(
    request: Request, user: User, instance_id: PathId, before: Annotated[int, Query(ge=0, le=INTEGER_MAX)]
) -> Response:
    """The lines of the current branch before position `before` (the history pages back to the first line)."""
    if before <= 0:
        raise InvalidInput("before: must be a position after the first line")
    start = max(0, before - PAGE_LINES)
    view = dialogue.view(instance_id, offset=start, limit=before - start, owner=user.owner)
    page = view["page"]
    return render(
        request,
        "lines.html",
        user=user,
        instance=view["instance"],
        character=view["character"],
        page=page,
        lines=page["lines"],
        last_line_id=None,
    )


@router.post("/instances/{instance_id:int}/swipe")
def swipe(user: User, instance_id: PathId, line_id: FormId) -> Response:
    dialogue.swipe(instance_id, line_id, owner=user.owner)
    return _go(f"{PREFIX}/instances/{instance_id}#line-{line_id}")


@router.post("/instances/{instance_id:int}/rewind")
def rewind(user: User, instance_id: PathId, line_id: FormId) -> Response:
    dialogue.rewind(instance_id, line_id, owner=user.owner)
    return _go(f"{PREFIX}/instances/{instance_id}#line-{line_id}")


@router.post("/instances/{instance_id:int}/sessions")
def new_session(user: User, instance_id: PathId) -> Response:
    dialogue.new_session(instance_id, owner=user.owner)
    return _go(f"{PREFIX}/instances/{instance_id}")


def host_lines(
    speakers: list[str],
    texts: list[str],
    character_id: int | None,
    character_name: str | None,
    language: str | None = None,
) -> list[dict[str, Any]]:
    """The chat form's host lines (seed 000: narration and the scene's other characters, put into the dialogue
    before the user's line, in order) as the turn input takes them. A row is a speaker and a text; a row without
    text is skipped. No speaker (or 旁白 / Narrator) is narration: an assistant line that no character speaks, named
    旁白, or Narrator in an English instance (`language`, issue 28); the instance's character by name is that
    character's line; any other name is another character of the scene (a script character: `script_role_id` and
    the display name are its name)."""
    narrator = catalog_for(language).narrator_name
    if len(speakers) != len(texts):
        raise InvalidInput(f"field 'host_speaker': {len(speakers)} speakers for {len(texts)} host lines")
    lines: list[dict[str, Any]] = []
    for number, (speaker, text) in enumerate(zip(speakers, texts, strict=True), start=1):
        content = text.replace("\r\n", "\n").strip()
        name = speaker.strip()
        if not content:
            continue
        if len(name) > MAX_SPEAKER_CHARS:
            raise InvalidInput(f"field 'host_speaker' (line {number}): over {MAX_SPEAKER_CHARS} characters")
        if not name or name in NARRATION_NAMES:
            lines.append({"attribute": "assistant", "display_name": narrator, "content": content})
        elif character_id is not None and name == character_name:
            lines.append({"attribute": "assistant", "role_id": character_id, "display_name": name, "content": content})
        else:
            lines.append({"attribute": "assistant", "script_role_id": name, "display_name": name, "content": content})
    return lines


def _describe(lang: str) -> Any:
    words = translator(lang)

    def describe(exc: BaseException) -> str:
        if isinstance(exc, InstanceBusy):
            return words["busy"]
        if isinstance(exc, PersonaLabError):
            return f"{words['turn_failed']}: {exc}"
        return f"{words['turn_failed']}: {type(exc).__name__}"

    return describe


@router.post("/instances/{instance_id:int}/turn")
async def turn(
    request: Request,
    user: User,
    instance_id: PathId,
    action: Annotated[str, Form()] = "send",
    message: Annotated[str, Form()] = "",
    line_id: Annotated[int | None, Form(ge=0, le=INTEGER_MAX)] = None,
    user_name: Annotated[str, Form()] = "",
    host_speaker: Annotated[list[str] | None, Form()] = None,
    host_text: Annotated[list[str] | None, Form()] = None,
    time_gap: Annotated[str, Form()] = "",
    choice_text: Annotated[str, Form()] = "",
    choice_level: Annotated[str, Form()] = "normal",
) -> Response:
    """One turn, streamed (`text/event-stream`): `send` a message (with the host lines before it, the time gap and
    the picked choice), `regenerate` the last reply, or `edit` user line `line_id`. The instance is checked before
    the stream starts, so a stale page on a deleted instance gets a plain error, not a stream."""
    lang = language(request)
    words = translator(lang)
    owner = user.owner
    instance = await run_in_threadpool(library.get_instance, instance_id, owner=owner)  # NotFound naming the id
    if action not in ("send", "regenerate", "edit"):
        raise InvalidInput(f"field 'action': {action!r} is not send, regenerate or edit")
    if action in ("send", "edit") and not message.strip():
        return error_page(request, words["empty_message"], 422)
    if time_gap and time_gap not in GAPS:
        raise InvalidInput(f"field 'time_gap': {time_gap!r} is not one of {', '.join(GAPS)}")
    if choice_level not in CHOICE_LEVELS:
        raise InvalidInput(f"field 'choice_level': {choice_level!r} is not one of {', '.join(CHOICE_LEVELS)}")
    extra: dict[str, Any] = {"user_name": user_name.strip() or None}
    lines_before = host_lines(
        host_speaker or [], host_text or [], instance.character_id, instance.character_name, instance.language
    )
    message = message.replace("\r\n", "\n")

    def work(on_token: Any) -> dict[str, Any]:
        if action == "regenerate":
            return dialogue.regenerate(instance_id, line_id=line_id, on_token=on_token, owner=owner)
        if action == "edit":
            if line_id is None:
                raise InvalidInput("field 'line_id': which user line to edit")
            return dialogue.edit(instance_id, line_id, message, on_token=on_token, owner=owner, **extra)
        if lines_before:
            extra["lines_before"] = lines_before
        if time_gap:
            extra["time_gap"] = time_gap
        if choice_text.strip():
            extra["selected_choice"] = {"level": choice_level, "text": choice_text.strip()}
        with turn_graph() as (graph, ctx):
            return run_turn(graph, ctx, instance_id, message, on_token=on_token, **extra)

    return StreamingResponse(
        stream_turn(work, _describe(lang)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


# any other /app/… path: a page of its own, on a router the app includes after every page router (graph/http/app.py),
# so the order the page modules are included in does not matter
fallback_router = APIRouter(prefix=PREFIX, route_class=WebRoute, include_in_schema=False)


@fallback_router.get("/{rest:path}")
def not_found(request: Request, rest: str) -> Response:
    return error_page(request, f"/app/{rest} does not exist", 404)
