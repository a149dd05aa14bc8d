"""Durable writes (issue 14; seed 002 事件写入异步执行): the store writes a turn queues for after its reply go through
the `outbox` table (`stores.outbox_tables`).

- **Queued in the turn's transaction.** `queue_writes` inserts the rows (one executemany) in the transaction that
  stores what they come from: the reply's lines and turn record (`write_back`: the event, the dialogue record, the
  mention marks, and the turn's review itself), the review's effects (`review`: the turn's memories). A crash after
  that commit loses none of them; a turn that fails before it queues none.
- **The review, held for its node.** The queued review (`review_write`) is claimed in this process's name for
  `REVIEW_HOLD_S`; drains pass over it without stopping. The review node settles it in the transaction of its
  effects (`store_turn_review`); a process that died first has its holds released at the next start-up on the host
  (`release_dead_holds`; elsewhere the hold lapses), and the outbox then reviews the turn with seed 003's rules. A
  review node that failed (the database went down after the reply) has its hold released by the process's next
  drain of the instance (`review_failed`), once the database answers, not after `REVIEW_HOLD_S`.
- **Applied at least once, in order per instance.** `apply_soon` puts a drain of the instance's rows on the
  instance's background writer (`stores.background`: after the turn that queued them ends, waited for by the
  instance's next turn: read your writes). A drain applies the instance's due rows oldest first and stops at the
  first that fails, so a later write never lands before an earlier one.
- **Idempotent.** An event is an upsert by its id (`i<instance>-l<line>`); memories, record entries and mention
  marks mark their row applied in the transaction of their own write; besides, record entries skip lines already
  recorded, a turn's memories those already stored for its reply line, and mention marks count once per turn, so a
  row replayed by hand writes nothing twice either. Chroma's upsert of a memory's vector runs inside that transaction: if Chroma fails nothing is
  stored; if the commit fails a vector may be left without its row (an orphan: never returned, since vector hits
  are checked against the database; `personalab doctor --repair` removes it).
- **Retried with backoff.** A failing row keeps its error, counts the attempt and waits 1, 2, 4 … s (at most
  `MAX_BACKOFF_S`) before the next; this process retries it then. While Chroma or the database is down a turn
  still plays and its writes wait here. A row the stores refuse as such (`InvalidInput`, `NotFound`) is set aside
  instead of blocking the instance's later writes; `personalab doctor` reports it and `--repair` tries it again.
- **Claimed, so never applied by two processes at once.** A drain claims a row (`claimed_by`, `claimed_until`:
  one conditional UPDATE, atomic on SQLite and PostgreSQL) before applying it, and commits each of its writes only
  while the claim is still its own (`_hold_claims`, `_Claim`: a claim that lapsed under load and was taken over by
  another drain rolls the write back, issue 27); a row claimed by a live process stops the other's drain of that
  instance.
- **Resumed at start-up.** `resume_pending` (graph open in-process, the served graph's load) drains every instance
  with rows left by a process that died; `apply_pending` (`personalab doctor --repair`) applies them at once.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.nodes.rules.injection import used_memory_ids
from personalab.nodes.rules.review.pipeline import EventBus, get_review_pipeline
from personalab.nodes.rules.review.turn import StoredTurn, review_key, review_outcome
from personalab.stores.allocator import MEMORY_RELEASER
from personalab.stores.background import run_in_background, writes_visible
from personalab.stores.db import session_scope, store_unavailable
from personalab.stores.embeddings import embed_stored_texts, embed_stored_texts_soon
from personalab.stores.events import write_event
from personalab.stores.failpoints import failpoint
from personalab.stores.memory import MemoryStore, mark_mentioned_in, stored_text
from personalab.stores.outbox_tables import OutboxWrite
from personalab.stores.review import save_review_effects
from personalab.stores.settings import settings
from personalab.stores.tables import utcnow
from personalab.stores.turns import holder_is_gone, holder_name
from personalab.stores.vectors import chroma_path, get_collection
from sqlalchemy import delete, func, insert, not_, or_, update
from sqlmodel import Session, col, select

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 300.0  # the longest wait between two attempts of a failing write
CLAIM_S = 30.0  # how long a claim keeps other processes off a row (a crashed applier's claim lapses then)
KEEP_APPLIED = timedelta(days=1)  # applied rows are kept this long (what was written, for an operator), then purged
# this process's claims, `host:pid:<process>:<claim>` (`holder_name`): a claim left by a process of this host that is
# gone (killed, or ended while the database was down) is taken over at once instead of after CLAIM_S
_PROCESS = uuid.uuid4().hex[:12]


# --------------------------------------------------------------------------------------------------
# Queueing (in the caller's transaction)


def write_row(kind: str, instance_id: int, key: str, payload: dict[str, Any]) -> dict[str, Any]:
    """One queued write as the outbox row `queue_writes` inserts."""
    if kind not in APPLIERS:
        raise ValueError(f"unknown outbox write kind {kind!r}")
    return {"kind": kind, "instance_id": instance_id, "key": key, "payload": payload}


def queue_writes(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Insert the writes (`write_row`) in the caller's transaction, in one executemany: they commit, or roll
    back, with what they come from."""
    if not rows:
        return
    now, created = time.time(), utcnow()
    session.exec(
        insert(OutboxWrite),
        params=[{**row, "attempts": 0, "next_attempt_at": now, "created_at": created} for row in rows],
    )


# Drains queued by `apply_soon` that have not started: a drain reads the rows when it starts, so one waiting drain
# applies every row committed before it; a second one (the review node's, after write-back's) would only look.
_waiting_drains: set[tuple[str, int]] = set()
_waiting_lock = threading.Lock()


