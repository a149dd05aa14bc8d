"""An instance's dialogue over HTTP (seed 002 对话功能 / 会话实例; seed 000's tree): thin over the API's
dialogue (`Api`, graph/http/deps.py). Reading and moving the tree are plain routes (run in FastAPI's thread pool); a
regenerate or an edit is a turn, so it stays a graph run on the instance's thread (uuid5 of the instance), started
through the server's own runs API, like any turn a client starts.

| method and path | what it does |
| --- | --- |
| `GET /instances/{id}/history` (`?offset=&limit=`) | the current branch from the root, paged (negative offset: from the end) |
| `GET /instances/{id}/lines/{line_id}/siblings` | the lines beside a line, marked `on_branch` |
| `GET /instances/{id}/story-state` | the leaf and the story state of the current branch (what the next turn starts from) |
| `POST /instances/{id}/rewind` `{"line_id"}` | move the leaf back to a line of the branch |
| `POST /instances/{id}/swipe` `{"line_id"}` | make a sibling of a branch line current (with the branch under it) |
| `POST /instances/{id}/regenerate` `{"line_id"?}` | a new reply beside the last one (a graph run; answers its output) |
| `POST /instances/{id}/edit` `{"line_id", "text"}` | a new user line beside `line_id`, answered (a graph run) |
| `GET /instances/{id}/sessions`, `POST /instances/{id}/sessions` | the sessions (sittings); start a new one |

A client may also start those runs itself: input `{"instance_id", "reply_to": line}` (regenerate) or
`{"instance_id", "message", "branch_from": parent}` (edit) on thread uuid5 of the instance; a run on another
instance's thread is refused.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, status
from personalab.graph.api.dialogue import DEFAULT_PAGE, Dialogue
from personalab.graph.api.schemas.dialogue import EditRequest, LineRequest, RegenerateRequest
from personalab.graph.http.deps import Api
from personalab.graph.http.guards import LimitedBodyRoute, PathId
from personalab.nodes.rules import errors
from personalab.nodes.rules.errors import PersonaLabError
from starlette.concurrency import run_in_threadpool

router = APIRouter(route_class=LimitedBodyRoute)
TAGS: list[str | Any] = ["dialogue"]


@router.get("/instances/{instance_id}/history", tags=TAGS)
def get_history(api: Api, instance_id: PathId, offset: int = 0, limit: int = DEFAULT_PAGE) -> dict[str, Any]:
    return api.dialogue.history(instance_id, offset=offset, limit=limit)


@router.get("/instances/{instance_id}/lines/{line_id}/siblings", tags=TAGS)
def get_siblings(api: Api, instance_id: PathId, line_id: PathId) -> dict[str, Any]:
    return api.dialogue.siblings(instance_id, line_id)


@router.get("/instances/{instance_id}/story-state", tags=TAGS)
def get_story_state(api: Api, instance_id: PathId) -> dict[str, Any]:
    return api.dialogue.story_state(instance_id)


@router.post("/instances/{instance_id}/rewind", tags=TAGS)
def post_rewind(api: Api, instance_id: PathId, body: LineRequest) -> dict[str, Any]:
    return api.dialogue.rewind(instance_id, body.line_id)


@router.post("/instances/{instance_id}/swipe", tags=TAGS)
def post_swipe(api: Api, instance_id: PathId, body: LineRequest) -> dict[str, Any]:
    return api.dialogue.swipe(instance_id, body.line_id)


@router.get("/instances/{instance_id}/sessions", tags=TAGS)
def get_sessions(api: Api, instance_id: PathId) -> list[dict[str, Any]]:
    return api.dialogue.sessions(instance_id)


@router.post("/instances/{instance_id}/sessions", status_code=status.HTTP_201_CREATED, tags=TAGS)
def post_session(api: Api, instance_id: PathId) -> dict[str, Any]:
    return api.dialogue.new_session(instance_id)


async def _run_on_thread(instance_id: int, run_input: dict[str, Any], owner: str | None) -> dict[str, Any]:
    """A turn as a graph run on the instance's thread, through the server's own runs API (in-process, which the
    server's auth does not see: the route checked the instance is `owner`'s, and a thread made here is stamped
    theirs, as graph/http/auth.py stamps one a client makes); the run's output, or its error as PersonaLab's."""
    from langgraph_sdk import get_client  # only inside the server: the in-process transport needs it

    client = get_client(url=None)
    thread_id = Dialogue.thread_id(instance_id)
    metadata = {"owner": owner} if owner is not None else None
    await client.threads.create(thread_id=thread_id, if_exists="do_nothing", metadata=metadata)
    result = await client.runs.wait(thread_id, "personalab", input={"instance_id": instance_id, **run_input})
    if isinstance(result, dict) and "__error__" in result:
        error = result["__error__"] or {}
        kind = errors.error_class(error.get("error")) or PersonaLabError  # the run's error, by its class name
        raise kind(str(error.get("message") or error.get("error") or "the run failed"))
    if not isinstance(result, dict):
        raise PersonaLabError(f"the run on instance {instance_id} returned no state")
    return result


@router.post("/instances/{instance_id}/regenerate", tags=TAGS)
async def post_regenerate(api: Api, instance_id: PathId, body: RegenerateRequest) -> dict[str, Any]:
    target = await run_in_threadpool(api.dialogue.regenerate_target, instance_id, body.line_id)
    return await _run_on_thread(instance_id, {"reply_to": target}, api.owner)


@router.post("/instances/{instance_id}/edit", tags=TAGS)
async def post_edit(api: Api, instance_id: PathId, body: EditRequest) -> dict[str, Any]:
    # the new line's text and name as a turn takes them, refused before the run starts (`InvalidInput` naming
    # the field): no thread or run is made for a line that could not be stored
    api.dialogue.check_edit(body.text, body.user_name)
    parent = await run_in_threadpool(api.dialogue.edit_target, instance_id, body.line_id)
    run_input: dict[str, Any] = {"message": body.text, "branch_from": parent}
    if body.user_name is not None:
        run_input["user_name"] = body.user_name
    return await _run_on_thread(instance_id, run_input, api.owner)
