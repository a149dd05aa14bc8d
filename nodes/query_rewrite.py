"""Graph node query_rewrite (seed 002 需求3 检索触发机制): the model turns the input + recent messages into one query.

The turn's deadline (seed 002 响应时间要求, nodes/rules/deadline.py) starts here, at the turn's first model call;
the rewrite gets its share of it. The answer is checked, not trusted (`check_rewrite`): an empty answer, one that
repeats the request, or one far longer than the input falls back to the raw input, and `debug.query_rewrite`
says why.

A slow local model (issue 30, PERSONALAB_QUERY_REWRITE): with `rules` the model is never asked; with `auto` it is
not asked when its measured speed (`measured_speed`, from the previous requests' usage and timing) says the
request would not be answered within the rewrite's share, or when a rewrite got no answer within it
(`record_too_slow`) — the query is then made by rules (`rule_rewrite`) and `debug.query_rewrite.status` says
`rules (…)` with the estimate. The request is streamed and closed at its share, so a local server cancels it rather
than finishing it while the reply waits."""

from __future__ import annotations

import logging
import time
from typing import Any

from langgraph.runtime import Runtime
from personalab.nodes.context import Context, context_of, long_term_memory, text_counter
from personalab.nodes.llm import get_chat_model, load_client, measured_speed, record_too_slow, stream_answer
from personalab.nodes.rules.deadline import rewrite_seconds
from personalab.nodes.rules.prompt_assembly import split_latest_user
from personalab.nodes.rules.rewrite import (
    HISTORY_MAX,
    HISTORY_MIN,
    REWRITE_ANSWER_TOKENS,
    REWRITE_MAX_TOKENS,
    check_rewrite,
    needs_rewrite,
    rewrite_messages,
    rule_rewrite,
)
from personalab.nodes.rules.tokens import TokenCounter
from personalab.nodes.state import TurnState, TurnUpdate
from personalab.stores.tokenizer import text_tokens_of

ANSWER_PREVIEW = 200
TIMED_OUT_SHARE = 0.9  # a failure after this much of the rewrite's share is its timeout


def query_rewrite(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    """Graph node (seed 002 需求3): the model rewrites the input + the last messages into one standalone query.
    A model failure or an unusable answer falls back to the raw input: retrieval quality drops, the turn goes on."""
    ctx = context_of(runtime)
    load_client()  # before the deadline's clock: loading the client is start-up
    if ctx.tokenizer:
        # the reply's token counter, also start-up: a GGUF vocabulary is turned into a tokenizer once per data dir,
        # which took a 1.5B model's 150k-token vocabulary 40 s on a loaded 2-core CPU (issue 30), and a one-shot CLI
        # turn loads even the kept one anew; inside the clock the reply was sent past its deadline
        text_tokens_of(ctx.tokenizer)
    started = time.time()
    deadline_at = started + ctx.turn_deadline_s
    message = state["message"]
    recent, _latest = split_latest_user(state.get("messages", []))
    if not needs_rewrite(recent):
        return {
            "query": message,
            "deadline_at": deadline_at,
            "debug": {"query_rewrite": {"status": "no dialogue before the input", "query": message}},
        }
    if not long_term_memory(ctx):  # the query only serves retrieval, which is off (issue 30's recent / history)
        status = f"off (memory_mode {ctx.memory_mode})"
        return {"query": message, "deadline_at": deadline_at, "debug": {"query_rewrite": {"status": status}}}
    window = max(HISTORY_MIN, min(HISTORY_MAX, ctx.rewrite_history_messages))
    request = rewrite_messages(message, recent, window, language=state["character"].get("language"))
    share = rewrite_seconds(ctx.turn_deadline_s)
    until = started + share  # at most PERSONALAB_LLM_TIMEOUT too (get_chat_model)
    skipped = _too_slow(ctx, request, share)
    if skipped:
        query = rule_rewrite(message, recent)
        ruled = {"status": f"rules ({skipped})", "query": query}
        return {"query": query, "deadline_at": deadline_at, "debug": {"query_rewrite": ruled}}
    try:
        model = get_chat_model("query_rewrite", until=until, max_tokens=REWRITE_MAX_TOKENS)
        # streamed and closed at its share: a local server cancels it instead of making the reply wait (issue 30)
        answer, timing = stream_answer(model, request, until, text_counter(ctx).text)
    except Exception as exc:  # noqa: BLE001 - the raw input is a usable query
        logging.getLogger(__name__).warning("query rewrite failed, using the raw input: %s", exc)
        if time.time() - started >= share * TIMED_OUT_SHARE:  # no answer within the share: the model is that slow
            record_too_slow("query_rewrite", _tokens(ctx, request), time.time() - started)
        return {
            "query": message,
            "deadline_at": deadline_at,
            "debug": {"query_rewrite": {"status": f"model error: {exc}", "query": message}},
        }
    shown = [m.get("content", "") for m in recent if m.get("role") in ("user", "assistant")]
    query, problem = check_rewrite(answer, message, shown)
    debug: dict[str, Any] = {"status": "ok", "query": query, "server": timing.debug()}
    if problem:
        logging.getLogger(__name__).warning("query rewrite unusable (%s), using the raw input", problem)
        debug |= {"status": f"fallback to the input: {problem}", "answer": answer[:ANSWER_PREVIEW]}
    return {"query": query, "deadline_at": deadline_at, "debug": {"query_rewrite": debug}}


def _too_slow(ctx: Context, request: list[dict[str, str]], share: float) -> str:
    """Why the model is not asked for the rewrite ("" when it is)."""
    if ctx.query_rewrite == "rules":
        return "PERSONALAB_QUERY_REWRITE=rules"
    if ctx.query_rewrite == "model":
        return ""
    speed = measured_speed("query_rewrite")
    if speed is None:
        return ""
    # the whole request is evaluated: a one-slot server's cache holds the last reply's prompt, not this one's
    tokens = _tokens(ctx, request)
    expected = speed.seconds(tokens, REWRITE_ANSWER_TOKENS)
    if expected <= share:
        return ""
    return (
        f"the model is slow: about {expected:.1f} s for a {tokens}-token request at {speed.prompt_per_s:.0f} prompt "
        f"tokens/s, over the rewrite's {share:.1f} s"
    )


def _tokens(ctx: Context, request: list[dict[str, str]]) -> int:
    return TokenCounter(ctx.chars_per_token).messages(request)