def apply_soon(database_url: str | None, instance_id: int) -> None:
    """Drain the instance's queued writes on its background writer (once the running turn ends), unless a drain
    of the instance is queued already and has not started (it will see these rows). The Chroma store is resolved
    now, where the turn runs."""
    key = (database_url or "", instance_id)
    with _waiting_lock:
        if key in _waiting_drains:
            return
        _waiting_drains.add(key)
    run_in_background(drain_instance, database_url, chroma_path(), instance_id, after_turn_of=instance_id)


def _drain_started(database_url: str | None, instance_id: int) -> None:
    with _waiting_lock:
        _waiting_drains.discard((database_url or "", instance_id))


# Queued reviews whose review node failed in this process (database url, review key): released by the next drain.
_unsettled: set[tuple[str, str]] = set()
_unsettled_lock = threading.Lock()


def review_failed(database_url: str | None, instance_id: int, line_id: int) -> None:
    """The review node of the turn whose reply is `line_id` failed before settling its queued review: release the
    review's hold on the instance's next drain (queued now; retried while the database is down), so the outbox
    reviews the turn with the rules at once instead of after REVIEW_HOLD_S (issue 14: the database down mid-turn)."""
    with _unsettled_lock:
        _unsettled.add((database_url or "", review_key(instance_id, line_id)))
    apply_soon(database_url, instance_id)


def _release_unsettled(database_url: str | None) -> None:
    with _unsettled_lock:
        keys = [key for url, key in _unsettled if url == (database_url or "")]
    if not keys:
        return
    with session_scope(database_url) as session:
        session.exec(
            update(OutboxWrite)
            .where(
                col(OutboxWrite.key).in_(keys),
                col(OutboxWrite.applied_at).is_(None),
                col(OutboxWrite.claimed_by) == f"{REVIEW_HOLD}{holder_name()}",
            )
            .values(claimed_by=None, claimed_until=None)
        )
    with _unsettled_lock:
        _unsettled.difference_update((database_url or "", key) for key in keys)


# --------------------------------------------------------------------------------------------------
# Applying


class ClaimLost(RuntimeError):
    """Another drain took the row over (this one's claim lapsed): what this one wrote is rolled back."""


def _hold_claims(session: Session, row_ids: Sequence[int | None], token: str) -> None:
    """In the caller's transaction, before its commit: renew this drain's claims on `row_ids` for CLAIM_S, or raise
    `ClaimLost` if another drain took one over (this one's lapsed under load), which rolls the caller's writes
    back (issue 27: a drain whose claim lapsed between reading what is fresh and storing it stored a turn's
    memories a second time). The guarded UPDATE serialises with a claim: on PostgreSQL it locks the rows until
    the commit (a drain claiming them meanwhile waits, then finds the claim renewed), on SQLite the database's
    one writer does. Every store write of a drain runs it (or `_Claim`, which marks the row applied)."""
    ids = [row_id for row_id in row_ids if row_id is not None]
    if not ids:
        return
    held = session.exec(
        update(OutboxWrite)
        .where(
            col(OutboxWrite.id).in_(ids), col(OutboxWrite.claimed_by) == token, col(OutboxWrite.applied_at).is_(None)
        )
        .values(claimed_until=time.time() + CLAIM_S)
    )
    if held.rowcount != len(ids):
        raise ClaimLost(f"outbox writes {ids} were claimed by another drain")


class _Claim:
    """A drain's claim on one row, for its applier: called in the transaction of the row's write, it marks the row
    applied while the claim is still this drain's (else `ClaimLost`: the write rolls back); `hold` only renews it,
    for an applier that writes in several transactions before its last."""

    def __init__(self, row_id: int, token: str) -> None:
        self.row_id, self.token = row_id, token

    def __call__(self, session: Session) -> None:
        done = session.exec(
            update(OutboxWrite)
            .where(col(OutboxWrite.id) == self.row_id, col(OutboxWrite.claimed_by) == self.token)
            .values(applied_at=utcnow(), claimed_by=None, claimed_until=None, last_error=None)
        )
        if not done.rowcount:
            raise ClaimLost(f"outbox write {self.row_id} was claimed by another drain")

    def hold(self, session: Session) -> None:
        _hold_claims(session, [self.row_id], self.token)


def _apply_event(store: MemoryStore, row: OutboxWrite, mark: Callable[[Session], None]) -> None:
    event = row.payload
    write_event(event["collection"], event["text"], event["metadata"], event["id"], store._chroma_path())
    with session_scope(store._url()) as session:
        mark(session)


def _apply_memories(store: MemoryStore, row: OutboxWrite, mark: Callable[[Session], None]) -> None:
    """The review's memories of one turn, then the keyword index rebuilt between turns (a cache: a failure there
    is only logged, the next retrieval rebuilds it)."""
    items = row.payload["items"]
    # a turn's memories carry its reply's line: those already stored for it (by hand-replayed rows) stay single
    lines = [item["line_id"] for item in items if item.get("line_id") is not None]
    stored = store.stored_contents(row.instance_id, lines)
    # compared as stored: a memory with a `context` is stored as context, line break, content
    fresh = [item for item in items if (item.get("line_id"), stored_text(item)) not in stored]
    if len(fresh) < len(items):
        _vectors_left(store, row.instance_id, lines)
    if fresh:
        store.add_memories(row.instance_id, fresh, before_commit=mark)
    else:
        with session_scope(store._url()) as session:
            mark(session)
    try:
        store.index(row.instance_id)
    except Exception as exc:  # noqa: BLE001
        log.warning("instance %s: keyword index not rebuilt after its memories: %s", row.instance_id, exc)


