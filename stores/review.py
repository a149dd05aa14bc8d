"""What a post-turn review (seed 003) leaves behind in the database: plot nodes and world-book suggestions.

Both belong to the branch of the reviewed turn (seed 000's tree): they carry the turn's reply line (`line_id`),
and listing them for an instance gives its current branch's (the path from the root to its leaf; rows without a
line, from before lines were kept, are on every branch) unless `all_branches` is asked. A regenerated, edited
or rewound turn writes its own rows beside the other branch's; a swipe back shows that branch's again.

Plot nodes (seed 003 剧情更新): `record_plot_node` stores one node per reply line — recording the same line
again (a retried review) replaces it; `list_plot_nodes` returns them in turn order. They are for the host to
read: nothing in the turn graph reads them back (the director steers by the outline and the archived events).

World-book suggestions (seed 003 世界书更新): the review only proposes; nothing reaches the world book until
a person approves. `create_suggestion` stores a pending proposal (validated as a world-book entry right
away, so approving it cannot fail on its content; a pending proposal for the same reply line is
replaced rather than duplicated). `approve_suggestion` creates the entry with
`stores.worldbook.add_worldbook_entry` in the proposal's scope (the instance by default) and marks the
proposal approved, in the caller's transaction: both happen or neither. An approved entry is in the world book
of its scope on every branch — approving is the user's decision to make it lore, whichever branch proposed it.
`reject_suggestion` marks it rejected. Only a pending proposal can be decided: an unknown id raises `SuggestionNotFoundError` (a
LookupError), a decided one `SuggestionDecidedError` (a ValueError), both naming the id (and the status),
with nothing changed. The decision is a conditional UPDATE (`... WHERE status = 'pending'`), so two
processes deciding the same proposal at once cannot both win.

Every function works in the caller's session (`stores.db.session_scope`), which commits or rolls back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.nodes.rules.review.effects import (
    MAX_SUMMARY_CHARS,
    SUGGESTION_KIND,
    SUGGESTION_SCOPES,
    check_choice,
    check_turn,
)
from personalab.nodes.rules.worldbook import validate_entry
from personalab.stores.history import get_path_ids
from personalab.stores.review_tables import PlotNodeRow, WorldbookSuggestionRow
from personalab.stores.saves import get_save
from personalab.stores.tables import Line, utcnow
from personalab.stores.worldbook import GLOBAL, Scope, add_worldbook_entry, check_scope
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

STATUSES: tuple[str, ...] = ("pending", "approved", "rejected")
SUGGESTION_TRIGGERS: tuple[str, ...] = ("keyword", "semantic")


class SuggestionNotFoundError(NotFound):
    """No world-book suggestion with that id."""


class SuggestionDecidedError(InvalidInput):
    """The suggestion was already approved or rejected."""


def _iso(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)  # SQLite hands back naive datetimes; they were written in UTC
    return value.isoformat()


# A stored time; in `to_dict()` an ISO text with its UTC offset ("+00:00"), naive SQLite values included.
StoredTime = Annotated[datetime, PlainSerializer(_iso, when_used="json")]


class PlotNode(BaseModel):
    """A stored plot node (seed 003 剧情更新), read from its row with `model_validate(row)`."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    id: int
    save_id: int = Field(serialization_alias="instance_id")  # public: one name per concept (issue 23)
    turn: int
    line_id: int | None
    level: str | None
    summary: str
    created_at: StoredTime

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class WorldbookSuggestion(BaseModel):
    """A stored world-book suggestion (seed 003 世界书更新), read from its row with `model_validate(row)`."""

    model_config = ConfigDict(frozen=True, from_attributes=True)

    id: int
    save_id: int = Field(serialization_alias="instance_id")  # public: one name per concept (issue 23)
    turn: int
    line_id: int | None
    choice_level: str | None
    title: str
    content: str
    keywords: tuple[str, ...]
    trigger_type: str
    kind: str
    scope: str
    status: str
    reason: str
    created_at: StoredTime
    decided_at: StoredTime | None
    worldbook_entry_id: int | None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


# --- branches -------------------------------------------------------------------------------------


def _check_line(session: Session, save_id: int, line_id: object) -> int | None:
    """`line_id` when it is a line of instance `save_id` (or None); InvalidInput naming it otherwise."""
    if line_id is None:
        return None
    if isinstance(line_id, bool) or not isinstance(line_id, int):
        raise InvalidInput(f"line_id {line_id!r} is not a line id")
    line = session.get(Line, line_id)
    if line is None or line.save_id != save_id:
        raise InvalidInput(f"line {line_id} is not a line of instance {save_id}")
    return line_id


def _same_line(column: Any, line_id: int | None, turn_column: Any, turn: int) -> Any:
    """The row a new one replaces: the same reply line; without a line, the same turn's row without one."""
    if line_id is not None:
        return col(column) == line_id
    return (col(column).is_(None)) & (col(turn_column) == turn)


