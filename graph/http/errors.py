"""PersonaLab's errors as HTTP answers, for every router of the app (graph/http/app.py): the message names the
field or id, and the status tells the kind. Anything that is not a `PersonaLabError` is a bug and stays a 500.

- `InvalidInput` (a bad field, an outline of 0 or 51 points, an avatar that is no image) → 422
- `NotFound`, `InstanceNotFound` (an unknown id) → 404
- `InUse` (a character or background instances use, deleted without cascade), `InstanceBusy` (a turn runs) → 409
- `StoreUnavailable` (the database cannot be opened or written) → 503
- `Unauthenticated` (no or a refused bearer token; graph/http/users.py) → 401
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from personalab.graph.api.library import InUse
from personalab.graph.http.users import Unauthenticated
from personalab.nodes.rules.errors import InstanceBusy, InvalidInput, NotFound, PersonaLabError, StoreUnavailable

STATUS: tuple[tuple[type[PersonaLabError], int], ...] = (
    (InUse, 409),  # before InvalidInput, which it is too
    (InstanceBusy, 409),
    (NotFound, 404),
    (InvalidInput, 422),
    (StoreUnavailable, 503),
    (Unauthenticated, 401),
)


def status_of(exc: PersonaLabError) -> int:
    return next((status for kind, status in STATUS if isinstance(exc, kind)), 400)


async def _answer(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PersonaLabError)
    return JSONResponse({"detail": str(exc), "error": type(exc).__name__}, status_code=status_of(exc))


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(PersonaLabError, _answer)