def _apply_record(store: MemoryStore, row: OutboxWrite, mark: Callable[[Session], None]) -> None:
    """Record entries of the turn's lines that have none yet (a regenerated reply's user line was recorded with
    the first reply), so each line is recorded once."""
    items = row.payload["items"]
    known = store.recorded_line_ids(row.instance_id, [item["line_id"] for item in items if item.get("line_id")])
    fresh = [item for item in items if item.get("line_id") not in known]
    if known:
        _vectors_left(store, row.instance_id, sorted(known))
    if fresh:
        store.add_memories(row.instance_id, fresh, before_commit=mark)
    else:
        with session_scope(store._url()) as session:
            mark(session)


def _vectors_left(store: MemoryStore, instance_id: int, line_ids: Sequence[int]) -> None:
    """The vectors of the memories of `line_ids` stored without them by a process that died between the two phases
    of `_apply_together` (a replayed row finds its items stored and writes only what they lack)."""
    left = store.vectorless(instance_id, line_ids)
    if left:
        store.put_vectors(instance_id, left, embed_stored_texts([entry.content for entry in left]))


def _apply_mentions(store: MemoryStore, row: OutboxWrite, mark: Callable[[Session], None]) -> None:
    """Seed 001 MarkMemoryAsMentioned: the retrieved memories the reply used get one more mention."""
    data = row.payload
    used = used_memory_ids(data["retrieved"], data["reply"], message=data["message"], ignore=data["ignore"])
    store.mark_mentioned(row.instance_id, used, data["turn"], before_commit=mark, once_per_turn=True)


def store_turn_review(
    session: Session,
    turn: StoredTurn,
    plan: Mapping[str, Any],
    memories: Sequence[dict[str, Any]],
    *,
    settle: bool = False,
) -> dict[str, Any]:
    """A reviewed turn's effects in the caller's transaction (seed 003): its plot node and world-book suggestion
    (`save_review_effects`, on the reply's line) and its memories as a queued `memory` write; with `settle`, the
    turn's queued review is marked done in the same transaction (the review node; the outbox's own application
    marks it through its claim). Returns what `save_review_effects` returns."""
    saved = save_review_effects(session, turn.instance_id, plan, line_id=turn.line_id)
    if memories:
        key = f"memory:i{turn.instance_id}-l{turn.line_id}"
        queue_writes(session, [write_row("memory", turn.instance_id, key, {"items": list(memories)})])
    if settle:
        session.exec(
            update(OutboxWrite)
            .where(
                col(OutboxWrite.key) == review_key(turn.instance_id, turn.line_id),
                col(OutboxWrite.applied_at).is_(None),
            )
            .values(applied_at=utcnow(), claimed_by=None, claimed_until=None)
        )
    return saved


def review_write(turn: StoredTurn) -> dict[str, Any]:
    """The durable review of a stored turn (issue 14), queued in the reply's transaction and held for the review
    node (`REVIEW_HOLD_S`, claimed in this process's name): the node settles it when it stores its effects; if
    the process dies first, the hold is released at the next start-up (or lapses) and the outbox reviews the turn
    with the rules."""
    row = write_row("review", turn.instance_id, review_key(turn.instance_id, turn.line_id), turn.model_dump())
    return {**row, "claimed_by": f"{REVIEW_HOLD}{holder_name()}", "claimed_until": time.time() + REVIEW_HOLD_S}


def _apply_review(store: MemoryStore, row: OutboxWrite, mark: Callable[[Session], None]) -> None:
    turn = StoredTurn.model_validate(row.payload)
    # at recovery there is no model call: the rules review the turn (seed 003's rule mode)
    _, plan, memories = review_outcome(get_review_pipeline(EventBus(), mode="rule"), turn)
    with session_scope(store._url()) as session:
        store_turn_review(session, turn, plan, memories)
        mark(session)


def _apply_consolidation(store: MemoryStore, row: OutboxWrite, mark: _Claim) -> None:
    """Issue 26: the facts the user's message told, consolidated with the stored ones by the rules
    (`stores.consolidation`), each step recorded; applied once (a fact already stored for the line is not
    consolidated again; its vector, if a process died before writing it, is written; each step's transaction
    commits only while this drain's claim holds, issue 27)."""
    if not _consolidate(store, row, vectors_later=False, guard=mark.hold):
        line_id = row.payload.get("line_id")
        if line_id is not None:
            _vectors_left(store, row.instance_id, [line_id])
    with session_scope(store._url()) as session:
        mark(session)


def _consolidate(
    store: MemoryStore, row: OutboxWrite, *, vectors_later: bool, guard: Callable[[Session], None]
) -> list[Any] | None:
    """Consolidate the facts of a `consolidate` row (`stores.consolidation.consolidate_message`); returns the fact
    memories stored (without vectors with `vectors_later`), or None when the line's facts were consolidated
    already (a replayed row: nothing is decided twice). `guard`: the drain's claim, checked in each transaction."""
    from personalab.stores.consolidation import consolidate_message, consolidated_line

    data = row.payload
    if consolidated_line(store._url(), row.instance_id, data.get("line_id")):
        return None
    added: list[Any] = []
    consolidate_message(
        store,
        row.instance_id,
        message=data["message"],
        user_name=data["user_name"],
        turn=data["turn"],
        line_id=data.get("line_id"),
        witnesses=data.get("witnesses"),
        vectors_later=vectors_later,
        added=added,
        guard=guard,
    )
    return added


APPLIERS: dict[str, Callable[[MemoryStore, OutboxWrite, _Claim], None]] = {
    "consolidate": _apply_consolidation,
    "event": _apply_event,
    "memory": _apply_memories,
    "record": _apply_record,
    "mention": _apply_mentions,
    "review": _apply_review,
}


