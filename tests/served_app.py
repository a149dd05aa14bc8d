"""`personalab serve --port 0` started as a subprocess for tests: its own data folder under `root`, the offline
scripted model, no PERSONALAB_/OPENAI_ setting of the caller's environment; stopped (its whole process group) after."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def serve_process(root: Path, *options: str, **settings: str) -> Iterator[tuple[str, int]]:
    """`personalab serve --port 0 [options]` with the given settings; yields (the first line it prints, which names
    the app's URL, and the server's process id)."""
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PERSONALAB_", "OPENAI_"))}
    env.update(PERSONALAB_DATA_DIR=str(data), PERSONALAB_LLM="scripted", **settings)
    command = [str(Path(sys.executable).parent / "personalab"), "serve", "--port", "0", *options]
    log = (root / "server.log").open("w")
    process = subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout or ()], daemon=True).start()
    try:
        try:
            first = lines.get(timeout=120)
        except queue.Empty:
            pytest.fail(f"personalab serve printed no URL: {(root / 'server.log').read_text()}")
        yield first, process.pid
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)
        except ProcessLookupError:  # the test killed it already
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()
