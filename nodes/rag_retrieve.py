"""RAG retrieval (seed 002 需求3, 检索触发机制): the rewritten query searches this instance's events only,
under a time cap (技术约束: RAG检索设置超时保护 1.5 秒). On timeout or error the turn goes on without events
and the debug output says why."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from langgraph.runtime import Runtime

from graph.context import Context, context_of
from graph.state import TurnState
from stores.events import search_events

# A search that overruns its cap keeps its worker until it ends; a few workers keep the next turns moving.
_searches = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rag")


def search_with_cap(search: Any, timeout_s: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run `search()` for at most `timeout_s`; returns (results, debug)."""
    start = time.perf_counter()
    future = _searches.submit(search)
    try:
        results = future.result(timeout=timeout_s)
        status = "ok"
    except FutureTimeout:
        results, status = [], f"timed out after {timeout_s:g} s: the turn goes on without retrieved events"
    except Exception as exc:  # noqa: BLE001 - retrieval must never fail the turn
        results, status = [], f"failed ({type(exc).__name__}: {exc}): the turn goes on without retrieved events"
    return results, {"status": status, "ms": round((time.perf_counter() - start) * 1000, 1), "count": len(results)}


def rag_retrieve(state: TurnState, runtime: Runtime[Context]) -> dict[str, Any]:
    ctx = context_of(runtime)
    instance_id = state["instance_id"]
    query = state.get("query") or state.get("message", "")
    events, debug = search_with_cap(
        lambda: search_events(query, ctx.rag_results, instance_id=instance_id), ctx.rag_timeout_s
    )
    return {"retrieved": events, "debug": {"retrieval": {"query": query, **debug}}}
