"""The texts of every model request besides the reply's scaffolding, per language (issue 28): the query rewrite
(seed 002 需求3), the core-memory maintenance (seed 002 需求2), the event-log summary (seed 001 中期记忆), the LLM
review (seed 003 扩展为 LLM 版本) and the director's fallback query (seed 002 需求1 兜底机制). The Chinese texts are
nodes/rules/prompts.py's, unchanged; the English ones nodes/rules/prompts_en.py's. `requests_for(language)` gives
one language's (None: Chinese, as an instance from before issue 28 had); `nodes.rules.prompt_catalog.Catalog`
reaches them as `catalog.requests`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from personalab.nodes.rules import prompts as zh
from personalab.nodes.rules import prompts_en as en
from personalab.nodes.rules.errors import InvalidInput


@dataclass(frozen=True)
class RequestTexts:
    """One language's texts of the model requests other than the reply."""

    language: str
    marker_template: str  # `{purpose}` inside
    query_rewrite_system: str
    query_rewrite_user: str
    no_history: str
    speaker_user: str
    speaker_character: str
    colon: str  # after a speaker's name: the full-width colon in Chinese, ": " in English
    aside: str  # a system message in the dialogue, `{content}` inside
    recent_dialogue: str
    latest_input: str
    old_core_memory: str
    state_events: str
    head_turn: str
    core_memory_system: str
    core_memory_user: str
    core_memory_no_events: str
    core_memory_no_dialogue: str
    event_summary_system: str
    event_summary_memories: str
    review_system: str
    review_user: str
    review_baseline_label: str
    fallback_query: str

    def marker(self, purpose: str) -> str:
        """The purpose marker (nodes/rules/prompts.py) in this language; the Chinese one is `purpose_marker`'s."""
        zh.purpose_marker(purpose)  # validates the purpose
        return self.marker_template.format(purpose=purpose)


ZH_REQUESTS = RequestTexts(
    language="zh",
    marker_template="〔PersonaLab任务：{purpose}〕",
    query_rewrite_system=zh.QUERY_REWRITE_SYSTEM,
    query_rewrite_user=zh.QUERY_REWRITE_USER,
    no_history=zh.QUERY_REWRITE_NO_HISTORY,
    speaker_user=zh.SPEAKER_USER,
    speaker_character=zh.SPEAKER_CHARACTER,
    colon="：",
    aside="（{content}）",
    recent_dialogue=zh.RECENT_DIALOGUE,
    latest_input=zh.LATEST_INPUT,
    old_core_memory=zh.OLD_CORE_MEMORY,
    state_events=zh.STATE_EVENTS,
    head_turn=zh.HEAD_TURN,
    core_memory_system=zh.CORE_MEMORY_SYSTEM,
    core_memory_user=zh.CORE_MEMORY_USER,
    core_memory_no_events=zh.CORE_MEMORY_NO_EVENTS,
    core_memory_no_dialogue=zh.CORE_MEMORY_NO_DIALOGUE,
    event_summary_system=zh.EVENT_SUMMARY_SYSTEM,
    event_summary_memories=zh.EVENT_SUMMARY_MEMORIES,
    review_system=zh.REVIEW_SYSTEM_PROMPT,
    review_user=zh.REVIEW_USER_TEMPLATE,
    review_baseline_label=zh.REVIEW_BASELINE_LABEL,
    fallback_query=zh.FALLBACK_QUERY,
)

EN_REQUESTS = RequestTexts(
    language="en",
    marker_template=en.MARKER,
    query_rewrite_system=en.QUERY_REWRITE_SYSTEM,
    query_rewrite_user=en.QUERY_REWRITE_USER,
    no_history=en.QUERY_REWRITE_NO_HISTORY,
    speaker_user=en.SPEAKER_USER,
    speaker_character=en.SPEAKER_CHARACTER,
    colon=": ",
    aside="({content})",
    recent_dialogue=en.RECENT_DIALOGUE,
    latest_input=en.LATEST_INPUT,
    old_core_memory=en.OLD_CORE_MEMORY,
    state_events=en.STATE_EVENTS,
    head_turn=en.HEAD_TURN,
    core_memory_system=en.CORE_MEMORY_SYSTEM,
    core_memory_user=en.CORE_MEMORY_USER,
    core_memory_no_events=en.CORE_MEMORY_NO_EVENTS,
    core_memory_no_dialogue=en.CORE_MEMORY_NO_DIALOGUE,
    event_summary_system=en.EVENT_SUMMARY_SYSTEM,
    event_summary_memories=en.EVENT_SUMMARY_MEMORIES,
    review_system=en.REVIEW_SYSTEM_PROMPT,
    review_user=en.REVIEW_USER_TEMPLATE,
    review_baseline_label=en.REVIEW_BASELINE_LABEL,
    fallback_query=en.FALLBACK_QUERY,
)

REQUESTS = {"zh": ZH_REQUESTS, "en": EN_REQUESTS}


def requests_for(language: str | None) -> RequestTexts:
    """The request texts of `language` (zh, en; case and spaces ignored); None is Chinese. An unsupported
    language is an `InvalidInput` listing the supported ones."""
    if language is None:
        return ZH_REQUESTS
    code = language.strip().lower() if isinstance(language, str) else None
    if code not in REQUESTS:
        raise InvalidInput(f"language: {language!r} is not a supported language (supported: {', '.join(REQUESTS)})")
    return REQUESTS[code]


def request_texts_of(text: str) -> RequestTexts:
    """The texts of the language whose purpose marker `text` carries (the offline scripted model reads a request
    this way); Chinese without an English marker."""
    return EN_REQUESTS if EN_REQUESTS.marker_template.split("{")[0] in (text or "") else ZH_REQUESTS


def event_summary_messages(
    memories: Sequence[str], max_chars: int, language: str | None = None
) -> list[dict[str, str]]:
    """The request that summarises memories fading out of the event log (seed 001 中期记忆 Event Log Summary): one
    numbered line each, oldest first, in the instance's `language`."""
    texts = requests_for(language)
    listed = "\n".join(f"{number}. {' '.join(text.split())}" for number, text in enumerate(memories, start=1))
    return [
        {
            "role": "system",
            "content": texts.event_summary_system.format(
                marker=texts.marker(zh.PURPOSE_EVENT_SUMMARY), max_chars=max_chars
            ),
        },
        {"role": "user", "content": f"{texts.event_summary_memories}\n{listed}"},
    ]
