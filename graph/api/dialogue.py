"""The dialogue of an instance, for host apps (seed 002 对话功能 / 会话实例; seed 000 the dialogue tree).

    from personalab.graph.api import dialogue
    dialogue.history(7, offset=0, limit=50)      # the current branch from the root, paged
    dialogue.siblings(7, line_id)                # the alternatives at a line (regenerated replies, edits)
    dialogue.regenerate(7)                       # a new reply beside the last one
    dialogue.swipe(7, line_id)                   # make another sibling (and the branch under it) current
    dialogue.edit(7, line_id, "新的话")           # a new user line beside `line_id`, then its reply
    dialogue.rewind(7, line_id)                  # move the leaf back to a line of the branch
    dialogue.new_session(7); dialogue.sessions(7)

Lines are never deleted or moved: every branch stays and can be made current again. The story state follows the
branch: the next turn starts from the turn counter, plot state, relationship, core memory and world-book timers
stored with the last reply on the current branch (`story_state`). Moving the leaf takes the instance's turn lock
(`InstanceBusy` while a turn runs). Bad ids are `InstanceNotFound` / `NotFound` / `InvalidInput` naming the id,
and nothing changes. Every function takes `owner` (issue 14): a user's call on another user's instance is
`InstanceNotFound`, like an id that does not exist; None (the operator) reaches every instance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from personalab.graph.api.library import check_instance
from personalab.graph.graph import TurnGraph
from personalab.graph.runner import run_turn, turn_config, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.state import STORY_FIELDS
from personalab.stores.branches import children_of, latest_leaf_under, line_of, move_leaf
from personalab.stores.db import session_scope
from personalab.stores.history import get_lines, get_path_ids
from personalab.stores.saves import get_save
from personalab.stores.sessions import list_sessions, start_session
from personalab.stores.settings import settings
from personalab.stores.tables import Line
from personalab.stores.turns import acquire_turn_lock, branch_story_state, release_turn_lock
from sqlalchemy import func, or_
from sqlmodel import Session, col, select

SPEAKER_FIELDS = ("original_emotion", "predicted_emotion", "tts_content", "action_content", "audio_file")
DEFAULT_PAGE = 50
MAX_PAGE = 1000


def _check_id(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInput(f"{what} must be an id (a whole number), got {value!r}")
    return value


def _check_instance(instance_id: Any, owner: str | None, database_url: str | None) -> int:
    """A whole-number instance id, and (for a user, issue 14) one of `owner`'s instances: `InstanceNotFound` naming
    the id for another user's, as for one that does not exist."""
    _check_id(instance_id, "instance")
    if owner is not None:
        check_instance(instance_id, owner=owner, database_url=database_url)
    return int(instance_id)


def _line_view(row: dict[str, Any], siblings: list[int], on_branch: bool) -> dict[str, Any]:
    """A line as the API shows it: id, parent, speaker, text, its seed 000 fields, and where it stands among its
    siblings (1-based `sibling_index` of `sibling_count`; `sibling_ids` oldest first)."""
    speaker = (
        row.get("display_name")
        or row.get("script_role_id")
        or ("用户" if row["attribute"] == "user" else "旁白" if row["attribute"] == "system" else "角色")
    )
    return {
        "id": row["id"],
        "parent_id": row["parent_line_id"],
        "attribute": row["attribute"],
        "speaker": speaker,
        "content": row["content"],
        "role_id": row.get("role_id"),
        "script_role_id": row.get("script_role_id"),
        "display_name": row.get("display_name"),
        "fields": {name: row[name] for name in SPEAKER_FIELDS if row.get(name)},
        "sibling_ids": siblings,
        "sibling_index": siblings.index(row["id"]) + 1 if row["id"] in siblings else 1,
        "sibling_count": len(siblings),
        "on_branch": on_branch,
    }


