"""glibc's malloc arenas, capped at 2 before the process starts its threads (issue 29: RSS over back-to-back turns).

glibc gives each thread that allocates while another holds the main arena an arena of its own, up to 8 per core,
and an arena keeps the memory freed in it for reuse by its threads instead of returning it. A turn runs on several
threads (the graph's executor, the background writes, the warm-up, Chroma's and the model runtime's own), so every
thread's peak stayed in the process: over back-to-back turns the arenas' free memory grew while the memory in use
barely did (docs/benchmarks/2026-11-27-rss.md). Two arenas share the freed memory between the threads. glibc fixes
its arena limit when the first extra arena is made, so this only takes effect when it runs before the process's
threads allocate; `MALLOC_ARENA_MAX` in the environment (read by glibc itself at start) wins.
"""

from __future__ import annotations

import os
import sys

ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


def cap_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas at `arenas` unless `MALLOC_ARENA_MAX` is set; False where there is no glibc
    (macOS, Windows, musl's stub) or the call was refused."""
    if not sys.platform.startswith("linux") or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, arenas))