def backoff_s(attempts: int) -> float:
    """The wait after the `attempts`-th failure: 1, 2, 4 … s, at most MAX_BACKOFF_S."""
    return float(min(MAX_BACKOFF_S, 2 ** max(0, attempts - 1)))


SET_ASIDE = "set aside"  # `claimed_by` of a row whose write itself is refused: drains skip it, doctor reports it
REVIEW_HOLD = "review-hold:"  # `claimed_by` prefix of a queued review held for its review node (+ host:pid)
REVIEW_HOLD_S = 120.0  # longer than any turn's deadline: a live review node always settles its review first


def _failed(url: str | None, row_id: int, token: str, exc: BaseException) -> float | None:
    """Count the failed attempt, keep its error, set the next attempt; returns when that is (epoch seconds). A write
    the stores refuse as such (`InvalidInput`, `NotFound`: retrying cannot help) is set aside instead, so it never
    holds the instance's later writes back: None. `personalab doctor` reports it; `--repair` tries it again."""
    with session_scope(url) as session:
        row = session.get(OutboxWrite, row_id)
        if row is None or row.claimed_by != token:
            return time.time()
        row.attempts += 1
        row.last_error = f"{type(exc).__name__}: {exc}"[:2000]
        refused = isinstance(exc, InvalidInput | NotFound)
        row.next_attempt_at = time.time() + backoff_s(row.attempts)
        row.claimed_by, row.claimed_until = (SET_ASIDE, None) if refused else (None, None)
        session.add(row)
        return None if refused else row.next_attempt_at


class Step(NamedTuple):
    """What one step of a drain did: rows applied, rows set aside, and why it stopped early ("failed": a row failed
    and waits for its retry; "held": the oldest row is claimed by another process or not due yet; None: it did not)
    with when to try again."""

    applied: int
    set_aside: int
    stopped: str | None = None
    when: float | None = None


def drain_instance(
    database_url: str | None, chroma: str | None, instance_id: int, *, force: bool = False
) -> dict[str, Any]:
    """Apply the instance's queued writes oldest first, until none is left or one cannot be applied now (failed:
    retried after its backoff; claimed by another live process; not due yet). `force`: do not wait for the
    backoff (`doctor --repair`). Returns {"applied", "failed", "waiting"}. A database that cannot be reached is
    tried again after DATABASE_RETRY_S."""
    _drain_started(database_url, instance_id)
    store = MemoryStore(db_url=database_url, chroma_path=chroma)
    applied, failed = 0, 0
    while True:
        try:
            _release_unsettled(database_url)
            step = _apply_due(store, database_url, instance_id, force)
        except Exception as exc:  # noqa: BLE001 - the database is down: the rows wait in it
            # a database that is down is the failed turn's one line (the CLI's contract), not a warning per retry
            level = logging.DEBUG if store_unavailable(exc, database_url) is not None else logging.WARNING
            log.log(
                level, "instance %s: queued writes not read (retried in %.0f s): %s", instance_id, DATABASE_RETRY_S, exc
            )
            _retry_at(database_url, chroma, instance_id, time.time() + DATABASE_RETRY_S)
            return {"applied": applied, "failed": failed + 1, "waiting": 1}
        if step is None:
            if applied:  # a turn's writes freed their temporaries: returned to the system now and then
                MEMORY_RELEASER.note_writes(settings().release_memory_every_s)
            return {"applied": applied, "failed": failed, "waiting": 0}
        applied += step.applied
        failed += step.set_aside
        if step.stopped is None:
            continue
        failed += step.stopped == "failed"
        if step.when is not None:
            _retry_at(database_url, chroma, instance_id, step.when)
        return {"applied": applied, "failed": failed, "waiting": 1}


DATABASE_RETRY_S = 5.0
BATCH_ROWS = 64  # queued writes applied together at most (a turn queues 3-4; a restart may find many)


def _apply_due(store: MemoryStore, database_url: str | None, instance_id: int, force: bool) -> Step | None:
    """Apply the instance's oldest queued writes: up to BATCH_ROWS of them together (`_apply_together`), a queued
    review alone. None when there is none."""
    with session_scope(database_url) as session:
        due = session.exec(
            select(OutboxWrite)
            .where(
                col(OutboxWrite.instance_id) == instance_id,
                col(OutboxWrite.applied_at).is_(None),
                _not_set_aside(),
                _not_held(time.time()),
            )
            .order_by(col(OutboxWrite.id))
            .limit(BATCH_ROWS)
        ).all()
    if not due:
        return None
    # a queued review is applied alone (it queues the turn's memories, a later row); the rows before it together
    cut = next((n for n, row in enumerate(due) if row.kind not in TOGETHER), len(due))
    batch = list(due[: max(1, cut)])
    # the leading events are claimed first, the rest when they are marked applied (`_apply_together`): a process
    # killed in between (fault tests: `during_writes`) leaves the rest free for the next process at once
    lead = next((n for n, row in enumerate(batch) if row.kind != "event"), len(batch))
    now = time.time()
    token = f"{holder_name()}:{_PROCESS}:{uuid.uuid4().hex[:8]}"
    claimed = _claim_in_order(database_url, batch[: lead or len(batch)], token, now, force)
    if not claimed:
        # another process applies the oldest (come back when its claim lapses), or it waits for its backoff
        first = batch[0]
        held = first.claimed_until if first.claimed_until is not None and first.claimed_until >= now else None
        return Step(0, 0, "held", None if force else max(first.next_attempt_at, held or 0.0))
    if claimed[0].kind in TOGETHER:
        later = batch[lead:] if lead and len(claimed) == lead else []
        try:
            last = cut == len(due) < BATCH_ROWS  # no later due row: the next retrieval may go on after phase 1
            return _apply_together(store, database_url, claimed, later, token, now, force, last)
        except ClaimLost as exc:  # another drain applies them now: not one by one with a claim that is gone
            return Step(0, 0, "held", _taken_over(database_url, instance_id, batch, token, exc))
        except Exception as exc:  # noqa: BLE001 - applied one by one below: the failing row keeps its error
            log.debug("instance %s: %d queued writes not applied together: %s", instance_id, len(claimed), exc)
    return _apply_one_by_one(store, database_url, instance_id, claimed, token)


