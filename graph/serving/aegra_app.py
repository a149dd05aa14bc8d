"""The ASGI app `personalab serve-production` serves (issue 27): Aegra's own app (`aegra_api.main:app`: the graph,
PersonaLab's routes and auth from `langgraph.json`), with Aegra's 2 s run-wait poll replaced first by a wait on the
run's `end` event (`aegra_wait`). An Aegra whose internals differ stops each worker here with `AegraMismatch`, one
line, rather than serving on the 2 s poll (serve-production checks the same before it starts the workers)."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from personalab.graph.serving.aegra_wait import install

WAIT_MODE = install()
# one line per worker in the server's log: which wait it answers `runs/wait` and `join` with
sys.stderr.write(f"PersonaLab: run wait on Aegra (pid {os.getpid()}): {WAIT_MODE}\n")

# imported after install: a mismatch stops the worker before Aegra's app is built (by name: Aegra is in .venv312 only)
app: Any = importlib.import_module("aegra_api.main").app

__all__ = ["WAIT_MODE", "app"]
