"""Failpoints for the fault tests (issue 14): with `PERSONALAB_FAILPOINT` set to a point's name, the process acts
when a turn gets there, as `PERSONALAB_FAILPOINT_ACTION` says:
- `kill` (kill -9 at every phase of a turn): it kills itself with SIGKILL, exactly as an operator's `kill -9` or
  the OOM killer would at that moment (no clean-up, no flush, no lock release);
- `stop` (the database down mid-turn): it stops itself with SIGSTOP, so the test, which waits for the stop, can
  take the database away at that very moment and then continue the process (SIGCONT) into the outage.
`bench faults` runs turns this way and checks that nothing was lost or written twice. Unset (always, outside
those tests) a failpoint is one settings look-up.
"""

from __future__ import annotations

import os
import signal

from personalab.stores.settings import settings


def failpoint(name: str) -> None:
    """Die (SIGKILL) or stop (SIGSTOP) here if PERSONALAB_FAILPOINT names this point."""
    config = settings()
    if config.failpoint == name:
        os.kill(os.getpid(), signal.SIGSTOP if config.failpoint_action == "stop" else signal.SIGKILL)
