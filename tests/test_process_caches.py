"""What a long-lived process keeps between turns stays bounded (issue 29: RSS growth over 1,000 back-to-back turns
under 5 %): the instances' roles, the review's LLM assessments per conversation and the knowledge / world-book
entry vectors each hold at most their bound, the least recently used going first, and a call larger than its
cache still gets every answer right."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from personalab.nodes.rules.knowledge import KnowledgeEntry
from personalab.nodes.rules.review.pipeline import AssessmentCache
from personalab.nodes.rules.review.types import LLMAssessment
from personalab.stores import memory_index, worldbook
from personalab.stores.embeddings import OfflineUSEEmbeddings
from personalab.stores.lru import LRU


def test_the_kept_roles_stay_within_their_bound() -> None:
    url = "sqlite:///roles-of-a-test.db"  # no database behind it: the process's own map only
    try:
        for instance_id in range(memory_index.ROLES_KEPT + 100):
            memory_index.keep_role(url, instance_id, instance_id % 7)
        assert len(memory_index._ROLES) == memory_index.ROLES_KEPT
        assert memory_index.kept_role(url, 0) is None  # the oldest went first, and is read again from the database
        last = memory_index.ROLES_KEPT + 99
        assert memory_index.kept_role(url, last) == last % 7
    finally:
        memory_index.clear_index_cache()


def test_the_review_keeps_the_assessments_of_its_latest_conversations_only() -> None:
    cache = AssessmentCache(size=3)
    scores = LLMAssessment(character_fidelity=0.9, immersion=0.8, world_consistency=0.7, risk=0.1)
    for conversation in ("1", "2", "3"):
        cache.put(conversation, scores)
    assert cache.get(1) == scores  # used: now the most recent
    cache.put("4", scores)
    assert cache.kept() == 3
    assert cache.get("2") is None  # the least recently used went first
    assert [cache.get(key) for key in ("1", "3", "4")] == [scores] * 3
    assert AssessmentCache().size == AssessmentCache.SIZE  # the process-wide one is bounded too


def test_entry_vectors_stay_within_their_bound_and_a_larger_call_is_still_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Six knowledge entries through a cache of four: every similarity is the one a cache large enough gives, the
    cache holds four float32 vectors, and a second search reuses what it kept."""
    model = OfflineUSEEmbeddings()
    entries = [
        KnowledgeEntry(id=f"k{index}", tag=tag, content=content)
        for index, (tag, content) in enumerate(
            [
                ("地点", "银杏镇在河的北岸，镇口有一棵老银杏。"),
                ("人物", "林小禾是莱姆的妹妹，今年十二岁。"),
                ("物品", "那封信藏在旧仓库的铁盒里。"),
                ("组织", "黑市由三个帮派轮流看守。"),
                ("天气", "废土的风季从十月开始。"),
                ("规矩", "净水片只能用旧地图换。"),
            ]
        )
    ]
    monkeypatch.setattr(worldbook, "_VECTOR_CACHE", LRU(64))
    expected = worldbook.knowledge_similarities(entries, "你妹妹多大了？", model)
    small: LRU[tuple[str, str], np.ndarray] = LRU(4)
    monkeypatch.setattr(worldbook, "_VECTOR_CACHE", small)
    got = worldbook.knowledge_similarities(entries, "你妹妹多大了？", model)
    assert got.keys() == expected.keys()
    assert all(got[key] == pytest.approx(expected[key], abs=1e-6) for key in expected)
    assert max(expected, key=lambda key: expected[key]) == "k1"
    assert len(small) == 4
    assert all(vector.dtype == np.float32 for _key, vector in small.items())

    embedded: list[str] = []
    embed = model.embed_documents

    def counted(texts: list[str]) -> list[list[float]]:
        embedded.extend(texts)
        return embed(texts)

    monkeypatch.setattr(model, "embed_documents", counted)
    worldbook.knowledge_similarities(entries[2:], "风什么时候来？", model)
    assert embedded == ["风什么时候来？"]  # the query only: the four kept (the first search's last four) were reused


