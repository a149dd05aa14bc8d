"""The chat model of the turn graph: any OpenAI-compatible endpoint, or an offline scripted model.

Configuration, from the settings (stores/settings.py, the environment as it is at each `get_chat_model` call):
- `OPENAI_API_KEY`: with none (or `PERSONALAB_LLM=scripted`), the model is `ScriptedChatModel` — offline and
  deterministic; every place that shows its output must show `model_label(model)` with it. Local servers that
  need no key (Ollama, vLLM) take any non-empty value, e.g. `OPENAI_API_KEY=ollama`.
- `OPENAI_BASE_URL`: the endpoint (`http(s)://…/v1`); unset = api.openai.com. DeepSeek, Qwen on vLLM,
  Ollama (`http://127.0.0.1:11434/v1`)… all speak this API.
- `PERSONALAB_MODEL` (default `gpt-4o-mini`); `PERSONALAB_MODEL_<PURPOSE>` (e.g. `PERSONALAB_MODEL_QUERY_REWRITE`)
  overrides it for one purpose, so the small rewrite call can use a faster model.
- `PERSONALAB_TEMPERATURE` (0–2; unset = the server's default).
- `PERSONALAB_LLM_TIMEOUT`: seconds per request (default 30, the seed's 响应时间要求 for a whole turn; lower it
  to leave room for retrieval and the other calls of the turn).
- `PERSONALAB_LLM_MAX_RETRIES` (default 0): each retry can add a whole timeout to a turn, so retrying is opt-in.
- `PERSONALAB_LLM`: `auto` (default: scripted without a key), `scripted` (always offline), `openai` (a missing key
  is an error instead of a silent switch to the scripted model).
A bad value raises `ConfigError` (a ValueError) naming the variable, the value and what is allowed.

The scripted model tells requests apart by the purpose marker each system prompt starts with
(nodes/rules/prompts.py), and answers:
- reply: one to three `【emotion】content<tts>(action)` segments in Chinese, built from the user's message and the
  turn (from the head's 【当前轮次】 line), with `[PROGRESS:i:status]` markers on a 6-turn cycle — turn 6k+1
  `in_progress` of the current point (at the start), 6k+2 `completed` (at the end), then none for 4 turns, so
  the director's fallback (≥ 3 turns without a marker) fires on turn 6k+5; when the director's
  【当前剧情事件】 block is in the prompt it mentions an event and marks `in_progress` (in the middle). Turn 18k+13
  writes its marker with full-width brackets and colons; turn 12k+10 adds an out-of-range marker (ignored path).
- query_rewrite: `独立查询：…` or `改写后的查询：“…”` — the input's topic plus context from the last character line.
- core_memory: the old core memory with one more `recent_changes` entry and an adjusted first opposition, as
  valid JSON inside a ```json fence.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.constants import TAG_NOSTREAM
from personalab.nodes.rules import core_memory, prompts
from personalab.nodes.rules.deadline import MIN_CALL_SECONDS, ModelSpeed, call_seconds, next_reply_tokens
from personalab.nodes.rules.errors import ConfigError
from personalab.nodes.rules.markers import MarkerFilter
from personalab.nodes.rules.memory_layers import SUMMARY_MAX_CHARS
from personalab.nodes.scripted_llm import ScriptedChatModel
from personalab.stores.model_servers import KeptServers, KeptSpeed, read_kept_servers, write_kept_servers
from personalab.stores.settings import Settings, settings
from pydantic import Field

DEFAULT_BASE_URL = "https://api.openai.com/v1"


# The most tokens each JSON / summary answer may take (twice its character limit: a tokenizer weak on Chinese gives
# about 0.5 characters per token). Without a cap a small local model writes until the window is full, and a
# one-request-at-a-time server (llama.cpp) makes the next turn's reply wait behind it (issue 17).
ANSWER_TOKEN_CAPS = {
    prompts.PURPOSE_CORE_MEMORY: 2 * core_memory.MAX_CHARS,
    prompts.PURPOSE_REVIEW: 1200,
    prompts.PURPOSE_EVENT_SUMMARY: 4 * SUMMARY_MAX_CHARS,
}


def get_chat_model(
    purpose: str = prompts.PURPOSE_REPLY, *, until: float | None = None, max_tokens: int | None = None, variant: int = 0
) -> BaseChatModel:
    """The chat model for `purpose` (one of nodes.rules.prompts.PURPOSES), configured from the settings (module doc).

    `until`: the time (`time.time()`) the request must end by — the turn's deadline (nodes/rules/deadline.py);
    the request's timeout is what is left, at most PERSONALAB_LLM_TIMEOUT, and a request made with (almost)
    nothing left fails at once as a timeout, which every caller already survives (the rewrite uses the raw input,
    the review its rules, the maintenance keeps the core memory). For a stream the timeout bounds each wait for
    the next chunk; the reply's reader also stops at the deadline. `max_tokens`: the most tokens the model may
    write (the reply's PERSONALAB_MAX_REPLY_TOKENS; unset: ANSWER_TOKEN_CAPS for JSON and summary answers).
    `variant`: a regeneration's number (0: the first reply); the offline model writes another reply for each, a
    real model varies by itself."""
    prompts.purpose_marker(purpose)  # validates the purpose
    if max_tokens is None:
        max_tokens = ANSWER_TOKEN_CAPS.get(purpose)
    # only the reply reaches a reader of the served graph's `messages` stream: LangGraph leaves out a model call
    # tagged "nostream" (the rewrite's query, the maintenance's and the review's JSON are no dialogue)
    tags = None if purpose == prompts.PURPOSE_REPLY else [TAG_NOSTREAM]
    current = settings()
    timeout = current.llm_timeout
    if until is not None:
        timeout = call_seconds(until, time.time(), timeout) or MIN_CALL_SECONDS
    if current.llm == "scripted":
        return ScriptedChatModel(reason="PERSONALAB_LLM=scripted", max_tokens=max_tokens, tags=tags, variant=variant)
    key = current.openai_api_key
    if key is None:
        if current.llm == "openai":
            raise ConfigError("PERSONALAB_LLM=openai but OPENAI_API_KEY is not set")
        return ScriptedChatModel(reason="no OPENAI_API_KEY", max_tokens=max_tokens, tags=tags, variant=variant)
    from langchain_openai import ChatOpenAI  # imported here: the offline path never needs the client

    extra_body = token_cap_body(current, max_tokens)
    return ChatOpenAI(
        model=model_name(current, purpose),
        # a streamed answer's last chunk carries its usage (prompt tokens, cached tokens): the model's measured
        # speed (issue 30) comes from it
        stream_usage=True,
        api_key=key,
        base_url=current.openai_base_url,
        temperature=current.temperature,
        timeout=timeout,
        max_retries=current.llm_max_retries,
        max_completion_tokens=max_tokens,
        extra_body=extra_body,
        tags=tags,
        callbacks=[SentPrompts(current.openai_base_url)],
    )


def token_cap_body(current: Settings, max_tokens: int | None) -> dict[str, int] | None:
    """The request's extra body for an answer capped at `max_tokens`. ChatOpenAI sends the cap as
    `max_completion_tokens` (OpenAI's current name); llama.cpp's server, llama-cpp-python, Ollama and older vLLM read
    only `max_tokens`, so a compatible endpoint (OPENAI_BASE_URL set) gets both."""
    return {"max_tokens": max_tokens} if max_tokens is not None and current.openai_base_url else None


def answer_cap(model: BaseChatModel, max_tokens: int | None) -> dict[str, Any]:
    """A request's own answer cap, lower than the model's (the reply's time cap, nodes/rules/deadline.py), as the
    keyword arguments of `model.stream`: both names for a compatible endpoint (`token_cap_body`); nothing for the
    offline model (it has no server to time) or without a cap."""
    if max_tokens is None or _server_of(model) is None:
        return {}
    body = token_cap_body(settings(), max_tokens)
    return {"max_completion_tokens": max_tokens, **({"extra_body": body} if body else {})}


def load_client() -> None:
    """Import the OpenAI client when it will answer: seconds in a new process, which are start-up, not the time a
    turn's deadline gives its model calls (a one-shot CLI turn's rewrite would otherwise time out before its request)."""
    current = settings()
    if current.llm != "scripted" and current.openai_api_key is not None:
        import langchain_openai  # noqa: F401 - loaded for later; get_chat_model imports it by name


def model_name(current: Settings, purpose: str) -> str:
    """PERSONALAB_MODEL_<PURPOSE>, else (the event-log summary is maintenance work) the core-memory model, else
    PERSONALAB_MODEL."""
    name: str | None = getattr(current, f"model_{purpose}")
    if name is None and purpose == prompts.PURPOSE_EVENT_SUMMARY:
        name = current.model_core_memory
    return name or current.model


class MarkerFreeStream(BaseChatModel):
    """The reply model as a reader of its stream sees it (seed 002 需求1: the director's `[PROGRESS:i:status]`
    markers are for the engine): every chunk's text without markers, a possible marker held back until it closes
    (`MarkerFilter`). The wrapped model runs without callbacks, so LangGraph's `messages` and `events` stream modes
    and `run_turn(on_token=…)` see only this run's clean chunks; the model's own text, markers included, is kept in
    `raw` for the progress parser. One instance per reply."""

    inner: BaseChatModel
    raw: list[str] = Field(default_factory=list)
    # an `EchoGuard` (nodes/rules/echo.py) of the user's input, or None: what may be the start of a reply that only
    # repeats the input is held back, and never shown when it is one (`echo.echoed`)
    echo: Any = None

    @property
    def _llm_type(self) -> str:
        return "marker-free-stream"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        answer = self.inner.invoke(messages, config={"callbacks": []}, stop=stop, **kwargs)
        text = answer.content if isinstance(answer.content, str) else str(answer.content)
        self.raw.append(text)
        markers = MarkerFilter()
        message = AIMessage(content=markers.feed(text) + markers.flush(), response_metadata=answer.response_metadata)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        markers = MarkerFilter()
        # callbacks=[]: the model's raw tokens reach no handler (stream modes, tracing of this run's readers)
        inner = self.inner.stream(messages, config={"callbacks": []}, stop=stop, **kwargs)
        try:
            for chunk in inner:
                text = chunk.content if isinstance(chunk.content, str) else str(chunk.content)
                self.raw.append(text)
                metadata = dict(chunk.response_metadata or {})
                shown = markers.feed(text) + (markers.flush() if metadata.get("finish_reason") else "")
                if self.echo is not None:
                    shown = self.echo.feed(shown) + (self.echo.finish() if metadata.get("finish_reason") else "")
                yield ChatGenerationChunk(
                    message=AIMessageChunk(
                        content=shown, response_metadata=metadata, usage_metadata=chunk.usage_metadata
                    )
                )
            rest = markers.flush()
            if self.echo is not None:
                rest = self.echo.feed(rest) + self.echo.finish()
            if rest:
                yield ChatGenerationChunk(message=AIMessageChunk(content=rest))
        finally:
            close = getattr(inner, "close", None)
            if close is not None:
                close()  # a reader that stops early (the deadline) closes the model's connection too


def model_label(model: BaseChatModel) -> str:
    """What answered: shown next to every output so scripted text is never mistaken for a real model's."""
    if isinstance(model, ScriptedChatModel):
        return f"scripted (offline, {model.reason})"
    name = getattr(model, "model_name", None)
    if name is not None:
        return f"openai-compatible: {name} @ {getattr(model, 'openai_api_base', None) or DEFAULT_BASE_URL}"
    return type(model).__name__


# --- a slow local model (issue 30): its measured speed, and requests that never outlive their deadline -----------

_SPEEDS: dict[tuple[str, str], ModelSpeed] = {}
_SPEEDS_LOCK = threading.Lock()
# what each server's prompt cache holds, as the engine can tell: the last prompt it was sent (rendered; one slot's
# cache, llama.cpp's — llama-cpp-python's RAM cache, `--cache true`, also restores older states, so after another
# purpose's request it may reuse more than estimated: its time then comes out shorter than expected, never longer),
# and until when it is still evaluating a prompt whose request was given up (llama-cpp-python cannot stop an
# evaluation midway: the next request waits for it)
_LAST_SENT: dict[str, str] = {}
_BUSY_UNTIL: dict[str, float] = {}
# kept between processes (`stores.model_servers`): read once per process, written on each change; the tests of other
# things turn it off, so that a stub server on a reused port never inherits an earlier run's speed
KEEP_SERVER_STATE = True
_kept_loaded = False
MIN_MEASURED_TOKENS = 32  # fewer evaluated prompt tokens than this: the timing is mostly overhead, not speed
MIN_WRITTEN_TOKENS = 8  # the same for the written answer (measured from its first chunk to its last)


def _speed_key(model: BaseChatModel) -> tuple[str, str] | None:
    name = getattr(model, "model_name", None)
    if name is None or isinstance(model, ScriptedChatModel):
        return None
    return (str(getattr(model, "openai_api_base", None) or DEFAULT_BASE_URL), str(name))


def _load_kept() -> None:
    """Once per process, under `_SPEEDS_LOCK` (`_known_servers`): what earlier processes knew, below what this one
    has measured."""
    global _kept_loaded
    if _kept_loaded or not KEEP_SERVER_STATE:
        return
    _kept_loaded = True
    kept = read_kept_servers()
    for speed in kept.speeds:
        _SPEEDS.setdefault(
            (speed.server, speed.model),
            ModelSpeed(prompt_per_s=speed.prompt_per_s, gen_per_s=speed.gen_per_s, reply_tokens=speed.reply_tokens),
        )
    for server, text in kept.last_sent.items():
        _LAST_SENT.setdefault(server, text)
    for server, until in kept.busy_until.items():
        _BUSY_UNTIL[server] = max(_BUSY_UNTIL.get(server, 0.0), until)


@contextmanager
def _known_servers() -> Iterator[None]:
    """What this process knows of its model servers, locked, with what earlier processes kept read in first."""
    with _SPEEDS_LOCK:
        _load_kept()
        yield


def _save_kept() -> None:
    """Under `_SPEEDS_LOCK`, after a change: this process's knowledge over what the file holds (other processes may
    have measured other servers meanwhile)."""
    if not KEEP_SERVER_STATE:
        return
    kept = read_kept_servers()
    speeds = {(k.server, k.model): k for k in kept.speeds}
    for (server, name), speed in _SPEEDS.items():
        speeds[(server, name)] = KeptSpeed(
            server=server,
            model=name,
            prompt_per_s=speed.prompt_per_s,
            gen_per_s=speed.gen_per_s,
            reply_tokens=speed.reply_tokens,
        )
    now = time.time()
    busy = {server: until for server, until in {**kept.busy_until, **_BUSY_UNTIL}.items() if until > now}
    write_kept_servers(
        KeptServers(speeds=list(speeds.values()), last_sent={**kept.last_sent, **_LAST_SENT}, busy_until=busy)
    )


def measured_speed(purpose: str) -> ModelSpeed | None:
    """The last measured speed of the model `purpose` is served by (same server, same model name), if any."""
    current = settings()
    if current.llm == "scripted" or current.openai_api_key is None:
        return None
    key = (str(current.openai_base_url or DEFAULT_BASE_URL), model_name(current, purpose))
    with _known_servers():
        return _SPEEDS.get(key)


def forget_speeds() -> None:
    """Drop every measurement (a server restarted with another model or thread count) and what its cache held."""
    global _kept_loaded
    with _SPEEDS_LOCK:
        _kept_loaded = True  # nothing of the file comes back
        _SPEEDS.clear()
        _LAST_SENT.clear()
        _BUSY_UNTIL.clear()
        if KEEP_SERVER_STATE:
            write_kept_servers(KeptServers())


def _server_of(model: BaseChatModel) -> str | None:
    if getattr(model, "model_name", None) is None or isinstance(model, ScriptedChatModel):
        return None
    return str(getattr(model, "openai_api_base", None) or DEFAULT_BASE_URL)


def rendered_prompt(messages: Sequence[Any]) -> str:
    """A prompt as one text, each message's role before its content (what a server's prompt cache compares)."""
    roles = {"human": "user", "ai": "assistant"}
    parts = []
    for message in messages:
        if isinstance(message, BaseMessage):
            role, content = roles.get(message.type, message.type), message.content
        else:
            role, content = str(message.get("role")), message.get("content")
        parts.append(f"\x00{role}\x01{content if isinstance(content, str) else content!r}")
    return "".join(parts)


class SentPrompts(BaseCallbackHandler):
    """Remembers the last prompt sent to `server` (of any purpose: the reply, the rewrite, maintenance, review, a
    judge), for `cached_chars`."""

    def __init__(self, server: object) -> None:
        self.server = str(server) if server else DEFAULT_BASE_URL

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any) -> None:
        if messages:
            remember_prompt(self.server, rendered_prompt(messages[0]))


def remember_prompt(server: str, rendered: str) -> None:
    with _known_servers():
        _LAST_SENT[server] = rendered
        _save_kept()  # the next process's first turn knows what the server's cache holds


def cached_chars(model: BaseChatModel, rendered: str) -> int:
    """Characters at the start of `rendered` the model's server is expected to hold in its prompt cache: the common
    start with the last prompt sent to it (0 when nothing was sent, or for the offline model)."""
    server = _server_of(model)
    with _known_servers():
        last = _LAST_SENT.get(server or "", "")
    return len(os.path.commonprefix([rendered, last]))


def busy_seconds(model: BaseChatModel) -> float:
    """Seconds the model's server is expected to go on evaluating the prompt of a request given up before its first
    chunk (`record_abandoned`), which the next request waits for."""
    server = _server_of(model)
    with _known_servers():
        until = _BUSY_UNTIL.get(server or "", 0.0)
    return max(0.0, until - time.time())


def record_abandoned(model: BaseChatModel, timing: Timing, evaluated_tokens: int) -> None:
    """A request given up before its first chunk: its server may go on evaluating its `evaluated_tokens` (llama-cpp-
    python's does) until about their reading time at the measured speed after it was sent, or after the given-up
    prompt it was still reading then (one slot: the request waited for it).

    A request fitted to its deadline (the reply, the core-memory rewrite, the event-log summary) is given up before
    its first chunk only when the server reads slower than measured (a machine that got busy): by that speed it
    would be read already, and the next reply would be sent as if the server were free. Its reading is then taken to
    last as long again as it has lasted, and the speed lowered to match (issue 30: the next fits plan with it; the
    next answer timed measures it anew)."""
    server, key = _server_of(model), _speed_key(model)
    if server is None or key is None or timing.first is not None:
        return
    with _known_servers():
        speed = _SPEEDS.get(key)
        if speed is not None:
            now = time.time()
            started = max(timing.sent, _BUSY_UNTIL.get(server, 0.0))
            until = started + evaluated_tokens / speed.prompt_per_s
            if until <= now and evaluated_tokens >= MIN_MEASURED_TOKENS:
                read_for = now - started
                until = now + read_for
                # at most half the measured speed: by that speed the prompt was read within `read_for`
                _SPEEDS[key] = ModelSpeed(
                    prompt_per_s=evaluated_tokens / (2 * read_for),
                    gen_per_s=speed.gen_per_s,
                    reply_tokens=speed.reply_tokens,
                )
            _BUSY_UNTIL[server] = max(_BUSY_UNTIL.get(server, 0.0), until)
            _save_kept()


@dataclass
class Timing:
    """One streamed request's clock: when it was sent, its first and its last chunk, and its usage. A server that
    reports no usage in its stream (llama-cpp-python's) is timed with the engine's own counts instead: `prompt_tokens`
    and `evaluated` (of them, not in the server's cache as `cached_chars` estimates it), set by the caller, and
    `written` (the answer's tokens)."""

    sent: float
    first: float | None = None
    last: float | None = None
    usage: dict[str, Any] | None = None
    prompt_tokens: int | None = None
    evaluated: int | None = None
    written: int | None = None

    def see(self, chunk: Any) -> None:
        now = time.time()
        self.first = self.first or now
        self.last = now
        self.usage = getattr(chunk, "usage_metadata", None) or self.usage

    def counts(self) -> tuple[int, int] | None:
        """(prompt tokens evaluated, answer tokens written) as the server reported them, else as the engine counted
        them; None when neither is known."""
        usage = self.usage
        if usage and usage.get("input_tokens"):
            cached = int((usage.get("input_token_details") or {}).get("cache_read") or 0)
            return int(usage["input_tokens"]) - cached, int(usage.get("output_tokens") or 0)
        if self.evaluated is None:
            return None
        return self.evaluated, int(self.written or 0)

    def debug(self) -> dict[str, Any]:
        """What the server reported: prompt tokens, of them reused from its cache, written tokens, seconds (the
        engine's estimates, marked so, when the server reports no usage)."""
        usage = dict(self.usage or {})
        if not usage.get("input_tokens") and self.evaluated is not None:
            shown: dict[str, Any] = {
                "prompt_tokens": self.prompt_tokens,
                "cached_tokens": int(self.prompt_tokens or 0) - self.evaluated,
                "answer_tokens": self.written,
                "counted_by": "engine (the server reported no usage)",
            }
        else:
            cached = int((usage.get("input_token_details") or {}).get("cache_read") or 0)
            shown = {"prompt_tokens": usage.get("input_tokens"), "cached_tokens": cached}
            shown["answer_tokens"] = usage.get("output_tokens")
        if self.first is not None:
            shown["first_chunk_s"] = round(self.first - self.sent, 3)
        return shown


def record_speed(
    model: BaseChatModel, timing: Timing, *, reply: bool = False, cut_reply: bool = False
) -> ModelSpeed | None:
    """The speed this request showed (prompt tokens evaluated / seconds to the first chunk; written tokens / seconds
    of writing), kept for the next turns' decisions; None when it measured nothing usable. `reply`: the answer was a
    character's reply, whose tokens go into the usual reply's size (`ModelSpeed.usual_reply_tokens`); `cut_reply`: a
    reply cut at the deadline, at least as long as what it wrote — its tokens raise the usual size when above it (the
    1.5B model's replies averaged 33 tokens, a cut one had written 65 and its retry planned with 33 again: cut three
    times in a row), never lower it."""
    key = _speed_key(model)
    counts = timing.counts()
    if key is None or counts is None or timing.first is None or timing.last is None:
        return None
    evaluated, written = counts
    with _known_servers():
        old = _SPEEDS.get(key)
        prompt_per_s = old.prompt_per_s if old else None
        gen_per_s = old.gen_per_s if old else None
        reply_tokens = old.reply_tokens if old else None
        if evaluated >= MIN_MEASURED_TOKENS and timing.first > timing.sent:
            prompt_per_s = evaluated / (timing.first - timing.sent)
        if written >= MIN_WRITTEN_TOKENS and timing.last > timing.first:
            gen_per_s = written / (timing.last - timing.first)
        if reply and written:
            reply_tokens = next_reply_tokens(reply_tokens, written)
        if cut_reply and written and (reply_tokens is None or written > reply_tokens):
            reply_tokens = next_reply_tokens(reply_tokens, written)
        if prompt_per_s is None:
            return old
        _SPEEDS[key] = ModelSpeed(prompt_per_s=prompt_per_s, gen_per_s=gen_per_s, reply_tokens=reply_tokens)
        _save_kept()
        return _SPEEDS[key]


def prompt_estimate(
    model: BaseChatModel, messages: Sequence[Any], count: Callable[[str], int]
) -> tuple[int | None, int | None]:
    """(prompt tokens, of them the server must evaluate) of `messages` before they are sent: the part past what its
    prompt cache is expected to hold (`cached_chars`), counted with `count`; (None, None) for the offline model."""
    if _server_of(model) is None:
        return None, None
    rendered = rendered_prompt(messages)
    return count(rendered), count(rendered[cached_chars(model, rendered) :])


def stream_answer(
    model: BaseChatModel,
    messages: Sequence[Any],
    until: float | None = None,
    count: Callable[[str], int] | None = None,
) -> tuple[str, Timing]:
    """The model's answer, streamed and closed at `until` (issue 30): a one-request-at-a-time local server
    (llama.cpp) cancels a request whose connection is closed, so a call that gives up leaves nothing running to make
    the next request (the turn's reply) wait. Raises TimeoutError past `until`, the model's errors as they are.
    `count` (a text's tokens): the request is timed with the engine's counts when its server reports no usage."""
    timing = Timing(sent=time.time())
    if count is not None:
        timing.prompt_tokens, timing.evaluated = prompt_estimate(model, messages, count)
    parts: list[str] = []
    stream = model.stream(list(messages))
    try:
        for chunk in stream:
            timing.see(chunk)
            parts.append(chunk.content if isinstance(chunk.content, str) else str(chunk.content))
            finished = (chunk.response_metadata or {}).get("finish_reason")
            if until is not None and not finished and time.time() > until:
                raise TimeoutError("the call's share of the turn's deadline passed while the answer streamed")
    except Exception as exc:
        if gave_up_waiting(exc):  # at `until`, or the client's timeout before the first chunk (a long prompt)
            record_abandoned(model, timing, timing.evaluated or 0)
        raise
    finally:
        close = getattr(stream, "close", None)  # a generator: closing it closes the HTTP response
        if close is not None:
            close()
    if count is not None:
        timing.written = count("".join(parts))
    record_speed(model, timing)
    return "".join(parts), timing


def gave_up_waiting(exc: BaseException) -> bool:
    """The request was given up for time (its share of the deadline, or the HTTP client's timeout) rather than
    refused: its server may still be evaluating it."""
    return isinstance(exc, (TimeoutError, openai.APITimeoutError, httpx.TimeoutException))


def record_too_slow(purpose: str, prompt_tokens: int, seconds: float) -> ModelSpeed | None:
    """A request of `prompt_tokens` that got no answer within `seconds` (its timeout): the model reads at most
    prompt_tokens / seconds a second. Kept (the lower of it and what was measured) so the next turn does not send a
    request that cannot be answered in time either; its answer speed, not measured, stays as it was."""
    current = settings()
    if current.llm == "scripted" or current.openai_api_key is None or prompt_tokens <= 0 or seconds <= 0:
        return None
    key = (str(current.openai_base_url or DEFAULT_BASE_URL), model_name(current, purpose))
    with _known_servers():
        old = _SPEEDS.get(key)
        bound = prompt_tokens / seconds
        prompt_per_s = min(bound, old.prompt_per_s) if old else bound
        _SPEEDS[key] = ModelSpeed(
            prompt_per_s=prompt_per_s,
            gen_per_s=old.gen_per_s if old else None,
            reply_tokens=old.reply_tokens if old else None,
        )
        _save_kept()
        return _SPEEDS[key]