def _taken_over(url: str | None, instance_id: int, rows: Sequence[OutboxWrite], token: str, exc: ClaimLost) -> float:
    """This drain's claim lapsed and another drain took the rows over (issue 27): what this one was writing was
    rolled back (`_hold_claims`); the claims it still has are given back, and the drain comes back when the
    other's claim would lapse (the rows are applied by then, or that drain died). Returns when."""
    log.info("instance %s: queued writes taken over by another drain, left to it: %s", instance_id, exc)
    try:
        _release(url, [row.id for row in rows], token)
    except Exception:  # noqa: BLE001 - the database went: the claims lapse
        pass
    return time.time() + CLAIM_S


def _dead_claim(claimed_by: str | None) -> str | None:
    """`claimed_by` if it is the claim of a process of this host that is gone (`_PROCESS`), else None."""
    parts = (claimed_by or "").rsplit(":", 2)
    return claimed_by if len(parts) == 3 and holder_is_gone(parts[0]) else None


def _claim_in_order(
    url: str | None, rows: Sequence[OutboxWrite], token: str, now: float, force: bool
) -> list[OutboxWrite]:
    """Claim `rows` (one conditional UPDATE, atomic on SQLite and PostgreSQL) and return the oldest ones up to the
    first this drain could not claim (another process holds it, or it is not due): a later write is never applied
    before an earlier one. The claims beyond that are given back."""
    ids = [row.id for row in rows if row.id is not None]
    if not ids:
        return []
    with session_scope(url) as session:
        return _claim_prefix(session, rows, ids, token, now, force)


def _claim_prefix(
    session: Session, rows: Sequence[OutboxWrite], ids: list[int], token: str, now: float, force: bool
) -> list[OutboxWrite]:
    free = (col(OutboxWrite.claimed_until).is_(None)) | (col(OutboxWrite.claimed_until) < now)
    # dead processes' claims (`_dead_claim`), still theirs when this UPDATE runs, are taken over at once
    stale = sorted({claim for row in rows if (claim := _dead_claim(row.claimed_by)) is not None})
    if stale:
        free = free | col(OutboxWrite.claimed_by).in_(stale)
    result = session.exec(
        update(OutboxWrite)
        .where(
            col(OutboxWrite.id).in_(ids),
            col(OutboxWrite.applied_at).is_(None),
            free,
            *([] if force else [col(OutboxWrite.next_attempt_at) <= now]),
        )
        .values(claimed_by=token, claimed_until=now + CLAIM_S)
    )
    if result.rowcount == len(ids):
        return list(rows)
    mine = set(
        session.exec(select(OutboxWrite.id).where(col(OutboxWrite.id).in_(ids), col(OutboxWrite.claimed_by) == token))
    )
    prefix: list[OutboxWrite] = []
    for row in rows:
        if row.id not in mine:
            break
        prefix.append(row)
    beyond = [row_id for row_id in mine if row_id not in {row.id for row in prefix}]
    if beyond:
        session.exec(
            update(OutboxWrite)
            .where(col(OutboxWrite.id).in_(beyond), col(OutboxWrite.claimed_by) == token)
            .values(claimed_by=None, claimed_until=None)
        )
    return prefix


def _release(url: str | None, row_ids: Sequence[int | None], token: str) -> None:
    """Give back this drain's claims on rows it will not apply now (they are the next drain's)."""
    ids = [row_id for row_id in row_ids if row_id is not None]
    if not ids:
        return
    with session_scope(url) as session:
        session.exec(
            update(OutboxWrite)
            .where(col(OutboxWrite.id).in_(ids), col(OutboxWrite.claimed_by) == token)
            .values(claimed_by=None, claimed_until=None)
        )


def _apply_one_by_one(
    store: MemoryStore, database_url: str | None, instance_id: int, rows: Sequence[OutboxWrite], token: str
) -> Step:
    """Apply claimed rows one at a time, in order, each in its own transaction; stop at the first that fails (its
    error and backoff kept, the later rows' claims given back). A row the stores refuse is set aside and the next
    goes on."""
    applied, set_aside = 0, 0
    for position, row in enumerate(rows):
        assert row.id is not None
        try:
            APPLIERS[row.kind](store, row, _Claim(row.id, token))
        except ClaimLost as exc:  # rolled back: the drain that took the row over applies it and the later ones
            return Step(applied, set_aside, "held", _taken_over(database_url, instance_id, rows[position:], token, exc))
        except Exception as exc:  # noqa: BLE001 - kept with the row and retried; never raised into a turn
            try:
                when = _failed(database_url, row.id, token, exc)
            except Exception:  # noqa: BLE001 - the database went too: its claim lapses, the row waits
                when = time.time() + DATABASE_RETRY_S
            if when is None:
                log.error("instance %s: queued write %s (%s) refused, set aside: %s", instance_id, row.id, row.key, exc)
                set_aside += 1
                continue  # out of the way: the drain goes on with the next
            log.log(
                logging.DEBUG if store_unavailable(exc, database_url) is not None else logging.WARNING,
                "instance %s: queued write %s (%s) failed, retried in %.0f s: %s",
                instance_id,
                row.id,
                row.key,
                max(0.0, when - time.time()),
                exc,
            )
            try:
                _release(database_url, [later.id for later in rows[position + 1 :]], token)
            except Exception:  # noqa: BLE001 - the database went: the claims lapse
                pass
            return Step(applied, set_aside, "failed", when)
        applied += 1
        failpoint("during_writes")  # fault tests: one write applied, the turn's others still queued
    return Step(applied, set_aside)