def _sibling_ids(session: Session, save_id: int, parents: set[int | None]) -> dict[int | None, list[int]]:
    """The children of each parent (None: the roots), oldest first."""
    found: dict[int | None, list[int]] = {parent: [] for parent in parents}
    ids = [parent for parent in parents if parent is not None]
    stmt = select(Line.id, Line.parent_line_id).where(col(Line.save_id) == save_id)
    conditions = []
    if ids:
        conditions.append(col(Line.parent_line_id).in_(ids))
    if None in parents:
        conditions.append(col(Line.parent_line_id).is_(None))
    if not conditions:
        return found
    for line_id, parent in session.exec(stmt.where(or_(*conditions)).order_by(col(Line.id))).all():
        if line_id is not None:
            found.setdefault(parent, []).append(line_id)
    return found


def history(
    instance_id: int,
    *,
    offset: int = 0,
    limit: int = DEFAULT_PAGE,
    owner: str | None = None,
    database_url: str | None = None,
) -> dict[str, Any]:
    """The current branch from the root (seed 002 查看历史对话), `limit` lines from `offset` (0: the first line;
    a negative offset counts from the end, -20 = the last 20 lines): `{"instance_id", "leaf", "total", "offset",
    "limit", "lines": [...]}`, each line with its id, parent, speaker, content, fields and its siblings."""
    _check_instance(instance_id, owner, database_url)
    if not isinstance(offset, int) or isinstance(offset, bool):
        raise InvalidInput(f"offset must be a whole number, got {offset!r}")
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be a whole number from 1 to {MAX_PAGE}, got {limit!r}")
    with session_scope(database_url) as session:
        path = get_path_ids(session, instance_id)
        start = max(0, len(path) + offset) if offset < 0 else offset
        page = path[start : start + limit]
        rows = get_lines(session, page)
        siblings = _sibling_ids(session, instance_id, {row["parent_line_id"] for row in rows})
        return {
            "instance_id": instance_id,
            "leaf": path[-1] if path else None,
            "total": len(path),
            "offset": start,
            "limit": limit,
            "lines": [_line_view(row, siblings.get(row["parent_line_id"], []), True) for row in rows],
        }


def siblings(
    instance_id: int, line_id: int, *, owner: str | None = None, database_url: str | None = None
) -> dict[str, Any]:
    """The lines beside `line_id` (the same parent, itself included, oldest first), each marked `on_branch` when
    it is on the current branch: the replies a regenerate made, the user lines an edit made."""
    _check_instance(instance_id, owner, database_url)
    _check_id(line_id, "line")
    with session_scope(database_url) as session:
        line = line_of(session, instance_id, line_id)
        on_branch = set(get_path_ids(session, instance_id))
        children = children_of(session, instance_id, line.parent_line_id)
        ids = [child.id for child in children if child.id is not None]
        rows = get_lines(session, ids)
        return {
            "instance_id": instance_id,
            "line_id": line_id,
            "parent_id": line.parent_line_id,
            "siblings": [_line_view(row, ids, row["id"] in on_branch) for row in rows],
        }


@contextmanager
def _holding(instance_id: int, database_url: str | None) -> Iterator[None]:
    """The instance's turn lock around a move of its leaf: no move while a turn runs (`InstanceBusy`)."""
    token = acquire_turn_lock(instance_id, settings().turn_lease, database_url)
    try:
        yield
    finally:
        release_turn_lock(instance_id, token, database_url)


def _branch(session: Session, instance_id: int) -> dict[str, Any]:
    """Where the instance stands: its leaf and the story state of its branch (what the next turn starts from)."""
    path = get_path_ids(session, instance_id)
    row = branch_story_state(session, instance_id, path)
    state = dict(row.state) if row is not None else {}
    return {
        "instance_id": instance_id,
        "leaf": path[-1] if path else None,
        "lines": len(path),
        "turn": state.get("turn", 0),
        "story_state": state,
        "story_state_id": row.id if row is not None else None,
    }


