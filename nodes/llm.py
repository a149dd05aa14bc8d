"""The chat model of the turn graph: any OpenAI-compatible endpoint, or an offline scripted model.

Configuration, from the environment (read on every `get_chat_model` call):
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
A bad value raises ValueError naming the variable.

The scripted model tells requests apart by the purpose marker each system prompt starts with
(nodes/prompts.py), and answers:
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

import math
import os
import re

from langchain_core.language_models import BaseChatModel
from personalab.nodes.rules import prompts
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.scripted_llm import ScriptedChatModel

DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RETRIES = 0
DEFAULT_BASE_URL = "https://api.openai.com/v1"
MODES = ("auto", "scripted", "openai")


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value.strip() if value and value.strip() else None


def _number(name: str, default: float | None, low: float, high: float | None, *, exclusive_low: bool) -> float | None:
    raw = _env(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInput(f"{name}={raw!r} is not a number") from None
    too_low = value <= low if exclusive_low else value < low
    if not math.isfinite(value) or too_low or (high is not None and value > high):
        bound = f"> {low}" if exclusive_low else f">= {low}"
        raise InvalidInput(f"{name}={raw!r} is out of range (expected {bound}{f' and <= {high}' if high else ''})")
    return value


def _retries() -> int:
    raw = _env("PERSONALAB_LLM_MAX_RETRIES")
    if raw is None:
        return DEFAULT_MAX_RETRIES
    if not raw.isdigit():
        raise InvalidInput(f"PERSONALAB_LLM_MAX_RETRIES={raw!r} is not a non-negative integer")
    return int(raw)


def get_chat_model(purpose: str = prompts.PURPOSE_REPLY) -> BaseChatModel:
    """The chat model for `purpose` (one of nodes.prompts.PURPOSES), configured from the environment (module doc)."""
    prompts.purpose_marker(purpose)  # validates the purpose
    mode = (_env("PERSONALAB_LLM") or "auto").lower()
    if mode not in MODES:
        raise InvalidInput(f"PERSONALAB_LLM={mode!r} is not one of {', '.join(MODES)}")
    key = _env("OPENAI_API_KEY")
    if mode == "scripted":
        return ScriptedChatModel(reason="PERSONALAB_LLM=scripted")
    if key is None:
        if mode == "openai":
            raise InvalidInput("PERSONALAB_LLM=openai but OPENAI_API_KEY is not set")
        return ScriptedChatModel(reason="no OPENAI_API_KEY")

    base_url = _env("OPENAI_BASE_URL")
    if base_url is not None and not re.match(r"^https?://[^/\s]+", base_url):
        raise InvalidInput(f"OPENAI_BASE_URL={base_url!r} is not an http(s) URL")
    model = _env(f"PERSONALAB_MODEL_{purpose.upper()}") or _env("PERSONALAB_MODEL") or DEFAULT_MODEL
    temperature = _number("PERSONALAB_TEMPERATURE", None, 0.0, 2.0, exclusive_low=False)
    timeout = _number("PERSONALAB_LLM_TIMEOUT", DEFAULT_TIMEOUT, 0.0, None, exclusive_low=True)
    from langchain_openai import ChatOpenAI  # imported here: the offline path never needs the client

    return ChatOpenAI(
        model=model,
        api_key=key,
        base_url=base_url,
        temperature=temperature,
        timeout=timeout,
        max_retries=_retries(),
    )


def model_label(model: BaseChatModel) -> str:
    """What answered: shown next to every output so scripted text is never mistaken for a real model's."""
    if isinstance(model, ScriptedChatModel):
        return f"scripted (offline, {model.reason})"
    name = getattr(model, "model_name", None)
    if name is not None:
        return f"openai-compatible: {name} @ {getattr(model, 'openai_api_base', None) or DEFAULT_BASE_URL}"
    return type(model).__name__



