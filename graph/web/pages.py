"""What every page of the web app shares: the templates (Jinja2, autoescape on: every piece of user text is
escaped, issue 24), the signed-in user (a token in a cookie, verified per request as the HTTP API verifies its
bearer header: no state in the process), the language, and the route class that turns PersonaLab's errors into a
page with one message."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader
from personalab.graph.http.errors import status_of
from personalab.graph.http.users import Unauthenticated, auth_enabled, verify
from personalab.graph.web.i18n import LANG_COOKIE, pick_language, translator
from personalab.nodes.rules.errors import ConfigError, PersonaLabError

PREFIX = "/app"
TOKEN_COOKIE = "personalab_token"
HERE = Path(__file__).resolve().parent
log = logging.getLogger(__name__)

templates = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True, trim_blocks=True)


@dataclass(frozen=True)
class WebUser:
    """Who the page acts for: `owner` as the API takes it (None: the local operator, auth off)."""

    owner: str | None
    name: str


class SignInNeeded(Exception):
    """No token cookie, or a refused one: the page sends the browser to the sign-in page."""


def web_user(request: Request) -> WebUser:
    """The request's user: with auth off the local operator; with auth on the user of the token cookie."""
    if not auth_enabled():
        return WebUser(owner=None, name="")
    token = request.cookies.get(TOKEN_COOKIE, "")
    if not token:
        raise SignInNeeded()
    try:
        name = verify(f"Bearer {token}")
    except Unauthenticated:
        raise SignInNeeded() from None
    return WebUser(owner=name, name=name)


def language(request: Request) -> str:
    return pick_language(request.cookies.get(LANG_COOKIE), request.headers.get("accept-language"))


def model_label() -> str | None:
    """The page's notice when turns use the offline scripted model (issue 24: labelled on the page), by the same
    rule as the model factory: `PERSONALAB_LLM=scripted`, or `auto` without `OPENAI_API_KEY`."""
    mode = os.environ.get("PERSONALAB_LLM", "auto").strip().lower()
    if mode == "scripted" or (mode != "openai" and not os.environ.get("OPENAI_API_KEY")):
        return "model_scripted"
    return None


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """A template as a page, with what every page needs (language, catalog, user, model notice)."""
    lang = language(request)
    user = context.pop("user", None)
    if user is None:
        try:
            user = web_user(request)
        except SignInNeeded:
            user = None
    html = templates.get_template(template).render(
        request=request,
        lang=lang,
        t=translator(lang),
        user=user,
        auth_on=auth_enabled(),
        model_notice=model_label(),
        prefix=PREFIX,
        path=request.url.path,
        **context,
    )
    return HTMLResponse(html, status_code=status_code)


def error_page(request: Request, message: str, status_code: int) -> HTMLResponse:
    return render(request, "error.html", status_code=status_code, message=message)


def same_origin(request: Request) -> bool:
    """A form post from this server's own pages: the browser's `Origin` (or `Referer`) names this host. Another
    site's page cannot make the browser post here (the token cookie is SameSite=Strict too)."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source or source == "null":
        return source is None  # no header: not a browser's cross-site form (curl, tests)
    return urlsplit(source).netloc == request.headers.get("host", "")


class WebRoute(APIRoute):
    """A page route: a post from another site is refused; no signed-in user sends the browser to sign in;
    PersonaLab's errors are a page with one message and the status the HTTP API would give."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page(request: Request) -> Response:
            if request.method not in ("GET", "HEAD") and not same_origin(request):
                return error_page(request, "cross-site form post refused", 403)
            try:
                return await handler(request)
            except SignInNeeded:
                if request.headers.get("hx-request"):
                    return Response(status_code=204, headers={"HX-Redirect": f"{PREFIX}/login"})
                return RedirectResponse(f"{PREFIX}/login", status_code=303)
            except ConfigError as exc:
                return error_page(request, str(exc), 500)
            except PersonaLabError as exc:
                return error_page(request, str(exc), status_of(exc))

        return page
