"""History fetch (seed 002 对话功能 / seed 000 get_chat_history): take the instance's turn lock, append the
host's lines and the user's line to the dialogue tree, and read the path from the root to the new leaf: the
ids of its lines, then its first and last lines, enough of them to find its preamble and recall window
(`recall_window`). The ids are kept between turns (`get_path_ids`), so a long play-through costs a turn
about what a short one does.

Nothing is written when the input is bad: the message and every host line are checked first.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

from langgraph.config import get_config
from langgraph.runtime import Runtime
from personalab.nodes.context import Context, context_of, most_recall_turns
from personalab.nodes.rules.character import persona_text, seeded_core_memory
from personalab.nodes.rules.core_memory import LAST_TURNS
from personalab.nodes.rules.errors import InvalidInput, RunOvertaken, TurnLockLost
from personalab.nodes.rules.memory_builder import recall_window
from personalab.nodes.rules.plot import new_plot_state
from personalab.nodes.rules.prompt_catalog import catalog_for
from personalab.nodes.rules.reply import format_reply
from personalab.nodes.rules.review.effects import check_choice, check_gap, gap_from_seconds
from personalab.nodes.rules.review.types import GapName
from personalab.nodes.rules.turn_input import check_turn_input, check_user_name
from personalab.nodes.rules.types import Character
from personalab.nodes.rules.worldbook import elapsed_seconds
from personalab.nodes.state import TurnState, TurnUpdate, story_fields
from personalab.stores.branches import children_of, place_turn_lines
from personalab.stores.card_play import card_play_fields
from personalab.stores.checkpoints import thread_id_for
from personalab.stores.db import session_scope
from personalab.stores.history import get_lines, get_path_ids, get_path_to_line
from personalab.stores.personas import persona_of_instance
from personalab.stores.saves import get_save, outline_of
from personalab.stores.sessions import recap_items, recap_turns, session_for_turn
from personalab.stores.tables import Background, Role
from personalab.stores.turns import (
    acquire_turn_lock,
    branch_story_state,
    last_turn_time,
    latest_story_state_id,
    release_turn_lock,
    remember_run,
    run_abandoned,
    run_reply,
    run_user_line,
    save_story_state,
)
from personalab.stores.vectors import chroma_path
from personalab.stores.warmup import warm_up_async
from sqlmodel import Session


def check_branch_input(state: TurnState) -> tuple[int | None, int | None]:
    """`reply_to` and `branch_from` (seed 000 siblings: regenerate, edit), each a line id or None; not both, and a
    regenerate takes no message or host lines of its own (the stored user line is the message)."""
    given = {}
    for name in ("reply_to", "branch_from"):
        value = state.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise InvalidInput(f"{name} must be a line id, got {value!r}")
        given[name] = value
    if given["reply_to"] is not None and (given["branch_from"] is not None or state.get("lines_before")):
        raise InvalidInput("reply_to (regenerate) takes no branch_from or lines_before")
    return given["reply_to"], given["branch_from"]


def check_thread(instance_id: int) -> None:
    """A turn runs on its instance's thread (uuid5 of the instance, `thread_id_for`): the thread's checkpoints are
    that instance's story, so a run that names another instance on it is refused (`InvalidInput`) before anything
    is written."""
    try:
        thread_id = (get_config().get("configurable") or {}).get("thread_id")
    except RuntimeError:  # called outside a graph run (a test of the node itself)
        return
    if thread_id is not None and str(thread_id) != thread_id_for(instance_id):
        raise InvalidInput(
            f"thread {thread_id} is not the thread of instance {instance_id}: run its turns on thread "
            f"{thread_id_for(instance_id)}"
        )


MAX_RUN_KEY_CHARS = 200


def run_key_of() -> str | None:
    """The identity of the run playing this turn (issue 27): a served run's id (`configurable.run_id`, the same
    when the server replays the run after a restart) or the key an in-process caller gave (`run_key`,
    `graph.runner`)."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # called outside a graph run (a test of the node itself)
        return None
    key = configurable.get("run_key") or configurable.get("run_id")
    if key is None or not str(key).strip():
        return None
    if len(str(key)) > MAX_RUN_KEY_CHARS:
        raise InvalidInput(f"run_id is over the limit of {MAX_RUN_KEY_CHARS} characters")
    return str(key)


