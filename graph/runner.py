"""Running turns in-process (CLI, demo, benchmarks, batch evaluation) with the instance's checkpoint."""

from __future__ import annotations

import gc
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from typing import Any, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig
from personalab.graph.graph import TurnGraph, compile_turn_graph
from personalab.graph.streaming import MarkerFilter
from personalab.nodes.context import Context
from personalab.nodes.rules.core_memory import CoreMemoryHistory
from personalab.nodes.rules.errors import InstanceBusy
from personalab.nodes.state import TurnInput, TurnState
from personalab.stores.background import turn_running
from personalab.stores.checkpoints import open_checkpointer, thread_id_for
from personalab.stores.db import session_scope, store_unavailable
from personalab.stores.history import get_path_ids
from personalab.stores.outbox import resume_pending
from personalab.stores.saves import create_background, create_role, create_save
from personalab.stores.turns import branch_story_state, release_held_lock, update_story_state
from personalab.stores.vectors import chroma_path
from personalab.stores.warmup import warm_up_async


def load_sample(name: str) -> dict[str, Any]:
    return json.loads(resources.files("personalab.graph.samples").joinpath(name).read_text(encoding="utf-8"))


def create_sample_instance(database_url: str | None = None) -> int:
    """A new instance of the shipped sample character and background (10 outline points)."""
    sample = load_sample("wasteland.json")
    with session_scope(database_url) as session:
        role = create_role(session, **sample["role"])
        background = create_background(session, **sample["background"])
        save = create_save(session, role.id, background.id, title=f"{role.name} · {background.name}")
        return save.id  # type: ignore[return-value]


_frozen = False


