"""The HTTP app mounted in the LangGraph server (langgraph.json ``http.app``), seed 002 功能需求.

Each part of the served API is an ``APIRouter`` in its own module, included here; the routes are thin layers over
``personalab.graph.api``. FastAPI serves the OpenAPI description at ``/openapi.json``.
"""

from __future__ import annotations

from fastapi import FastAPI
from personalab.graph.http.library import router as library_router

app = FastAPI(title="PersonaLab")
app.include_router(library_router)
