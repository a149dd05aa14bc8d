"""How a turn ends (seed 002 对话功能): one `end_turn` node that every path of the graph ends in, and
`releasing_on_failure` for a turn that raises.

A stored turn's story state (`story_state`) is brought up to date with what the review and the maintenance
changed, and the instance's turn lock is released, in one transaction: the next turn of the instance starts from
all of it. Then the work the turn queued on the background writer (its event, memories, index updates, layer
maintenance; seed 002 事件写入异步执行), held back while the turn ran so it never took the interpreter from the
reply, may start; the last of them prunes the instance's checkpoints to the latest (`stores.checkpoints`).

A turn that raises (a bug, a lost database, Ctrl-C) releases the lock at once, so the instance is free for the
next turn instead of waiting for the lease; what the failed turn changed in the graph's state is dropped by the
next turn, which starts from the stored story state (`history_fetch.kept_state`).
"""

from __future__ import annotations

import functools
import time
from typing import Protocol

from langgraph.runtime import Runtime
from personalab.nodes.context import Context, context_of
from personalab.nodes.state import TurnState, TurnUpdate, story_fields
from personalab.stores.background import turn_ended
from personalab.stores.checkpoints import prune_after_turn
from personalab.stores.db import session_scope
from personalab.stores.turns import drop_turn_lock, record_turn_figures, release_turn_lock, update_story_state


def end_turn(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    ctx = context_of(runtime)
    instance_id, token, stored = state["instance_id"], state.get("lock_token"), state.get("story_state_id")
    if stored is not None or token:
        with session_scope(ctx.database_url) as session:
            if stored is not None:
                update_story_state(session, stored, story_fields(state))
            if token:
                drop_turn_lock(session, instance_id, token)
    turn_ended(instance_id)
    # the thread keeps only its latest checkpoint: the story state lives in `story_state` (issue 14)
    prune_after_turn(instance_id, ctx.database_url)
    took = turn_time(state)
    reply_line_ids = (state.get("debug") or {}).get("reply_line_ids") or []
    if took and reply_line_ids:
        # issue 25: the turn's times stored with its record, for the statistics charts (end_turn's own is
        # in graph_ms only: it is still running)
        figures = {**took, "node_ms": dict((state.get("debug") or {}).get("node_ms") or {})}
        with session_scope(ctx.database_url) as session:
            record_turn_figures(session, instance_id, int(reply_line_ids[-1]), figures)
    return {"lock_token": None, "debug": {"turn_time": took}}


def turn_time(state: TurnState) -> dict[str, float]:
    """`debug.turn_time`: the graph's own time for the turn, from `history_fetch` to the end of `end_turn`, and
    that time without the reply's model call: PersonaLab's per-turn overhead wherever the graph runs (a served
    graph's run queue and checkpoint writes around the nodes are not in it). Issue 14 Load."""
    clock = dict((state.get("debug") or {}).get("turn_time") or {})
    started = clock.get("started_at")
    if started is None:  # a state from before this field: nothing to report
        return {}
    graph_ms = round((time.time() - float(started)) * 1000, 2)
    model_ms = float(clock.get("reply_model_ms") or 0.0)
    return {"graph_ms": graph_ms, "without_reply_model_ms": round(graph_ms - model_ms, 2)}


def timed(name: str, node: Node) -> Node:
    """`node`, adding its wall-clock time to the turn's `debug.node_ms` (issue 25: per-node turn time)."""

    @functools.wraps(node)
    def run(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
        started = time.perf_counter()
        update = node(state, runtime)
        if isinstance(update, dict):
            debug = dict(update.get("debug") or {})
            debug["node_ms"] = {**(debug.get("node_ms") or {}), name: round((time.perf_counter() - started) * 1000, 2)}
            update = {**update, "debug": debug}
        return update

    return run


class Node(Protocol):
    """A graph node (`def node(state, runtime) -> update`)."""

    def __call__(self, state: TurnState, runtime: Runtime[Context]) -> TurnUpdate: ...


def releasing_on_failure(node: Node) -> Node:
    """`node`, releasing the turn's lock when it raises (and re-raising)."""

    @functools.wraps(node)
    def run(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
        try:
            return node(state, runtime)
        except BaseException:
            token = state.get("lock_token")
            if token:
                _release_quietly(state["instance_id"], token, context_of(runtime).database_url)
            raise

    return run


def _release_quietly(instance_id: int, token: str, database_url: str | None) -> None:
    # the turn's own error is what the caller must see; a release that fails too (the database is gone) leaves the
    # lock row, which the next turn takes over at once (this process's, or any after this process ended: stores.turns)
    try:
        release_turn_lock(instance_id, token, database_url)
    except Exception:  # noqa: BLE001
        turn_ended(instance_id)
