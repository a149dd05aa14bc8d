"""Periodic maintenance (seed 002 定期维护机制, every N turns): the model merges the old core memory, the last
10 turns and the state-change events into a new persona JSON. An answer that is not valid JSON, breaks the
schema or the seed's limits (≤ 3 binary oppositions, ≤ 2 ternary tensions) keeps the old core memory and is
logged; every accepted rewrite is kept as a version so a bad one can be rolled back. The long-term memory's layer
flow (seed 001) runs on the same turns, its event-log summaries fitted to the turn deadline like the rewrite (issue
30: a slow local model is not asked what it cannot write in time)."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from langgraph.runtime import Runtime
from personalab.nodes.context import Context, context_of, text_counter
from personalab.nodes.llm import (
    busy_seconds,
    get_chat_model,
    measured_speed,
    model_label,
    prompt_estimate,
    stream_answer,
)
from personalab.nodes.rules import prompts
from personalab.nodes.rules.core_memory import (
    CoreMemoryHistory,
    accept_core_memory,
    last_turn_messages,
    maintenance_messages,
)
from personalab.nodes.rules.deadline import FIT_SHARE, MIN_CALL_SECONDS, POST_REPLY_SHARE
from personalab.nodes.rules.memory_layers import (
    SUMMARY_MAX_CHARS,
    LayerConfig,
    MaintenancePlan,
    extractive_summary,
    fading_from_event_log,
    plan_maintenance,
    summary_groups,
    summary_memory,
)
from personalab.nodes.rules.persona_changes import persona_change_memory, persona_changes
from personalab.nodes.rules.request_catalog import event_summary_messages
from personalab.nodes.state import TurnState, TurnUpdate
from personalab.stores.background import memories_rewritten, run_in_background
from personalab.stores.memory import MaintenanceReport, MemoryStore
from personalab.stores.persona_changes import archive_persona_changes
from personalab.stores.vectors import chroma_path

log = logging.getLogger(__name__)

Summariser = Callable[[list[str]], str]  # the memories fading out of the event log → their summary

# The event-log summaries' share of the turn deadline (issue 30): what a turn holds back for each model call after its
# reply. They run between turns on the background writer, but a one-slot local server makes the next turn's reply
# wait behind them (and its retrieval waits for the instance's writes): one layer maintenance holds it at most this.
SUMMARY_SHARE = POST_REPLY_SHARE


# what a maintenance request too slow for its time needs (issue 30); the event-log summary's model defaults to it too
SLOW_MODEL_REMEDY = "PERSONALAB_MODEL_CORE_MEMORY: a faster model for it; or a longer PERSONALAB_TURN_DEADLINE"


class SummaryNotAsked(Exception):
    """The event-log summary was not sent to the model (issue 30): it could not end within its share (the reason)."""


def maintenance(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    """Both periodic jobs: the core-memory rewrite, then the long-term memory's layer flow (seed 001). In this order
    the rewrite's persona-change archive is queued before the layer flow: the next turn's retrieval reads the archive
    (it waits for it) and not the layer flow (issue 29), which would otherwise hold the archive back."""
    update = rewrite_core_memory(state, runtime)
    layers = maintain_memory_layers(state, runtime)
    update.setdefault("debug", {}).setdefault("maintenance", {})["memory_layers"] = layers
    return update


def maintain_memory_layers(state: TurnState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Decay, move and fade the instance's memories up to this turn; pinned and user-edited ones stay.
    Queued behind this turn's memory writes on the background writer (same worker, so in order), off the
    reply's path; failures are logged there."""
    ctx = context_of(runtime)
    store = MemoryStore(db_url=ctx.database_url, chroma_path=chroma_path())
    language = state["character"].get("language")
    run_in_background(
        run_layer_maintenance,
        store,
        state["instance_id"],
        state["turn"],
        language,
        ctx=ctx,  # the run's deadline and token counter: the summaries are fitted to them (issue 30)
        after_turn_of=state["instance_id"],
        # the next turn reads the memories before it or after it, never between (`maintain_layers`), and does not
        # wait for it (issue 29); its director reads the story's events, which it does not write
        unread_by_retrieval=True,
        unread_by_director=True,
    )
    return {"status": "queued"}


def run_layer_maintenance(
    store: MemoryStore, instance_id: int, turn: int, language: str | None = None, ctx: Context | None = None
) -> None:
    """The layer flow (its deletions update the kept keyword index), then the index made current at once:
    between turns, not on the next reply's path. The summaries are asked for in the instance's `language`, fitted
    to `ctx`'s turn deadline (`model_summariser`; without one, the settings')."""
    maintain_layers(store, instance_id, turn, summarise=model_summariser(language, ctx), language=language)
    store.index(instance_id)


