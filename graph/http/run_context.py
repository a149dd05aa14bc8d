"""The served graph's run context, checked before the LangGraph server creates anything (issue 14).

A client may set only the documented per-run knobs (`personalab.graph.api.runs`); storage locations,
limits and model settings come from the server's configuration. LangGraph's server would otherwise turn a run's
`context` (or, without one, its `config.configurable`) into the graph's `Context` as given, and silently drop
unknown keys. This ASGI middleware reads the body of every request that starts runs or stores a context
(runs, threads' runs, crons, batches, assistants) and answers 422 naming the field, before the run, thread or
assistant exists. It is installed on the app of langgraph.json's `http.app`, whose middleware the server applies
to its own routes too.

The v2 event-streaming protocol starts runs too (`run.start` over `POST /threads/{id}/commands` and the WebSocket
`/threads/{id}/stream/events`), with the command's `params.config.configurable` as the run's context: its commands
are checked the same way (`check_command`), a WebSocket's bad command answered in the protocol's own error envelope.

The same middleware checks a run's `input` (`check_run_input`, issue 14 hostile values): only the graph's input
fields (`TurnInput`), an `instance_id` / `reply_to` / `branch_from` that is a whole number from 0 to 2147483647, and
a message, user name and host lines the turn could store (text without NUL characters or lone surrogates, within
`PERSONALAB_MAX_MESSAGE_CHARS`, `PERSONALAB_MAX_USER_NAME_CHARS`, `PERSONALAB_MAX_HOST_LINES`): anything else is a
422 naming `input.<field>` before the run exists, where the run would otherwise be made and fail inside.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from personalab.graph.api.runs import CONTEXT_FIELDS, INPUT_FIELDS, check_run_context, turn_limits
from personalab.graph.api.schemas.common import INTEGER_MAX
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.turn_input import check_turn_input, check_user_name
from personalab.nodes.rules.validation import bad_character, json_type

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# the server's routes whose body carries a run's context (POST) or an assistant's (POST, PATCH)
_RUN_PATHS = re.compile(
    r"^/(?:threads/[^/]+/)?runs(?:/stream|/wait|/batch|/crons)?/?$|^/runs/crons/[^/]+/?$|^/assistants(?:/[^/]+)?/?$"
    r"|^/threads/[^/]+/commands/?$"
)
# the v2 event-streaming protocol's WebSocket, whose `run.start` commands start runs as the routes above do
_PROTOCOL_SOCKET = re.compile(r"^/threads/[^/]+/stream/events/?$")
_RUN_COMMANDS = ("run.start", "input.respond")
_CONTEXT_FIELDS = CONTEXT_FIELDS


def check_command(command: Any) -> None:
    """A v2 event-streaming command (`POST /threads/{id}/commands`, or a WebSocket message): a `run.start` or
    `input.respond` is checked as a run body (its `params`); the server passes their `config.configurable` to the
    run as its context, so without this check a client could set `database_url` there (issue 14)."""
    if isinstance(command, dict) and command.get("method") in _RUN_COMMANDS:
        _check_one(command.get("params"), "params.")


def check_run_body(body: Any) -> None:
    """Refuse a run (or batch, cron, assistant) body whose context sets anything but the run knobs. The
    `config.configurable` keys that are context fields are checked the same way (LangGraph uses configurable as
    the context when none is given); its other keys (thread_id, checkpoint ids, ...) are LangGraph's own."""
    if isinstance(body, list):  # /runs/batch
        for index, item in enumerate(body):
            _check_one(item, f"[{index}].")
        return
    _check_one(body, "")


_INPUT_FIELDS = INPUT_FIELDS
_ID_FIELDS = ("instance_id", "reply_to", "branch_from")


