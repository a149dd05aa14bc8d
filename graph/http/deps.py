"""What each request's route gets: the API bound to the request's user and the served database (FastAPI `Depends`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from personalab.graph.api.facade import PersonaLab
from personalab.graph.http.users import Owner


def request_api(owner: Owner) -> PersonaLab:
    """The API bound to the request's owner (None without auth) and the server's configured database."""
    return PersonaLab(owner=owner)


Api = Annotated[PersonaLab, Depends(request_api)]
"""A route's parameter: the API acting for the request's user."""
