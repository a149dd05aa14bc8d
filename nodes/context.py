"""Run-time configuration of the turn graph (LangGraph `context_schema`), defaults from the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from personalab.nodes.rules.errors import InvalidInput


def _env_number(name: str, default: float, *, integer: bool = False, minimum: float = 0) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError as exc:
        raise InvalidInput(f"{name}={raw!r} is not a {'whole ' if integer else ''}number") from exc
    if value < minimum:
        raise InvalidInput(f"{name}={raw!r} must be at least {minimum}")
    return value


def _choice(name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = (os.environ.get(name) or default).strip().lower()
    if value not in allowed:
        raise InvalidInput(f"{name}={value!r} is not one of {', '.join(allowed)}")
    return value


def _int(name: str, default: int, minimum: int = 1) -> int:
    return int(_env_number(name, default, integer=True, minimum=minimum))


@dataclass(kw_only=True)
class Context:
    """Everything a turn may be configured with; each field reads its `PERSONALAB_*` variable by default."""

    database_url: str | None = field(default_factory=lambda: os.environ.get("PERSONALAB_DATABASE_URL") or None)
    # seed 002 定期维护: core memory is rewritten every N turns
    maintenance_every: int = field(default_factory=lambda: _int("PERSONALAB_MAINTENANCE_EVERY", 10))
    # seed 002 需求1 兜底机制: fallback after this many turns without a [PROGRESS] marker
    stall_turns: int = field(default_factory=lambda: _int("PERSONALAB_STALL_TURNS", 3))
    # seed 002 需求3: 20 events of this instance, under a 1.5 s cap
    rag_results: int = field(default_factory=lambda: _int("PERSONALAB_RAG_RESULTS", 20))
    rag_timeout_s: float = field(default_factory=lambda: _env_number("PERSONALAB_RAG_TIMEOUT", 1.5, minimum=0.01))
    rewrite_history_messages: int = field(default_factory=lambda: _int("PERSONALAB_REWRITE_MESSAGES", 8))
    max_message_chars: int = field(default_factory=lambda: _int("PERSONALAB_MAX_MESSAGE_CHARS", 4000))
    lock_lease_s: float = field(default_factory=lambda: _env_number("PERSONALAB_TURN_LEASE", 600, minimum=1))
    # token budgets of the prompt regions (seed 002 Prompt区域分配)
    head_tokens: int = field(default_factory=lambda: _int("PERSONALAB_HEAD_TOKENS", 4000))
    middle_tokens: int = field(default_factory=lambda: _int("PERSONALAB_MIDDLE_TOKENS", 28000))
    retrieved_tokens: int = field(default_factory=lambda: _int("PERSONALAB_RETRIEVED_TOKENS", 8000))
    tail_tokens: int = field(default_factory=lambda: _int("PERSONALAB_TAIL_TOKENS", 4000))
    recall_turns: int = field(default_factory=lambda: _int("PERSONALAB_RECALL_TURNS", 20))
    # seed 003: the post-turn review runs on rules (no LLM call) unless told to ask the model
    review_mode: str = field(default_factory=lambda: _choice("PERSONALAB_REVIEW_MODE", "rule", ("rule", "llm")))


def context_of(runtime: object) -> Context:
    """The run's context; a run started without one (e.g. from Studio) gets the environment's defaults."""
    ctx = getattr(runtime, "context", None)
    if isinstance(ctx, Context):
        return ctx
    if isinstance(ctx, dict):
        return Context(**ctx)
    return Context()