def check_run_input(run_input: Any, where: str = "input") -> None:
    """Refuse a served run's `input` the turn could not take (`InvalidInput` naming `where.<field>`); None (a run
    that resumes or only streams) passes. Whether the instance exists, is the caller's and is the thread's is the
    auth's and the graph's."""
    if run_input is None:
        return
    if not isinstance(run_input, dict):
        raise InvalidInput(f"{where} must be an object with the turn's fields, got {json_type(run_input)}")
    unknown = sorted(set(run_input) - set(_INPUT_FIELDS))
    if unknown:
        raise InvalidInput(f"{where}.{unknown[0]} is not an input of the turn (fields: {', '.join(_INPUT_FIELDS)})")
    for name in _ID_FIELDS:
        value = run_input.get(name)
        if value is None and name != "instance_id":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INTEGER_MAX:
            raise InvalidInput(f"{where}.{name} must be a whole number from 0 to {INTEGER_MAX}, got {json_type(value)}")
    ctx = turn_limits()
    message = run_input.get("message")
    if message is None and run_input.get("reply_to") is not None:
        message = "-"  # a regenerate's message is its stored user line
    for name, value in (("message", message), ("user_name", run_input.get("user_name"))):
        bad = bad_character(value) if isinstance(value, str) else None
        if bad:
            raise InvalidInput(f"{where}.{name} contains {bad}")
    try:
        check_turn_input(message, run_input.get("lines_before"), ctx.max_message_chars, ctx.max_host_lines)
    except InvalidInput as exc:
        text = str(exc)
        field = "lines_before" if text.startswith(("lines_before", "line")) else "message"
        raise InvalidInput(f"{where}.{field}: {text}") from None
    try:
        check_user_name(run_input.get("user_name"), ctx.max_user_name_chars)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}.user_name: {exc}") from None


def _check_one(body: Any, prefix: str) -> None:
    if not isinstance(body, dict):
        return  # not a run payload: the server's own validation answers
    check_run_context(body.get("context"), f"{prefix}context")
    if "input" in body:
        check_run_input(body["input"], where=f"{prefix}input")
    payload = body.get("payload")  # a cron's run
    if isinstance(payload, dict) and "input" in payload:
        check_run_input(payload["input"], where=f"{prefix}payload.input")
    config = body.get("config")
    configurable = config.get("configurable") if isinstance(config, dict) else None
    if isinstance(configurable, dict):
        ours = {key: value for key, value in configurable.items() if key in _CONTEXT_FIELDS}
        check_run_context(ours, f"{prefix}config.configurable")


class RunContextGuard:
    """ASGI middleware: `check_run_body` on the run-starting routes; 422 `{"detail", "error"}` on bad context."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if scope.get("type") == "websocket" and _PROTOCOL_SOCKET.match(path):
            await self.app(scope, _checked_socket(receive, send), send)
            return
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
            parsed = json.loads(body) if body.strip() else None
            if path.rstrip("/").endswith("/commands"):
                check_command(parsed)
            else:
                check_run_body(parsed)
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


def _checked_socket(receive: Receive, send: Send) -> Receive:
    """The socket's `receive`, which answers a run command with a bad context or input itself, as the protocol
    answers a bad command (`{"type": "error", "error": "invalid_argument", ...}`), and never passes it on."""

    async def checked() -> Message:
        while True:
            message = await receive()
            if message.get("type") != "websocket.receive":
                return message
            raw = message.get("text") if message.get("text") is not None else message.get("bytes")
            try:
                command = json.loads(raw) if raw else None
                check_command(command)
            except InvalidInput as exc:
                error = {
                    "type": "error",
                    "id": command.get("id") if isinstance(command, dict) else None,
                    "error": "invalid_argument",
                    "message": str(exc),
                }
                await send({"type": "websocket.send", "text": json.dumps(error, ensure_ascii=False)})
                continue
            except (ValueError, RecursionError):
                pass  # not JSON: the protocol answers it
            return message

    return checked


async def _answer(send: Send, status: int, payload: dict[str, str]) -> None:
    data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
