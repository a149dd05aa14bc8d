"""Back-to-back turns (issue 29): a turn's queued writes are applied in two phases — the memory and record rows, the
mention marks and the keyword index first, the vectors and events after — and the instance's next retrieval (the next
turn's, the memory console's "try it") waits only for the first: it finds the fact the previous turn told by keyword
and by vector at once (its vector path scores the memories whose vectors are still being written). No row is marked
applied before its vectors are in Chroma: a process killed between the phases loses nothing, and the next process
writes what it left. Real SQLite and PostgreSQL, real Chroma, the offline USE model, the offline scripted chat model."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from personalab.graph.api.preview import preview_retrieval
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.stores import outbox
from personalab.stores.background import flush_event_writes
from personalab.stores.memory import MemoryStore
from personalab.stores.memory_index import PENDING_VECTORS
from test_outbox import (
    ASK,
    FACT,
    FILLER,
    IMPORTANT,
    ONE_TURN,
    assert_each_write_once,
    personalab_turn,
    rows,
    scripted_data_folder,
)


class VectorsDown:
    """The memories' vectors cannot be written (Chroma refuses the upserts of `MemoryStore.put_vectors`) while
    `down`: the rows stay queued, retried, and whatever the next retrievals find of them they find with the vectors
    not written. Each vector search that scored memories whose vectors were pending keeps their texts."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.down = True
        self.pending_seen: list[list[str]] = []
        real_put, real_pending = MemoryStore.put_vectors, MemoryStore._with_pending

        def put(store: MemoryStore, *args: Any, **kwargs: Any) -> None:
            if self.down:
                raise ConnectionError("Chroma refuses the upsert (test)")
            real_put(store, *args, **kwargs)

        def seen_pending(
            store: MemoryStore, instance_id: int, character_id: int, embedding: np.ndarray, hits: Any, n: int
        ) -> list[tuple[int, float]]:
            place = (store._chroma_path(), store._collection(instance_id, character_id).name)
            pending = PENDING_VECTORS.of(place)
            if pending:
                self.pending_seen.append(list(pending.values()))
            return real_pending(store, instance_id, character_id, embedding, hits, n)

        monkeypatch.setattr(MemoryStore, "put_vectors", put)
        monkeypatch.setattr(MemoryStore, "_with_pending", seen_pending)

    def back_up(self, url: str, instance: int) -> None:
        """Chroma takes the upserts again: every queued write is applied, each once, every memory with its vector."""
        self.down = False
        outbox.cancel_retries()
        flush_event_writes()
        outbox.apply_pending(url)
        flush_event_writes()
        assert not rows(url, instance, applied=False)
        assert_each_write_once(url, instance)


@pytest.fixture
def vectors_down(monkeypatch: pytest.MonkeyPatch) -> Iterator[VectorsDown]:
    down = VectorsDown(monkeypatch)
    yield down
    down.down = False
    outbox.cancel_retries()
    flush_event_writes()


def _fact_found(memories: list[dict[str, Any]], paths: Any) -> list[dict[str, Any]]:
    """The memories holding the told fact, each with the retrieval paths that found it."""
    return [(m, set(paths(m))) for m in memories if "十二岁" in str(m.get("content"))]  # type: ignore[misc]


def test_the_next_turns_find_the_told_fact_by_keyword_and_vector_before_its_vectors_are_written(
    db_url: str, data_dir: Path, vectors_down: VectorsDown
) -> None:
    instance = create_sample_instance(db_url)
    # the retrieval gets time on a loaded machine (no timing is asserted)
    with turn_graph(Context(database_url=db_url, rag_timeout_s=30.0, **ONE_TURN)) as (graph, context):
        run_turn(graph, context, instance, FACT, selected_choice=IMPORTANT)
        run_turn(graph, context, instance, FILLER)  # back to back: no pause, no flush
        asked = run_turn(graph, context, instance, ASK)
    assert any(FACT in text for texts in vectors_down.pending_seen for text in texts)
    assert rows(db_url, instance, applied=False)  # the fact's vectors were never written
    found = _fact_found(asked["retrieved"], lambda m: (m.get("breakdown") or {}).get("paths") or {})
    assert found, [m["content"] for m in asked["retrieved"]]
    assert any({"bm25", "vector"} <= paths for _, paths in found), found
    vectors_down.back_up(db_url, instance)


