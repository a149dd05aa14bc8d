"""The web app (issue 24): server-rendered pages (Jinja2) with htmx, over `personalab.graph.api` and the runner,
served under `/app` by PersonaLab's own FastAPI app (graph/http/app.py), so one server gives the graph API, the
HTTP API and the pages. See docs/web.md."""
