"""`--judge`: an LLM judge on the same OpenAI-compatible endpoint as the run (issue 12) scores each probe's reply:
persona consistency (does the reply sound like the character) and memory used (does it use what was recalled),
both 0–1. Its prompt is in `evals.prompts`; an answer that is no JSON object with the two numbers is counted as
unanswered, never as a score."""

from __future__ import annotations

import json
import re
from typing import Any

from personalab.evals.prompts import JUDGE_SYSTEM, judge_request
from personalab.evals.scenario import Scenario, Step
from personalab.nodes.rules.errors import ConfigError

_JSON_RE = re.compile(r"\{.*\}", re.DOTALL)


class Judge:
    """The judge model: `ChatOpenAI` configured from the environment (OPENAI_API_KEY, OPENAI_BASE_URL,
    PERSONALAB_MODEL), temperature 0."""

    def __init__(self, model: Any = None) -> None:
        self.model = model if model is not None else endpoint_model("--judge")

    def score(self, scenario: Scenario, step: Step, state: dict[str, Any]) -> dict[str, Any]:
        prompt = state.get("prompt") or []
        head = next((str(m.get("content", "")) for m in prompt if m.get("region") == "head"), "")
        recalled = "\n".join(str(m.get("content", "")) for m in prompt if m.get("region") == "retrieved")
        request = judge_request(head, recalled, step.message, str(state.get("reply") or ""))
        try:
            answer = self.model.invoke([("system", JUDGE_SYSTEM), ("human", request)])
        except Exception as exc:  # noqa: BLE001 - a judge failure is reported, never a failed scenario
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        return parse_verdict(str(answer.content))


def endpoint_model(needed_by: str, max_tokens: int | None = None) -> Any:
    """`ChatOpenAI` on the run's endpoint (OPENAI_API_KEY, OPENAI_BASE_URL, PERSONALAB_MODEL), temperature 0;
    `ConfigError` naming `needed_by` when no endpoint is configured. `max_tokens` is also sent under its old name
    (`token_cap_body`). Its prompts are remembered as the turns' are (`SentPrompts`): a judge's request takes a
    one-slot server's prompt cache, and the next reply's prompt is fitted knowing it."""
    from langchain_openai import ChatOpenAI
    from personalab.nodes.llm import SentPrompts, token_cap_body
    from personalab.stores.settings import settings

    current = settings()
    if current.openai_api_key is None:
        raise ConfigError(f"{needed_by} needs an OpenAI-compatible endpoint: OPENAI_API_KEY is not set")
    return ChatOpenAI(
        model=current.model,
        api_key=current.openai_api_key,
        base_url=current.openai_base_url,
        temperature=0,
        timeout=current.llm_timeout,
        max_retries=current.llm_max_retries,
        max_completion_tokens=max_tokens,
        extra_body=token_cap_body(current, max_tokens),
        callbacks=[SentPrompts(current.openai_base_url)],
    )


def parse_verdict(text: str) -> dict[str, Any]:
    """{"ok": True, persona_consistency, memory_used, reason} from the judge's answer, or ok False and why."""
    match = _JSON_RE.search(text or "")
    try:
        data = json.loads(match.group(0)) if match else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return {"ok": False, "error": "the judge's answer holds no JSON object", "answer": (text or "")[:200]}
    out: dict[str, Any] = {"ok": True, "reason": str(data.get("reason", ""))[:300]}
    for key in ("persona_consistency", "memory_used"):
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return {"ok": False, "error": f"the judge's answer has no number {key}", "answer": text[:200]}
        out[key] = min(1.0, max(0.0, float(value)))
    return out
