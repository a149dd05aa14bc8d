"""PersonaLab's errors as HTTP answers, for every router of the app (graph/http/app.py): the message names the
field or id, and the status tells the kind. Anything that is not a `PersonaLabError` is a bug and stays a 500.

- `InvalidInput` (a bad field, an outline of 0 or 51 points, an avatar that is no image) → 422
- `NotFound`, `InstanceNotFound` (an unknown id) → 404
- `InUse` (a character or background instances use, deleted without cascade), `InstanceBusy` (a turn runs) → 409
- `StoreUnavailable` (the database cannot be opened or written) → 503
- `Unauthenticated` (no or a refused bearer token; graph/http/users.py) → 401
- a request FastAPI cannot validate (a wrong type, a missing field, an id out of range) → 422 naming each field
  (`body.name: String should have at most 500 characters`), without echoing the value: a value that is no text
  (a lone surrogate) could not even be written into the answer, and a huge one would come back whole
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from personalab.graph.api.library import InUse
from personalab.graph.http.users import Unauthenticated
from personalab.nodes.rules.errors import (
    InstanceBusy,
    InvalidInput,
    NotAllowed,
    NotFound,
    PersonaLabError,
    StoreUnavailable,
)

STATUS: tuple[tuple[type[PersonaLabError], int], ...] = (
    (InUse, 409),  # before InvalidInput, which it is too
    (InstanceBusy, 409),
    (NotFound, 404),
    (NotAllowed, 403),
    (InvalidInput, 422),
    (StoreUnavailable, 503),
    (Unauthenticated, 401),
)


def status_of(exc: PersonaLabError) -> int:
    return next((status for kind, status in STATUS if isinstance(exc, kind)), 400)


async def _answer(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PersonaLabError)
    return JSONResponse({"detail": str(exc), "error": type(exc).__name__}, status_code=status_of(exc))


def field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    """FastAPI's validation errors without the values they were given: where, what, and the kind."""
    return [
        {
            "loc": [str(part) for part in error.get("loc", ())],
            "msg": str(error.get("msg", "")),
            "type": error.get("type"),
        }
        for error in exc.errors()
    ]


async def _invalid(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = field_errors(exc)
    detail = "; ".join(f"{'.'.join(error['loc'])}: {error['msg']}" for error in errors[:5]) or "invalid request"
    return JSONResponse({"detail": detail, "error": "InvalidInput", "errors": errors}, status_code=422)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(PersonaLabError, _answer)
    app.add_exception_handler(RequestValidationError, _invalid)