def replay_of(session: Session, instance_id: int, run_key: str) -> tuple[TurnUpdate | None, int | None]:
    """For a run seen before (replayed after its server was killed): its answer when its turn is done, else the
    user line it stored, still the instance's last line (`RunOvertaken` when a later turn followed it); (None,
    None) for a new run."""
    replayed = run_user_line(session, instance_id, run_key)
    if replayed is None:
        return None, None
    done = run_reply(session, instance_id, run_key)
    if done is None:
        if get_save(session, instance_id).last_message_id != replayed:
            # a later turn took the dead process's lock over (stores.turns: a holder of this host that no longer
            # runs) and played after the unanswered line, or the user moved elsewhere: answering the old line would
            # move the instance back under it and leave the later turn off the current branch
            raise RunOvertaken(
                f"run {run_key}: instance {instance_id} has played on since this run's line was stored (its server "
                "process died before the reply); the run is not played again"
            )
        return None, replayed
    return replayed_answer(session, instance_id, replayed, done), replayed


def replayed_answer(session: Session, instance_id: int, user_line_id: int, reply_line_id: int) -> TurnUpdate:
    """What a replayed run answers when its turn is done: the stored reply and the story state it left, nothing
    written (issue 27: a run replayed after a killed server must not play the turn again)."""
    path = get_path_to_line(session, instance_id, reply_line_id)
    ids = [line.id for line in path]
    reply = [line.model_dump() for line in path[ids.index(user_line_id) + 1 :]]
    segments = [
        {key: line.get(key) for key in ("original_emotion", "content", "tts_content", "action_content")}
        for line in reply
    ]
    row = branch_story_state(session, instance_id, [line_id for line_id in ids if line_id is not None])
    kept = dict(row.state) if row is not None else {}
    return cast(
        TurnUpdate,
        {
            **kept,
            "story_state_id": row.id if row is not None else None,
            "user_line_id": user_line_id,
            "reply": format_reply(segments),
            "reply_lines": segments,
            "lock_token": None,
            "error": None,
            "retrieved": [],
            "memory_blocks": [],
            "injected": {},
            "director_events": None,
            "prompt": [],
            "review": None,
            "debug": {"reset": True, "instance_id": instance_id, "replayed_run": {"reply_line_id": reply_line_id}},
        },
    )


def seconds_since(moment: datetime | None) -> float | None:
    """Seconds from `moment` (a stored timestamp, naive = UTC) to now; None when there is no previous turn."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, (datetime.now(UTC) - moment).total_seconds())


HEAD_LINES = 16  # the opening lines read first, to find where the preamble's first turn ends
TAIL_LINES_PER_TURN = 4  # the last lines read first, per turn of the window


def window_turns(ctx: Context) -> int:
    """Turns of dialogue a turn reads: the prompt's recall memory or the maintenance's last turns, whichever is
    more, plus the turn being answered."""
    return max(most_recall_turns(ctx), LAST_TURNS) + 1


def read_recall_window(
    session: Session, path: Sequence[int], turns: int, role_id: int | None, name: str
) -> tuple[tuple[int, int], list[dict[str, Any]]]:
    """`recall_window` of the path with line ids `path` and the lines it keeps (the preamble, then the
    window), reading only the path's first and last lines (more of them, fourfold, until that settles it):
    a long path's middle is never read."""
    head, tail = HEAD_LINES, TAIL_LINES_PER_TURN * turns
    read: dict[int, dict[str, Any]] = {}
    while True:
        known = set(range(min(head, len(path)))) | set(range(max(0, len(path) - tail), len(path)))
        unread = [path[index] for index in sorted(known) if path[index] not in read]
        read.update((line["id"], line) for line in get_lines(session, unread))
        partial = [read[line_id] if index in known else None for index, line_id in enumerate(path)]
        window = recall_window(partial, turns, role_id=role_id, display_name=name)
        if window is not None:
            head_end, tail_start = window
            return window, [read[line_id] for line_id in [*path[:head_end], *path[tail_start:]]]
        head, tail = head * 4, tail * 4


