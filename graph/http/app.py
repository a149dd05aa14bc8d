"""The HTTP app mounted in the LangGraph server (langgraph.json ``http.app``), seed 002 功能需求.

Each part of the served API is an ``APIRouter`` in its own module, included here; the routes are thin layers over
``personalab.graph.api``. FastAPI serves the OpenAPI description at ``/openapi.json``. PersonaLab's errors become
4xx answers naming the field or id (graph/http/errors.py).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from personalab.graph.http import dialogue
from personalab.graph.http.admin import router as admin_router
from personalab.graph.http.broker import BrokerGuard, install_broker_errors
from personalab.graph.http.errors import install_error_handlers
from personalab.graph.http.guards import DevRoutesGuard
from personalab.graph.http.handoff import router as handoff_router
from personalab.graph.http.library import router as library_router
from personalab.graph.http.memory import router as memory_router
from personalab.graph.http.personas import router as personas_router
from personalab.graph.http.run_context import RunContextGuard
from personalab.graph.http.statistics import router as statistics_router
from personalab.graph.http.story import router as story_router
from personalab.graph.http.trigger_config import router as trigger_config_router
from personalab.graph.http.worldbook import router as worldbook_router
from personalab.graph.web.console_pages import router as console_router
from personalab.graph.web.memory_pages import router as memory_pages_router
from personalab.graph.web.persona_pages import router as persona_pages_router
from personalab.graph.web.routes import fallback_router as web_fallback_router
from personalab.graph.web.routes import router as web_router
from personalab.graph.web.stats_pages import router as stats_pages_router

app = FastAPI(title="PersonaLab")
install_error_handlers(app)
# under Aegra: a Redis error escaping a route is a 503 naming Redis, not a 500 (issue 27; graph/http/broker.py)
install_broker_errors(app)
# under Aegra: a run asked for while Redis is away is a 503 before Aegra stores it (innermost: after the checks below)
app.add_middleware(BrokerGuard)
# a served run's context may set the run knobs only (issue 14); the server applies this app's middleware to all
app.add_middleware(RunContextGuard)
# with auth on, the development server's unauthenticated routes (/internal/*, /deploy) are closed (issue 14)
app.add_middleware(DevRoutesGuard)
app.include_router(library_router)
app.include_router(personas_router)
app.include_router(dialogue.router)
app.include_router(worldbook_router)
app.include_router(trigger_config_router)
app.include_router(story_router)
app.include_router(memory_router)
app.include_router(admin_router)
app.include_router(statistics_router)
app.include_router(handoff_router)  # `personalab turn` handing its turn to `personalab serve` (issue 29)
# the web app's pages under /app (graph/web): the app (issue 24), the memory console and its statistics (issue 25);
# last, the page for any other /app/… path
app.include_router(web_router)
app.include_router(console_router)
app.include_router(stats_pages_router)
app.include_router(persona_pages_router)
app.include_router(memory_pages_router)
app.include_router(web_fallback_router)


@app.get("/", include_in_schema=False)
def root() -> RedirectResponse:
    """A browser opening the server's address gets the web app."""
    return RedirectResponse("/app/instances", status_code=307)
