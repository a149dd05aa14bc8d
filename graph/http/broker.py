"""Redis gone under Aegra (issue 27 "Bad input": a request to a process whose Redis went away gets a clear 503,
nothing half-written, and the server is usable again when Redis is back; docs/deployment.md "Production serving on
Aegra").

Aegra (`personalab serve-production`, `REDIS_BROKER_ENABLED=true`) queues each run in Redis and streams it through
Redis pub/sub. With Redis away, a run-starting route first stores the run (`pending`) and marks the thread busy in
PostgreSQL, then fails to queue it in Redis: the client got a 500 (an unhandled `redis.ConnectionError`), and the
stored run was still played later (Aegra's workers fall back to polling PostgreSQL for pending runs, and its reaper
queues them again), so the client's next turn answered "instance N is busy" or found a turn it was told had failed.

- `BrokerGuard` (ASGI middleware of the mounted app, which Aegra applies to its own routes too): before a route that
  starts or streams a run, Redis is asked `PING` on a connection of its own (about a millisecond on a LAN); no
  answer is a 503 `StoreUnavailable` naming Redis, and Aegra never sees the request: no run stored, nothing played
  later. Under `langgraph dev` (no Redis broker) it does nothing.
- `install_broker_errors`: a Redis error that still escapes a route (Redis went away between the `PING` and the
  route's own use of it) is a 503 naming Redis as well, not a 500. The run such a route stored before failing is
  Aegra's: it plays it later (that window is milliseconds wide; see docs/deployment.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PING_TIMEOUT_S = 2.0
"""How long the guard waits for Redis to connect and to answer `PING` (each)."""
# the routes that need Redis at once: those that start a run (queued in Redis) and the one that streams a run
# (Redis pub/sub); joining a run and reading runs, threads and state need PostgreSQL only
_STARTS_RUN = re.compile(
    r"^/(?:threads/[^/]+/)?runs(?:/stream|/wait|/batch)?/?$|^/threads/[^/]+/(?:commands|stream/events)/?$"
)
_STREAMS_RUN = re.compile(r"^/threads/[^/]+/runs/[^/]+/stream/?$")


def broker_url() -> str | None:
    """The Redis URL of Aegra's broker when this process serves on Aegra with it (`serve-production` sets both
    variables), else None."""
    if os.environ.get("REDIS_BROKER_ENABLED", "").strip().lower() not in ("1", "true", "yes", "on"):
        return None
    return os.environ.get("REDIS_URL") or "redis://localhost:6379/0"


def unavailable_message(reason: str, *, refused: bool = True) -> str:
    """The 503's `detail`: `refused` when nothing of the request was done (the guard), else what escaped a route."""
    done = "the run was not started" if refused else "the request did not finish"
    return f"Redis, the server's run queue, cannot be reached ({reason}): {done}; try again when it is back"


async def redis_unreachable(url: str, timeout: float = PING_TIMEOUT_S) -> str | None:
    """Why Redis at `url` does not answer (`connection refused`, `timed out`, `connection closed`: no address, the
    answer may go to any client), or None when it answers `PING` with anything (`+PONG`, or an error such as
    `-NOAUTH`: it is there). `rediss://` (TLS): a TCP connection is enough (no handshake here, whose certificate
    checks are Aegra's). A URL that is no TCP address (a unix socket) is not checked (None)."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return None
    host, port = parts.hostname or "localhost", parts.port or 6379
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except TimeoutError:
        return "timed out"
    except OSError as exc:
        return _reason(exc)
    try:
        if parts.scheme == "rediss":
            return None
        writer.write(b"PING\r\n")
        await asyncio.wait_for(writer.drain(), timeout)
        answer = await asyncio.wait_for(reader.readline(), timeout)
    except TimeoutError:
        return "no answer in time"
    except OSError as exc:
        return _reason(exc)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return None if answer else "connection closed"


def _reason(exc: OSError) -> str:
    """What went wrong, without the address (the event loops put it in their messages)."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionError):
        return "connection lost"
    name = errno.errorcode.get(exc.errno) if exc.errno is not None else None
    return f"connection failed ({name})" if name else "connection failed"


class BrokerGuard:
    """ASGI middleware: under Aegra with its Redis broker, a run-starting or run-streaming request while Redis does
    not answer is a 503 `StoreUnavailable` naming Redis, before Aegra stores anything."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        url = broker_url()
        if url is not None and _needs_redis(scope):
            reason = await redis_unreachable(url)
            if reason is not None:
                where = urlsplit(url)
                log.warning(
                    "Redis at %s:%s unreachable (%s): %s %s answered 503",
                    where.hostname, where.port or 6379, reason, scope.get("method"), scope.get("path"),
                )  # fmt: skip
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1013, "reason": "Redis cannot be reached"})
                    return
                await _answer(send, 503, unavailable_message(reason))
                return
        await self.app(scope, receive, send)


def _needs_redis(scope: Scope) -> bool:
    path = str(scope.get("path", ""))
    if scope.get("type") == "websocket":
        return bool(_STARTS_RUN.match(path))
    if scope.get("type") != "http":
        return False
    method = scope.get("method")
    return (method == "POST" and bool(_STARTS_RUN.match(path))) or (method == "GET" and bool(_STREAMS_RUN.match(path)))


async def _answer(send: Send, status: int, detail: str) -> None:
    data = json.dumps({"detail": detail, "error": "StoreUnavailable"}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def _redis_error(_request: Request, exc: Exception) -> JSONResponse:
    log.warning("a Redis error reached the client as a 503: %s", exc)
    reason = "connection lost" if "Connection" in type(exc).__name__ else type(exc).__name__
    return JSONResponse({"detail": unavailable_message(reason, refused=False), "error": "StoreUnavailable"}, 503)


def install_broker_errors(app: FastAPI) -> None:
    """A Redis error escaping any route answers 503 naming Redis (Aegra's own handler answers 500). Redis is
    Aegra's dependency, not PersonaLab's: without it installed (`langgraph dev`) there is nothing to catch."""
    try:
        errors = importlib.import_module("redis.exceptions")
    except ImportError:
        return
    app.add_exception_handler(errors.RedisError, _redis_error)