def _sync_checkpoint(branch: dict[str, Any], database_url: str | None) -> None:
    """Bring the instance's checkpoint (what `personalab core show`, LangGraph Studio and the served thread's
    state show) to the story state of the branch the leaf moved to. A turn would start from the stored state
    anyway (history_fetch compares the two); this keeps what a reader sees between turns right too."""
    config = turn_config(branch["instance_id"])
    with turn_graph(Context(database_url=database_url)) as (graph, _ctx):
        if not graph.get_state(config).values:
            return  # no turn ran through the graph yet: nothing to bring up to date
        story = branch["story_state"]
        change = {name: story[name] for name in STORY_FIELDS if name in story}
        graph.update_state(
            config, {**change, "turn": branch["turn"], "story_state_id": branch["story_state_id"]}, as_node="end_turn"
        )


def _move(instance_id: int, leaf: int, database_url: str | None) -> dict[str, Any]:
    """Move the leaf under the instance's turn lock, then its checkpoint."""
    with _holding(instance_id, database_url):
        with session_scope(database_url) as session:
            move_leaf(session, get_save(session, instance_id), leaf)
            branch = _branch(session, instance_id)
        _sync_checkpoint(branch, database_url)
    return branch


def story_state(instance_id: int, *, owner: str | None = None, database_url: str | None = None) -> dict[str, Any]:
    """The instance's leaf and the story state of its current branch: turn, plot state, relationship, core
    memory, world-book firings (empty before the branch's first stored reply)."""
    _check_instance(instance_id, owner, database_url)
    with session_scope(database_url) as session:
        get_save(session, instance_id)
        return _branch(session, instance_id)


def rewind(
    instance_id: int, line_id: int, *, owner: str | None = None, database_url: str | None = None
) -> dict[str, Any]:
    """Move the leaf back to `line_id`, a line of the current branch; the next turn continues from there, with
    the story state stored there. The lines after it stay, as a branch a swipe can bring back."""
    _check_instance(instance_id, owner, database_url)
    _check_id(line_id, "line")
    with session_scope(database_url) as session:
        line_of(session, instance_id, line_id)
        if line_id not in set(get_path_ids(session, instance_id)):
            raise InvalidInput(f"line {line_id} is not on the current branch of instance {instance_id}")
    return _move(instance_id, line_id, database_url)


def swipe(
    instance_id: int, line_id: int, *, owner: str | None = None, database_url: str | None = None
) -> dict[str, Any]:
    """Make `line_id` current: a sibling of a line of the current branch (another reply to the same user line,
    another edit of a user line). The leaf goes to the end of the branch under it (its newest line each step),
    and the story state is that branch's."""
    _check_instance(instance_id, owner, database_url)
    _check_id(line_id, "line")
    with session_scope(database_url) as session:
        line = line_of(session, instance_id, line_id)
        path = get_path_ids(session, instance_id)
        parents_on_branch = {None, *path}
        if line.parent_line_id not in parents_on_branch:
            raise InvalidInput(
                f"line {line_id} is not a sibling of a line on the current branch of instance {instance_id}"
            )
        # a line of the current branch: it stays as it is; another: the end of the branch under it
        leaf = path[-1] if line_id in set(path) else latest_leaf_under(session, instance_id, line_id)
    return _move(instance_id, leaf, database_url)


def _last_user_line(session: Session, instance_id: int) -> int:
    path = get_path_ids(session, instance_id)
    for row in reversed(get_lines(session, path[-64:] if len(path) > 64 else path, ["id", "attribute"])):
        if row["attribute"] == "user":
            return int(row["id"])
    for row in reversed(get_lines(session, path, ["id", "attribute"])):
        if row["attribute"] == "user":
            return int(row["id"])
    raise InvalidInput(f"instance {instance_id} has no user line on its current branch to answer again")


@contextmanager
def _graph(graph: TurnGraph | None, context: Context | None) -> Iterator[tuple[TurnGraph, Context]]:
    if graph is not None:
        yield graph, context or Context()
    else:
        with turn_graph(context) as made:
            yield made


