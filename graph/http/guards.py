"""What the served API refuses before a route runs (issue 14, hostile values and users kept apart).

- **Ids** in a path or query (`PathId`, `QueryId`): whole numbers from 0 to 2147483647, the range of an INTEGER
  column on every backend (docs/cli.md "Bad input"); others are a 422 naming the parameter, where
  PostgreSQL would refuse to even compare them (a 500) and SQLite overflow.
- **JSON bodies** of PersonaLab's routes (`LimitedBodyRoute`): at most `MAX_JSON_BODY_BYTES` (a character with a
  base64 avatar: `MAX_CHARACTER_BODY_BYTES`; an instance import: `library.MAX_EXPORT_BYTES`), refused with a 413 naming the limit as soon as the `Content-Length` or the bytes read
  pass it, never buffered whole. The upload routes (avatar, card, world book) read their raw body themselves, each
  up to its own limit.
- **The development server's own routes** (`DevRoutesGuard`): `langgraph dev` (the in-memory runtime) serves
  `/internal/truncate` (erase every thread, run and checkpoint), `/internal/debug/thread/{id}` (any thread's raw
  record) and `/deploy` outside its auth. With auth on they are a 404 for every caller: no user empties or reads
  another's threads through them. Without auth (the local operator) they stay as the server made them.
- **The server's metrics** (`/metrics`, served by LangGraph outside its auth): with auth on, a 401 without a valid
  token (issue 27: run counts and worker figures are the operator's, not the internet's).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Annotated, Any

from fastapi import Path, Query, Request, Response
from fastapi.routing import APIRoute
from personalab.graph.api.schemas.common import INTEGER_MAX
from personalab.graph.http.users import Unauthenticated, auth_enabled, verify
from personalab.nodes.rules.errors import PersonaLabError

MAX_JSON_BODY_BYTES = 4 * 1024 * 1024
"""A JSON body of a PersonaLab route (a background with its texts at their limits, a knowledge entry, ...)."""
MAX_CHARACTER_BODY_BYTES = 16 * 1024 * 1024
"""A character's JSON body: its texts and a base64 avatar of up to `library.MAX_AVATAR_BYTES`."""
BODY_LIMIT_KEY = "x-max-body-bytes"
"""A route's own JSON body limit, in its `openapi_extra` (shown in the OpenAPI description)."""
DEV_ROUTE_PREFIXES = ("/internal/", "/deploy")
TOKEN_ROUTES = ("/metrics", "/metrics/")
"""The server's meta routes outside its auth that need a token when auth is on."""

PathId = Annotated[int, Path(ge=0, le=INTEGER_MAX)]
QueryId = Annotated[int | None, Query(ge=0, le=INTEGER_MAX)]


class BodyTooLarge(Exception):
    """A request body over its route's limit (HTTP 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"body: the request body is over the limit of {limit} bytes")
        self.limit = limit


async def read_limited_body(request: Request, limit: int) -> bytes:
    """The request's body, refused (`BodyTooLarge`) as soon as its declared length or the bytes read pass `limit`;
    kept on the request for the route's own parsing."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # noqa: SLF001 - Starlette's cache of the body, which FastAPI's parsing reads
    return body


class LimitedBodyRoute(APIRoute):
    """A route whose JSON body is read up to its limit (`BODY_LIMIT_KEY` in `openapi_extra`, else
    `MAX_JSON_BODY_BYTES`) before FastAPI parses it. Routes without a body parameter are as FastAPI makes them."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler
        limit = int((self.openapi_extra or {}).get(BODY_LIMIT_KEY, MAX_JSON_BODY_BYTES))

        async def limited(request: Request) -> Response:
            try:
                await read_limited_body(request, limit)
            except BodyTooLarge as exc:
                return Response(
                    json.dumps({"detail": str(exc), "error": "BodyTooLarge"}),
                    status_code=413,
                    media_type="application/json",
                )
            return await handler(request)

        return limited


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class DevRoutesGuard:
    """ASGI middleware of the mounted app, which the LangGraph server applies to every request: with auth on, the
    development server's unauthenticated routes (`DEV_ROUTE_PREFIXES`) are a 404."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope.get("type") == "http" and path in TOKEN_ROUTES and auth_enabled():
            refused = await _refusal(scope)
            if refused is not None:
                await _answer(send, *refused)
                return
        if scope.get("type") not in ("http", "websocket") or not path.startswith(DEV_ROUTE_PREFIXES):
            await self.app(scope, receive, send)
            return
        if not auth_enabled():
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await _answer(send, 404, f"{path} does not exist on this server", "NotFound")


async def _refusal(scope: Scope) -> tuple[int, str, str] | None:
    """Why a request to a token route is refused (status, detail, error), None when its token is good."""
    headers = dict(scope.get("headers") or [])
    authorization = headers.get(b"authorization", b"").decode("latin-1") or None
    try:
        await asyncio.to_thread(verify, authorization)
    except Unauthenticated as exc:
        return 401, str(exc), "Unauthenticated"
    except PersonaLabError as exc:  # a bad auth setting: the server's fault, said without the secret
        return 500, str(exc), "ConfigError"
    return None


async def _answer(send: Send, status: int, detail: str, error: str) -> None:
    data = json.dumps({"detail": detail, "error": error}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