TOGETHER = ("event", "record", "memory", "mention", "consolidate")  # the kinds `_apply_together` applies


def _apply_together(
    store: MemoryStore,
    database_url: str | None,
    claimed: Sequence[OutboxWrite],
    later: Sequence[OutboxWrite],
    token: str,
    now: float,
    force: bool,
    last: bool = False,
) -> Step:
    """Apply claimed rows of the kinds in TOGETHER, and the `later` rows after them (claimed here), as the rows one
    by one would, at the cost of about one write, in two phases (issue 29: the instance's next retrieval waits for
    the first only):

    1. what a retrieval reads, in one transaction: the fresh memories and record entries as rows, without their
       vectors (`MemoryStore.add_memories(vectors_later=True)`), and the mention marks; then the consolidations
       (issue 26), in order, each fact's decision and step in a transaction of its own (a decision reads the facts
       the previous one stored), their fact memories without vectors too; the keyword index follows the commits.
       With `last` (no later row is due), the instance's next retrieval may go on (`writes_visible`):
       its keyword side finds the rows at once, its vector side scores them itself (`PENDING_VECTORS`).
    2. the slow part: every text to embed (events, the new rows and facts; a turn's memory is its event's text) in
       one embeddings call, a text embedded before not again (`embed_stored_texts`); the events upserted by collection,
       the memories' vectors by collection; every row marked applied in one transaction.

    No row is marked applied before its vectors are in Chroma: a process that dies between the phases (fault tests:
    `during_writes`) leaves every row queued; the next applies them again, which stores no row twice and writes the
    vectors the stored rows lack (`MemoryStore.vectorless`). A failure before the first commit is raised (the
    caller applies the claimed rows one by one); after it, the rows are applied one by one here."""
    instance_id = claimed[0].instance_id
    lead = next((n for n, row in enumerate(claimed) if row.kind != "event"), len(claimed))
    rows = list(claimed)
    if lead and later:
        rows += _claim_in_order(database_url, later, token, now, force)
        last = last and len(rows) == len(claimed) + len(later)
    body = [row for row in rows if row.kind != "event"]
    plan = _fresh_items(store, instance_id, body)
    # the batch's one embeddings call, begun now (the model runs while phase 1 writes): the events, the new rows and
    # the facts a consolidation may store, whose rows are written only after the decisions phase 1 takes
    embed_stored_texts_soon(_batch_texts(rows, plan))
    # phase 1: the rows a retrieval reads
    entries: list[Any] = []
    recheck: list[int] = []
    if body:
        # every write of phase 1 commits only while this drain's claims on the batch hold (`_hold_claims`)
        entries, recheck = _store_rows(
            store, body, plan, lambda session: _hold_claims(session, [r.id for r in rows], token)
        )
    if last:
        writes_visible()
    failpoint("during_writes")  # fault tests: the turn's rows stored, their vectors and events not yet, none applied
    # phase 2: the vectors and events, then every row applied
    try:
        _write_vectors(store, rows, plan, entries, token, recheck)
    except ClaimLost:  # the rows are another drain's now (`_apply_due`): its own vectors are upserts by id
        raise
    except Exception as exc:  # noqa: BLE001 - one by one: the failing row keeps its error, the others go on
        log.debug("instance %s: %d queued writes not applied together: %s", instance_id, len(rows), exc)
        step = _apply_one_by_one(store, database_url, instance_id, rows, token)
        return Step(step.applied, step.set_aside, step.stopped, step.when)
    return Step(len(rows), 0)


def _batch_texts(rows: Sequence[OutboxWrite], items: Sequence[dict[str, Any]]) -> list[str]:
    """Every text a batch may embed: its events', its fresh items', and the facts its `consolidate` rows tell."""
    from personalab.stores.consolidation import fact_texts

    texts = [row.payload["text"] for row in rows if row.kind == "event"]
    texts += [stored_text(item) for item in items]
    for row in rows:
        if row.kind == "consolidate":
            texts += fact_texts(row.payload["message"], row.payload["user_name"])
    return list(dict.fromkeys(texts))


def _store_rows(
    store: MemoryStore, rows: Sequence[OutboxWrite], items: Sequence[dict[str, Any]], hold: Callable[[Session], None]
) -> tuple[list[Any], list[int]]:
    """Phase 1 of `_apply_together`: the fresh memories and record entries (`items`) as rows without vectors and the
    mention marks, in one transaction; then the consolidations of the `consolidate` rows, in order (their fact
    memories without vectors); then the keyword index of new memories. Each transaction commits only if `hold` (the
    drain's claims, issue 27) passes. Returns the stored entries, and the user's
    lines whose facts were consolidated before (a replayed row: their facts may lack a vector)."""
    instance_id = rows[0].instance_id
    # mention checks: the memories each reply used (the keywords of each, before the transaction)
    mentions = [
        (
            used_memory_ids(data["retrieved"], data["reply"], message=data["message"], ignore=data["ignore"]),
            data["turn"],
        )
        for data in (row.payload for row in rows if row.kind == "mention")
    ]

    def marks(session: Session) -> None:
        hold(session)  # ClaimLost: another drain applies these rows, nothing of this one's is stored
        for used, turn in mentions:
            mark_mentioned_in(session, instance_id, used, turn, once_per_turn=True)

    entries: list[Any] = []
    if items:
        entries = store.add_memories(instance_id, items, vectors_later=True, before_commit=marks)
    elif mentions:
        with session_scope(store._url()) as session:
            marks(session)
    # after the turns' record entries: a fact's update closes the exchange that told the old value (issue 26)
    recheck: list[int] = []
    for row in rows:
        if row.kind != "consolidate":
            continue
        facts = _consolidate(store, row, vectors_later=True, guard=hold)
        if facts is not None:
            entries.extend(facts)
        elif row.payload.get("line_id") is not None:
            recheck.append(int(row.payload["line_id"]))
    if any(row.kind in ("memory", "consolidate") for row in rows):
        try:  # the keyword index of the new memories for the next turn (a cache: its failure is only logged)
            store.index(instance_id)
        except Exception as exc:  # noqa: BLE001
            log.warning("instance %s: keyword index not rebuilt after its memories: %s", instance_id, exc)
    return entries, recheck


