"""Failpoints for the fault tests (issue 14: kill -9 at every phase of a turn): with `PERSONALAB_FAILPOINT` set to a
point's name the process kills itself with SIGKILL when a turn gets there, exactly as an operator's `kill -9` or
the OOM killer would at that moment (no clean-up, no flush, no lock release). `bench faults` runs turns this way
and checks that nothing was lost or written twice. Unset (always, outside those tests) a failpoint is one settings
look-up.
"""

from __future__ import annotations

import os
import signal

from personalab.stores.settings import settings


def failpoint(name: str) -> None:
    """Die here (SIGKILL) if PERSONALAB_FAILPOINT names this point."""
    if settings().failpoint == name:
        os.kill(os.getpid(), signal.SIGKILL)
