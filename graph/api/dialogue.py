"""The dialogue of an instance, for host apps (seed 002 对话功能 / 会话实例; seed 000 the dialogue tree).

    from personalab.graph.api import PersonaLab
    dialogue = PersonaLab().dialogue             # `Dialogue`, bound to the caller (owner, database)
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
and nothing changes. The caller's `owner` (issue 14): a user's call on another user's instance is
`InstanceNotFound`, like an id that does not exist; None (the operator) reaches every instance. The module-level
functions (`history(7, owner=…, database_url=…)`, …) are the previous release's API, kept for one release.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.library import Instances, _Area
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.prompt_catalog import catalog_for
from personalab.nodes.rules.turn_input import check_edit_input
from personalab.stores.branches import (
    children_of,
    latest_leaf_under,
    line_of,
    move_leaf,
    remember_viewed_leaf,
    sibling_ids,
    viewed_leaf_under,
)
from personalab.stores.history import get_lines, get_path_ids
from personalab.stores.saves import get_save
from personalab.stores.sessions import list_sessions, start_session

if TYPE_CHECKING:  # the turn graph (LangGraph) is loaded only by what runs or syncs a turn
    from personalab.graph.graph import TurnGraph
    from personalab.nodes.context import Context

SPEAKER_FIELDS = ("original_emotion", "predicted_emotion", "tts_content", "action_content", "audio_file")
DEFAULT_PAGE = 50
MAX_PAGE = 1000


def _check_id(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInput(f"{what} must be an id (a whole number), got {value!r}")
    return value


def _line_view(
    row: dict[str, Any], siblings: list[int], on_branch: bool, language: str | None = None
) -> dict[str, Any]:
    """A line as the API shows it: id, parent, speaker, text, its seed 000 fields, and where it stands among its
    siblings (1-based `sibling_index` of `sibling_count`; `sibling_ids` oldest first). An unnamed speaker is
    named in the instance's `language` (issue 28: 用户 / User, 旁白 / Narrator, 角色 / Character)."""
    catalog = catalog_for(language)
    speaker = (
        row.get("display_name")
        or row.get("script_role_id")
        or (
            catalog.default_user_name
            if row["attribute"] == "user"
            else catalog.narrator_name
            if row["attribute"] == "system"
            else catalog.default_character_name
        )
    )
    return {
        "id": row["id"],
        "parent_id": row["parent_line_id"],
        "attribute": row["attribute"],
        "speaker": speaker,
        "content": row["content"],
        "role_id": row.get("role_id"),  # seed 000's field name: the speaking character's id
        "script_role_id": row.get("script_role_id"),
        "display_name": row.get("display_name"),
        "fields": {name: row[name] for name in SPEAKER_FIELDS if row.get(name)},
        "sibling_ids": siblings,
        "sibling_index": siblings.index(row["id"]) + 1 if row["id"] in siblings else 1,
        "sibling_count": len(siblings),
        "on_branch": on_branch,
    }


def _branch(session: Any, instance_id: int) -> dict[str, Any]:
    """Where the instance stands: its leaf and the story state of its branch (what the next turn starts from)."""
    from personalab.stores.turns import branch_story_state

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


def _last_user_line(session: Any, instance_id: int) -> int:
    path = get_path_ids(session, instance_id)
    for row in reversed(get_lines(session, path[-64:] if len(path) > 64 else path, ["id", "attribute"])):
        if row["attribute"] == "user":
            return int(row["id"])
    for row in reversed(get_lines(session, path, ["id", "attribute"])):
        if row["attribute"] == "user":
            return int(row["id"])
    raise InvalidInput(f"instance {instance_id} has no user line on its current branch to answer again")