def test_try_it_right_after_the_turns_finds_their_fact_by_keyword_and_vector(
    db_url: str, data_dir: Path, vectors_down: VectorsDown, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_RECALL_TURNS", "1")  # "try it" reads the setting, as the turn's own retrieval
    instance = create_sample_instance(db_url)
    # the retrieval gets time on a loaded machine (no timing is asserted)
    with turn_graph(Context(database_url=db_url, rag_timeout_s=30.0, **ONE_TURN)) as (graph, context):
        run_turn(graph, context, instance, FACT, selected_choice=IMPORTANT)
        run_turn(graph, context, instance, FILLER)
    vectors_down.pending_seen.clear()
    tried = preview_retrieval(instance, ASK, db_url)  # at once, the turns' vectors not written
    assert any(FACT in text for texts in vectors_down.pending_seen for text in texts)
    found = _fact_found(tried["memories"], lambda m: m.get("trigger") or [])
    assert any({"bm25", "vector"} <= paths for _, paths in found), tried["memories"]
    vectors_down.back_up(db_url, instance)


KILLED_BETWEEN = """
import sys
from personalab.graph.runner import run_turn, turn_graph
from personalab.nodes.context import Context

# PERSONALAB_FAILPOINT=during_writes: the writer kills the process (SIGKILL) once the turn's rows are stored,
# before their vectors and events are written
with turn_graph(Context()) as (graph, context):
    state = run_turn(graph, context, int(sys.argv[1]), sys.argv[2], selected_choice={"level": "important"})
    print(state["reply"], flush=True)
    from personalab.stores.background import flush_event_writes
    flush_event_writes()
print("not killed", flush=True)
"""


def test_a_process_killed_between_the_phases_loses_nothing(data_dir: Path, tmp_path: Path) -> None:
    """A real `kill -9` after the rows' commit, before the vectors (SQLite, the default data folder): every row is
    still queued; the next `personalab turn` process writes the vectors the stored rows lack, stores nothing twice,
    and its retrieval finds the fact by vector too."""
    url, instance, env = scripted_data_folder(data_dir)
    script = tmp_path / "killed_between.py"
    script.write_text(KILLED_BETWEEN, encoding="utf-8")
    killed = subprocess.run(
        [sys.executable, str(script), str(instance), FACT],
        env={**env, "PERSONALAB_FAILPOINT": "during_writes"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    # between the phases: the rows are stored, none of the turn's writes is marked applied, no vector written
    store = MemoryStore(db_url=url)
    stored = store.list_memories(instance, include_record=True)
    assert any(FACT in m.content for m in stored)
    assert {row.kind for row in rows(url, instance, applied=False)} >= {"event", "record"}
    assert rows(url, instance, applied=True) == [] or all(r.kind == "review" for r in rows(url, instance, applied=True))
    assert store.vectorless(instance, [m.line_id for m in stored])

    for message in (FILLER, ASK):  # the fact two turns back reaches the prompt only from the memories
        nxt = personalab_turn(env, instance, message)
        assert nxt.returncode == 0, nxt.stderr
    retrieved = json.loads(nxt.stdout)["retrieved_events"]
    assert any("十二岁" in item["content"] for item in retrieved), retrieved
    assert not rows(url, instance, applied=False)
    assert store.vectorless(instance, [m.line_id for m in store.list_memories(instance, include_record=True)]) == []
    assert_each_write_once(url, instance)
