"""The memory and event collections persist their vector index every `SYNC_THRESHOLD` writes (issue 29: at Chroma's
default 1,000 every write also paid for the writes not yet persisted, 52 → 82 ms for an upsert of two memories), new
collections and those an earlier version made alike, with nothing stored lost."""

from __future__ import annotations

from pathlib import Path

import chromadb
from chromadb.config import Settings as ChromaSettings
from personalab.stores.vectors import SYNC_THRESHOLD, get_collection


def sync_threshold(path: Path, name: str) -> int:
    client = chromadb.PersistentClient(path=str(path), settings=ChromaSettings(anonymized_telemetry=False))
    return int(client.get_collection(name).configuration_json["hnsw"]["sync_threshold"])


def test_a_new_collection_persists_its_index_every_sync_threshold_writes(tmp_path: Path) -> None:
    store = get_collection("memories_7_7", str(tmp_path / "chroma"))
    store.add_texts(["雷娜害怕黑暗"], metadatas=[{"instance_id": 7}], ids=["1"])
    assert SYNC_THRESHOLD < 1000
    assert store._collection.configuration_json["hnsw"]["sync_threshold"] == SYNC_THRESHOLD
    assert store._collection.configuration_json["hnsw"]["space"] == "cosine"


def test_a_collection_an_earlier_version_made_gets_the_threshold_and_keeps_its_vectors(tmp_path: Path) -> None:
    path = tmp_path / "chroma"
    client = chromadb.PersistentClient(path=str(path), settings=ChromaSettings(anonymized_telemetry=False))
    old = client.get_or_create_collection("events_8_8", embedding_function=None, metadata={"hnsw:space": "cosine"})
    old.add(ids=["a", "b"], embeddings=[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], documents=["桥", "塔"])
    assert old.configuration_json["hnsw"]["sync_threshold"] == 1000  # Chroma's default, as before issue 29

    store = get_collection("events_8_8", str(path))

    assert store._collection.configuration_json["hnsw"]["sync_threshold"] == SYNC_THRESHOLD
    assert store._collection.count() == 2
    found = store._collection.query(query_embeddings=[[0.9, 0.1, 0.0]], n_results=1)
    assert found["ids"] == [["a"]]
    assert sync_threshold(path, "events_8_8") == SYNC_THRESHOLD  # stored, not only this process's view