def model_summariser(language: str | None = None, ctx: Context | None = None) -> Summariser:
    """The event-log summary (seed 001 中期记忆 "Event Log Summary") by the maintenance model
    (PERSONALAB_MODEL_EVENT_SUMMARY, else PERSONALAB_MODEL_CORE_MEMORY; the scripted model gives a labelled extractive
    summary), prompt in `nodes.rules.request_catalog`, in the instance's `language`.

    Fitted like the core-memory rewrite (issue 30): the summaries of one maintenance get `SUMMARY_SHARE` of the turn
    deadline (`ctx`'s, else PERSONALAB_TURN_DEADLINE's), counted from the first one. A summary the model's measured
    speed cannot write within what is left of it is not sent (`SummaryNotAsked`, with `summary_too_slow`'s reason;
    `maintain_layers` stores the extractive one); one sent is streamed and closed at that end (`stream_answer`), so
    the server's last prompt, its speed and a given-up prompt it goes on reading are known to the next turn's fit."""
    context = ctx if ctx is not None else Context()
    count = text_counter(context).text
    share = context.turn_deadline_s * SUMMARY_SHARE
    ends: list[float] = []  # when this maintenance's summaries must have ended, set by the first one

    def summarise(memories: list[str]) -> str:
        if not ends:
            ends.append(time.time() + share)
        until = ends[0]
        model = get_chat_model(prompts.PURPOSE_EVENT_SUMMARY, until=until)  # its timeout: what is left of the share
        request = event_summary_messages(memories, SUMMARY_MAX_CHARS, language)
        too_slow = summary_too_slow(model, request, memories, until, share, count)
        if too_slow:
            # never sent: a local server evaluates a given-up prompt to its end, and the next reply waits for it
            raise SummaryNotAsked(too_slow)
        # streamed and closed at the share's end: a local server stops writing rather than finishing it
        answer = stream_answer(model, request, until, count)[0].strip()
        if not answer:
            raise ValueError("the model's summary is empty")
        return answer[: SUMMARY_MAX_CHARS * 2]

    return summarise


def summary_too_slow(
    model: Any,
    request: list[dict[str, str]],
    memories: list[str],
    until: float,
    share: float,
    count: Callable[[str], int],
) -> str:
    """Why the event-log summary is not asked ("" when it is; issue 30, seed 001 中期记忆 "Event Log Summary"):
    reading its request's new tokens and writing a summary of `SUMMARY_MAX_CHARS` characters would not end by
    `until` (`request_too_slow`). The summary's tokens: the limit at the memories' own tokens per character, as the
    summary is written in their language and a tokenizer counts Chinese and English apart. The offline model is
    always asked (it answers at once)."""
    if prompt_estimate(model, request, count)[0] is None:
        return ""
    if until - time.time() < MIN_CALL_SECONDS:  # the earlier summaries of this maintenance took the whole share
        return f"the summaries' {share:.1f} s share of PERSONALAB_TURN_DEADLINE is used up ({SLOW_MODEL_REMEDY})"
    text = "".join("".join(memory.split()) for memory in memories)
    answer_tokens = math.ceil(count(text) * SUMMARY_MAX_CHARS / len(text)) if text else 0
    return request_too_slow(
        model,
        prompts.PURPOSE_EVENT_SUMMARY,
        request,
        until,
        count,
        answer=f"a summary of about {answer_tokens} tokens",
        answer_tokens=answer_tokens,
        left_of=f"of the summaries' {share:.1f} s share of PERSONALAB_TURN_DEADLINE",
    )


