"""A bounded, thread-safe least-recently-used map: what the process keeps between turns (keyword indexes,
dialogue paths, memory vectors, the director's prefetched searches) without growing without end."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most `size` entries; `get` and `put` make an entry the most recent, the least recent goes first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> V:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value

    def pop(self, key: K) -> V | None:
        with self._lock:
            return self._items.pop(key, None)

    def discard(self, keys: Callable[[K], bool]) -> None:
        """Drop every entry whose key `keys` selects."""
        with self._lock:
            for key in [key for key in self._items if keys(key)]:
                del self._items[key]

    def items(self) -> list[tuple[K, V]]:
        """The entries now, least recent first (a copy: the map may change while the caller walks it)."""
        with self._lock:
            return list(self._items.items())

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