class Dialogue(_Area):
    """An instance's dialogue tree (seed 000; seed 002 对话功能 / 会话实例): read it, move along it, regenerate,
    edit, sessions."""

    def _instance(self, instance_id: Any) -> int:
        """A whole-number instance id, and (for a user, issue 14) one of the caller's instances:
        `InstanceNotFound` naming the id for another user's, as for one that does not exist."""
        _check_id(instance_id, "instance")
        if self.owner is not None:
            Instances(self.caller).check(instance_id)
        return int(instance_id)

    def history(self, instance_id: int, *, offset: int = 0, limit: int = DEFAULT_PAGE) -> dict[str, Any]:
        """The current branch from the root (seed 002 查看历史对话), `limit` lines from `offset` (0: the first
        line; a negative offset counts from the end, -20 = the last 20 lines): `{"instance_id", "leaf", "total",
        "offset", "limit", "lines": [...]}`, each line with its id, parent, speaker, content, fields and its
        siblings."""
        self._instance(instance_id)
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise InvalidInput(f"offset must be a whole number, got {offset!r}")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
            raise InvalidInput(f"limit must be a whole number from 1 to {MAX_PAGE}, got {limit!r}")
        with self._session() as session:
            path = get_path_ids(session, instance_id)
            start = max(0, len(path) + offset) if offset < 0 else offset
            page = path[start : start + limit]
            rows = get_lines(session, page)
            siblings = sibling_ids(session, instance_id, {row["parent_line_id"] for row in rows})
            language = get_save(session, instance_id).language
            return {
                "instance_id": instance_id,
                "leaf": path[-1] if path else None,
                "total": len(path),
                "offset": start,
                "limit": limit,
                "lines": [_line_view(row, siblings.get(row["parent_line_id"], []), True, language) for row in rows],
            }

    def view(self, instance_id: int, *, offset: int = -DEFAULT_PAGE, limit: int = DEFAULT_PAGE) -> dict[str, Any]:
        """What a chat page shows, read in one session (issue 24: a page is a few queries, however long the
        dialogue): `{"instance", "character", "page", "branch", "outline"}` — the instance as the list shows it,
        its character (None when it has none), `history`'s page of lines (`offset` / `limit` as there), the story
        state of the current branch as `story_state` gives it, and the background's outline points when the
        branch has no stored state yet (the plot starts at point 1)."""
        from personalab.graph.api.library import _character, _instance
        from personalab.stores import library_rows as rows
        from personalab.stores.tables import Role
        from personalab.stores.turns import branch_story_state

        _check_id(instance_id, "instance")
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise InvalidInput(f"offset must be a whole number, got {offset!r}")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
            raise InvalidInput(f"limit must be a whole number from 1 to {MAX_PAGE}, got {limit!r}")
        with self._session() as session:
            instance_row = rows.instance_row(session, instance_id, self.owner)  # InstanceNotFound naming the id
            instance = _instance(session, instance_row)
            # the instance's own character, even one its owner has since unshared: the chat names its speaker
            role = session.get(Role, instance_row.role_id) if instance_row.role_id is not None else None
            path = get_path_ids(session, instance_id)
            start = max(0, len(path) + offset) if offset < 0 else offset
            lines = get_lines(session, path[start : start + limit])
            siblings = sibling_ids(session, instance_id, {row["parent_line_id"] for row in lines})
            row = branch_story_state(session, instance_id, path)
            state = dict(row.state) if row is not None else {}
            plot = state.get("plot_state") or {}
            background_id = instance_row.background_id
            return {
                "instance": instance,
                "character": _character(session, role, self.owner) if role is not None else None,
                "page": {
                    "instance_id": instance_id,
                    "leaf": path[-1] if path else None,
                    "total": len(path),
                    "offset": start,
                    "limit": limit,
                    "lines": [
                        _line_view(line, siblings.get(line["parent_line_id"], []), True, instance_row.language)
                        for line in lines
                    ],
                },
                "branch": {
                    "instance_id": instance_id,
                    "leaf": path[-1] if path else None,
                    "lines": len(path),
                    "turn": state.get("turn", 0),
                    "story_state": state,
                    "story_state_id": row.id if row is not None else None,
                },
                # the plot starts at point 1 of the background's outline until the branch stores a state
                "outline": (
                    rows.outline(session, background_id)
                    if background_id is not None and not plot.get("story_outline")
                    else None
                ),
            }

    def siblings(self, instance_id: int, line_id: int) -> dict[str, Any]:
        """The lines beside `line_id` (the same parent, itself included, oldest first), each marked `on_branch`
        when it is on the current branch: the replies a regenerate made, the user lines an edit made."""
        self._instance(instance_id)
        _check_id(line_id, "line")
        with self._session() as session:
            line = line_of(session, instance_id, line_id)
            on_branch = set(get_path_ids(session, instance_id))
            children = children_of(session, instance_id, line.parent_line_id)
            ids = [child.id for child in children if child.id is not None]
            rows = get_lines(session, ids)
            return {
                "instance_id": instance_id,
                "line_id": line_id,
                "parent_id": line.parent_line_id,
                "siblings": [
                    _line_view(row, ids, row["id"] in on_branch, get_save(session, instance_id).language)
                    for row in rows
                ],
            }

    def story_state(self, instance_id: int) -> dict[str, Any]:
        """The instance's leaf and the story state of its current branch: turn, plot state, relationship, core
        memory, world-book firings (empty before the branch's first stored reply)."""
        self._instance(instance_id)
        with self._session() as session:
            get_save(session, instance_id)
            return _branch(session, instance_id)

    @contextmanager
    def _holding(self, instance_id: int) -> Iterator[None]:
        """The instance's turn lock around a move of its leaf: no move while a turn runs (`InstanceBusy`)."""
        from personalab.stores.settings import settings
        from personalab.stores.turns import acquire_turn_lock, release_turn_lock

        token = acquire_turn_lock(instance_id, settings().turn_lease, self.database_url)
        try:
            yield
        finally:
            release_turn_lock(instance_id, token, self.database_url)

    def _sync_checkpoint(self, branch: dict[str, Any]) -> None:
        """Bring the instance's checkpoint (what `personalab core show`, LangGraph Studio and the served thread's
        state show) to the story state of the branch the leaf moved to. A turn would start from the stored state
        anyway (history_fetch compares the two); this keeps what a reader sees between turns right too."""
        from personalab.graph.runner import turn_config, turn_graph
        from personalab.nodes.context import Context
        from personalab.nodes.state import STORY_FIELDS

        config = turn_config(branch["instance_id"])
        with turn_graph(Context(database_url=self.database_url)) as (graph, _ctx):
            if not graph.get_state(config).values:
                return  # no turn ran through the graph yet: nothing to bring up to date
            story = branch["story_state"]
            change = {name: story[name] for name in STORY_FIELDS if name in story}
            graph.update_state(
                config,
                {**change, "turn": branch["turn"], "story_state_id": branch["story_state_id"]},
                as_node="end_turn",
            )

    def _move(self, instance_id: int, leaf: int) -> dict[str, Any]:
        """Move the leaf under the instance's turn lock, then its checkpoint."""
        with self._holding(instance_id):
            with self._session() as session:
                move_leaf(session, get_save(session, instance_id), leaf)
                branch = _branch(session, instance_id)
            self._sync_checkpoint(branch)
        return branch

    def rewind(self, instance_id: int, line_id: int) -> dict[str, Any]:
        """Move the leaf back to `line_id`, a line of the current branch; the next turn continues from there, with
        the story state stored there. The lines after it stay, as a branch a swipe can bring back."""
        self._instance(instance_id)
        _check_id(line_id, "line")
        with self._session() as session:
            line_of(session, instance_id, line_id)
            if line_id not in set(get_path_ids(session, instance_id)):
                raise InvalidInput(f"line {line_id} is not on the current branch of instance {instance_id}")
        return self._move(instance_id, line_id)

    def swipe(self, instance_id: int, line_id: int) -> dict[str, Any]:
        """Make `line_id` current: a sibling of a line of the current branch (another reply to the same user line,
        another edit of a user line). The leaf goes to where the branch under it was last viewed (a swipe left it
        there; issue 28), else to its end (its newest line each step); the story state is that branch's."""
        self._instance(instance_id)
        _check_id(line_id, "line")
        with self._session() as session:
            line = line_of(session, instance_id, line_id)
            path = get_path_ids(session, instance_id)
            if line.parent_line_id not in {None, *path}:
                raise InvalidInput(
                    f"line {line_id} is not a sibling of a line on the current branch of instance {instance_id}"
                )
            # a line of the current branch: it stays as it is; another: the reply last viewed under it (issue 28),
            # or the end of the branch under it; the line left remembers its leaf for a swipe back
            if line_id in set(path):
                leaf = path[-1]
            else:
                save = get_save(session, instance_id)
                leaf = viewed_leaf_under(session, save, line_id) or latest_leaf_under(session, instance_id, line_id)
                remember_viewed_leaf(session, save, path, line.parent_line_id)
        return self._move(instance_id, leaf)

    def regenerate_target(self, instance_id: int, line_id: int | None = None) -> int:
        """The user line a regenerate answers again: `line_id` (checked: a user line of the instance) or the last
        user line of the current branch."""
        self._instance(instance_id)
        with self._session() as session:
            get_save(session, instance_id)
            if line_id is None:
                return _last_user_line(session, instance_id)
            _check_id(line_id, "line")
            if line_of(session, instance_id, line_id).attribute != "user":
                raise InvalidInput(f"line {line_id} is not a user line: only a user line can be answered again")
            return line_id

    def edit_target(self, instance_id: int, line_id: int) -> int:
        """Where an edit of user line `line_id` goes: its parent (0: it is the first line). The line must be a
        user line of the instance's current branch."""
        self._instance(instance_id)
        _check_id(line_id, "line")
        with self._session() as session:
            line = line_of(session, instance_id, line_id)
            if line.attribute != "user":
                raise InvalidInput(f"line {line_id} is not a user line: only the user's lines can be edited")
            if line_id not in set(get_path_ids(session, instance_id)):
                raise InvalidInput(f"line {line_id} is not on the current branch of instance {instance_id}")
            return line.parent_line_id or 0

    def check_edit(self, text: Any, user_name: Any = None) -> None:
        """The new text and display name of an edited line, as a turn takes them (nodes/rules/turn_input.py):
        `InvalidInput` naming the field ('text' / 'user_name') before a run starts."""
        from personalab.nodes.context import Context

        ctx = Context()
        check_edit_input(text, user_name, ctx.max_message_chars, ctx.max_user_name_chars)

    @staticmethod
    def thread_id(instance_id: int) -> str:
        """The LangGraph thread of the instance's turns (uuid5 of its id): where a served run on it goes."""
        from personalab.stores.checkpoints import thread_id_for

        return thread_id_for(instance_id)

    @contextmanager
    def _graph(self, graph: TurnGraph | None, context: Context | None) -> Iterator[tuple[TurnGraph, Context]]:
        from personalab.graph.runner import turn_graph
        from personalab.nodes.context import Context

        ctx = context or (Context(database_url=self.database_url) if self.database_url else Context())
        if graph is not None:
            yield graph, ctx
        else:
            with turn_graph(ctx) as made:
                yield made

    def regenerate(
        self,
        instance_id: int,
        *,
        line_id: int | None = None,
        graph: TurnGraph | None = None,
        context: Context | None = None,
        on_token: Callable[[str], None] | None = None,
    ) -> dict[str, Any]:
        """A new reply to the last user line of the current branch (or to user line `line_id`), stored beside the
        replies it already has (a sibling); the turn starts from the story state stored before that user line,
        and its result is `run_turn`'s."""
        from personalab.graph.runner import run_turn

        target = self.regenerate_target(instance_id, line_id)
        with self._graph(graph, context) as (turn, ctx):
            return run_turn(turn, ctx, instance_id, "", on_token=on_token, reply_to=target)

    def edit(
        self,
        instance_id: int,
        line_id: int,
        text: str,
        *,
        graph: TurnGraph | None = None,
        context: Context | None = None,
        on_token: Callable[[str], None] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """Edit user line `line_id` of the current branch: `text` becomes a new user line beside it (a sibling,
        under the same parent) and is answered; the old line and what followed it stay as a branch. The turn
        starts from the story state stored before the edited line. `extra`: `run_turn`'s other inputs
        (user_name, …)."""
        from personalab.graph.runner import run_turn

        parent = self.edit_target(instance_id, line_id)
        with self._graph(graph, context) as (turn, ctx):
            return run_turn(turn, ctx, instance_id, text, on_token=on_token, branch_from=parent, **extra)

    def new_session(self, instance_id: int) -> dict[str, Any]:
        """Start a new session (sitting) of the instance now (seed 002 可暂停/继续): the current one ends at its
        last turn, and the next turn gets a recap of it. Starting again before any turn keeps the empty one."""
        self._instance(instance_id)
        with self._session() as session:
            play = start_session(session, instance_id)
            return next(item for item in list_sessions(session, instance_id) if item["id"] == play.id)

    def sessions(self, instance_id: int) -> list[dict[str, Any]]:
        """The instance's sessions, oldest first: id, started_at, ended_at (None for the current one), turns,
        last_turn_at."""
        self._instance(instance_id)
        with self._session() as session:
            return list_sessions(session, instance_id)

    def line_count(self, instance_id: int) -> int:
        """How many lines the instance's tree holds, every branch counted."""
        from personalab.stores.branches import line_count

        self._instance(instance_id)
        with self._session() as session:
            return line_count(session, instance_id)

    def memory_of(
        self, instance_id: int, *, role_id: int | None = None, script_role_id: str | None = None
    ) -> list[dict[str, Any]]:
        """What one character of the scene remembers of the whole stored dialogue (seed 000 build_memory): its own
        lines as the assistant's, everyone else's as the user's. `role_id` (seed 000's field) names a stored
        character, `script_role_id` one of the host's script characters."""
        from personalab.nodes.rules.memory_builder import build_memory
        from personalab.stores.history import get_chat_history

        self._instance(instance_id)
        with self._session() as session:
            history = get_chat_history(session, instance_id)
            language = get_save(session, instance_id).language  # issue 28: unnamed speakers in its language
            return [
                dict(message)
                for message in build_memory(history, role_id=role_id, script_role_id=script_role_id, language=language)
            ]

    def release_lock(self, instance_id: int) -> bool:
        """Give back the turn lock this process holds on the instance (a turn stopped by Ctrl-C): the instance is
        free at once instead of after the lease."""
        from personalab.stores.turns import release_held_lock

        return release_held_lock(instance_id, self.database_url)


def flush_writes() -> None:
    """Wait for the memory and event writes the turns of this process queued (a command's exit, a batch's end)."""
    from personalab.stores.background import flush_event_writes

    flush_event_writes()


# ---- the previous release's functions (one release more) ---------------------------------------------------------


def _dialogue(owner: str | None, database_url: str | None) -> Dialogue:
    return Dialogue(Caller(owner=owner, database_url=database_url))


def history(
    instance_id: int,
    *,
    offset: int = 0,
    limit: int = DEFAULT_PAGE,
    owner: str | None = None,
    database_url: str | None = None,
) -> dict[str, Any]:
    return _dialogue(owner, database_url).history(instance_id, offset=offset, limit=limit)


def siblings(
    instance_id: int, line_id: int, *, owner: str | None = None, database_url: str | None = None
) -> dict[str, Any]:
    return _dialogue(owner, database_url).siblings(instance_id, line_id)


def view(
    instance_id: int,
    *,
    offset: int = -DEFAULT_PAGE,
    limit: int = DEFAULT_PAGE,
    owner: str | None = None,
    database_url: str | None = None,
) -> dict[str, Any]:
    return _dialogue(owner, database_url).view(instance_id, offset=offset, limit=limit)


def story_state(instance_id: int, *, owner: str | None = None, database_url: str | None = None) -> dict[str, Any]:
    return _dialogue(owner, database_url).story_state(instance_id)


def rewind(
    instance_id: int, line_id: int, *, owner: str | None = None, database_url: str | None = None
) -> dict[str, Any]:
    return _dialogue(owner, database_url).rewind(instance_id, line_id)


def swipe(
    instance_id: int, line_id: int, *, owner: str | None = None, database_url: str | None = None
) -> dict[str, Any]:
    return _dialogue(owner, database_url).swipe(instance_id, line_id)


def regenerate_target(
    instance_id: int, line_id: int | None = None, *, owner: str | None = None, database_url: str | None = None
) -> int:
    return _dialogue(owner, database_url).regenerate_target(instance_id, line_id)


def edit_target(instance_id: int, line_id: int, *, owner: str | None = None, database_url: str | None = None) -> int:
    return _dialogue(owner, database_url).edit_target(instance_id, line_id)


def regenerate(
    instance_id: int,
    *,
    line_id: int | None = None,
    graph: TurnGraph | None = None,
    context: Context | None = None,
    on_token: Callable[[str], None] | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    url = context.database_url if context is not None else None
    return _dialogue(owner, url).regenerate(
        instance_id, line_id=line_id, graph=graph, context=context, on_token=on_token
    )


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
    url = context.database_url if context is not None else None
    return _dialogue(owner, url).edit(
        instance_id, line_id, text, graph=graph, context=context, on_token=on_token, **extra
    )


def new_session(instance_id: int, *, owner: str | None = None, database_url: str | None = None) -> dict[str, Any]:
    return _dialogue(owner, database_url).new_session(instance_id)


def sessions(instance_id: int, *, owner: str | None = None, database_url: str | None = None) -> list[dict[str, Any]]:
    return _dialogue(owner, database_url).sessions(instance_id)


def line_count(instance_id: int, *, database_url: str | None = None) -> int:
    return _dialogue(None, database_url).line_count(instance_id)