def maintain_layers(
    store: MemoryStore,
    instance_id: int,
    turn: int | None = None,
    config: LayerConfig | None = None,
    summarise: Summariser | None = None,
    language: str | None = None,
) -> MaintenanceReport:
    """One step of the layer flow (seed 001 记忆流转) for every character of the instance: the rule
    (`plan_maintenance`) decides, the store loads the memories and writes the plans in one transaction and
    never changes a pinned or user-edited memory. `turn` defaults to the latest memory turn of the instance.

    With `summarise`, memories about to fade out of the event log are first summarised (seed 001 中期记忆
    "Event Log Summary"): each summary is stored as a new archive memory (`memory_layers.summary_memory`) before
    the step deletes them; no model call is made inside a transaction. A failing summariser is logged and the
    labelled extractive summary is stored instead, as it is when the summary is not asked (`SummaryNotAsked`: the
    model too slow for the summaries' share of the turn deadline, issue 30). The fading memories are summarised per
    branch of the dialogue tree (seed 000): `memory_layers.summary_groups` groups them and gives each summary the
    line it is retrieved under, so what an abandoned branch remembered stays on that branch and comes back with it.

    Only the current branch's memories (and those without a line) flow (`MemoryStore.maintenance`): a branch the
    user left neither takes room in this branch's layers nor decays meanwhile; its memories are maintained
    when it is current again. What lies above a fork is summarised at or above the fork (`forks`), so the other
    branches through it keep it. `language`: the instance's (issue 28), for the summary's title and the
    extractive fallback."""
    summaries: dict[int, list[tuple[int | None, list[tuple[int, str, int]]]]] = {}
    # the retrievals read the memories before the step or after it, never between its writes (issue 29: the next
    # turn does not wait for it); the summaries' model calls are made outside
    with memories_rewritten(instance_id), store.maintenance(instance_id, turn) as batch:
        plans = {
            character: plan_maintenance(memories, batch.turn, config) for character, memories in batch.memories.items()
        }
        fading = {character: fading_from_event_log(plan) for character, plan in plans.items()}
        if summarise is not None and any(fading.values()):
            faded = {character: batch.contents(ids) for character, ids in fading.items() if ids}
            parents = batch.line_parents(
                line for rows in faded.values() for (_content, _turn, line) in rows.values() if line is not None
            )
            forks = batch.forks(parents)  # the other branches through these lines still hold what lies above
            for character, rows in faded.items():
                memory_lines = {memory_id: line for memory_id, (_c, _t, line) in rows.items()}
                groups = summary_groups(memory_lines, parents, forks)
                summaries[character] = [
                    (tag, sorted(((i, rows[i][0], rows[i][1]) for i in ids), key=lambda row: (row[2], row[0])))
                    for tag, ids in groups.items()
                ]
        else:
            _apply(batch, plans)
    if not summaries:
        return batch.report()
    written: list[tuple[int, dict[str, Any]]] = []
    for character, tagged in summaries.items():
        for tag, ordered in tagged:
            texts = [content for _id, content, _turn in ordered]
            try:
                summary = summarise(texts)  # type: ignore[misc]  # summaries only when summarise is given
            except SummaryNotAsked as exc:  # the model too slow for its share (issue 30): the reason says what helps
                log.warning("event-log summary on instance %s not asked, extractive summary kept: %s", instance_id, exc)
                summary = extractive_summary(texts, language=language)
            except Exception as exc:  # noqa: BLE001 - a model failure must not stop the layer flow
                log.warning("event-log summary on instance %s failed, extractive summary kept: %s", instance_id, exc)
                summary = extractive_summary(texts, language=language)
            turns = [t for _i, _c, t in ordered]
            item = summary_memory(summary, turns, [i for i, _c, _t in ordered], config, language)
            if tag is not None:
                item["line_id"] = tag
            written.append((character, item))
    with memories_rewritten(instance_id):  # the summaries and the step that fades what they summarise: one change
        for character, item in written:
            store.add_memories(instance_id, [item], character_id=character)
        with store.maintenance(instance_id, turn) as batch:  # the step itself, now that the summaries are stored
            plans = {character: plan_maintenance(m, batch.turn, config) for character, m in batch.memories.items()}
            _apply(batch, plans)
    return batch.report()


def _apply(batch: Any, plans: dict[int, MaintenancePlan]) -> None:
    for character_id, plan in plans.items():
        batch.apply(character_id, plan)


