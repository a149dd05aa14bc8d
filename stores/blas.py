"""NumPy's BLAS threads, set before NumPy is loaded (imported first by every package of PersonaLab).

OpenBLAS, which NumPy's wheels bundle, starts a worker thread per extra core and lets it spin after each
matrix product. On a 2-core machine that worker took the core a turn's next step needed: a query's
embedding took 25–35 ms instead of 3 in a few turns of every hundred (`personalab bench turn`). A turn's
products are small (one query, about a hundred candidates), so they lose little on one thread; bulk
embedding is about 1.4x slower. OpenBLAS reads its thread count once, when it is loaded, so this only
takes effect when it runs before the first `import numpy` of the process; a host app that imported NumPy
first keeps its own setting.
"""

from __future__ import annotations

import os


def blas_threads() -> int:
    """`PERSONALAB_BLAS_THREADS` (a whole number ≥ 1, default 1); `ValueError` naming it otherwise."""
    # read from the environment itself, not through stores.settings: this runs in every package's __init__, and
    # loading pydantic-settings there would cost every command (`personalab --help`) its import; stores.settings
    # checks the same variable with the others wherever the settings are used (`Settings.blas_threads`)
    raw = os.environ.get("PERSONALAB_BLAS_THREADS", "1").strip()
    if not raw.lstrip("+").isdigit() or int(raw) < 1:
        raise ValueError(f"PERSONALAB_BLAS_THREADS={raw!r} is not a whole number from 1")
    return int(raw)


def set_blas_threads() -> None:
    """Give OpenBLAS `blas_threads()` threads unless `OPENBLAS_NUM_THREADS` is set already. A bad setting (this
    one or any other: the settings are validated together) is left for where the settings are used to report,
    not raised at import; OpenBLAS then keeps its own default."""
    try:
        threads = blas_threads()
    except ValueError:
        return
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(threads))
