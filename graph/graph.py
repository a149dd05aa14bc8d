"""The turn graph (seed 002): one role-play turn of a conversation instance, end to end.

history_fetch → memory_build → query_rewrite → rag_retrieve (+ director beside it, only when the story has
stalled) → generate → progress_parse → write_back → review → [maintenance, every N turns] → end_turn; a model
failure goes from generate to abort_turn → end_turn instead. Served by `langgraph.json` without a checkpointer
(the server brings the one `stores.checkpoints.make_checkpointer` makes); `compile_turn_graph(saver)` in-process.
Built by the server, the graph starts the cold-start warm-up (stores/warmup.py) at once, so the first served
turn's retrieval does not wait for the models, dictionaries and Chroma client to load (issue 11), and resumes the
writes a stopped server queued and never applied (issue 14, `stores.outbox`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any, TypeAlias

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig

# LangGraph has no public name for it: the configurable key that overrides its "resume this run?" inference
from langgraph._internal._constants import CONFIG_KEY_RESUMING
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from personalab.graph.routing import (
    after_generate,
    after_history_fetch,
    after_progress_parse,
    after_review,
    after_write_back,
    retrieval_paths,
)
from personalab.nodes.context import Context
from personalab.nodes.director import director
from personalab.nodes.end_turn import end_turn, releasing_on_failure, timed
from personalab.nodes.generate import generate
from personalab.nodes.history_fetch import history_fetch
from personalab.nodes.maintenance import maintenance
from personalab.nodes.memory_build import memory_build
from personalab.nodes.progress_parse import progress_parse
from personalab.nodes.query_rewrite import query_rewrite
from personalab.nodes.rag_retrieve import rag_retrieve
from personalab.nodes.review import review
from personalab.nodes.state import TurnInput, TurnOutput, TurnState
from personalab.nodes.write_back import abort_turn, write_back
from personalab.stores.outbox import resume_pending
from personalab.stores.server_records import claim_server_records
from personalab.stores.turns import release_or_abandon
from personalab.stores.vectors import chroma_path
from personalab.stores.warmup import warm_up_async

log = logging.getLogger(__name__)

# the served graph's input / output / context JSON schemas (Studio's form) come from these three types
builder = StateGraph(TurnState, context_schema=Context, input_schema=TurnInput, output_schema=TurnOutput)
builder.add_node(
    "history_fetch", timed("history_fetch", history_fetch)
)  # takes the instance's lock; releases it itself when it fails
# from here to end_turn the turn holds the lock: a node that raises releases it (releasing_on_failure)
for name, node in (
    ("memory_build", memory_build),
    ("query_rewrite", query_rewrite),
    ("rag_retrieve", rag_retrieve),
    ("director", director),
    ("generate", generate),
    ("abort_turn", abort_turn),
    ("progress_parse", progress_parse),
    ("write_back", write_back),
    ("review", review),
    ("maintenance", maintenance),
    ("end_turn", end_turn),
):
    # each node's time goes into `debug.node_ms` (issue 25: the per-node turn time chart; stored by end_turn)
    builder.add_node(name, timed(name, releasing_on_failure(node)))

builder.add_edge(START, "history_fetch")
# a replayed run whose turn is done answers with the stored reply and ends (issue 27)
builder.add_conditional_edges("history_fetch", after_history_fetch, ["memory_build", END])
builder.add_edge("memory_build", "query_rewrite")
# the director's searches run beside the memory retrieval (one superstep), generate waits for both
builder.add_conditional_edges("query_rewrite", retrieval_paths, ["rag_retrieve", "director"])
builder.add_edge("rag_retrieve", "generate")
builder.add_edge("director", "generate")
builder.add_conditional_edges("generate", after_generate, ["progress_parse", "abort_turn"])
builder.add_edge("abort_turn", "end_turn")
builder.add_conditional_edges("progress_parse", after_progress_parse, ["write_back", "abort_turn"])
builder.add_conditional_edges("write_back", after_write_back, ["review", "end_turn"])
builder.add_conditional_edges("review", after_review, ["maintenance", "end_turn"])
builder.add_edge("maintenance", "end_turn")
builder.add_edge("end_turn", END)


TURN_GRAPH_NAME = "PersonaLab turn"
TurnGraph: TypeAlias = CompiledStateGraph[TurnState, Context, TurnInput, TurnOutput]


def compile_turn_graph(checkpointer: BaseCheckpointSaver | None = None) -> TurnGraph:
    compiled = builder.compile(checkpointer=checkpointer)
    compiled.name = TURN_GRAPH_NAME
    return compiled


def start_warm_up() -> None:
    """Start the cold-start warm-up for the configured store in the background (stores.warmup.warm_up_async).
    A bad setting or an unusable data directory is only logged here: the first turn reports it."""
    try:
        warm_up_async(chroma_path())
        # writes queued by a server that stopped before applying them (issue 14), off the server's start
        threading.Thread(target=resume_pending, args=(None, chroma_path()), name="outbox-resume", daemon=True).start()
    except Exception as exc:  # noqa: BLE001 - building the graph must not fail on what a turn will report
        log.warning("warm-up not started: %s", exc)


class ReleaseOnCancel(BaseCallbackHandler):
    """Frees the instance's turn lock when a served run is cancelled between two nodes (issue 27, found on Aegra:
    its `runs.cancel` cancels the run's task while LangGraph waits for a node; no node raises, so
    `releasing_on_failure` never runs and the lock's heartbeat kept the instance busy for as long as the process
    lived). The in-process runner does the same in `graph.runner.run_turn`. A node of the cancelled run still
    running in its thread stores nothing after this: `write_back` checks the lock (TurnLockLost). A cancel that
    comes while `history_fetch` is still taking the lock in its thread finds no lock to free: the run is marked
    abandoned (`stores.turns.release_or_abandon`) and `history_fetch` gives the lock back as soon as it has it (found by
    tests/test_aegra_outage.py: the client-gone case's next turn was "instance N is busy" until a restart). A run
    cancelled while holding its lock is not marked: Aegra cancels a live worker's run whose lease lapsed and queues
    it again, and that replay, in this process or another, must answer the run's stored user line (it was refused
    "was cancelled", or "busy" while the first execution still held the lock: `acquire_turn_lock` now waits for
    it; found by `bench load` with kills, tests/test_replayed_runs.py)."""

    def __init__(self) -> None:
        self._runs: dict[Any, tuple[int, str]] = {}

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: Any, **kwargs: Any) -> None:
        if kwargs.get("name") == TURN_GRAPH_NAME and isinstance(inputs, dict):
            instance_id = inputs.get("instance_id")
            if isinstance(instance_id, int) and not isinstance(instance_id, bool):
                # the run's key as history_fetch reads it (`run_key_of`: the server's `run_id`, which LangGraph
                # also puts in the callbacks' metadata; Aegra makes it the root run's id too)
                metadata = kwargs.get("metadata") or {}
                key = metadata.get("run_key") or metadata.get("run_id") or run_id
                self._runs[run_id] = (instance_id, str(key))

    def on_chain_end(self, outputs: Any, *, run_id: Any, **kwargs: Any) -> None:
        self._runs.pop(run_id, None)

    def on_chain_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        started = self._runs.pop(run_id, None)
        if started is None or not isinstance(error, asyncio.CancelledError | KeyboardInterrupt):
            return
        instance_id, key = started
        # the lock is freed now, or, when history_fetch is still taking it in its worker thread, given back by
        # history_fetch itself; a replay of the run started after this is not refused (issue 27)
        try:
            release_or_abandon(instance_id, key, Context().database_url)
        except Exception as exc:  # noqa: BLE001 - the database is gone: the next turn takes the lock over (stores.turns)
            log.warning("instance %s: the cancelled run's turn lock was not released: %s", instance_id, exc)


# A served run is never resumed from the checkpoint it left mid-turn (issue 27, found by
# tests/test_served_kill_replay.py): a server killed with a run in flight queues the run again under its id on
# restart, and LangGraph resumes a run whose id the thread's last checkpoint carries, past the nodes that ran. The
# turn's inputs (`message`, the built `messages`, ...) are UntrackedValues, never checkpointed, so the resumed run
# failed in `generate` (KeyError 'message') and the user's line stayed unanswered. Started again from its input,
# the run meets its stored user line by its identity (`turn_run`, history_fetch) and answers with the stored turn.
NOT_RESUMED: RunnableConfig = {"configurable": {CONFIG_KEY_RESUMING: False}}
graph = compile_turn_graph().with_config(NOT_RESUMED, callbacks=[ReleaseOnCancel()])
# The LangGraph server loads this file by its path (langgraph.json), as a module named after the path; the
# package's own import (`personalab.graph.graph`: the CLI, the API, tests) leaves the loads to
# `graph.runner.turn_graph` and the turn, so a command that plays no turn does not pay for them.
if __name__ != "personalab.graph.graph":
    # the server's own thread records are one data folder's (issue 27): refused before it serves another's. Aegra
    # (`personalab serve-production`, which sets AEGRA_CONFIG) keeps its records in its own PostgreSQL database,
    # never in the working folder's .langgraph_api
    if not os.environ.get("AEGRA_CONFIG"):
        claim_server_records()
    start_warm_up()
