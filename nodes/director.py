"""Graph node director (seed 002 需求1 兜底机制): the current outline point → two labelled layers of story events."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from personalab.nodes.context import Context, context_of, long_term_memory, window_turns_at
from personalab.nodes.state import TurnState, TurnUpdate
from personalab.nodes.story_search import story_search
from personalab.stores.background import search_with_cap, wait_for_writes
from personalab.stores.db import session_scope
from personalab.stores.events import take_prefetched_story
from personalab.stores.history import get_path_ids
from personalab.stores.vectors import chroma_path
from personalab.stores.warmup import warm_up_or_why


def events_left_out(state: TurnState, ctx: Context, current: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Issue 26 (each exchange once, the current truth): the turns of this instance's events the prompt does not tell
    again — those the recent dialogue still shows, those whose line it shows said again (the same words), and,
    unless the user asks about the past, those that said a fact a later one replaced (their memories are closed:
    `stores.consolidation.closed_turns`). The director's layers keep every event found (the search's result, what
    the fallback hands on); `generate.retrieved_blocks` leaves these turns out of the prompt."""
    from personalab.nodes.rules.consolidation import asks_about_past
    from personalab.nodes.rules.curation import same_words, turn_in_recall_window, turn_memory_lines
    from personalab.stores.consolidation import closed_turns

    turn = int(state["turn"])
    turns = [int(e["turn"]) for e in current if isinstance(e.get("turn"), int)]
    window_turns = window_turns_at(ctx, turn, state.get("recall_floor_turn"))
    window = {t for t in turns if turn_in_recall_window(t, turn=turn, window_turns=window_turns)}
    # an older turn whose line was said again in the recent dialogue (the same words, another turn): told there
    shown = {same_words(line) for line in state.get("window_lines", [])}
    again = {
        int(e["turn"])
        for e in current
        if isinstance(e.get("turn"), int)
        and any(same_words(line) in shown for line in turn_memory_lines(str(e.get("text") or "")))
    }
    stale: set[int] = set()
    if not asks_about_past(state["message"]):
        stale = closed_turns(ctx.database_url, state["instance_id"], turns)
    return {"in_recent_dialogue": sorted(window), "said_again": sorted(again - window), "no_longer_true": sorted(stale)}


def director(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    """Graph node (seed 002 兜底机制): the current outline point is the query; 15 events of this instance and 5
    of other instances of the same character + background, as two separately labelled layers. The search done
    between turns (`prefetch_next_turn`) is taken when it is there for exactly this turn and query. This
    instance's layer holds the events of the current branch (seed 000's tree, as the memory retrieval's
    `off_branch`): what a branch the user left wrote comes back with its branch; the other instances' events
    are those of their own current branches (what another play-through abandoned is no reference)."""
    ctx = context_of(runtime)
    if not long_term_memory(ctx):  # issue 30's recent / history conditions: no stored story events either
        off = {"status": f"off (memory_mode {ctx.memory_mode})", "ms": 0.0, "current": 0, "others": 0}
        return {"director_events": {"query": "", "current": [], "others": []}, "debug": {"director": off}}
    with session_scope(ctx.database_url) as session:
        branch = get_path_ids(session, state["instance_id"])  # the lines of the branch this turn continues
    search = story_search(state, state["plot_state"], branch, ctx.database_url)
    # read your writes: the earlier turns' events (and the search queued behind them) are in before this reads
    waited_ms = wait_for_writes(state["instance_id"], whole=True)  # the events
    found = take_prefetched_story(search, state["turn"])
    if found is not None:
        debug: dict[str, Any] = {"status": "ok", "source": "searched between turns", "ms": 0.0}
    else:
        # cold start: loads before the cap, which is for the search
        warm_ms, unavailable = warm_up_or_why(chroma_path())
        if unavailable is not None:  # a stopped Chroma server: no layers this turn, said in the debug output
            found, debug = None, {"status": unavailable, "ms": 0.0}
        else:
            found, debug = search_with_cap(search.run, ctx.rag_timeout_s)
        debug["source"] = "searched in the turn"
        debug["warm_up_ms"] = warm_ms
    debug["waited_for_writes_ms"] = waited_ms
    current, others = found or ([], [])  # on timeout or error: no layers, and the debug output says why
    left_out = events_left_out(state, ctx, current)  # for the prompt only: the layers keep what was found
    debug["left_out"] = left_out
    # other play-throughs are reference only: one that is not about this outline point (say, another user's
    # secret) must not reach this prompt at all, labelled or not
    relevant = [event for event in others if float(event.get("score", 0.0)) >= ctx.director_reference_floor]
    query = search.query
    return {
        "director_events": {"query": query, "current": current, "others": relevant, "left_out": left_out},
        "debug": {
            "director": {
                "query": query,
                **debug,
                "current": len(current),
                "others": len(relevant),
                "others_below_floor": len(others) - len(relevant),
            }
        },
    }