def _on_branch(session: Session, save_id: int, rows: Sequence[Any]) -> list[Any]:
    """The rows of instance `save_id` on its current branch (or without a line)."""
    branch = set(get_path_ids(session, save_id))
    return [row for row in rows if row.line_id is None or row.line_id in branch]


# --- plot nodes -----------------------------------------------------------------------------------


def record_plot_node(
    session: Session, save_id: int, turn: int, level: str | None, summary: str, line_id: int | None = None
) -> PlotNode:
    """Store the plot node of `turn` in instance `save_id` for the reply line `line_id` (its branch), replacing
    an earlier one of the same line (without a line: of the same turn). `level` is the choice level (None:
    suggested without a choice). InstanceNotFound for an unknown instance, ValueError for a bad turn, level,
    summary or line."""
    check_turn(turn)
    level = check_choice(level, "plot node level")
    if not isinstance(summary, str) or not summary.strip():
        raise InvalidInput(f"plot node summary must be non-empty text, got {summary!r}")
    summary = summary.strip()
    if len(summary) > MAX_SUMMARY_CHARS:
        raise InvalidInput(f"plot node summary has {len(summary)} characters, over the limit of {MAX_SUMMARY_CHARS}")
    get_save(session, save_id)
    line_id = _check_line(session, save_id, line_id)
    stmt = select(PlotNodeRow).where(
        PlotNodeRow.save_id == save_id, _same_line(PlotNodeRow.line_id, line_id, PlotNodeRow.turn, turn)
    )
    row = session.exec(stmt).first()
    if row is None:
        row = PlotNodeRow(save_id=save_id, turn=turn, line_id=line_id, level=level, summary=summary)
    else:
        row.level, row.summary, row.created_at = level, summary, utcnow()
    session.add(row)
    try:
        session.flush()
    except IntegrityError as exc:
        if "uq_plot_node_save_turn" in str(exc) or "plot_node.save_id, plot_node.turn" in str(exc):
            raise InvalidInput(
                "the database keeps one plot node per turn (before revision 0005): run `personalab db upgrade`"
            ) from None
        raise
    return PlotNode.model_validate(row)


def list_plot_nodes(session: Session, save_id: int, *, all_branches: bool = False) -> list[PlotNode]:
    """The plot nodes of instance `save_id` on its current branch (every branch's with `all_branches`), oldest
    turn first (InstanceNotFound for an unknown one)."""
    get_save(session, save_id)
    stmt = select(PlotNodeRow).where(PlotNodeRow.save_id == save_id)
    rows = session.exec(stmt.order_by(col(PlotNodeRow.turn), col(PlotNodeRow.id))).all()
    return [PlotNode.model_validate(r) for r in (rows if all_branches else _on_branch(session, save_id, rows))]


# --- world-book suggestions -----------------------------------------------------------------------


def _clean_keywords(keywords: object) -> list[str]:
    if isinstance(keywords, str) or not isinstance(keywords, Sequence):
        raise InvalidInput(f"world-book suggestion keywords must be a list of texts, got {keywords!r}")
    out: list[str] = []
    for word in keywords:
        if not isinstance(word, str):
            raise InvalidInput(f"world-book suggestion keywords must be texts, got {type(word).__name__}: {word!r}")
        word = word.strip()
        if word and word not in out:
            out.append(word)
    return out


def _target_scope(session: Session, save_id: int, scope: str) -> Scope:
    """Where an approved suggestion's entry goes."""
    if scope not in SUGGESTION_SCOPES:
        raise InvalidInput(f"world-book suggestion scope must be one of {', '.join(SUGGESTION_SCOPES)}, got {scope!r}")
    save = get_save(session, save_id)
    if scope == "instance":
        return Scope(save_id=save_id)
    if scope == "character":
        if save.role_id is None:
            raise InvalidInput(f"world-book suggestion scope 'character': instance {save_id} has no character")
        return Scope(role_id=save.role_id)
    return GLOBAL


def _check_entry(
    content: str, keywords: list[str], title: str, trigger_type: str, kind: str, scope: Scope, where: str
) -> None:
    """Raise ValueError when the proposal could not become a world-book entry."""
    if trigger_type not in SUGGESTION_TRIGGERS:
        raise InvalidInput(
            f"{where}: field 'trigger_type' must be one of {', '.join(SUGGESTION_TRIGGERS)}, got {trigger_type!r}"
        )
    entry = dict(
        id="new",
        content=content,
        keywords=tuple(keywords),
        title=title,
        trigger_type=trigger_type,
        kind=kind,
        role_id=scope.role_id,
        save_id=scope.save_id,
    )
    validate_entry(entry, where)