def regenerate_target(
    instance_id: int, line_id: int | None = None, *, owner: str | None = None, database_url: str | None = None
) -> int:
    """The user line a regenerate answers again: `line_id` (checked: a user line of the instance) or the last
    user line of the current branch."""
    _check_instance(instance_id, owner, database_url)
    with session_scope(database_url) as session:
        get_save(session, instance_id)
        if line_id is None:
            return _last_user_line(session, instance_id)
        _check_id(line_id, "line")
        if line_of(session, instance_id, line_id).attribute != "user":
            raise InvalidInput(f"line {line_id} is not a user line: only a user line can be answered again")
        return line_id


def edit_target(instance_id: int, line_id: int, *, owner: str | None = None, database_url: str | None = None) -> int:
    """Where an edit of user line `line_id` goes: its parent (0: it is the first line). The line must be a user
    line of the instance's current branch."""
    _check_instance(instance_id, owner, database_url)
    _check_id(line_id, "line")
    with session_scope(database_url) as session:
        line = line_of(session, instance_id, line_id)
        if line.attribute != "user":
            raise InvalidInput(f"line {line_id} is not a user line: only the user's lines can be edited")
        if line_id not in set(get_path_ids(session, instance_id)):
            raise InvalidInput(f"line {line_id} is not on the current branch of instance {instance_id}")
        return line.parent_line_id or 0


def regenerate(
    instance_id: int,
    *,
    line_id: int | None = None,
    graph: TurnGraph | None = None,
    context: Context | None = None,
    on_token: Callable[[str], None] | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    """A new reply to the last user line of the current branch (or to user line `line_id`), stored beside the
    replies it already has (a sibling); the turn starts from the story state stored before that user line, and
    its result is `run_turn`'s."""
    ctx = context or Context()
    target = regenerate_target(instance_id, line_id, owner=owner, database_url=ctx.database_url)
    with _graph(graph, ctx) as (turn, ctx):
        return run_turn(turn, ctx, instance_id, "", on_token=on_token, reply_to=target)


def edit(
    instance_id: int,
    line_id: int,
    text: str,
    *,
    graph: TurnGraph | None = None,
    context: Context | None = None,
    on_token: Callable[[str], None] | None = None,
    owner: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Edit user line `line_id` of the current branch: `text` becomes a new user line beside it (a sibling, under
    the same parent) and is answered; the old line and what followed it stay as a branch. The turn starts from
    the story state stored before the edited line. `extra`: `run_turn`'s other inputs (user_name, …)."""
    ctx = context or Context()
    parent = edit_target(instance_id, line_id, owner=owner, database_url=ctx.database_url)
    with _graph(graph, ctx) as (turn, ctx):
        return run_turn(turn, ctx, instance_id, text, on_token=on_token, branch_from=parent, **extra)


def new_session(instance_id: int, *, owner: str | None = None, database_url: str | None = None) -> dict[str, Any]:
    """Start a new session (sitting) of the instance now (seed 002 可暂停/继续): the current one ends at its last
    turn, and the next turn gets a recap of it. Starting again before any turn keeps the empty one."""
    _check_instance(instance_id, owner, database_url)
    with session_scope(database_url) as session:
        play = start_session(session, instance_id)
        return next(item for item in list_sessions(session, instance_id) if item["id"] == play.id)


def sessions(instance_id: int, *, owner: str | None = None, database_url: str | None = None) -> list[dict[str, Any]]:
    """The instance's sessions, oldest first: id, started_at, ended_at (None for the current one), turns,
    last_turn_at."""
    _check_instance(instance_id, owner, database_url)
    with session_scope(database_url) as session:
        return list_sessions(session, instance_id)


def line_count(instance_id: int, *, database_url: str | None = None) -> int:
    """How many lines the instance's tree holds, every branch counted."""
    _check_id(instance_id, "instance")
    with session_scope(database_url) as session:
        get_save(session, instance_id)
        return int(session.exec(select(func.count()).select_from(Line).where(col(Line.save_id) == instance_id)).one())
