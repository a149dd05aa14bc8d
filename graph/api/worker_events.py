"""A turn played in a worker thread, its events read as they come (the web app's streamed turn, a turn handed to
the running server: issues 24 and 29).

`WorkerEvents(work)` starts `work(put)` in a daemon thread: whatever it `put`s (reply tokens, the final state, an
error) comes out of `next()` / iteration in order, and the end comes when `work` returns or raises (an exception
`work` lets through ends the events without one: `work` reports its own failures as events). The reader may go
away: the thread finishes its turn anyway, so the instance is freed and nothing is left half-written.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

END: Any = object()
"""What `next()` returns once the worker is done."""


class WorkerEvents:
    """The events `work(put)` puts, from its own daemon thread named `name`."""

    def __init__(self, work: Callable[[Callable[[Any], None]], None], name: str) -> None:
        self._events: queue.Queue[Any] = queue.Queue()

        def run() -> None:
            try:
                work(self._events.put)
            finally:
                self._events.put(END)

        threading.Thread(target=run, name=name, daemon=True).start()

    def next(self) -> Any:
        """The next event, waiting for it; `END` when the worker is done (blocking: async readers run it in a
        thread)."""
        return self._events.get()

    def __iter__(self) -> Iterator[Any]:
        while (event := self.next()) is not END:
            yield event
