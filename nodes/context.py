"""Run-time configuration of the turn graph (LangGraph `context_schema`), in the shape of memory-agent's
`context.py`: a kw_only dataclass whose every field defaults to its `PERSONALAB_*` setting (stores/settings.py),
read when the `Context` is made. Each field carries its setting's description and bounds, so the served graph's
context schema (`graph.get_context_jsonschema()`) documents itself."""

# no `from __future__ import annotations`: the fields' Annotated descriptions are built once, at import, instead
# of each time pydantic or LangGraph resolves the type hints
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, get_type_hints

from personalab.nodes.rules.curation import recall_window_turns
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.tokens import TokenCounter
from personalab.stores.settings import MemoryMode, ReviewMode, RewriteMode, describe, env_name, settings
from personalab.stores.tokenizer import text_tokens_of
from pydantic import BaseModel, ConfigDict, ValidationError, create_model


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
    recall_step: Annotated[int, describe("recall_step")] = _setting("recall_step")  # issue 30: a cache-friendly window
    # issue 30: a turn's retrieved region stays in the next prompts (nodes/rules/shown_memory.py)
    memory_stays: Annotated[int, describe("memory_stays")] = _setting("memory_stays")
    consolidation: Annotated[bool, describe("consolidation")] = _setting("consolidation")  # issue 26
    chars_per_token: Annotated[float, describe("chars_per_token")] = _setting("chars_per_token")
    tokenizer: Annotated[str, describe("tokenizer")] = _setting("tokenizer")
    # the reply model's window and reply cap: the regions are fitted inside the window (seed 002 Prompt区域分配)
    context_tokens: Annotated[int, describe("context_tokens")] = _setting("context_tokens")
    max_reply_tokens: Annotated[int, describe("max_reply_tokens")] = _setting("max_reply_tokens")
    # seed 002 响应时间要求: 总响应时间应控制在30秒以内
    turn_deadline_s: Annotated[float, describe("turn_deadline")] = _setting("turn_deadline")
    # seed 003: the post-turn review runs on rules (no LLM call) unless told to ask the model
    review_mode: Annotated[ReviewMode, describe("review_mode")] = _setting("review_mode")
    # issue 30: a slow local model's rewrite is done by rules when it cannot fit its share of the deadline
    query_rewrite: Annotated[RewriteMode, describe("query_rewrite")] = _setting("query_rewrite")
    # issue 30: a reply that only repeats the input is asked once more (nodes/rules/echo.py)
    echo_retry: Annotated[bool, describe("echo_retry")] = _setting("echo_retry")
    # issue 30: the evaluation's conditions (full memory / recent window only / whole history), one run at a time
    memory_mode: Annotated[MemoryMode, describe("memory_mode")] = _setting("memory_mode")


HISTORY_TURNS = 100_000  # memory_mode "history": every turn of the dialogue (the window then decides what fits)


def long_term_memory(ctx: Context) -> bool:
    """Whether the turn reads PersonaLab's long-term memory (issue 30: off in the recent and history conditions)."""
    return ctx.memory_mode == "full"


def window_turns_at(ctx: Context, turn: int, floor: int | None = None) -> int:
    """Turns before `turn` the recent window keeps (`recall_turns`, moved `recall_step` turns at a time, starting no
    earlier than `floor`: the state's `recall_floor_turn`)."""
    return recall_window_turns(turn, ctx.recall_turns, ctx.recall_step, floor)


def recall_turns_of(ctx: Context, turn: int, floor: int | None = None) -> int:
    """Turns of dialogue the prompt keeps at `turn`: the recent window, or the whole dialogue in the history
    condition."""
    return HISTORY_TURNS if ctx.memory_mode == "history" else window_turns_at(ctx, turn, floor)


def most_recall_turns(ctx: Context) -> int:
    """The most turns of dialogue the prompt ever keeps (what a turn reads of the history)."""
    return HISTORY_TURNS if ctx.memory_mode == "history" else ctx.recall_turns + ctx.recall_step - 1


