"""Run-time configuration of the turn graph (LangGraph `context_schema`), in the shape of memory-agent's
`context.py`: a kw_only dataclass whose every field defaults to its `PERSONALAB_*` setting (stores/settings.py),
read when the `Context` is made. Each field carries its setting's description and bounds, so the served graph's
context schema (`graph.get_context_jsonschema()`) documents itself."""

# no `from __future__ import annotations`: the fields' Annotated descriptions are built once, at import, instead
# of each time pydantic or LangGraph resolves the type hints
from dataclasses import dataclass, field
from typing import Annotated, Any

from personalab.stores.settings import ReviewMode, describe, settings


def _setting(name: str) -> Any:
    """The field's default: setting `name` of the environment as it is when the Context is made."""
    return field(default_factory=lambda: getattr(settings(), name))


@dataclass(kw_only=True)
class Context:
    """Everything a turn may be configured with; each field defaults to its `PERSONALAB_*` variable."""

    database_url: Annotated[str | None, describe("database_url")] = _setting("database_url")
    # seed 002 定期维护: core memory is rewritten every N turns
    maintenance_every: Annotated[int, describe("maintenance_every")] = _setting("maintenance_every")
    # seed 002 需求1 兜底机制: fallback after this many turns without a [PROGRESS] marker
    stall_turns: Annotated[int, describe("stall_turns")] = _setting("stall_turns")
    # seed 002 需求3: 20 events of this instance, under a 1.5 s cap
    rag_results: Annotated[int, describe("rag_results")] = _setting("rag_results")
    rag_timeout_s: Annotated[float, describe("rag_timeout")] = _setting("rag_timeout")
    rewrite_history_messages: Annotated[int, describe("rewrite_messages")] = _setting("rewrite_messages")
    max_message_chars: Annotated[int, describe("max_message_chars")] = _setting("max_message_chars")
    max_user_name_chars: Annotated[int, describe("max_user_name_chars")] = _setting("max_user_name_chars")
    max_host_lines: Annotated[int, describe("max_host_lines")] = _setting("max_host_lines")
    max_reply_chars: Annotated[int, describe("max_reply_chars")] = _setting("max_reply_chars")
    # seed 002 需求1: markers may move the story only this far ahead of the current point
    progress_max_step: Annotated[int, describe("progress_max_step")] = _setting("progress_max_step")
    director_reference_floor: Annotated[float, describe("director_reference_floor")] = _setting(
        "director_reference_floor"
    )
    lock_lease_s: Annotated[float, describe("turn_lease")] = _setting("turn_lease")
    # seed 002 可暂停/继续: a pause this long (minutes) starts a new session
    session_pause_min: Annotated[float, describe("session_pause")] = _setting("session_pause")
    # token budgets of the prompt regions (seed 002 Prompt区域分配)
    head_tokens: Annotated[int, describe("head_tokens")] = _setting("head_tokens")
    middle_tokens: Annotated[int, describe("middle_tokens")] = _setting("middle_tokens")
    retrieved_tokens: Annotated[int, describe("retrieved_tokens")] = _setting("retrieved_tokens")
    tail_tokens: Annotated[int, describe("tail_tokens")] = _setting("tail_tokens")
    recall_turns: Annotated[int, describe("recall_turns")] = _setting("recall_turns")
    chars_per_token: Annotated[float, describe("chars_per_token")] = _setting("chars_per_token")
    # the reply model's window and reply cap: the regions are fitted inside the window (seed 002 Prompt区域分配)
    context_tokens: Annotated[int, describe("context_tokens")] = _setting("context_tokens")
    max_reply_tokens: Annotated[int, describe("max_reply_tokens")] = _setting("max_reply_tokens")
    # seed 002 响应时间要求: 总响应时间应控制在30秒以内
    turn_deadline_s: Annotated[float, describe("turn_deadline")] = _setting("turn_deadline")
    # seed 003: the post-turn review runs on rules (no LLM call) unless told to ask the model
    review_mode: Annotated[ReviewMode, describe("review_mode")] = _setting("review_mode")


def context_of(runtime: object) -> Context:
    """The run's context; a run started without one (e.g. from Studio) gets the environment's defaults."""
    ctx = getattr(runtime, "context", None)
    if isinstance(ctx, Context):
        return ctx
    if isinstance(ctx, dict):
        return Context(**ctx)
    return Context()