def _freeze_long_lived_objects() -> None:
    """After the first turn of a process, move what is loaded by then (models, dictionaries, indexes, clients)
    out of the garbage collector's full sweeps: on a heap that size a full collection pauses a turn for
    100 ms or more, and those objects live as long as the process anyway."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()


def turn_config(instance_id: int) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id_for(instance_id)}}


class ReplyTokens(BaseCallbackHandler):
    """Passes on the text of the chat-model calls made by the generate node (not the query rewrite's or the
    maintenance's) as the model streams it, without the director's `[PROGRESS:i:status]` markers: a possible
    marker is held back until it closes (`MarkerFilter`), so none reaches the reader, split over tokens or not."""

    def __init__(self, on_token: Callable[[str], None], node: str = "generate") -> None:
        self.on_token, self.node = on_token, node
        self._runs: dict[UUID, MarkerFilter] = {}

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if (kwargs.get("metadata") or {}).get("langgraph_node") == self.node:
            self._runs[run_id] = MarkerFilter()

    def on_llm_new_token(self, token: str | list[str | dict[str, Any]], *, run_id: UUID, **kwargs: Any) -> None:
        markers = self._runs.get(run_id)
        if markers is not None and isinstance(token, str):  # chat models stream text tokens
            text = markers.feed(token)
            if text:
                self.on_token(text)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        markers = self._runs.pop(run_id, None)
        rest = markers.flush() if markers is not None else ""
        if rest:
            self.on_token(rest)


@contextmanager
def turn_graph(context: Context | None = None) -> Iterator[tuple[TurnGraph, Context]]:
    """The turn graph compiled with the configured checkpointer, and the context to run it with."""
    ctx = context or Context()
    # cold start: the searches' models, dictionaries and store load beside the checkpointer's set-up and the
    # turn's first nodes, not under the retrieval's time cap
    warm_up_async(chroma_path())
    # writes queued by a process that stopped before applying them (issue 14: durable writes)
    resume_pending(ctx.database_url, chroma_path())
    with open_checkpointer(ctx.database_url) as saver:
        yield compile_turn_graph(saver), ctx


def run_turn(
    graph: TurnGraph,
    ctx: Context,
    instance_id: int,
    message: str,
    *,
    on_token: Callable[[str], None] | None = None,
    run_id: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One turn; `on_token` receives the reply's tokens as the model streams them. Returns the final state
    with `debug.timings_ms` (per node) and `debug.total_ms`. Bad input (unknown instance, empty message, …)
    raises from the first node, before anything is written. `run_id`: the run's identity (an idempotency key,
    issue 27): a turn run again with it stores nothing twice and answers with the reply stored the first time."""
    # the extras are TurnInput's other fields (user_name, lines_before, …), None meaning "not given"
    given = {key: value for key, value in extra.items() if value is not None}
    payload = cast(TurnInput, {"instance_id": instance_id, "message": message, **given})
    timings: dict[str, float] = {}
    started = last = time.perf_counter()
    config = turn_config(instance_id)
    if run_id is not None:
        # beside where a served run's id is (`run_id`): LangGraph resumes a run whose `run_id` wrote the thread's
        # last checkpoint mid-way, without the turn's input; a key of its own plays the turn from its start
        config["configurable"]["run_key"] = run_id
    if on_token:
        # a callback, not the "messages" stream mode: that mode makes every node run in a worker thread so the
        # stream can be read while it runs, which costs the turn a thread hand-off per node
        config["callbacks"] = [ReplyTokens(on_token)]
    # durability="exit": one checkpoint per turn, written when the turn ends; a turn that dies midway is
    # retried from the stored dialogue, so the supersteps in between need not be persisted
    # the whole run counts as the turn, so queued background work also waits for the last checkpoint write
    with _one_run_at_a_time(ctx, instance_id), turn_running(instance_id):
        try:
            for chunk in graph.stream(payload, config, context=ctx, stream_mode="updates", durability="exit"):
                now = time.perf_counter()
                for node in chunk:
                    timings[node] = round((now - last) * 1000, 2)
                last = now
        except BaseException as exc:
            # Ctrl-C (or any error) that lands outside a node, e.g. while LangGraph waits for a node running in
            # a worker thread: the nodes' own release never ran, so free the instance here, not after the lease
            try:
                release_held_lock(instance_id, ctx.database_url)
            except Exception:  # noqa: BLE001 - the database is gone too: the run's own error is the one to raise
                pass  # the next turn takes the lock over at once (stores.turns)
            # a store that cannot be written (a full disk: the checkpointer's own connection) is one line
            unavailable = store_unavailable(exc, ctx.database_url) if isinstance(exc, Exception) else None
            if unavailable is not None and unavailable is not exc:
                raise unavailable from exc
            raise
        state = dict(graph.get_state(turn_config(instance_id)).values)
    _freeze_long_lived_objects()
    debug = dict(state.get("debug") or {})
    debug["timings_ms"] = timings
    debug["total_ms"] = round((time.perf_counter() - started) * 1000, 2)
    state["debug"] = debug
    return state


_running: set[tuple[str, int]] = set()
_running_lock = threading.Lock()


@contextmanager
def _one_run_at_a_time(ctx: Context, instance_id: int) -> Iterator[None]:
    """One run per instance in this process, from reading its checkpoint to writing the next one; a second is
    refused (`InstanceBusy`). The database lock (history_fetch) covers only the nodes, and the checkpoint is read
    before them and written after them: two runs in one process could otherwise end in an older checkpoint
    than the stored story state (the next turn would still start right, from the stored state)."""
    key = (ctx.database_url or "", instance_id)
    with _running_lock:
        if key in _running:
            raise InstanceBusy(f"instance {instance_id} is busy: another turn is running")
        _running.add(key)
    try:
        yield
    finally:
        with _running_lock:
            _running.discard(key)


def rollback_core_memory(
    graph: TurnGraph, instance_id: int, to_version: int | None = None, database_url: str | None = None
) -> dict[str, Any]:
    """Make an earlier core-memory version current again (seed 002 需求2: a bad rewrite can be undone).
    The rollback is itself a new version, so it can be undone too; it is written to the checkpoint and to the
    instance's stored story state alike. Returns the new current version."""
    config = turn_config(instance_id)
    values = graph.get_state(config).values
    history = CoreMemoryHistory.from_state(values.get("core_memory_versions"))
    history = history.rollback(to_version, turn=values.get("turn", 0))
    change: TurnState = {"core_memory": dict(history.current or {}), "core_memory_versions": history.to_state()}
    with session_scope(database_url) as session:
        # the story state of the current branch: after a rewind or swipe the instance's latest is another branch's
        stored = branch_story_state(session, instance_id, get_path_ids(session, instance_id))
        if stored is not None and stored.id is not None and stored.id == values.get("story_state_id"):
            update_story_state(session, stored.id, {**stored.state, **change})
    graph.update_state(config, change, as_node="maintenance")
    return history.versions[-1]
