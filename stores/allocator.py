"""glibc's malloc arenas, capped at 2 before the process starts its threads (issue 29: RSS over back-to-back turns).

glibc gives each thread that allocates while another holds the main arena an arena of its own, up to 8 per core,
and an arena keeps the memory freed in it for reuse by its threads instead of returning it. A turn runs on several
threads (the graph's executor, the background writes, the warm-up, Chroma's and the model runtime's own), so every
thread's peak stayed in the process: over back-to-back turns the arenas' free memory grew while the memory in use
barely did (docs/benchmarks/2026-11-27-rss.md). Two arenas share the freed memory between the threads. glibc fixes
its arena limit when the first extra arena is made, so this only takes effect when it runs before the process's
threads allocate; `MALLOC_ARENA_MAX` in the environment (read by glibc itself at start) wins.

An arena also keeps what was freed in the middle of it: glibc returns to the system only the free memory at the top
of its heap. After 1,000 back-to-back turns the main heap held ~75 MiB of freed memory
(docs/benchmarks/2026-12-06-session15.md). `MemoryReleaser` asks glibc to return it (`malloc_trim(0)`) every
`PERSONALAB_RELEASE_MEMORY_EVERY_S` seconds while the process writes memories, on a thread of its own (the call
leaves the interpreter lock), off every turn's path.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from functools import cache
from typing import Any

ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)

log = logging.getLogger(__name__)


def cap_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas at `arenas` unless `MALLOC_ARENA_MAX` is set; False where there is no glibc
    (macOS, Windows, musl's stub) or the call was refused."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    mallopt = _glibc_function("mallopt")
    return mallopt is not None and bool(mallopt(_M_ARENA_MAX, arenas))


@cache  # looked up once: every drain of a turn's writes asks for malloc_trim
def _glibc_function(name: str) -> Any | None:
    """glibc's `mallopt(int, int)` or `malloc_trim(size_t)` as a ctypes function returning int, or None where there is
    none (not Linux; musl has no `malloc_trim`)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        function = ctypes.CDLL(None)[name]
    except (OSError, AttributeError):
        return None
    arguments: dict[str, list[Any]] = {"mallopt": [ctypes.c_int, ctypes.c_int], "malloc_trim": [ctypes.c_size_t]}
    function.argtypes = arguments[name]
    function.restype = ctypes.c_int
    return function


def release_freed_memory() -> float | None:
    """Return the memory the process freed to the system (`malloc_trim(0)`: every arena's free pages, not only its
    top). Returns the milliseconds it took, None where there is no glibc."""
    trim = _glibc_function("malloc_trim")
    if trim is None:
        return None
    started = time.perf_counter()
    trim(0)  # a ctypes call: the interpreter lock is left while glibc works
    return (time.perf_counter() - started) * 1000


class MemoryReleaser:
    """Releases the freed memory (`release_freed_memory`) at most every `every_s` seconds, and only after memory
    writes were noted since the last time (`note_writes`: a process at rest is not woken). The thread starts at
    the first note and is a daemon: it never holds a process open."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._every_s = 0.0
        self._thread: threading.Thread | None = None
        self._dirty = False
        self.released = 0  # times released
        self.last_ms: float | None = None

    def note_writes(self, every_s: float) -> None:
        if every_s <= 0 or _glibc_function("malloc_trim") is None:
            return
        with self._lock:
            self._dirty = True
            self._every_s = every_s
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="memory-releaser", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                every_s = self._every_s
            time.sleep(every_s)
            with self._lock:
                dirty, self._dirty = self._dirty, False
            if not dirty:
                continue
            try:
                self.last_ms = release_freed_memory()
                self.released += 1
            except Exception as exc:  # noqa: BLE001 - only the process's size depends on it
                log.debug("freed memory not released: %s", exc)


MEMORY_RELEASER = MemoryReleaser()