def kept_state(
    session: Session, state: TurnState, instance_id: int, path: Sequence[int], anchor: int | None
) -> dict[str, Any]:
    """The kept fields this turn starts from, read under the instance's lock: the story state of the branch it
    continues (`path`: the line ids from the root to this turn's user line; the state of the last stored reply on
    it, so after a rewind, swipe or edit the turn counter, plot, relationship, core memory and world-book timers
    are those of the branch point) — the checkpoint's copy when it is that state, else the stored one. So a
    turn that failed midway leaves nothing behind, a kill between storing a reply and writing the checkpoint
    loses nothing, and two runs that read the same checkpoint never both build on it (the second sees the first's
    stored state)."""
    row = branch_story_state(session, instance_id, path)
    if row is not None and row.id == state.get("story_state_id"):
        return story_fields(state)
    if row is not None:
        return dict(row.state)
    if "story_state_id" in state or latest_story_state_id(session, instance_id) is not None:
        # no reply of this branch was stored (a failed turn's checkpoint, or a branch taken before the first
        # reply): the story starts from its beginning
        return {}
    # a checkpoint from before stored story states: it is the truth; store it at the leaf it belongs to
    kept = story_fields(state)
    if kept.get("turn"):
        save_story_state(session, instance_id, kept["turn"], kept, anchor)
    return kept


def character_of(role: Role | None, name: str, background_id: int | None, world_setting: str) -> Character:
    """The turn's character: every field of the role that reaches the model, "" for an empty one (issue 13)."""

    def text(value: str | None) -> str:
        return value or ""

    return {
        "role_id": role.id if role else None,
        "name": name,
        "persona": persona_text(role.model_dump()) if role else "",
        "background_id": background_id,
        "world_setting": world_setting,
        "description": text(role.description) if role else "",
        "system_prompt": text(role.system_prompt) if role else "",
        "example_dialogue": text(role.example_dialogue) if role else "",
        "post_history_instructions": text(role.post_history_instructions) if role else "",
    }


