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
    """`PERSONALAB_BLAS_THREADS` (a whole number ≥ 1, default 1); `ConfigError` naming it otherwise."""
    # imported here: this module runs first in every package's __init__, before the rest of PersonaLab exists;
    # stores.settings imports nothing of PersonaLab at module level and does not load NumPy
    from personalab.stores.settings import settings

    return settings().blas_threads


def set_blas_threads() -> None:
    """Give OpenBLAS `blas_threads()` threads unless `OPENBLAS_NUM_THREADS` is set already. A bad setting (this
    one or any other: the settings are validated together) is left for where the settings are used to report,
    not raised at import; OpenBLAS then keeps its own default."""
    try:
        threads = blas_threads()
    except ValueError:
        return
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(threads))
