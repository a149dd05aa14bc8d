"""The memory console's pages (issue 25, second part), in the web app under `/app`: the trigger configuration (seed
004 MemoryTriggerConfig with the world-book settings) per scope, the world-book and knowledge editors, an
instance's core-memory versions (diff, rollback) and its director and review page (suggestions, plot nodes, the
current outline point). Each route goes only through `personalab.graph.api.PersonaLab`, acting for the page's user
(`pages.web_user`); PersonaLab's errors are one message on the page (`pages.WebRoute`) and nothing is stored.

Scopes: global (`/app/config`, `/app/worldbook`, `/app/knowledge`: the operator's), a character's
(`/app/characters/{id}/…`) and an instance's (`/app/instances/{id}/…`).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from personalab.graph.api import PersonaLab
from personalab.graph.api.trigger_config import DEFAULTS, FIELDS, KINDS, POSITIONS
from personalab.graph.api.worldbook import MAX_IMPORT_BYTES, SETTING_FIELDS, TRIGGER_TYPES
from personalab.graph.http.guards import PathId
from personalab.graph.web.pages import PREFIX, WebRoute, WebUser, render, web_user
from personalab.graph.web.routes import _read_json_upload
from personalab.nodes.rules.errors import InvalidInput, NotFound, PersonaLabError

router = APIRouter(prefix=PREFIX, route_class=WebRoute, include_in_schema=False)
User = Annotated[WebUser, Depends(web_user)]
INTEGER_MAX = 2_147_483_647

# the configuration page's fields: (name, kind) in the seed's order; kinds: bool, int, float, choice, text
TRIGGER_KINDS: dict[str, str] = {
    "enabled": "bool",
    "keyword_matching": "bool",
    "semantic_similarity": "bool",
    "temporal_proximity": "bool",
    "emotional_relevance": "bool",
    "relevance_threshold": "float",
    "time_decay_enabled": "bool",
    "emotional_boost_enabled": "bool",
    "max_total_length": "int",
    "inject_position": "choice",
    "template": "text",
    "separate_by_type": "bool",
}
SETTING_KINDS: dict[str, str] = {
    "budget_share": "float",
    "max_tokens": "int",
    "scan_depth": "int",
    "recursive": "bool",
    "max_recursion_steps": "int",
    "case_sensitive": "bool",
    "match_whole_words": "bool",
}
SETTING_DEFAULTS_NOTE = "default"
assert set(TRIGGER_KINDS) | {"max_per_type"} == set(FIELDS)  # every seed field has its control
assert set(SETTING_KINDS) == set(SETTING_FIELDS)


def _api(user: WebUser) -> PersonaLab:
    return PersonaLab(owner=user.owner)


def _go(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


# --- scopes ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """Where a console page acts: global (both None), a character or an instance; `base` is its URL prefix."""

    character_id: int | None = None
    instance_id: int | None = None

    @property
    def base(self) -> str:
        if self.instance_id is not None:
            return f"{PREFIX}/instances/{self.instance_id}"
        if self.character_id is not None:
            return f"{PREFIX}/characters/{self.character_id}"
        return PREFIX

    @property
    def kw(self) -> dict[str, int | None]:
        return {"character_id": self.character_id, "instance_id": self.instance_id}

    @property
    def kind(self) -> str:
        return (
            "instance" if self.instance_id is not None else "character" if self.character_id is not None else "global"
        )


def _scope(request: Request) -> Scope:
    """The scope named by the path (`/characters/{id}` or `/instances/{id}`), its id in the database's range."""
    params = request.path_params
    found = {name: params.get(name) for name in ("character_id", "instance_id")}
    for name, value in found.items():
        if value is not None and not 0 <= int(value) <= INTEGER_MAX:
            raise NotFound(f"{name.split('_')[0]} {value} does not exist")
    return Scope(**{name: int(value) for name, value in found.items() if value is not None})


def _title(api: PersonaLab, scope: Scope) -> str:
    """The scope's name for the page heading (checks the user may see it: another user's is `NotFound`)."""
    if scope.instance_id is not None:
        return api.instances.get(scope.instance_id).title
    if scope.character_id is not None:
        return api.characters.get(scope.character_id).name
    return ""