def create_suggestion(
    session: Session,
    save_id: int,
    turn: int,
    content: str,
    *,
    keywords: Sequence[str] = (),
    title: str = "",
    trigger_type: str | None = None,
    kind: str = SUGGESTION_KIND,
    scope: str = "instance",
    choice_level: str | None = None,
    reason: str = "",
    line_id: int | None = None,
) -> WorldbookSuggestion:
    """A pending world-book suggestion for `turn` of instance `save_id`, proposed by the reply line `line_id`
    (its branch). Takes the dict of `review.effects.worldbook_suggestion_from_turn` as keyword arguments.
    `trigger_type` defaults to "keyword" with keywords, "semantic" without. A pending suggestion of the same
    reply line (without a line: of the same turn and no line) is replaced (same id). InstanceNotFound /
    ValueError for bad input, nothing stored."""
    check_turn(turn)
    choice_level = check_choice(choice_level, "world-book suggestion choice_level")
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput(f"world-book suggestion content must be non-empty text, got {content!r}")
    for name, value in (("title", title), ("reason", reason), ("kind", kind)):
        if not isinstance(value, str):
            raise InvalidInput(f"world-book suggestion {name} must be text, got {type(value).__name__}")
    content = content.strip()
    words = _clean_keywords(keywords)
    trigger = trigger_type if trigger_type is not None else ("keyword" if words else "semantic")
    target = _target_scope(session, save_id, scope)
    check_scope(session, target)
    _check_entry(content, words, title.strip(), trigger, kind, target, "world-book suggestion")
    line_id = _check_line(session, save_id, line_id)
    stmt = select(WorldbookSuggestionRow).where(
        WorldbookSuggestionRow.save_id == save_id,
        _same_line(WorldbookSuggestionRow.line_id, line_id, WorldbookSuggestionRow.turn, turn),
        WorldbookSuggestionRow.status == "pending",
    )
    row = session.exec(stmt.order_by(col(WorldbookSuggestionRow.id))).first()
    values: dict[str, Any] = {
        "choice_level": choice_level,
        "title": title.strip(),
        "content": content,
        "keywords": words,
        "trigger_type": trigger,
        "kind": kind,
        "scope": scope,
        "reason": reason.strip(),
    }
    if row is None:
        row = WorldbookSuggestionRow(save_id=save_id, turn=turn, line_id=line_id, **values)
    else:
        for name, value in values.items():
            setattr(row, name, value)
        row.created_at = utcnow()
    session.add(row)
    session.flush()
    return WorldbookSuggestion.model_validate(row)


def _row(session: Session, suggestion_id: int) -> WorldbookSuggestionRow:
    if isinstance(suggestion_id, bool) or not isinstance(suggestion_id, int):
        raise InvalidInput(f"world-book suggestion id must be an integer, got {suggestion_id!r}")
    row = session.get(WorldbookSuggestionRow, suggestion_id)
    if row is None:
        raise SuggestionNotFoundError(f"world-book suggestion {suggestion_id} does not exist")
    return row


def get_suggestion(session: Session, suggestion_id: int) -> WorldbookSuggestion:
    return WorldbookSuggestion.model_validate(_row(session, suggestion_id))


def list_suggestions(
    session: Session, save_id: int | None = None, status: str | None = None, *, all_branches: bool = False
) -> list[WorldbookSuggestion]:
    """Suggestions, oldest first: all, or of one instance (InstanceNotFound for an unknown one) — those proposed
    on its current branch, or on every branch with `all_branches` —, and / or with one status (ValueError for a
    status outside pending / approved / rejected). Each says its reply line (`line_id`)."""
    stmt = select(WorldbookSuggestionRow)
    if status is not None:
        if status not in STATUSES:
            raise InvalidInput(f"suggestion status must be one of {', '.join(STATUSES)}, got {status!r}")
        stmt = stmt.where(WorldbookSuggestionRow.status == status)
    if save_id is not None:
        get_save(session, save_id)
        stmt = stmt.where(WorldbookSuggestionRow.save_id == save_id)
    rows = session.exec(stmt.order_by(col(WorldbookSuggestionRow.id))).all()
    if save_id is not None and not all_branches:
        rows = _on_branch(session, save_id, rows)
    return [WorldbookSuggestion.model_validate(r) for r in rows]


def _decided_error(row: WorldbookSuggestionRow, action: str) -> SuggestionDecidedError:
    entry = f" (world-book entry {row.worldbook_entry_id})" if row.worldbook_entry_id is not None else ""
    return SuggestionDecidedError(
        f"world-book suggestion {row.id} is already {row.status}{entry}; only a pending suggestion can be {action}"
    )