ARENAS_IN_USE = """
import ctypes, os, tempfile, threading
import personalab.graph  # what the console script imports first: the allocator is set up before any thread runs
barrier = threading.Barrier(6)
def work():
    kept = [bytearray(10_000) for _ in range(50)]  # malloc'd (not Python's small-object allocator) in its arena
    barrier.wait()  # all six threads alive at once: none reuses an arena another thread left
    del kept
threads = [threading.Thread(target=work) for _ in range(6)]
for thread in threads: thread.start()
for thread in threads: thread.join()
libc = ctypes.CDLL(None)
libc.fdopen.restype = ctypes.c_void_p
with tempfile.TemporaryFile() as file:
    stream = libc.fdopen(os.dup(file.fileno()), b"w")
    libc.malloc_info(0, ctypes.c_void_p(stream)); libc.fclose(ctypes.c_void_p(stream))
    file.seek(0)
    print(file.read().count(b"<heap nr="))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc arenas")
def test_a_process_of_many_threads_keeps_two_malloc_arenas() -> None:
    """glibc would give each of six threads an arena of its own, each keeping what its thread freed (over
    back-to-back turns the arenas' free memory grew while the memory in use barely did): the product's packages cap
    them at two (`stores.allocator`), and `MALLOC_ARENA_MAX` set by the user still wins."""
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    capped = subprocess.run([sys.executable, "-c", ARENAS_IN_USE], capture_output=True, text=True, env=env, timeout=120)
    assert capped.returncode == 0, capped.stderr[-2000:]
    assert int(capped.stdout.split()[-1]) <= 2
    env["MALLOC_ARENA_MAX"] = "4"
    own = subprocess.run([sys.executable, "-c", ARENAS_IN_USE], capture_output=True, text=True, env=env, timeout=120)
    assert own.returncode == 0, own.stderr[-2000:]
    assert 2 < int(own.stdout.split()[-1]) <= 4


FREED_IN_THE_MIDDLE = """
from personalab.stores.allocator import release_freed_memory
def rss_mib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024
blocks = [bytearray(1_000) for _ in range(200_000)]  # ~200 MiB malloc'd (over Python's small-object size)
kept = blocks[::100]  # one block in a hundred stays: the heap's top cannot shrink, its middle is free
del blocks
before = rss_mib()
took_ms = release_freed_memory()
print(before, rss_mib(), took_ms)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_memory_freed_in_the_middle_of_the_heap_goes_back_to_the_system() -> None:
    """glibc returns to the system only the free memory at the top of its heap (after 1,000 back-to-back turns the
    main heap held ~75 MiB freed below memory still in use): `release_freed_memory` returns the rest."""
    done = subprocess.run([sys.executable, "-c", FREED_IN_THE_MIDDLE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    before, after, took_ms = (float(value) for value in done.stdout.split())
    assert before - after > 100, (before, after)  # of ~200 MiB freed, ~2 MiB still in use
    assert took_ms >= 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_a_turns_writes_have_the_freed_memory_released_after_the_period(
    db_url: str, data_dir: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`PERSONALAB_RELEASE_MEMORY_EVERY_S`: after a turn's writes are applied the process releases its freed memory
    within the period (on a thread of its own), and with 0 it never does."""
    import time

    from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
    from personalab.nodes.context import Context
    from personalab.stores import allocator, outbox
    from personalab.stores.background import flush_event_writes

    instance = create_sample_instance(db_url)
    for every_s, expected in (("0", False), ("0.2", True)):
        releaser = allocator.MemoryReleaser()
        monkeypatch.setattr(outbox, "MEMORY_RELEASER", releaser)
        monkeypatch.setenv("PERSONALAB_RELEASE_MEMORY_EVERY_S", every_s)
        with turn_graph(Context(database_url=db_url)) as (graph, context):
            run_turn(graph, context, instance, "我们去黑市换点水吧。")
            flush_event_writes()
        deadline = time.monotonic() + 10
        while expected and not releaser.released and time.monotonic() < deadline:
            time.sleep(0.05)
        # a drain per batch of the turn's writes: more than one release when they came more than a period apart
        assert (releaser.released >= 1) == expected, every_s
        assert (releaser.last_ms is not None) == expected
        time.sleep(1.0)  # a release still due for the last drain's writes (noted within the period) is made
        released = releaser.released
        time.sleep(0.7)  # over three periods with no writes (all flushed): an idle process is not released again
        assert releaser.released == released
