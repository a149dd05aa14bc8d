"""Consolidation steps (issue 26): store what `nodes.rules.consolidation` decides for the facts of a turn, record
every step in `memory_consolidation`, list them, and undo one.

- ``add``: a new fact memory (type ``semantic``, tag ``fact``, `valid_from_turn` = the turn);
- ``update`` / ``merge`` (the new text fuller): a new fact memory, and the stored one closed in the same
  transaction (`valid_to_turn` = the turn, `superseded_by` = the new one) — never deleted, so the past stays
  answerable; a ``merge`` whose stored text is the fuller one changes nothing;
- ``none``: a repeat; nothing written but the step (a recorded no-op).
A stored fact closed or deleted meanwhile (a user edit racing the consolidation) is not closed again: the step
says so and the new fact is added. `undo_step` takes a step back (deletes the fact it added, reopens the one it
closed) and marks it undone; it refuses, naming the step, one already undone or one a later step built on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from personalab.nodes.rules.consolidation import (
    FACT_TAG,
    FACT_TYPE,
    Action,
    Decision,
    Fact,
    decide,
    extract_facts,
    fact_content,
    value_of,
)
from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.stores.db import session_scope
from personalab.stores.memory_tables import MemoryConsolidation, MemoryEntry
from personalab.stores.tables import utcnow
from sqlalchemy import or_, update
from sqlmodel import Session, col, select

if TYPE_CHECKING:  # the memory store loads numpy: listing the steps never needs it (issue 29)
    from personalab.stores.memory import MemoryStore

FACT_IMPORTANCE = 0.8  # a fact the user told about themselves: above small talk, kept by the layer flow


def current_facts(session: Session, instance_id: int, character_id: int, slot: str) -> list[dict[str, Any]]:
    """The still-true fact memories of `slot`, newest first, as `rules.consolidation.decide` reads them."""
    rows = session.exec(
        select(MemoryEntry.id, MemoryEntry.content)
        .where(
            MemoryEntry.instance_id == instance_id,
            MemoryEntry.character_id == character_id,
            MemoryEntry.type == FACT_TYPE,
            col(MemoryEntry.content).startswith(f"【{slot}】"),
            col(MemoryEntry.valid_to_turn).is_(None),
        )
        .order_by(col(MemoryEntry.id).desc())
    ).all()
    return [{"id": memory_id, "content": content, "value": value_of(content)} for memory_id, content in rows]


def _step_row(instance_id: int, character_id: int, turn: int, decision: Decision, **fields: Any) -> MemoryConsolidation:
    return MemoryConsolidation(
        instance_id=instance_id,
        character_id=character_id,
        turn=turn,
        action=decision.action.value,
        slot=decision.fact.slot,
        reason=decision.reason,
        decided_by=decision.decided_by,
        target_id=decision.target_id,
        **fields,
    )


def consolidate_message(
    store: MemoryStore,
    instance_id: int,
    *,
    message: str,
    user_name: str,
    turn: int,
    line_id: int | None = None,
    witnesses: Sequence[str] | None = None,
    character_id: int | None = None,
    vectors_later: bool = False,
    added: list[MemoryEntry] | None = None,
    guard: Callable[[Session], None] | None = None,
) -> list[dict[str, Any]]:
    """Consolidate the facts the user's `message` of `turn` tells (the rules decide, `decided_by: rules`); returns
    the steps recorded, as dicts. A message that tells no fact records nothing.

    `vectors_later` (the outbox's batched writes): the new fact memories are stored without their vectors
    (`MemoryStore.add_memories(vectors_later=True)`), appended to `added`, for the caller to embed with the rest of
    the turn's texts in one call and write with `put_vectors`. `guard(session)` runs in each transaction before
    its commit (the outbox's claim, issue 27: if it raises, that transaction stores nothing)."""
    steps: list[dict[str, Any]] = []
    for fact in extract_facts(message):
        step, entries = _consolidate_fact(
            store, instance_id, fact, user_name, turn, line_id, witnesses, character_id, vectors_later, guard
        )
        steps.append(step)
        if added is not None:
            added.extend(entries)
    return steps


def fact_texts(message: str, user_name: str) -> list[str]:
    """The texts of the fact memories `consolidate_message` may store for `message` (one per fact it tells): the
    outbox embeds them with the turn's other texts, in one call, before the decisions are taken."""
    return [fact_content(fact, user_name) for fact in extract_facts(message)]


def _consolidate_fact(
    store: MemoryStore,
    instance_id: int,
    fact: Fact,
    user_name: str,
    turn: int,
    line_id: int | None,
    witnesses: Sequence[str] | None,
    character_id: int | None,
    vectors_later: bool = False,
    guard: Callable[[Session], None] | None = None,
) -> tuple[dict[str, Any], list[MemoryEntry]]:
    with session_scope(store._url()) as session:
        character = store.resolve_character(instance_id, character_id)
        decision = decide(fact, current_facts(session, instance_id, character, fact.slot))
    if decision.action is Action.NONE or (
        decision.action is Action.MERGE and len(fact.value) <= len(_stored_value(store, instance_id, decision))
    ):
        with session_scope(store._url()) as session:
            if guard is not None:
                guard(session)
            step = _step_row(instance_id, character, turn, decision)
            session.add(step)
            session.flush()
            return step.model_dump(), []
    recorded: dict[str, Any] = {}

    def close_and_record(session: Session) -> None:
        if guard is not None:
            guard(session)
        new = session.exec(
            select(MemoryEntry.id)
            .where(MemoryEntry.instance_id == instance_id, MemoryEntry.character_id == character)
            .order_by(col(MemoryEntry.id).desc())
            .limit(1)
        ).first()
        reason: str = decision.reason
        before: dict[str, Any] | None = None
        if decision.target_id is not None:
            closed = session.exec(
                update(MemoryEntry)
                .where(
                    col(MemoryEntry.id) == decision.target_id,
                    col(MemoryEntry.instance_id) == instance_id,
                    col(MemoryEntry.valid_to_turn).is_(None),
                )
                .values(valid_to_turn=turn, superseded_by=new, updated_at=utcnow())
            )
            if closed.rowcount:
                before = {"valid_to_turn": None, "superseded_by": None}
                # the old fact's exchange in the dialogue record is no longer true either: closed with it
                source = session.get(MemoryEntry, decision.target_id)
                if source is not None and source.line_id is not None:
                    # and so is the turn's own memory (``第N轮：…``) that repeated it
                    records = session.exec(
                        select(MemoryEntry.id).where(
                            MemoryEntry.instance_id == instance_id,
                            MemoryEntry.character_id == character,
                            col(MemoryEntry.valid_to_turn).is_(None),
                            or_(
                                # the whole exchange: the reply that took the old fact in repeats it too
                                (col(MemoryEntry.turn) == source.turn) & (col(MemoryEntry.type) == "record"),
                                (col(MemoryEntry.turn) == source.turn)
                                & col(MemoryEntry.content).startswith(f"第{source.turn}轮：")
                                & col(MemoryEntry.type).in_(["conversation", "event"]),
                            ),
                        )
                    ).all()
                    if records:
                        session.exec(
                            update(MemoryEntry)
                            .where(col(MemoryEntry.id).in_(list(records)))
                            .values(valid_to_turn=turn, superseded_by=new)
                        )
                        before["record_ids"] = list(records)
            else:  # edited away meanwhile: nothing to close, the new fact stands alone
                reason += f"; memory {decision.target_id} was no longer current, left as it was"
        step = _step_row(instance_id, character, turn, decision, memory_id=new, before=before)
        step.reason = reason
        session.add(step)
        session.flush()
        recorded.update(step.model_dump())

    entries = store.add_memories(
        instance_id,
        [
            {
                "content": fact_content(fact, user_name),
                "type": FACT_TYPE,
                "tags": [FACT_TAG],
                "importance": FACT_IMPORTANCE,
                "turn": turn,
                "line_id": line_id,
                "witnesses": list(witnesses) if witnesses is not None else None,
                "valid_from_turn": turn,
                "related_character": user_name,
            }
        ],
        character_id=character,
        before_commit=close_and_record,
        vectors_later=vectors_later,
    )
    return recorded, entries


def _stored_value(store: MemoryStore, instance_id: int, decision: Decision) -> str:
    if decision.target_id is None:
        return ""
    return value_of(store.get_memory(instance_id, decision.target_id).content)


def consolidated_line(database_url: str | None, instance_id: int, line_id: int | None) -> bool:
    """Whether the facts of the user's line `line_id` were consolidated already (an outbox row applied twice)."""
    if line_id is None:
        return False
    with session_scope(database_url) as session:
        found = session.exec(
            select(MemoryEntry.id).where(
                MemoryEntry.instance_id == instance_id,
                MemoryEntry.line_id == line_id,
                MemoryEntry.type == FACT_TYPE,
            )
        ).first()
        return found is not None


def closed_record_lines(session: Session, instance_id: int) -> list[str]:
    """The instance's dialogue-record lines a later fact closed (issue 26), each ``speaker：text`` as recorded; in the
    caller's session (a turn's other fixed reads share it, issue 28)."""
    from personalab.nodes.rules.curation import record_parts

    return [record_parts(str(content))[1] for content in session.exec(closed_records_query(instance_id)).all()]


def closed_records_query(instance_id: int) -> Any:
    """The contents of the instance's closed dialogue-record entries: read on every turn, through the partial index
    `ix_memory_entry_closed` (only closed memories are in it), not by reading every memory of the instance."""
    return select(MemoryEntry.content).where(
        MemoryEntry.instance_id == instance_id,
        MemoryEntry.type == "record",
        col(MemoryEntry.valid_to_turn).is_not(None),
    )


def closed_turns(database_url: str | None, instance_id: int, turns: Sequence[int]) -> set[int]:
    """Of `turns`, those of the instance with a memory a later fact closed (`valid_to_turn` set): an exchange that
    said something no longer true (issue 26; the director's events of those turns are left out)."""
    if not turns:
        return set()
    with session_scope(database_url) as session:
        rows = session.exec(
            select(MemoryEntry.turn)
            .where(
                MemoryEntry.instance_id == instance_id,
                col(MemoryEntry.turn).in_(sorted(set(turns))),
                col(MemoryEntry.valid_to_turn).is_not(None),
            )
            .distinct()
        ).all()
    return {int(turn) for turn in rows if turn is not None}


def consolidation_steps(
    database_url: str | None, instance_id: int, *, include_undone: bool = True
) -> list[dict[str, Any]]:
    """An instance's consolidation steps, oldest first (what the memory API lists)."""
    with session_scope(database_url) as session:
        stmt = select(MemoryConsolidation).where(MemoryConsolidation.instance_id == instance_id)
        if not include_undone:
            stmt = stmt.where(col(MemoryConsolidation.undone_at).is_(None))
        return [row.model_dump() for row in session.exec(stmt.order_by(col(MemoryConsolidation.id))).all()]


def undo_step(
    database_url: str | None, instance_id: int, step_id: int, chroma_path: str | None = None
) -> dict[str, Any]:
    """Undo consolidation step `step_id` of the instance: delete the fact it added and reopen the one it closed
    (as it was: `before`), then mark it undone. `NotFound` for a step not of this instance; `InvalidInput` naming
    the step for one already undone, or whose new fact a later step closed (undo that one first)."""
    from personalab.stores.memory import MemoryStore

    store = MemoryStore(db_url=database_url, chroma_path=chroma_path)
    with session_scope(database_url) as session:
        step = session.get(MemoryConsolidation, step_id)
        if step is None or step.instance_id != instance_id:
            raise NotFound(f"consolidation step {step_id} not found in instance {instance_id}")
        if step.undone_at is not None:
            raise InvalidInput(f"consolidation step {step_id} was undone already")
        new = session.get(MemoryEntry, step.memory_id) if step.memory_id is not None else None
        if new is not None and new.superseded_by is not None:
            later = session.exec(
                select(MemoryConsolidation.id).where(
                    MemoryConsolidation.instance_id == instance_id,
                    MemoryConsolidation.target_id == new.id,
                    col(MemoryConsolidation.undone_at).is_(None),
                )
            ).first()
            raise InvalidInput(
                f"consolidation step {step_id}: its fact (memory {new.id}) was replaced by a later step"
                f"{f' ({later})' if later else ''}; undo that one first"
            )
        new_id = new.id if new is not None else None
    if new_id is not None:
        store.delete_memory(instance_id, new_id)
    with session_scope(database_url) as session:
        step = session.get(MemoryConsolidation, step_id)
        assert step is not None
        if step.before is not None and step.target_id is not None:
            before = dict(step.before)
            records = before.pop("record_ids", [])
            reopen = [step.target_id, *records]
            session.exec(
                update(MemoryEntry)
                .where(col(MemoryEntry.id).in_(reopen), col(MemoryEntry.instance_id) == instance_id)
                .values(**before, updated_at=utcnow())
            )
        step.undone_at = utcnow()
        session.add(step)
        session.flush()
        return step.model_dump()