def _decide(session: Session, row: WorldbookSuggestionRow, status: str, action: str) -> None:
    """Move `row` from pending to `status`, or raise if someone else decided it first."""
    result = session.execute(
        update(WorldbookSuggestionRow)
        .where(col(WorldbookSuggestionRow.id) == row.id, col(WorldbookSuggestionRow.status) == "pending")
        .values(status=status, decided_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    session.refresh(row)
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise _decided_error(row, action)


def approve_suggestion(
    session: Session,
    suggestion_id: int,
    *,
    content: str | None = None,
    keywords: Sequence[str] | None = None,
) -> WorldbookSuggestion:
    """Create the suggested world-book entry and mark the suggestion approved (one transaction: the
    caller's). `content` / `keywords` replace the proposed ones (a person's edit before approving).
    Returns the approved suggestion; its `worldbook_entry_id` is the new entry. The entry is in the world book
    of the suggestion's scope (the whole instance by default) on every branch, not only the branch that
    proposed it: approving is the user's decision."""
    row = _row(session, suggestion_id)
    if row.status != "pending":
        raise _decided_error(row, "approved")
    if content is not None:
        if not isinstance(content, str) or not content.strip():
            raise InvalidInput(f"world-book suggestion {suggestion_id}: the new content is empty")
        content = content.strip()
    words = _clean_keywords(keywords) if keywords is not None else list(row.keywords or ())
    final_content = content if content is not None else row.content
    trigger = row.trigger_type
    if keywords is not None:
        trigger = "keyword" if words else "semantic"
    target = _target_scope(session, row.save_id, row.scope)
    check_scope(session, target)
    # Everything is checked before the first write, so a bad edit leaves the suggestion pending.
    _check_entry(final_content, words, row.title, trigger, row.kind, target, f"world-book suggestion {suggestion_id}")
    _decide(session, row, "approved", "approved")
    entry = add_worldbook_entry(
        session,
        final_content,
        scope=target,
        title=row.title,
        keywords=tuple(words),
        trigger_type=trigger,
        kind=row.kind,
    )
    row.worldbook_entry_id = int(entry.id)
    row.content, row.keywords, row.trigger_type = final_content, words, trigger
    session.add(row)
    session.flush()
    return WorldbookSuggestion.model_validate(row)


def reject_suggestion(session: Session, suggestion_id: int) -> WorldbookSuggestion:
    """Mark a pending suggestion rejected; the world book is not touched."""
    row = _row(session, suggestion_id)
    if row.status != "pending":
        raise _decided_error(row, "rejected")
    _decide(session, row, "rejected", "rejected")
    return WorldbookSuggestion.model_validate(row)


# --- one reviewed turn ----------------------------------------------------------------------------


PLOT_NODE_PLAN: tuple[str, ...] = ("turn", "level", "summary")
SUGGESTION_PLAN: tuple[str, ...] = (
    "turn",
    "content",
    "keywords",
    "title",
    "trigger_type",
    "kind",
    "scope",
    "choice_level",
    "reason",
)
SUGGESTION_PLAN_REQUIRED: tuple[str, ...] = ("turn", "content")


def _planned(
    plan: Mapping[str, Any], key: str, required: Sequence[str], allowed: Sequence[str]
) -> Mapping[str, Any] | None:
    """One part of a review plan: None when the review planned none; InvalidInput naming the part and its keys
    when it is not what `plan_review_effects` makes (host code may build plans of its own)."""
    part = plan.get(key)
    if not part:
        return None
    if not isinstance(part, Mapping):
        raise InvalidInput(f"review plan {key} must be a mapping, got {type(part).__name__}")
    missing = [name for name in required if name not in part]
    unknown = sorted(str(name) for name in part if name not in allowed)
    if missing or unknown:
        raise InvalidInput(
            f"review plan {key} needs {', '.join(required)} and allows {', '.join(allowed)}; "
            f"missing {missing}, unknown {unknown}"
        )
    return part


def save_review_effects(
    session: Session, save_id: int, plan: Mapping[str, Any], line_id: int | None = None
) -> dict[str, Any]:
    """Store what `review.effects.plan_review_effects` planned: its plot node and its world-book
    suggestion (either may be None), both for the reviewed turn's reply line `line_id` (its branch). Returns
    {"plot_node": PlotNode | None, "worldbook_suggestion": WorldbookSuggestion | None}."""
    if not isinstance(plan, Mapping):
        raise InvalidInput(f"review plan must be a mapping, got {type(plan).__name__}")
    plot = _planned(plan, "plot_node", PLOT_NODE_PLAN, PLOT_NODE_PLAN)
    proposal = _planned(plan, "worldbook_suggestion", SUGGESTION_PLAN_REQUIRED, SUGGESTION_PLAN)
    node = record_plot_node(session, save_id, plot["turn"], plot["level"], plot["summary"], line_id) if plot else None
    suggestion = create_suggestion(session, save_id, **proposal, line_id=line_id) if proposal else None
    return {"plot_node": node, "worldbook_suggestion": suggestion}