def _write_vectors(
    store: MemoryStore,
    rows: Sequence[OutboxWrite],
    items: Sequence[dict[str, Any]],
    entries: Sequence[Any],
    token: str,
    recheck: Sequence[int] = (),
) -> None:
    """Phase 2 of `_apply_together`: one embeddings call for the events, the new entries (facts too) and the stored
    ones left without a vector (a process that died between the phases; `recheck`: the lines of consolidations
    found done), the upserts, every row marked applied."""
    instance_id = rows[0].instance_id
    events = [row.payload for row in rows if row.kind == "event"]
    lines = [item.get("line_id") for row in rows if row.kind in ("record", "memory") for item in row.payload["items"]]
    new_ids = {entry.id for entry in entries}
    # a replay: the rows' items stored before (not in `items`) may lack their vectors, and so may the facts
    replayed = len(items) < len(lines) or bool(recheck)
    left = [e for e in store.vectorless(instance_id, [*lines, *recheck]) if e.id not in new_ids] if replayed else []
    texts = [event["text"] for event in events] + [entry.content for entry in [*entries, *left]]
    vectors = embed_stored_texts(texts)
    event_vectors = dict(zip((event["id"] for event in events), vectors, strict=False))
    _upsert_events(store, events, event_vectors)
    if entries or left:
        store.put_vectors(instance_id, [*entries, *left], vectors[len(events) :])
    with session_scope(store._url()) as session:
        _mark_applied(session, rows, token)


def _fresh_items(store: MemoryStore, instance_id: int, rows: Sequence[OutboxWrite]) -> list[dict[str, Any]]:
    """The record entries and memories the rows store that are not stored yet, in order: the checks of
    `_apply_record` and `_apply_memories`, each earlier row of `rows` counted as written."""
    lines = [item.get("line_id") for row in rows if row.kind in ("record", "memory") for item in row.payload["items"]]
    recorded = store.recorded_line_ids(instance_id, [line for line in lines if line])
    stored = store.stored_contents(instance_id, [line for line in lines if line is not None])
    items: list[dict[str, Any]] = []
    for row in rows:
        if row.kind == "record":
            fresh = [item for item in row.payload["items"] if item.get("line_id") not in recorded]
            recorded |= {item["line_id"] for item in fresh if item.get("line_id")}
        elif row.kind == "memory":
            fresh = [item for item in row.payload["items"] if (item.get("line_id"), stored_text(item)) not in stored]
        else:
            continue
        stored |= {(item.get("line_id"), stored_text(item)) for item in fresh}
        items.extend(fresh)
    return items


def _upsert_events(store: MemoryStore, events: Sequence[Mapping[str, Any]], vectors: Mapping[str, Any]) -> None:
    """Upsert events by their ids (`write_event`'s store, with the vectors known), one call per story collection."""
    by_collection: dict[str, dict[str, Mapping[str, Any]]] = {}
    for event in events:  # an event queued twice is upserted once (Chroma refuses one id twice in a call)
        by_collection.setdefault(event["collection"], {})[event["id"]] = event
    for name, by_id in by_collection.items():
        group = list(by_id.values())
        get_collection(name, store._chroma_path())._collection.upsert(
            ids=[event["id"] for event in group],
            embeddings=[vectors[event["id"]] for event in group],
            metadatas=[event["metadata"] for event in group],
            documents=[event["text"] for event in group],
        )


def _mark_applied(session: Session, rows: Sequence[OutboxWrite], token: str) -> None:
    """Mark the rows applied in the caller's transaction, only while every claim is still this drain's."""
    ids = [row.id for row in rows]
    done = session.exec(
        update(OutboxWrite)
        .where(col(OutboxWrite.id).in_(ids), col(OutboxWrite.claimed_by) == token)
        .values(applied_at=utcnow(), claimed_by=None, claimed_until=None, last_error=None)
    )
    if done.rowcount != len(ids):
        raise ClaimLost(f"outbox writes {ids} were claimed by another process")


# One retry timer per (database, instance): the earliest time its drain is wanted again.
_timers: dict[tuple[str, int], tuple[float, threading.Timer]] = {}
_timers_lock = threading.Lock()


def _retry_at(database_url: str | None, chroma: str | None, instance_id: int, when: float) -> None:
    key = (database_url or "", instance_id)
    with _timers_lock:
        kept = _timers.get(key)
        if kept is not None and kept[0] <= when and kept[1].is_alive():
            return
        if kept is not None:
            kept[1].cancel()

        def fire() -> None:
            with _timers_lock:
                if _timers.get(key, (0.0, None))[1] is timer:
                    del _timers[key]
            run_in_background(drain_instance, database_url, chroma, instance_id, after_turn_of=instance_id)

        timer = threading.Timer(max(0.05, when - time.time()), fire)
        timer.daemon = True
        _timers[key] = (when, timer)
        timer.start()