def history_fetch(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    ctx = context_of(runtime)
    instance_id = state.get("instance_id")
    if not isinstance(instance_id, int) or isinstance(instance_id, bool):
        raise InvalidInput(f"instance_id must be an integer, got {instance_id!r}")
    check_thread(instance_id)
    reply_to, branch_from = check_branch_input(state)
    replayed: int | None = None
    lines = (
        []
        if reply_to is not None
        else check_turn_input(
            state.get("message"), state.get("lines_before"), ctx.max_message_chars, ctx.max_host_lines
        )
    )
    user_name = check_user_name(state.get("user_name"), ctx.max_user_name_chars)
    check_choice(state.get("selected_choice"), "selected_choice")
    given_gap = check_gap(state["time_gap"], "time_gap") if state.get("time_gap") is not None else None
    warm_up_async(chroma_path())  # overlaps the loads (models, dictionaries, store) with this node and the rewrite
    run_key = run_key_of()
    started = time.monotonic()  # a cancel of the run after this is this execution's, not an earlier one's
    token = acquire_turn_lock(instance_id, ctx.lock_lease_s, ctx.database_url, run_key=run_key)
    if run_abandoned(run_key, started):  # cancelled while this node was taking the lock (graph.ReleaseOnCancel)
        release_turn_lock(instance_id, token, ctx.database_url)
        raise TurnLockLost(f"run {run_key} was cancelled: its turn stops, nothing stored")
    try:
        if run_key is not None:
            with session_scope(ctx.database_url) as session:
                answer, replayed = replay_of(session, instance_id, run_key)
            if answer is not None:
                release_turn_lock(instance_id, token, ctx.database_url)
                return answer
            if replayed is not None:  # stored, not answered: answer that line, never a second copy of it
                reply_to, branch_from, lines = replayed, None, []
        with session_scope(ctx.database_url) as session:
            save = get_save(session, instance_id)
            # issue 28: the instance's persona names the user unless the call gives a name
            persona = persona_of_instance(session, instance_id)
            if user_name is None and persona is not None:
                user_name = persona.name
            if user_name and lines:
                lines[-1]["display_name"] = user_name
            written, anchor = place_turn_lines(session, save, lines, reply_to, branch_from)
            # a regenerate's number under its user line: the offline model writes another reply for each (issue 28)
            replies_before = len(children_of(session, instance_id, written[-1].id)) if reply_to is not None else 0
            if run_key is not None and not replayed:
                remember_run(
                    session, instance_id, run_key, cast(int, written[-1].id)
                )  # with the line, in its transaction
            sitting = session_for_turn(session, instance_id, ctx.session_pause_min)
            role = session.get(Role, save.role_id) if save.role_id else None
            name = role.name if role else catalog_for(save.language).default_character_name  # issue 28
            path = get_path_ids(session, instance_id)
            kept = kept_state(session, state, instance_id, path, anchor)
            # the last sitting's turns on this branch only (seed 000's tree: a branch left behind did not happen)
            branch = set(path)
            recap_line = catalog_for(save.language).recap_line  # issue 28: in the instance's language
            if persona is not None:  # ... naming the user by the instance's persona (issue 28)
                escaped = persona.name.replace("{", "{{").replace("}", "}}")
                recap_line = recap_line.replace(catalog_for(save.language).default_user_name, escaped, 1)
            recap = (
                recap_items(recap_turns(session, sitting.previous, branch=branch), name, recap_line)
                if sitting.previous
                else []
            )
            (head_end, tail_start), history = read_recall_window(session, path, window_turns(ctx), save.role_id, name)
            background = session.get(Background, save.background_id) if save.background_id else None
            outline = (
                [point.content for point in outline_of(session, background.id)] if background and background.id else []
            )
            previous = last_turn_time(session, instance_id)
            play = card_play_fields(session, save, background)  # issue 28: the card's scenario, depth, language
    except BaseException:
        release_turn_lock(instance_id, token, ctx.database_url)
        raise

    character = character_of(role, name, save.background_id, background.world_setting if background else "")
    character.update(play)  # type: ignore[typeddict-item]
    # always present, "" without a persona: the state's shape is what types.Character says (served schemas)
    character["user_persona"] = (persona.description or "") if persona is not None else ""
    update: TurnUpdate = {
        **cast(TurnUpdate, kept),
        "turn": kept.get("turn", 0) + 1,
        "story_state_id": None,  # until this turn's reply is stored
        "user_name": user_name,
        "lock_token": token,
        "run_key": run_key,
        "character": character,
        "history": history,
        "user_line_id": written[-1].id,
        "session_id": sitting.session.id,
        "session_recap": recap,
        "retrieved": [],
        "memory_blocks": [],
        "injected": {},
        "director_events": None,
        "prompt": [],
        "reply_raw": "",
        "reply": "",
        "reply_lines": [],
        "error": None,
        # one of seed 003's gaps: check_gap returns only those, gap_from_seconds only its thresholds' gaps
        "gap": cast(GapName, given_gap or gap_from_seconds(seconds_since(previous))),
        # the elapsed time itself, for the world book's time windows (seed 004 时间邻近性)
        "gap_seconds": elapsed_seconds(seconds_since(previous), given_gap),
        "path_lines": len(path),
        "review": None,
        "debug": {
            "reset": True,
            "instance_id": instance_id,
            # the graph's own time for this turn, read by `end_turn` (`debug.turn_time`): wall clock, since a
            # served graph may run the nodes in different threads
            "turn_time": {"started_at": time.time()},
            "history": {
                "path_lines": len(path),
                "lines_read": len(history),
                "older_lines_not_read": tail_start - head_end,
            },
        },
    }
    if reply_to is not None:
        update["debug"]["regenerate"] = {"replies_before": replies_before}
    if reply_to is not None:  # a regenerate answers the stored user line again, under its stored name
        update["message"], update["user_name"] = written[-1].content, user_name or written[-1].display_name
    if not kept.get("plot_state"):
        update["plot_state"] = new_plot_state(outline or [catalog_for(save.language).free_story])  # issue 28
    if not kept.get("core_memory"):
        # seeded from the role's persona fields (seed 002 会话实例: 复制角色定义 → 独立角色状态)
        update["core_memory"] = seeded_core_memory(character["name"], role.model_dump() if role else {})
        update["core_memory_versions"] = []
    # every kept field set from the branch's stored state: a value of a later turn left in the checkpoint (after a
    # rewind) never carries over
    for name_, empty in (
        ("relationship", {}),
        ("relations", {}),
        ("worldbook_fired", {}),
        ("state_events", []),
        ("recall_floor_turn", 0),
        ("shown_memory", []),
    ):
        update.setdefault(name_, empty)  # type: ignore[misc]
    return update