SCOPED = ("", "/characters/{character_id:int}", "/instances/{instance_id:int}")


def _scoped(path: str, methods: list[str]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a handler at `path` under each scope (global, character, instance)."""

    def register(handler: Callable[..., Any]) -> Callable[..., Any]:
        for base in SCOPED:
            router.add_api_route(base + path, handler, methods=methods)
        return handler

    return register


# --- trigger configuration ------------------------------------------------------------------------------------------


def _parse(kind: str, raw: str) -> Any:
    """A form value as the field's type; "" unsets (None). A value of the wrong type goes on as the text it is, so
    the rules' check names the field and what it wanted."""
    text = raw.strip()
    if text == "":
        return None
    if kind == "bool":
        return {"true": True, "false": False}.get(text, text)
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            return text
    if kind == "float":
        try:
            number = float(text)
        except ValueError:
            return text
        return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
    return raw if kind == "text" else text


def _config_changes(form: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The page's form as (trigger config changes, world-book settings changes), every field (None: unset)."""
    trigger: dict[str, Any] = {name: _parse(kind, form.get(name, "")) for name, kind in TRIGGER_KINDS.items()}
    limits = {kind: _parse("int", form.get(f"max_per_type.{kind}", "")) for kind in KINDS}
    trigger["max_per_type"] = {kind: value for kind, value in limits.items() if value is not None} or None
    settings = {name: _parse(kind, form.get(f"wb.{name}", "")) for name, kind in SETTING_KINDS.items()}
    return trigger, settings


def _form(data: Any) -> dict[str, str]:
    return {key: value for key, value in data.items() if isinstance(value, str)}


def _config_view(api: PersonaLab, scope: Scope) -> dict[str, Any]:
    trigger = api.trigger_config.get(**scope.kw)
    settings = api.worldbook.settings(**scope.kw)
    return {"trigger": trigger, "settings": settings}


def _config_page(request: Request, user: WebUser, scope: Scope, status_code: int = 200, **extra: Any) -> HTMLResponse:
    api = _api(user)
    return render(
        request,
        "console_config.html",
        status_code,
        user=user,
        scope=scope,
        name=_title(api, scope),
        trigger_kinds=TRIGGER_KINDS,
        setting_kinds=SETTING_KINDS,
        kinds=KINDS,
        positions=POSITIONS,
        defaults=DEFAULTS.model_dump(mode="json"),
        **_config_view(api, scope),
        **extra,
    )


@_scoped("/config", ["GET"])
def config_page(request: Request, user: User) -> Response:
    """Every field: the value set on this scope, the value in effect and where it comes from."""
    return _config_page(request, user, _scope(request), saved=request.query_params.get("saved"))


@_scoped("/config/validate", ["POST"])
async def validate_config(request: Request, user: User) -> Response:
    """Check the field the user is typing in (htmx sends its name as `HX-Trigger-Name`, the form whole): its error,
    naming it, or nothing. Stores nothing."""
    scope = _scope(request)
    _title(_api(user), scope)  # the scope must be the user's
    form = _form(await request.form())
    field = request.headers.get("hx-trigger-name") or form.get("_field", "")
    trigger, settings = _config_changes(form)
    try:
        if field.startswith("wb."):
            name = field[3:]
            _api(user).worldbook.validate_settings({name: settings.get(name)})
        elif field.startswith("max_per_type."):
            _api(user).trigger_config.validate({"max_per_type": trigger["max_per_type"]})
        else:
            _api(user).trigger_config.validate({field: trigger.get(field)} if field in trigger else {field: None})
    except InvalidInput as exc:
        return HTMLResponse(f'<span class="error" role="alert">{_escape(str(exc))}</span>')
    return HTMLResponse("")


def _escape(text: str) -> str:
    from markupsafe import escape

    return str(escape(text))


@_scoped("/config", ["POST"])
async def save_config(request: Request, user: User) -> Response:
    """Save the whole form: every field checked first (trigger configuration and world-book settings), then both
    stored; a bad value is the page again with the field named and nothing saved. Live from the next turn."""
    scope = _scope(request)
    api = _api(user)
    form = _form(await request.form())
    trigger, settings = _config_changes(form)
    try:
        api.trigger_config.validate({name: value for name, value in trigger.items() if value is not None})
        api.worldbook.validate_settings(settings)
    except InvalidInput as exc:
        return _config_page(request, user, scope, 400, error=str(exc), posted=form)
    api.trigger_config.set({k: v for k, v in trigger.items() if v is not None}, clear=True, **scope.kw)
    api.worldbook.set_settings(settings, clear=True, **scope.kw)
    return _go(f"{scope.base}/config?saved=1")


@_scoped("/config/reset", ["POST"])
def reset_config(request: Request, user: User) -> Response:
    """Unset everything set on this scope: the wider scopes' values (or the defaults) apply again."""
    scope = _scope(request)
    api = _api(user)
    api.trigger_config.reset(**scope.kw)
    api.worldbook.set_settings({}, clear=True, **scope.kw)
    return _go(f"{scope.base}/config?saved=reset")


# --- world book -----------------------------------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    """Keys typed comma- or line-separated (Chinese commas too)."""
    return [part.strip() for part in text.replace("，", ",").replace("\n", ",").split(",") if part.strip()]


def _worldbook_page(request: Request, user: WebUser, scope: Scope, status_code: int = 200, **extra: Any) -> Response:
    api = _api(user)
    name = _title(api, scope)
    entries = sorted(
        api.worldbook.list(character_id=scope.character_id, instance_id=scope.instance_id),
        key=lambda entry: (-entry["priority"], entry["id"]),
    )
    return render(
        request,
        "console_worldbook.html",
        status_code,
        user=user,
        scope=scope,
        name=name,
        entries=entries,
        trigger_types=TRIGGER_TYPES,
        **extra,
    )


@_scoped("/worldbook", ["GET"])
def worldbook_page(request: Request, user: User) -> Response:
    return _worldbook_page(request, user, _scope(request), done=request.query_params.get("done"))


@_scoped("/worldbook", ["POST"])
def add_worldbook_entry(
    request: Request,
    user: User,
    content: Annotated[str, Form()] = "",
    keywords: Annotated[str, Form()] = "",
    trigger_type: Annotated[str, Form()] = "keyword",
) -> Response:
    """A new entry (content and keys; the rest on its edit page)."""
    scope = _scope(request)
    try:
        _api(user).worldbook.add(content, keywords=_words(keywords), trigger_type=trigger_type, **scope.kw)
    except InvalidInput as exc:
        return _worldbook_page(request, user, scope, 400, error=str(exc))
    return _go(f"{scope.base}/worldbook?done=added")


@_scoped("/worldbook/import", ["POST"])
async def import_worldbook(
    request: Request, user: User, lorebook: Annotated[UploadFile | None, File()] = None
) -> Response:
    """A SillyTavern lorebook (world info JSON) or a PersonaLab export into this scope, all or nothing: a broken
    file is one message and nothing changes."""
    scope = _scope(request)
    api = _api(user)
    try:
        parsed = await _read_json_upload(lorebook, MAX_IMPORT_BYTES, "lorebook")
        report = api.worldbook.import_data(parsed, **scope.kw)
    except InvalidInput as exc:
        return _worldbook_page(request, user, scope, 400, error=str(exc))
    return _worldbook_page(request, user, scope, imported=report["summary"])


@_scoped("/worldbook/export", ["GET"])
def export_worldbook(request: Request, user: User, format: str = "sillytavern") -> Response:  # noqa: A002
    scope = _scope(request)
    data = _api(user).worldbook.export(format, **scope.kw)
    name = f"worldbook-{scope.kind}{scope.instance_id or scope.character_id or ''}-{format}.json"
    return Response(
        json.dumps(data, ensure_ascii=False, indent=2),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


def _entry_scope(entry: dict[str, Any]) -> Scope:
    kind, _, number = str(entry["scope"]).partition(" ")
    if kind == "instance":
        return Scope(instance_id=int(number))
    if kind == "character":
        return Scope(character_id=int(number))
    return Scope()


def _entry_page(request: Request, user: WebUser, entry_id: int, status_code: int = 200, **extra: Any) -> Response:
    entry = _api(user).worldbook.get(entry_id)
    return render(
        request,
        "console_entry.html",
        status_code,
        user=user,
        entry=entry,
        scope=_entry_scope(entry),
        positions=POSITIONS,
        trigger_types=TRIGGER_TYPES,
        **extra,
    )


@router.get("/worldbook/entries/{entry_id:int}")
def entry_page(request: Request, user: User, entry_id: PathId) -> Response:
    return _entry_page(request, user, entry_id)


ENTRY_NUMBERS = {"priority": "int", "probability": "float", "sticky": "int", "cooldown": "int", "delay": "int"}
WINDOW = ("min_turn", "max_turn")


@router.post("/worldbook/entries/{entry_id:int}")
async def edit_entry(request: Request, user: User, entry_id: PathId) -> Response:
    """Keys, secondary keys, content, position, order, probability, timed effects (sticky / cooldown / delay in
    turns, the turn window), enabled: validated as the whole entry; a bad value is the page again naming the
    field, nothing stored."""
    form = _form(await request.form())
    changes: dict[str, Any] = {
        "content": form.get("content", ""),
        "title": form.get("title", ""),
        "keywords": _words(form.get("keywords", "")),
        "secondary_keywords": _words(form.get("secondary_keywords", "")),
        "position": form.get("position") or None,
        "trigger_type": form.get("trigger_type", "keyword"),
        "enabled": form.get("enabled") == "on",
        "constant": form.get("constant") == "on",
    }
    for name, kind in ENTRY_NUMBERS.items():
        value = _parse(kind, form.get(name, ""))
        if value is None:
            value = 100 if name in ("priority", "probability") else 0
        changes[name] = value
    changes["temporal"] = {name: _parse("int", form.get(name, "")) for name in WINDOW}
    api = _api(user)
    try:
        entry = api.worldbook.edit(entry_id, **changes)
    except InvalidInput as exc:
        return _entry_page(request, user, entry_id, 400, error=str(exc), posted=form)
    return _go(f"{_entry_scope(entry).base}/worldbook?done=saved")


@router.post("/worldbook/entries/{entry_id:int}/delete")
def delete_entry(user: User, entry_id: PathId) -> Response:
    api = _api(user)
    scope = _entry_scope(api.worldbook.get(entry_id))
    api.worldbook.delete(entry_id)
    return _go(f"{scope.base}/worldbook?done=deleted")


@router.post("/worldbook/entries/{entry_id:int}/move")
def move_entry(user: User, entry_id: PathId, direction: Annotated[str, Form()] = "up") -> Response:
    """Move an entry up or down the book's order: it takes its neighbour's order value and the neighbour gets one
    past it (SillyTavern's `order`, higher first), in one transaction."""
    if direction not in ("up", "down"):
        raise InvalidInput(f"field 'direction': {direction!r} is not up or down")
    api = _api(user)
    scope = _entry_scope(api.worldbook.get(entry_id))
    entries = sorted(
        api.worldbook.list(character_id=scope.character_id, instance_id=scope.instance_id),
        key=lambda entry: (-entry["priority"], entry["id"]),
    )
    ids = [entry["id"] for entry in entries]
    at = ids.index(entry_id)
    other = at - 1 if direction == "up" else at + 1
    if 0 <= other < len(ids):
        orders = [entry["priority"] for entry in entries]
        high, low = (at, other) if direction == "down" else (other, at)
        top = max(orders[high], orders[low] + 1)
        api.worldbook.reorder(
            {ids[low]: top, ids[high]: top - 1} if direction == "up" else {ids[high]: top - 1, ids[low]: top}
        )
    return _go(f"{scope.base}/worldbook#entry-{entry_id}")


# --- knowledge ------------------------------------------------------------------------------------------------------


def _knowledge_page(request: Request, user: WebUser, scope: Scope, status_code: int = 200, **extra: Any) -> Response:
    api = _api(user)
    name = _title(api, scope)
    return render(
        request,
        "console_knowledge.html",
        status_code,
        user=user,
        scope=scope,
        name=name,
        entries=api.knowledge.list(character_id=scope.character_id, instance_id=scope.instance_id),
        **extra,
    )


@_scoped("/knowledge", ["GET"])
def knowledge_page(request: Request, user: User) -> Response:
    return _knowledge_page(request, user, _scope(request), done=request.query_params.get("done"))


def _knowledge_fields(form: dict[str, str]) -> dict[str, Any]:
    return {
        "tag": form.get("tag", "").strip(),
        "content": form.get("content", ""),
        "importance": _parse("float", form.get("importance", "")) if form.get("importance", "").strip() else 0.5,
        "keywords": _words(form.get("keywords", "")),
        "enabled": form.get("enabled", "on") == "on",
    }


@_scoped("/knowledge", ["POST"])
async def add_knowledge(request: Request, user: User) -> Response:
    scope = _scope(request)
    fields = _knowledge_fields(_form(await request.form()))
    try:
        _api(user).knowledge.add(fields.pop("tag"), fields.pop("content"), **fields, **scope.kw)
    except InvalidInput as exc:
        return _knowledge_page(request, user, scope, 400, error=str(exc))
    return _go(f"{scope.base}/knowledge?done=added")


@_scoped("/knowledge/import", ["POST"])
async def import_knowledge(request: Request, user: User, file: Annotated[UploadFile | None, File()] = None) -> Response:
    scope = _scope(request)
    try:
        parsed = await _read_json_upload(file, MAX_IMPORT_BYTES, "file")
        report = _api(user).knowledge.import_data(parsed, **scope.kw)
    except InvalidInput as exc:
        return _knowledge_page(request, user, scope, 400, error=str(exc))
    return _knowledge_page(request, user, scope, imported=report["summary"])


@_scoped("/knowledge/export", ["GET"])
def export_knowledge(request: Request, user: User) -> Response:
    scope = _scope(request)
    data = _api(user).knowledge.export(with_keywords=True, **scope.kw)
    return Response(
        json.dumps(data, ensure_ascii=False, indent=2),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="knowledge-{scope.kind}.json"'},
    )


def _knowledge_scope(entry: dict[str, Any]) -> Scope:
    return _entry_scope(entry)


@router.get("/knowledge/entries/{entry_id:int}")
def knowledge_entry_page(request: Request, user: User, entry_id: PathId) -> Response:
    entry = _api(user).knowledge.get(entry_id)
    return render(request, "console_knowledge_entry.html", user=user, entry=entry, scope=_knowledge_scope(entry))


@router.post("/knowledge/entries/{entry_id:int}")
async def edit_knowledge(request: Request, user: User, entry_id: PathId) -> Response:
    form = _form(await request.form())
    fields = _knowledge_fields({**form, "enabled": form.get("enabled", "off")})
    api = _api(user)
    try:
        entry = api.knowledge.edit(entry_id, **fields)
    except InvalidInput as exc:
        entry = api.knowledge.get(entry_id)
        return render(
            request,
            "console_knowledge_entry.html",
            400,
            user=user,
            entry=entry,
            scope=_knowledge_scope(entry),
            error=str(exc),
        )
    return _go(f"{_knowledge_scope(entry).base}/knowledge?done=saved")


@router.post("/knowledge/entries/{entry_id:int}/delete")
def delete_knowledge(user: User, entry_id: PathId) -> Response:
    api = _api(user)
    scope = _knowledge_scope(api.knowledge.get(entry_id))
    api.knowledge.delete(entry_id)
    return _go(f"{scope.base}/knowledge?done=deleted")


@router.post("/knowledge/entries/{entry_id:int}/move")
def move_knowledge(user: User, entry_id: PathId, direction: Annotated[str, Form()] = "up") -> Response:
    """Move an entry one place up or down its scope's order (issue 25: lower is injected first), through
    `api.knowledge.move`; an unknown direction is one line naming the field."""
    if direction not in ("up", "down"):
        raise InvalidInput(f"field 'direction': {direction!r} is not up or down")
    api = _api(user)
    api.knowledge.move(entry_id, direction)
    return _go(f"{_knowledge_scope(api.knowledge.get(entry_id)).base}/knowledge#knowledge-{entry_id}")


# --- core memory ----------------------------------------------------------------------------------------------------


def _text(core: dict[str, Any]) -> list[str]:
    return json.dumps(core, ensure_ascii=False, indent=2, sort_keys=True).splitlines()


def diff_rows(old: dict[str, Any], new: dict[str, Any], old_label: str, new_label: str) -> list[tuple[str, str]]:
    """A unified diff (difflib) of two core memories as (kind, line) rows: add, del, hunk, same."""
    rows: list[tuple[str, str]] = []
    for line in difflib.unified_diff(_text(old), _text(new), old_label, new_label, lineterm="", n=2):
        if line.startswith(("---", "+++")):
            continue
        kind = (
            "hunk"
            if line.startswith("@@")
            else "add"
            if line.startswith("+")
            else "del"
            if line.startswith("-")
            else "same"
        )
        rows.append((kind, line))
    return rows


def _core_page(request: Request, user: WebUser, instance_id: int, status_code: int = 200, **extra: Any) -> Response:
    api = _api(user)
    instance = api.instances.get(instance_id)
    current = api.core_memory.show(instance_id)
    versions = api.core_memory.versions(instance_id)
    return render(
        request,
        "console_core.html",
        status_code,
        user=user,
        scope=Scope(instance_id=instance_id),
        name=instance.title,
        current=current,
        versions=versions,
        core_text="\n".join(_text(current["core"])),
        **extra,
    )


def _version(raw: str | None, field: str) -> int | None:
    if raw is None or raw.strip() in ("", "current"):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"field '{field}': {raw!r} is not a version number") from None
    if not 0 <= value <= INTEGER_MAX:
        raise InvalidInput(f"field '{field}': {raw!r} is not a version number")
    return value


@router.get("/instances/{instance_id:int}/core")
def core_page(request: Request, user: User, instance_id: PathId) -> Response:
    """The current core memory, every kept version with the turn that made it, and the diff of any two."""
    query = request.query_params
    extra: dict[str, Any] = {"done": query.get("done")}
    if "a" in query:
        api = _api(user)
        try:
            old, new = _version(query.get("a"), "a"), _version(query.get("b"), "b")
            if old is None:
                raise InvalidInput("field 'a': choose the version to compare from")
            before = api.core_memory.version(instance_id, old)["core"]
            after = (
                api.core_memory.show(instance_id)["core"]
                if new is None
                else api.core_memory.version(instance_id, new)["core"]
            )
        except (InvalidInput, NotFound) as exc:
            return _core_page(request, user, instance_id, 404 if isinstance(exc, NotFound) else 400, error=str(exc))
        labels = (f"v{old}", "current" if new is None else f"v{new}")
        extra.update(diff=diff_rows(before, after, *labels), diff_labels=labels, a=old, b=new)
    return _core_page(request, user, instance_id, **extra)


@router.post("/instances/{instance_id:int}/core/rollback")
def rollback_core(request: Request, user: User, instance_id: PathId, to: Annotated[str, Form()] = "") -> Response:
    """Make a kept version current again (as a new version); one that is not kept: the message, nothing changed."""
    try:
        version = _version(to, "to")
        made = _api(user).core_memory.rollback(instance_id, version)
    except (InvalidInput, NotFound) as exc:
        return _core_page(request, user, instance_id, 404 if isinstance(exc, NotFound) else 400, error=str(exc))
    return _go(f"{PREFIX}/instances/{instance_id}/core?done={made['version']}")


# --- director and review --------------------------------------------------------------------------------------------


EMOTION_TAG = re.compile(r"【[^】\n]{1,16}】")


def _without_tags(node: dict[str, Any]) -> dict[str, Any]:
    """A plot node as shown: the 【emotion】 tags its summary copied from the reply left out (the app never shows
    raw tags, issue 24)."""
    return {**node, "summary": EMOTION_TAG.sub("", str(node.get("summary") or ""))}


def _branch_param(raw: str | None) -> int | None:
    """The `?branch=` query (a leaf line's id); `InvalidInput` naming the field for anything but a whole number."""
    if raw is None or not raw.strip():
        return None
    if not raw.strip().isdigit():
        raise InvalidInput(f"field 'branch': {raw!r} is not a line id (a whole number)")
    return int(raw.strip())


def _director_page(
    request: Request,
    user: WebUser,
    instance_id: int,
    status_code: int = 200,
    *,
    branch: int | None = None,
    **extra: Any,
) -> Response:
    """The page; `branch`: the leaf whose plot nodes are shown (None: the current branch)."""
    api = _api(user)
    instance = api.instances.get(instance_id)
    branches = api.plot.branches(instance_id)
    chosen = next((b for b in branches if b["leaf"] == branch), None) if branch is not None else None
    if branch is not None and chosen is None:
        raise NotFound(f"branch {branch}: no branch of instance {instance_id} ends at that line")
    chosen = chosen or next((b for b in branches if b["current"]), None)
    return render(
        request,
        "console_director.html",
        status_code,
        user=user,
        scope=Scope(instance_id=instance_id),
        name=instance.title,
        pending=api.suggestions.list(instance_id=instance_id, status="pending", all_branches=True),
        decided=[
            s for s in api.suggestions.list(instance_id=instance_id, all_branches=True) if s["status"] != "pending"
        ],
        branches=branches,
        branch=chosen,
        branch_nodes=[_without_tags(node) for node in chosen["nodes"]] if chosen else [],
        plot=api.plot.outline(instance_id),
        **extra,
    )


@router.get("/instances/{instance_id:int}/director")
def director_page(request: Request, user: User, instance_id: PathId) -> Response:
    """Pending review suggestions, the plot nodes per branch (`?branch=` a branch's leaf line; the current one by
    default), the outline with its current point."""
    try:
        branch = _branch_param(request.query_params.get("branch"))
    except InvalidInput as exc:
        return _director_page(request, user, instance_id, 400, error=str(exc))
    return _director_page(request, user, instance_id, branch=branch, done=request.query_params.get("done"))


def _suggestion_of(api: PersonaLab, instance_id: int, suggestion_id: int) -> None:
    """The suggestion must be this instance's (a stale or crafted form naming another one: `NotFound`)."""
    if api.suggestions.get(suggestion_id)["instance_id"] != instance_id:
        raise NotFound(f"world-book suggestion {suggestion_id} does not exist")


@router.post("/instances/{instance_id:int}/director/suggestions/{suggestion_id:int}")
def decide_suggestion(
    request: Request,
    user: User,
    instance_id: PathId,
    suggestion_id: PathId,
    decision: Annotated[str, Form()] = "",
    content: Annotated[str, Form()] = "",
    keywords: Annotated[str, Form()] = "",
) -> Response:
    """Approve (with the content and keys as edited on the page) or reject a pending suggestion."""
    api = _api(user)
    _suggestion_of(api, instance_id, suggestion_id)
    try:
        if decision == "approve":
            api.suggestions.approve(suggestion_id, content=content.strip() or None, keywords=_words(keywords) or None)
        elif decision == "reject":
            api.suggestions.reject(suggestion_id)
        else:
            raise InvalidInput(f"field 'decision': {decision!r} is not approve or reject")
    except InvalidInput as exc:
        return _director_page(request, user, instance_id, 400, error=str(exc))
    return _go(f"{PREFIX}/instances/{instance_id}/director?done={decision}")


@router.post("/instances/{instance_id:int}/director/point")
def set_point(request: Request, user: User, instance_id: PathId, index: Annotated[str, Form()] = "") -> Response:
    """Set the current outline point by hand (1-based): the ones before it completed, live from the next turn."""
    api = _api(user)
    try:
        try:
            number = int(index)
        except ValueError:
            raise InvalidInput(f"field 'index': {index!r} is not a point number") from None
        api.plot.set_current_point(instance_id, number)
    except (InvalidInput, PersonaLabError) as exc:
        if not isinstance(exc, InvalidInput):
            raise
        return _director_page(request, user, instance_id, 400, error=str(exc))
    return _go(f"{PREFIX}/instances/{instance_id}/director?done=point")