def rewrite_core_memory(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    old = state["core_memory"]
    turn = state["turn"]
    dialogue = [*state.get("messages", []), {"role": "assistant", "content": state.get("reply", "")}]
    language = state["character"].get("language")  # issue 28: the request in the instance's language
    events = state.get("state_events", [])
    request = maintenance_messages(old, last_turn_messages(dialogue), events, turn=turn, language=language)
    model = get_chat_model("core_memory", until=state.get("deadline_at"))  # what is left of the turn's 30 s
    too_slow = rewrite_too_slow(model, request, old, state.get("deadline_at"), context_of(runtime))
    if too_slow:
        # never sent: a local server evaluates a given-up prompt to its end, and the next turn's reply would wait
        # for it (issue 30); the state events stay for the next maintenance
        log.warning("core-memory maintenance not asked on instance %s: %s", state["instance_id"], too_slow)
        return {"debug": {"maintenance": {"status": "not asked, core memory kept", "reason": too_slow}}}
    try:
        # streamed and closed at the deadline: a local server cancels it rather than finishing it (issue 30)
        answer = stream_answer(model, request, state.get("deadline_at"), text_counter(context_of(runtime)).text)[0]
    except Exception as exc:  # noqa: BLE001 - maintenance must never fail a turn that is already stored
        log.error("core-memory maintenance failed on instance %s: %s", state["instance_id"], exc)
        return {"debug": {"maintenance": {"status": "model error, core memory kept", "error": str(exc)}}}
    core, problems = accept_core_memory(old, answer)
    if problems:
        log.warning("core-memory rewrite rejected on instance %s: %s", state["instance_id"], "; ".join(problems))
        return {"debug": {"maintenance": {"status": "rejected, core memory kept", "problems": problems}}}
    history = CoreMemoryHistory.from_state(state.get("core_memory_versions"))
    if not history.versions:
        history = history.push(old, turn=0, reason="initial")
    history = history.push(core, turn=turn, reason=f"maintenance at turn {turn}")
    archived = archive_changes(state, runtime, old, core, history.versions[-1]["version"])
    return {
        "core_memory": core,
        "core_memory_versions": history.to_state(),
        "state_events": [],
        "debug": {
            "maintenance": {
                "status": "core memory rewritten",
                "version": history.versions[-1]["version"],
                "model": model_label(model),
                "persona_changes": archived,
            }
        },
    }


def rewrite_too_slow(
    model: Any, request: list[dict[str, str]], old: dict[str, Any], deadline_at: float | None, ctx: Context
) -> str:
    """Why the core-memory rewrite is not asked ("" when it is; issue 30): reading the request's new tokens and
    writing a core memory about as long as the old one would not end by the turn's deadline (`request_too_slow`)."""
    count = text_counter(ctx).text
    answer_tokens = count(json.dumps(old, ensure_ascii=False))
    return request_too_slow(
        model,
        prompts.PURPOSE_CORE_MEMORY,
        request,
        deadline_at,
        count,
        answer=f"a core memory of about {answer_tokens} tokens",
        answer_tokens=answer_tokens,
        left_of="in the turn",
    )


def request_too_slow(
    model: Any,
    purpose: str,
    request: list[dict[str, str]],
    until: float | None,
    count: Callable[[str], int],
    *,
    answer: str,
    answer_tokens: int,
    left_of: str,
) -> str:
    """Why a maintenance request of `purpose` is not sent ("" when it is; issue 30): the model's measured speed (its
    server's answers) says that reading the request's new tokens (past what its prompt cache holds) and writing
    `answer_tokens` would not end within `FIT_SHARE` of the seconds left until `until`, after the prompt a given-up
    request still has its server reading. A request given up at its end is no cheaper: a local server
    (llama-cpp-python's) evaluates its prompt to the end, and the next turn's reply waits for that. `answer` and
    `left_of` name the answer and the seconds in the reason. No measured speed, no `until`: sent."""
    speed = measured_speed(purpose)
    if speed is None or until is None:
        return ""
    new_tokens = prompt_estimate(model, request, count)[1]
    if new_tokens is None:
        return ""
    left = until - time.time() - busy_seconds(model)
    expected = speed.seconds(new_tokens, answer_tokens)
    if expected <= left * FIT_SHARE:
        return ""
    return (
        f"the model is slow: about {expected:.1f} s for {new_tokens} new prompt tokens at {speed.prompt_per_s:.0f}/s "
        f"and {answer}, over {FIT_SHARE:.0%} of the {max(left, 0.0):.1f} s left {left_of} ({SLOW_MODEL_REMEDY})"
    )


def archive_changes(
    state: TurnState, runtime: Runtime[Context], old: dict[str, Any], core: dict[str, Any], version: int
) -> dict[str, Any]:
    """Seed 002 Archival Memory (历史人格变化事件): the persona changes of this accepted rewrite
    (`rules.persona_changes`), queued as archive memories on the instance's background writer behind the turn's
    own writes, off the reply's path; each on the line of the turn's reply (seed 000: it stays on its branch) and
    stored once per key, so a replayed or repeated maintenance adds nothing."""
    character = state["character"]
    language = character.get("language")
    changes = persona_changes(old, core, state["turn"], language)
    if not changes:
        return {"status": "no change", "count": 0}
    lines = (state.get("debug") or {}).get("reply_line_ids") or [state.get("user_line_id")]
    line_id = lines[-1] if lines and lines[-1] is not None else None
    items = [
        persona_change_memory(
            change, version=version, line_id=line_id, role_id=character.get("role_id"), language=language
        )
        for change in changes
    ]
    store = MemoryStore(db_url=context_of(runtime).database_url, chroma_path=chroma_path())
    run_in_background(
        archive_persona_changes,
        store,
        state["instance_id"],
        items,
        character.get("role_id"),
        after_turn_of=state["instance_id"],
        unread_by_director=True,  # memories only: the next turn's director reads the story's events
    )
    return {"status": "queued", "count": len(items)}
