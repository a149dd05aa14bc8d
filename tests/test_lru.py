"""The bounded map behind every per-process cache (indexes, paths, vectors, prefetched searches)."""

from __future__ import annotations

from personalab.stores.lru import LRU


def test_the_least_recently_used_entry_goes_first() -> None:
    kept: LRU[str, int] = LRU(2)
    kept.put("a", 1)
    kept.put("b", 2)
    assert kept.get("a") == 1  # a is now the most recent
    kept.put("c", 3)
    assert (kept.get("a"), kept.get("b"), kept.get("c"), len(kept)) == (1, None, 3, 2)


def test_entries_can_be_taken_out_one_by_one_or_by_key() -> None:
    kept: LRU[tuple[str, int], str] = LRU(10)
    for n in range(3):
        kept.put(("x", n), f"x{n}")
        kept.put(("y", n), f"y{n}")
    assert kept.pop(("x", 0)) == "x0" and kept.pop(("x", 0)) is None
    kept.discard(lambda key: key[0] == "y")
    assert len(kept) == 2 and kept.get(("x", 1)) == "x1"
    kept.clear()
    assert len(kept) == 0
