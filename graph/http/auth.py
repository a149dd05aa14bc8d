"""The LangGraph server's custom auth (`langgraph.json` `auth.path`, issue 14): every request's user, and what each
user may see and do among the server's own resources (threads, runs, crons, assistants, the store).

`authenticate` verifies the request's credential by `PERSONALAB_AUTH` (graph/http/users.py): 401 when it is
missing or refused, its message never repeating the credential. With `PERSONALAB_AUTH=none` every request is the
local operator and no handler restricts anything: the server behaves as before users existed.

With auth on, a user's threads, runs and crons carry `metadata.owner` (stamped here, whatever the client sent) and
every read, search, update, delete and run is filtered to them, so another user's thread or run is a 404 and lists
never show it. Besides:
- a thread id that is the thread of an instance (uuid5, `Dialogue.thread_id`) can only be created for
  one of the user's own instances;
- a run or cron whose `input.instance_id` is an instance of another user is refused (404 naming the field) before it
  exists; the graph itself refuses a run whose instance is not its thread's;
- assistants are the server's (one per graph): users read them, and may not create, change or delete them;
- the store: a user's items live under namespaces that start with their user id.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any

from langgraph_sdk import Auth
from personalab.graph.api import library
from personalab.graph.api.dialogue import Dialogue
from personalab.graph.http.users import Unauthenticated, auth_enabled, verify
from personalab.nodes.rules.errors import PersonaLabError

auth = Auth()
OWNER = "owner"


def _authorization(headers: Mapping[Any, Any]) -> str | None:
    """The Authorization header from the server's headers: `langgraph dev` passes them with bytes keys and values,
    Aegra with str ones (issue 27)."""
    for key, value in headers.items():
        name = key.decode("latin-1") if isinstance(key, bytes) else str(key)
        if name.lower() == "authorization":
            return value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return None


@auth.authenticate
async def authenticate(headers: Mapping[Any, Any]) -> Auth.types.MinimalUserDict:
    # one parameter named `headers`: langgraph-api hands the handler its parameters by name, Aegra passes the
    # headers positionally (an `authorization` parameter would get Aegra's whole headers dict)
    authorization = _authorization(headers)
    try:
        user = await asyncio.to_thread(verify, authorization)
    except Unauthenticated as exc:
        raise Auth.exceptions.HTTPException(status_code=401, detail=str(exc)) from None
    except PersonaLabError as exc:  # a bad auth setting: the server's fault, said without the secret
        raise Auth.exceptions.HTTPException(status_code=500, detail=str(exc)) from None
    return {"identity": user, "is_authenticated": True}


def _not_found(detail: str) -> Auth.exceptions.HTTPException:
    return Auth.exceptions.HTTPException(status_code=404, detail=detail)


def _stamp(value: Any, user: str) -> None:
    """Set `metadata.owner` of a thread, run or cron being made or changed to its user, in place: the server keeps
    its own reference to the metadata it passed."""
    metadata = value.get("metadata")
    if isinstance(metadata, dict):
        metadata[OWNER] = user
    else:
        value["metadata"] = {OWNER: user}


async def _check_input(run_input: Any, user: str | None, where: str) -> None:
    """Refuse a run or cron input whose `instance_id` is another user's instance or no instance at all (issue 28:
    a 404 naming it before the run exists, not a run that fails inside with a traceback); `user` None: auth is off,
    only existence is checked. A bad id (not a whole number) is the run-input check's (`run_context`)."""
    if not isinstance(run_input, dict):
        return
    instance_id = run_input.get("instance_id")
    if isinstance(instance_id, bool) or not isinstance(instance_id, int):
        return
    exists, owner = await asyncio.to_thread(library.instance_owner, instance_id)
    if not exists or (user is not None and owner != user):
        raise _not_found(f"{where}.instance_id: instance {instance_id} does not exist")


async def _check_thread_id(thread_id: Any, user: str) -> None:
    """A client-chosen thread id of the instance kind (uuid5) must be the thread of one of the user's instances:
    nobody takes another user's instance thread before its owner does."""
    if thread_id is None:
        return
    try:
        chosen = uuid.UUID(str(thread_id))
    except ValueError:
        return  # not a UUID: the server answers it
    if chosen.version != 5:
        return
    mine = await asyncio.to_thread(library.instance_ids_of, user)
    if str(chosen) not in {Dialogue.thread_id(instance_id) for instance_id in mine}:
        raise _not_found(f"thread_id: {chosen} is not the thread of one of your instances")


@auth.on.threads.create
async def on_thread_create(
    ctx: Auth.types.AuthContext, value: Auth.types.ThreadsCreate
) -> Auth.types.FilterType | None:
    if not auth_enabled():
        return None
    await _check_thread_id(value.get("thread_id"), ctx.user.identity)
    _stamp(value, ctx.user.identity)
    return {OWNER: ctx.user.identity}  # an existing thread (if_exists="do_nothing") must be theirs too


@auth.on.threads.create_run
async def on_run_create(ctx: Auth.types.AuthContext, value: Auth.types.RunsCreate) -> Auth.types.FilterType | None:
    kwargs = value.get("kwargs") or {}
    run_input = kwargs.get("input") if isinstance(kwargs, dict) else None
    if not auth_enabled():
        await _check_input(run_input, None, "input")
        return None
    await _check_input(run_input, ctx.user.identity, "input")
    _stamp(value, ctx.user.identity)
    return {OWNER: ctx.user.identity}


@auth.on.threads
async def on_threads(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> Auth.types.FilterType | None:
    """Read, search, update, delete of threads and their runs and state: the user's only."""
    if not auth_enabled():
        return None
    if ctx.action == "update":
        _stamp(value, ctx.user.identity)  # an update cannot hand a thread to someone else
    return {OWNER: ctx.user.identity}


@auth.on.crons.create
async def on_cron_create(ctx: Auth.types.AuthContext, value: Auth.types.CronsCreate) -> None:
    if not auth_enabled():
        return None
    payload = value.get("payload") or {}
    await _check_input(payload.get("input") if isinstance(payload, dict) else None, ctx.user.identity, "input")
    await _check_thread_id(value.get("thread_id"), ctx.user.identity)
    _stamp(value, ctx.user.identity)
    return None


@auth.on.crons
async def on_crons(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> Auth.types.FilterType | None:
    if not auth_enabled():
        return None
    if ctx.action == "update":
        _stamp(value, ctx.user.identity)
    return {OWNER: ctx.user.identity}


@auth.on.assistants
async def on_assistants(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> Auth.types.FilterType | None:
    """Assistants are the server's: readable by every user, made and changed by none (a user's assistant would
    carry its config into other users' runs)."""
    if not auth_enabled() or ctx.action in ("read", "search"):
        return None
    raise Auth.exceptions.HTTPException(status_code=403, detail="assistants are the server's: users cannot change them")


@auth.on.store
async def on_store(ctx: Auth.types.AuthContext, value: dict[str, Any]) -> None:
    """The store: a user's namespaces start with their user id; a search or listing without one gets it."""
    if not auth_enabled():
        return None
    user = ctx.user.identity
    namespace = tuple(value.get("namespace") or ())
    if ctx.action in ("search", "list_namespaces") and not namespace:
        value["namespace"] = (user,)
        return None
    if not namespace or namespace[0] != user:
        raise Auth.exceptions.HTTPException(status_code=403, detail=f"namespace: must start with your user id {user!r}")
    return None


@auth.on
async def on_anything_else(ctx: Auth.types.AuthContext, value: Any) -> bool | None:
    """Anything the server adds later: refused for users until a handler says who owns it."""
    return None if not auth_enabled() else False