def text_counter(ctx: Context) -> TokenCounter:
    """The prompt's token counter: the model's own tokenizer when configured (issue 17), else the approximate one."""
    if not ctx.tokenizer:
        return TokenCounter(ctx.chars_per_token)
    return TokenCounter(ctx.chars_per_token, text_tokens_of(ctx.tokenizer), Path(ctx.tokenizer).name)


def middle_tokens_of(ctx: Context) -> int:
    """The recent-dialogue region's budget; in the history condition the whole window (the window still caps it)."""
    return max(ctx.middle_tokens, ctx.context_tokens) if ctx.memory_mode == "history" else ctx.middle_tokens


# Fields only the server's configuration sets (issue 14): where data lives, the limits that protect the server
# from its clients, and what a turn may cost. A served run's context may set none of them; in-process callers
# (graph/runner.py, tests, evals) build a whole Context and may.
SERVER_FIELDS: dict[str, str] = {
    "database_url": "database_url",
    "lock_lease_s": "turn_lease",
    "max_message_chars": "max_message_chars",
    "max_user_name_chars": "max_user_name_chars",
    "max_host_lines": "max_host_lines",
    "max_reply_chars": "max_reply_chars",
    "chars_per_token": "chars_per_token",
    "tokenizer": "tokenizer",
    "context_tokens": "context_tokens",
    "max_reply_tokens": "max_reply_tokens",
    "turn_deadline_s": "turn_deadline",
}
# The documented per-run knobs: everything else of Context (story pacing, retrieval, prompt budgets, review mode).
RUN_KNOBS: tuple[str, ...] = tuple(f.name for f in fields(Context) if f.name not in SERVER_FIELDS)


def _knobs_model() -> type[BaseModel]:
    """A pydantic model of the run knobs with Context's types and bounds; every knob optional, nothing else."""
    hints = get_type_hints(Context, include_extras=True)
    spec: dict[str, Any] = {name: (hints[name] | None, None) for name in RUN_KNOBS}
    return create_model("RunKnobs", __config__=ConfigDict(extra="forbid", strict=False), **spec)


RunKnobs = _knobs_model()


def validate_run_context(raw: object, *, where: str = "context") -> dict[str, Any]:
    """A served run's context checked (issue 14): only documented knobs, each within its bounds. Returns the
    knobs given; raises `InvalidInput` naming the first bad field (`context.database_url`, ...)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where} must be an object of run settings, not {type(raw).__name__}")
    for key in raw:
        if key in SERVER_FIELDS:
            raise InvalidInput(
                f"{where}.{key} is set by the server's configuration ({env_name(SERVER_FIELDS[key])}), not per run"
            )
        if key not in RUN_KNOBS:
            raise InvalidInput(f"{where}.{key} is not a run setting; allowed: {', '.join(RUN_KNOBS)}")
    try:
        knobs = RunKnobs.model_validate(dict(raw))
    except ValidationError as exc:
        error = exc.errors()[0]
        name = ".".join(str(part) for part in error["loc"])
        shown = repr(error.get("input"))
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise InvalidInput(f"{where}.{name}: {error['msg']} (got {shown})") from None
    given = knobs.model_dump(exclude_unset=True)
    for name, value in given.items():
        if value is None:
            raise InvalidInput(f"{where}.{name}: null is not a value (leave it out for the server's default)")
    return given


def context_of(runtime: object) -> Context:
    """The run's context; a run started without one (e.g. from Studio) gets the environment's defaults. A plain
    mapping (a served run's context as the client sent it) may set the run knobs only (`validate_run_context`)."""
    ctx = getattr(runtime, "context", None)
    if isinstance(ctx, Context):
        return ctx
    if isinstance(ctx, Mapping):
        return Context(**validate_run_context(ctx))
    return Context()
