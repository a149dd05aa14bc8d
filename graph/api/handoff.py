"""A turn handed to the running web app's server (issue 29: `personalab turn` when `personalab serve` runs).

Both sides of one exchange, `POST /local/turn` (graph/http/handoff.py) in newline-delimited JSON:
- the command (`turn_on_server`) sends the turn's input and the local token of `<data folder>/local-server.json`
  (`stores.local_server`); it imports nothing heavy, so the process costs a fraction of a second beside the turn;
- the server (`handed_turn_events`) runs the same `run_turn` the command would run in-process, on its own loaded
  engine, and answers the reply's tokens as they come (`{"token"}`), then the turn's final state (`{"state"}`), or
  the PersonaLab error the turn raised (`{"error": {"kind", "message"}}`), which the command raises again: the
  same output, the same one-line errors and the same exit codes as the in-process path.

The turn runs with the server's settings (its model, its limits): the server is the one that plays the data folder.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from personalab.nodes.rules import errors
from personalab.nodes.rules.errors import PersonaLabError
from personalab.stores.local_server import LocalServer, drop_record, keep_record, running_server, token_accepted

__all__ = ["LocalServer", "ServerUnreachable", "handed_turn_events", "running_server", "token_accepted"]

log = logging.getLogger(__name__)

PATH = "/local/turn"
TOKEN_HEADER = "X-PersonaLab-Local-Token"


class ServerUnreachable(Exception):
    """The recorded server did not take the turn (nothing was sent): the command plays it in-process instead."""


class ServerStopped(PersonaLabError):
    """The server stopped answering after the turn was handed to it."""


def serving(url: str, *, warm: bool) -> LocalServer:
    """Record that this process serves the data folder at `url` (`personalab serve`, until `stopped_serving`);
    `warm`: start loading the turn's models and store now (this process plays the turns), so that the first turn
    handed over or played in the browser does not pay for them."""
    record = keep_record(url)
    if warm:
        from personalab.stores.vectors import chroma_path
        from personalab.stores.warmup import warm_up_async

        warm_up_async(chroma_path())
    return record


def stopped_serving(record: LocalServer) -> None:
    drop_record(record)


def turn_on_server(server: LocalServer, instance_id: int, message: str, **extra: Any) -> Iterator[dict[str, Any]]:
    """Hand one turn to `server`; yields its events (`token`, then `state` or `error`). Raises `ServerUnreachable`
    when the turn could not be sent, `ServerStopped` when the answer broke off after it was."""
    import http.client

    address = urlsplit(server.url)
    body = json.dumps(
        {"instance_id": instance_id, "message": message, "run_id": str(uuid.uuid4()), **extra}, ensure_ascii=False
    ).encode("utf-8")
    connection = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port or 80, timeout=600)
    try:
        try:
            connection.request(
                "POST",
                PATH,
                body=body,
                headers={"Content-Type": "application/json", TOKEN_HEADER: server.token},
            )
            response = connection.getresponse()
        except OSError as exc:  # refused, reset before an answer: the server is not there (or not any more)
            raise ServerUnreachable(f"{server.url}: {exc}") from None
        if response.status != 200:
            detail = response.read(2000).decode("utf-8", "replace")
            raise ServerUnreachable(f"{server.url} answered {response.status}: {detail}")
        ended = False
        try:
            for raw in response:
                event = json.loads(raw)
                ended = "state" in event or "error" in event
                yield event
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise ServerStopped(f"the server at {server.url} stopped answering during the turn ({exc})") from None
        if not ended:
            raise ServerStopped(f"the server at {server.url} stopped answering during the turn")
    finally:
        connection.close()


def raise_handed_error(error: dict[str, Any]) -> None:
    """Raise the error the server's turn raised: the same PersonaLab error class and message."""
    kind = errors.error_class(error.get("kind"))
    message = str(error.get("message", ""))
    if kind is not None:
        raise kind(message)
    raise ServerStopped(f"the server's turn failed: {message}")


def handed_turn_events(body: Any) -> Iterator[dict[str, Any]]:
    """The server's side: validate the handed turn now (`InvalidInput` naming the field), then run it in a thread;
    the iterator yields its events as they come."""
    from personalab.graph.api.schemas.handoff import HandedTurn
    from pydantic import ValidationError

    try:
        turn = HandedTurn.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "body"
        raise errors.InvalidInput(f"field '{field}': {first['msg']}") from None
    return _played(turn)


def _played(turn: Any) -> Iterator[dict[str, Any]]:
    from personalab.graph.api.support import store_unavailable
    from personalab.graph.api.worker_events import WorkerEvents
    from personalab.graph.runner import run_turn, turn_graph

    def play(put: Callable[[dict[str, Any]], None]) -> None:
        extra = turn.model_dump(exclude={"instance_id", "message", "run_id"})
        try:
            with turn_graph() as (graph, ctx):
                state = run_turn(
                    graph,
                    ctx,
                    turn.instance_id,
                    turn.message,
                    on_token=lambda text: put({"token": text}),
                    run_id=turn.run_id,
                    **extra,
                )
            put({"state": json.loads(json.dumps(state, default=str))})
        except PersonaLabError as exc:
            put({"error": {"kind": type(exc).__name__, "message": str(exc)}})
        except Exception as exc:  # noqa: BLE001 - the command says what failed; the server's log has the rest
            unavailable = store_unavailable(exc)
            if unavailable is not None:
                put({"error": {"kind": type(unavailable).__name__, "message": str(unavailable)}})
            else:
                log.exception("handed turn failed")
                put({"error": {"kind": "internal", "message": f"{type(exc).__name__}: {exc}"}})

    yield from WorkerEvents(play, "personalab-handed-turn")
