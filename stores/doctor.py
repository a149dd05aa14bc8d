"""`personalab doctor` (issue 14): what a deployment's stores say about their health, and the repairs that are safe.

Checks, one finding each:
- **outbox**: queued writes not applied yet (`stores.outbox`): how many, per instance, the oldest, how many failed
  and the last error. A write queued less than `IN_FLIGHT_S` ago and never failed is in flight, not a problem.
  Repair: apply them now (backoff or not; a row another live process is applying is left to it).
- **vectors**: orphan vectors (Chroma entries of a memory collection whose memory row is gone: left by a write whose
  commit failed, or by an instance deleted while Chroma was down) and memories without a vector (a Chroma store
  lost or restored from an older backup). Repair: delete the orphans, embed the missing again.
- **locks**: turn locks whose lease expired (a crashed holder; `stores.turns`). Repair: free them.
- **duplicates**: user lines stored twice (issue 27: a run replayed by a restarted server before runs had an
  identity): two user lines of one instance with the same text under the same parent. Reported with their ids, for
  the operator to look at (an edit that kept the text makes such a pair too); never repaired.
- **checkpoints**: per thread, its checkpoints and their bytes, and bytes per stored turn of its instance. More than
  one checkpoint in a thread can be pruned (only the latest is read); repair prunes them. Reported, never a problem.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from personalab.stores.checkpoints import checkpoint_sizes, prune_thread, thread_id_for
from personalab.stores.db import session_scope
from personalab.stores.memory_index import collection_name
from personalab.stores.memory_tables import MemoryEntry
from personalab.stores.outbox import apply_pending, pending_summary
from personalab.stores.outbox_tables import OutboxWrite
from personalab.stores.tables import Line, Save
from personalab.stores.turn_tables import TurnLock, TurnRecord
from personalab.stores.vectors import COLLECTION_METADATA, chroma_client, chroma_path
from sqlalchemy import delete, func
from sqlalchemy import select as sql_select
from sqlmodel import col, select

IN_FLIGHT_S = 60.0
_MEMORY_COLLECTION = re.compile(r"^memories_(\d+)_(\d+)$")


@dataclass
class Finding:
    """One line of the report: `status` ok | problem | info | repaired."""

    check: str
    status: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not any(f.status == "problem" for f in self.findings)

    def add(self, check: str, status: str, message: str, **data: Any) -> None:
        self.findings.append(Finding(check, status, message, data))

    def to_dict(self) -> dict[str, Any]:
        return {"healthy": self.healthy, "findings": [asdict(f) for f in self.findings]}


# --------------------------------------------------------------------------------------------------
# outbox


def _check_outbox(report: Report, url: str | None) -> None:
    summary = pending_summary(url)
    if not summary["pending"]:
        report.add("outbox", "ok", "no queued writes waiting")
        return
    with session_scope(url) as session:
        stale = datetime.now(UTC) - timedelta(seconds=IN_FLIGHT_S)
        waiting = session.exec(
            select(func.count()).where(
                col(OutboxWrite.applied_at).is_(None),
                (col(OutboxWrite.attempts) > 0) | (col(OutboxWrite.created_at) < stale),
            )
        ).one()
    instances = ", ".join(f"instance {i}: {n}" for i, n in summary["per_instance"].items())
    text = f"{summary['pending']} queued write(s) not applied ({instances}), oldest {summary['oldest']}"
    if summary["set_aside"]:
        text += f"; {summary['set_aside']} set aside (refused by the stores)"
    if summary["failing"]:
        last = summary["last_error"] or {}
        text += f"; {summary['failing']} failed at least once, last: {last.get('key')}: {last.get('error')}"
    status = "problem" if waiting else "info"
    if not waiting:
        text += " (in flight)"
    report.add("outbox", status, text, **summary)


# --------------------------------------------------------------------------------------------------
# vectors


def _memory_collections(path: str) -> dict[str, Any]:
    client = chroma_client(path)
    found = {}
    for item in client.list_collections():
        name = item if isinstance(item, str) else item.name
        if _MEMORY_COLLECTION.match(name):
            found[name] = client.get_collection(name)
    return found


def _vector_state(url: str | None, path: str) -> tuple[dict[str, list[str]], dict[tuple[int, int], list[int]]]:
    """(orphans: collection → vector ids without a memory row, missing: (instance, character) → memory ids
    without a vector)."""
    collections = _memory_collections(path)
    with session_scope(url) as session:
        rows = session.exec(select(MemoryEntry.id, MemoryEntry.instance_id, MemoryEntry.character_id)).all()
    stored: dict[str, set[str]] = {}
    for memory_id, instance_id, character_id in rows:
        stored.setdefault(collection_name(instance_id, character_id), set()).add(str(memory_id))
    orphans: dict[str, list[str]] = {}
    in_chroma: dict[str, set[str]] = {}
    for name, collection in collections.items():
        ids = set(collection.get(include=[])["ids"])
        in_chroma[name] = ids
        extra = sorted(ids - stored.get(name, set()), key=int)
        if extra:
            orphans[name] = extra
    missing: dict[tuple[int, int], list[int]] = {}
    for name, ids in stored.items():
        lacking = ids - in_chroma.get(name, set())
        if lacking:
            match = _MEMORY_COLLECTION.match(name)
            assert match is not None  # collection_name's own pattern
            missing[(int(match[1]), int(match[2]))] = sorted(int(i) for i in lacking)
    return orphans, missing


def _check_vectors(report: Report, url: str | None, path: str) -> None:
    orphans, missing = _vector_state(url, path)
    if not orphans and not missing:
        report.add("vectors", "ok", "every memory has its vector and every vector its memory")
    for name, ids in orphans.items():
        report.add(
            "vectors", "problem", f"{len(ids)} orphan vector(s) in {name} (their memory rows are gone)", collection=name
        )
    for (instance_id, character_id), memory_ids in missing.items():
        report.add(
            "vectors",
            "problem",
            f"instance {instance_id}: {len(memory_ids)} memory(ies) of character {character_id} without a vector",
            instance_id=instance_id,
            character_id=character_id,
        )


def _repair_vectors(report: Report, url: str | None, path: str) -> None:
    from personalab.stores.embeddings import get_embeddings
    from personalab.stores.memory import MemoryStore

    orphans, missing = _vector_state(url, path)
    collections = _memory_collections(path)
    for name, ids in orphans.items():
        collections[name].delete(ids=ids)
        report.add("vectors", "repaired", f"removed {len(ids)} orphan vector(s) from {name}", collection=name)
    for (instance_id, character_id), memory_ids in missing.items():
        with session_scope(url) as session:
            entries = session.exec(select(MemoryEntry).where(col(MemoryEntry.id).in_(memory_ids))).all()
        if not entries:
            continue
        vectors = get_embeddings().embed_documents([entry.content for entry in entries])
        collection = chroma_client(path).get_or_create_collection(
            collection_name(instance_id, character_id), metadata=COLLECTION_METADATA
        )
        collection.upsert(
            ids=[str(entry.id) for entry in entries],
            embeddings=[list(map(float, vector)) for vector in vectors],
            metadatas=[MemoryStore._metadata(entry) for entry in entries],
            documents=[entry.content for entry in entries],
        )
        report.add(
            "vectors",
            "repaired",
            f"instance {instance_id}: embedded {len(entries)} memory(ies) of character {character_id} again",
            instance_id=instance_id,
        )


# --------------------------------------------------------------------------------------------------
# locks


def _check_locks(report: Report, url: str | None, repair: bool) -> None:
    now = time.time()
    with session_scope(url) as session:
        locks = session.exec(select(TurnLock).where(col(TurnLock.expires_at) < now)).all()
        if not locks:
            report.add("locks", "ok", "no expired turn locks")
            return
        for lock in locks:
            since = "an unknown time" if lock.acquired_at is None else _when(lock.acquired_at)
            text = (
                f"instance {lock.save_id}: turn lock of {lock.holder or 'an unknown process'} since {since},"
                f" lease expired at {_when(lock.expires_at)}"
            )
            if repair:
                # only if it is still that expired lock: a turn may have taken the instance meanwhile
                session.exec(
                    delete(TurnLock).where(
                        col(TurnLock.save_id) == lock.save_id,
                        col(TurnLock.token) == lock.token,
                        col(TurnLock.expires_at) < time.time(),
                    )
                )
                report.add("locks", "repaired", f"freed {text}", instance_id=lock.save_id)
            else:
                report.add("locks", "problem", text, instance_id=lock.save_id)


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------------------
# duplicated user lines


def _check_duplicates(report: Report, url: str | None) -> None:
    with session_scope(url) as session:
        groups = session.execute(  # six columns: SQLAlchemy's select (SQLModel's types take four)
            sql_select(
                col(Line.save_id),
                col(Line.parent_line_id),
                col(Line.content),
                func.count(),
                func.min(Line.id),
                func.max(Line.id),
            )
            .where(col(Line.attribute) == "user")
            .group_by(col(Line.save_id), col(Line.parent_line_id), col(Line.content))
            .having(func.count() > 1)
        ).all()
    if not groups:
        report.add("duplicates", "ok", "no user line stored twice")
        return
    for save_id, parent, content, count, first, last in groups:
        text = str(content)
        shown = text if len(text) <= 40 else text[:40] + "…"
        report.add(
            "duplicates",
            "problem",
            f"instance {save_id}: the user line {shown!r} is stored {count} times under line {parent}"
            f" (lines {first} … {last})",
            instance_id=save_id,
            parent_line_id=parent,
            count=count,
        )


# --------------------------------------------------------------------------------------------------
# checkpoints


def _check_checkpoints(report: Report, url: str | None, repair: bool) -> None:
    sizes = checkpoint_sizes(url)
    with session_scope(url) as session:
        instances = {thread_id_for(i): int(i) for i in session.exec(select(Save.id)).all() if i is not None}
        turns = dict(
            session.exec(
                select(TurnRecord.save_id, func.count())
                .where(col(TurnRecord.status) == "ok")
                .group_by(col(TurnRecord.save_id))
            ).all()
        )
    if repair:
        for thread, entry in list(sizes.items()):
            if entry["checkpoints"] > 1 and thread in instances:
                prune_thread(thread, url)
                report.add(
                    "checkpoints",
                    "repaired",
                    f"instance {instances[thread]}: pruned to its latest checkpoint ({entry['checkpoints']} before)",
                )
        sizes = checkpoint_sizes(url)
    total_bytes = sum(entry["bytes"] for entry in sizes.values())
    total_turns = sum(int(turns.get(instances[t], 0)) for t in sizes if t in instances)
    per_turn = round(total_bytes / total_turns) if total_turns else None
    report.add(
        "checkpoints",
        "info",
        f"{len(sizes)} thread(s), {sum(e['checkpoints'] for e in sizes.values())} checkpoint(s), {total_bytes:,} bytes"
        + (f", {per_turn:,} bytes per stored turn" if per_turn is not None else ""),
        threads=len(sizes),
        bytes=total_bytes,
        turns=total_turns,
        bytes_per_turn=per_turn,
    )
    for thread, entry in sorted(sizes.items()):
        instance = instances.get(thread)
        count = int(turns.get(instance, 0)) if instance is not None else 0
        owner = f"instance {instance}" if instance is not None else f"thread {thread} (no instance)"
        text = f"{owner}: {entry['checkpoints']} checkpoint(s), {entry['bytes']:,} bytes"
        if count:
            text += f", {count} turn(s), {round(entry['bytes'] / count):,} bytes per turn"
        if entry["checkpoints"] > 1:
            text += f"; {entry['checkpoints'] - 1} can be pruned"
        report.add(
            "checkpoints",
            "info",
            text,
            thread_id=thread,
            instance_id=instance,
            checkpoints=entry["checkpoints"],
            bytes=entry["bytes"],
            turns=count,
        )


# --------------------------------------------------------------------------------------------------


def diagnose(url: str | None = None, *, repair: bool = False, chroma: str | None = None) -> Report:
    """Run every check (and, with `repair`, every safe repair first); the report lists what remains."""
    path = chroma or chroma_path()
    report = Report()
    if repair:
        totals = apply_pending(url, path)
        if totals["applied"]:
            report.add("outbox", "repaired", f"applied {totals['applied']} queued write(s)", **totals)
        _repair_vectors(report, url, path)
    _check_outbox(report, url)
    _check_vectors(report, url, path)
    _check_locks(report, url, repair)
    _check_duplicates(report, url)
    _check_checkpoints(report, url, repair)
    return report
