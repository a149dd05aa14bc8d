"""Prompt texts of the LLM review (seed 003, 扩展为 LLM 版本).

The model gets the turn and the rule review's result as a baseline, and answers with one JSON object in
the shape `REVIEW_ANSWER_SCHEMA` describes; `review.answer` validates it, and the pipeline falls back to the
rule result when it does not fit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from personalab.nodes.rules.prompts import (  # noqa: F401 - the Chinese texts, where they have always been read
    PURPOSE_REVIEW,
    REVIEW_ANSWER_SCHEMA,
    REVIEW_SYSTEM_PROMPT,
    REVIEW_USER_TEMPLATE,
)
from personalab.nodes.rules.request_catalog import requests_for


def _dump(value: Any) -> str:
    # default=str: turn_context comes from host code and may hold dates or other non-JSON values.
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def build_review_messages(
    turn: Mapping[str, Any], baseline: Mapping[str, Any], language: str | None = None
) -> list[BaseMessage]:
    """The chat messages of one LLM review: the instructions, then the turn and the rule baseline, in the
    instance's `language` (issue 28; None: Chinese, as it always was)."""
    texts = requests_for(language)
    return [
        # the purpose marker lets the offline scripted model answer a review with review JSON
        SystemMessage(content=texts.marker(PURPOSE_REVIEW) + "\n" + texts.review_system),
        HumanMessage(content=texts.review_user.format(turn_json=_dump(turn), baseline_json=_dump(baseline))),
    ]