def cancel_retries() -> None:
    """Stop this process's retry timers (tests that drop their database)."""
    with _timers_lock:
        for _, timer in _timers.values():
            timer.cancel()
        _timers.clear()


def _not_set_aside() -> Any:
    return col(OutboxWrite.claimed_by).is_(None) | (col(OutboxWrite.claimed_by) != SET_ASIDE)


def _not_held(now: float) -> Any:
    """Not a review held for its live review node: the drain passes over it (it does not block later writes)."""
    return or_(
        col(OutboxWrite.claimed_by).is_(None),
        not_(col(OutboxWrite.claimed_by).startswith(REVIEW_HOLD)),
        col(OutboxWrite.claimed_until).is_(None),
        col(OutboxWrite.claimed_until) < now,
    )


def release_dead_holds(database_url: str | None = None) -> int:
    """Release the queued reviews held by processes of this host that are gone (killed between their reply and
    their review), so the outbox reviews those turns now instead of after REVIEW_HOLD_S. Returns how many."""
    released = 0
    with session_scope(database_url) as session:
        held = session.exec(
            select(OutboxWrite).where(
                col(OutboxWrite.applied_at).is_(None), col(OutboxWrite.claimed_by).startswith(REVIEW_HOLD)
            )
        ).all()
        for row in held:
            if holder_is_gone((row.claimed_by or "")[len(REVIEW_HOLD) :]):
                row.claimed_by, row.claimed_until = None, None
                session.add(row)
                released += 1
    return released


def pending_instances(database_url: str | None = None) -> list[int]:
    """Instances with writes not applied yet (and not set aside)."""
    with session_scope(database_url) as session:
        stmt = select(OutboxWrite.instance_id).where(col(OutboxWrite.applied_at).is_(None), _not_set_aside())
        stmt = stmt.distinct()
        return sorted(int(i) for i in session.exec(stmt).all())


_purged: set[str] = set()


def resume_pending(database_url: str | None = None, chroma: str | None = None) -> list[int]:
    """At start-up: queue a drain of every instance with writes left by a process that stopped before applying
    them (a row another live process is applying is left to it), and purge rows applied more than KEEP_APPLIED
    ago. Returns the instances. Never raises: a database that cannot be read now is logged (the first turn
    reports it)."""
    try:
        if (database_url or "") not in _purged:  # once per process and database: a graph opens many times
            with session_scope(database_url) as session:
                session.exec(
                    delete(OutboxWrite).where(
                        col(OutboxWrite.applied_at).is_not(None), col(OutboxWrite.applied_at) < utcnow() - KEEP_APPLIED
                    )
                )
            _purged.add(database_url or "")
        release_dead_holds(database_url)
        instances = pending_instances(database_url)
    except Exception as exc:  # noqa: BLE001
        # a database that cannot be opened or written now: the command's own first store call says so in one
        # line (the CLI's contract); a warning here would be a second
        level = logging.DEBUG if store_unavailable(exc, database_url) is not None else logging.WARNING
        log.log(level, "pending outbox writes not resumed: %s", exc)
        return []
    path = chroma or chroma_path()
    for instance_id in instances:
        run_in_background(drain_instance, database_url, path, instance_id, after_turn_of=instance_id)
    if instances:
        log.info("resuming the queued writes of %d instance(s)", len(instances))
    return instances


def apply_pending(database_url: str | None = None, chroma: str | None = None) -> dict[str, Any]:
    """Apply every pending write now, in this thread, backoff or not (`doctor --repair`, tests); rows claimed by
    a live process are left to it. Returns the totals."""
    totals = {"applied": 0, "failed": 0, "waiting": 0}
    with session_scope(database_url) as session:  # the writes set aside get one more try
        session.exec(
            update(OutboxWrite)
            .where(col(OutboxWrite.applied_at).is_(None), col(OutboxWrite.claimed_by) == SET_ASIDE)
            .values(claimed_by=None)
        )
    release_dead_holds(database_url)
    for instance_id in pending_instances(database_url):
        result = drain_instance(database_url, chroma or chroma_path(), instance_id, force=True)
        for name in totals:
            totals[name] += result[name]
    return totals


def pending_summary(database_url: str | None = None) -> dict[str, Any]:
    """What is queued and not applied: count, per instance, the oldest, how many failed at least once and the
    latest error (`personalab doctor`)."""
    with session_scope(database_url) as session:
        rows = session.exec(
            select(
                OutboxWrite.instance_id,
                func.count(),
                func.min(OutboxWrite.created_at),
                func.max(OutboxWrite.attempts),
            )
            .where(col(OutboxWrite.applied_at).is_(None))
            .group_by(col(OutboxWrite.instance_id))
        ).all()
        last = session.exec(
            select(OutboxWrite.key, OutboxWrite.last_error, OutboxWrite.attempts)
            .where(col(OutboxWrite.applied_at).is_(None), col(OutboxWrite.last_error).is_not(None))
            .order_by(col(OutboxWrite.id).desc())
            .limit(1)
        ).first()
        failing = session.exec(
            select(func.count()).where(col(OutboxWrite.applied_at).is_(None), col(OutboxWrite.attempts) > 0)
        ).one()
        set_aside = session.exec(
            select(func.count()).where(col(OutboxWrite.applied_at).is_(None), col(OutboxWrite.claimed_by) == SET_ASIDE)
        ).one()
    oldest = min((row[2] for row in rows), default=None)
    return {
        "pending": sum(int(row[1]) for row in rows),
        "per_instance": {int(row[0]): int(row[1]) for row in rows},
        "oldest": oldest.isoformat() if oldest is not None else None,
        "failing": int(failing),
        "set_aside": int(set_aside),
        "last_error": None if last is None else {"key": last[0], "error": last[1], "attempts": last[2]},
    }
