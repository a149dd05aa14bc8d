"""The served graph's run context, checked before the LangGraph server creates anything (issue 14).

A client may set only the documented per-run knobs (`personalab.nodes.context.RUN_KNOBS`); storage locations,
limits and model settings come from the server's configuration. LangGraph's server would otherwise turn a run's
`context` (or, without one, its `config.configurable`) into the graph's `Context` as given, and silently drop
unknown keys. This ASGI middleware reads the body of every request that starts runs or stores a context
(runs, threads' runs, crons, batches, assistants) and answers 422 naming the field, before the run, thread or
assistant exists. It is installed on the app of langgraph.json's `http.app`, whose middleware the server applies
to its own routes too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from personalab.nodes.context import RUN_KNOBS, SERVER_FIELDS, validate_run_context
from personalab.nodes.rules.errors import InvalidInput

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# the server's routes whose body carries a run's context (POST) or an assistant's (POST, PATCH)
_RUN_PATHS = re.compile(
    r"^/(?:threads/[^/]+/)?runs(?:/stream|/wait|/batch|/crons)?/?$|^/runs/crons/[^/]+/?$|^/assistants(?:/[^/]+)?/?$"
)
_CONTEXT_FIELDS = frozenset(SERVER_FIELDS) | frozenset(RUN_KNOBS)


def check_run_body(body: Any) -> None:
    """Refuse a run (or batch, cron, assistant) body whose context sets anything but the run knobs. The
    `config.configurable` keys that are context fields are checked the same way (LangGraph uses configurable as
    the context when none is given); its other keys (thread_id, checkpoint ids, ...) are LangGraph's own."""
    if isinstance(body, list):  # /runs/batch
        for index, item in enumerate(body):
            _check_one(item, f"[{index}].")
        return
    _check_one(body, "")


def _check_one(body: Any, prefix: str) -> None:
    if not isinstance(body, dict):
        return  # not a run payload: the server's own validation answers
    validate_run_context(body.get("context"), where=f"{prefix}context")
    config = body.get("config")
    configurable = config.get("configurable") if isinstance(config, dict) else None
    if isinstance(configurable, dict):
        ours = {key: value for key, value in configurable.items() if key in _CONTEXT_FIELDS}
        validate_run_context(ours, where=f"{prefix}config.configurable")


class RunContextGuard:
    """ASGI middleware: `check_run_body` on the run-starting routes; 422 `{"detail", "error"}` on bad context."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope.get("type") != "http"
            or scope.get("method") not in ("POST", "PATCH", "PUT")
            or not _RUN_PATHS.match(str(scope.get("path", "")))
        ):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = bool(message.get("more_body"))
        body = b"".join(chunks)
        try:
            check_run_body(json.loads(body) if body.strip() else None)
        except (ValueError, RecursionError) as exc:
            if isinstance(exc, InvalidInput):
                await _answer(send, 422, {"detail": str(exc), "error": "InvalidInput"})
                return
            # not JSON: the server's own parser answers it

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _answer(send: Send, status: int, payload: dict[str, str]) -> None:
    data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
