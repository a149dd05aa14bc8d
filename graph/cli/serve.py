"""`personalab serve`: the web app, the HTTP API and the pages on one local server (issue 24).

uvicorn runs PersonaLab's FastAPI app (graph/http/app.py) directly: the web app under `/app` and the HTTP API
beside it, on the embedded defaults (SQLite in the data folder, the offline scripted model without a model key).
`langgraph dev` serves the same app plus LangGraph's graph API (docs/web.md says when to use which).
"""

from __future__ import annotations

import argparse
import signal
import sys

from personalab.graph.api import handoff
from personalab.graph.cli.output import echo
from personalab.nodes.rules.errors import InvalidInput


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("serve", help="the web app and the HTTP API on one local server (prints the URL)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: a free one)")
    parser.add_argument("--workers", type=int, default=1, help="server processes (the pages keep no state in one)")
    parser.set_defaults(handler=serve)


def serve(args: argparse.Namespace) -> int:
    import socket

    import uvicorn

    if not 0 <= args.port <= 65535:
        raise InvalidInput(f"--port: {args.port} is not a port number (0-65535)")
    if not 1 <= args.workers <= 64:
        raise InvalidInput(f"--workers: {args.workers} is not from 1 to 64")
    # bind first, so the printed URL has the real port (with --port 0) and a taken port is one clear line
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        sock.close()
        raise InvalidInput(f"--port: cannot listen on {args.host}:{args.port} ({exc.strerror})") from None
    sock.listen(2048)  # a browser opened at once waits in the queue instead of being refused
    port = sock.getsockname()[1]
    shown = f"[{args.host}]" if ":" in args.host else args.host
    # `personalab turn` of this data folder hands its turns to this server while it runs (graph/api/handoff.py);
    # recorded before the URL is printed: whoever waits for that line can hand a turn over at once
    record = handoff.serving(f"http://{_local_address(args.host)}:{port}", warm=args.workers == 1)
    # uvicorn shuts down on SIGTERM, then raises the signal again under the handler it found: with Python's
    # default that ends the process before the `finally` below removes the record; this one ends it through it
    signal.signal(signal.SIGTERM, _exit_on_terminate)
    echo(f"PersonaLab is at http://{shown}:{port}/app  (Ctrl-C stops it)")
    sys.stdout.flush()
    app = "personalab.graph.http.app:app"
    try:
        if args.workers > 1:
            sock.close()  # uvicorn's process supervisor binds the port itself for its workers
            uvicorn.run(app, host=args.host, port=port, workers=args.workers, log_level="warning")
            return 0
        uvicorn.Server(uvicorn.Config(app, host=args.host, port=port, log_level="warning")).run(sockets=[sock])
        return 0
    finally:
        handoff.stopped_serving(record)


def _exit_on_terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _local_address(host: str) -> str:
    """Where a command on this machine reaches a server listening on `host` (any address: the loopback)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host
