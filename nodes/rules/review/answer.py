"""The LLM review's answer (seed 003, 扩展为 LLM 版本): the JSON a model must give, its checks, and the
`ReviewOutput` it becomes.

The model gets the turn and the rule result as a baseline (prompt in `review.prompts`) and answers the
whole output as JSON. A valid answer decides every field; the four rule-side quality scores it may omit
are taken from the rule result, quality.memory_value is always the answer's memory_value, and total_delta
is recomputed from its deltas. The answer is invalid (`InvalidAnswerError`) when it is not a JSON object,
misses a field, has a wrong type or a score outside [0, 1], a delta beyond ±`llm_max_abs_delta` (the user's or
a participant's), or says skipped together with a write / plot / world-book suggestion. The optional
`participants` (issue 26) gives the character's relation change per other participant of the turn.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.review.types import (
    DEFAULT_CONFIG,
    REASON_KEYS,
    LLMAssessment,
    QualityScores,
    RelationshipDelta,
    ReviewConfig,
    ReviewOutput,
    Score,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

NO_REASON = "(the model gave no reason)"


class AnswerDelta(BaseModel):
    """relationship_delta of an answer: all three values, integers (strict: 1.5 and "1" are refused)."""

    model_config = ConfigDict(strict=True)
    trust: int
    affection: int
    familiarity: int


class AnswerQuality(BaseModel):
    """quality of an answer: the four scores only a model can judge, and optionally the rule-side three."""

    model_config = ConfigDict(strict=True)
    character_fidelity: Score
    immersion: Score
    world_consistency: Score
    risk: Score
    story_progress: Score | None = None
    relationship_progress: Score | None = None
    user_engagement: Score | None = None


class ReviewAnswer(BaseModel):
    """The JSON a model must answer (see `review.prompts.REVIEW_ANSWER_SCHEMA`)."""

    model_config = ConfigDict(strict=True)
    skipped: bool
    should_write_memory: bool
    memory_value: Score
    relationship_delta: AnswerDelta
    # issue 26: optional, one delta per other participant of the turn (`turn_context.participants`)
    participants: dict[str, AnswerDelta] = Field(default_factory=dict)
    suggest_plot_node: bool
    suggest_worldbook_update: bool
    quality: AnswerQuality
    reasons: dict[str, str] = Field(default_factory=dict)

    def assessment(self) -> LLMAssessment:
        """The four scores the `AssessmentCache` keeps for the conversation (the seed's AutoState)."""
        q = self.quality
        return LLMAssessment(q.character_fidelity, q.immersion, q.world_consistency, q.risk)


class InvalidAnswerError(InvalidInput):
    """The model's answer is not the review JSON; the message says what is wrong."""


_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)


def answer_text(message: object) -> str:
    """The text of a chat model's reply (an AIMessage's `.text`, or the reply itself)."""
    text = getattr(message, "text", message)
    return text if isinstance(text, str) else str(text)


def _json_object(text: str) -> dict[str, object]:
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        # Models sometimes wrap the object in a sentence; take the outermost braces.
        start, end = body.find("{"), body.rfind("}")
        if start < 0 or end <= start:
            raise InvalidAnswerError(f"answer is not JSON: {text[:80]!r}") from None
        try:
            data = json.loads(body[start : end + 1])
        except json.JSONDecodeError as exc:
            raise InvalidAnswerError(f"answer is not valid JSON ({exc.msg}): {text[:80]!r}") from None
    if not isinstance(data, dict):
        raise InvalidAnswerError(f"answer is JSON but not an object: {type(data).__name__}")
    return data


def parse_answer(text: str, config: ReviewConfig | None = None) -> ReviewAnswer:
    """Parse and validate a model's review answer; raises `InvalidAnswerError` saying what is wrong."""
    config = config or DEFAULT_CONFIG
    try:
        answer = ReviewAnswer.model_validate(_json_object(text))
    except ValidationError as exc:
        # The answer's own paths (relationship_delta.familiarity), as the fallback reason shows them.
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(root)'}: {error['msg']}"
            for error in exc.errors(include_url=False)
        )
        raise InvalidAnswerError(f"answer does not fit the schema: {problems}") from None
    deltas = {"relationship_delta": answer.relationship_delta}
    deltas.update({f"participants.{who}": delta for who, delta in answer.participants.items()})
    for where, delta in deltas.items():
        for name in ("trust", "affection", "familiarity"):
            if abs(getattr(delta, name)) > config.llm_max_abs_delta:
                raise InvalidAnswerError(
                    f"answer does not fit the schema: {where}.{name} {getattr(delta, name)} "
                    f"is beyond ±{config.llm_max_abs_delta}"
                )
    if answer.skipped and (answer.should_write_memory or answer.suggest_plot_node or answer.suggest_worldbook_update):
        raise InvalidAnswerError(
            "answer contradicts itself: skipped is true together with should_write_memory, "
            "suggest_plot_node or suggest_worldbook_update"
        )
    return answer


def output_from_answer(answer: ReviewAnswer, rule: ReviewOutput) -> ReviewOutput:
    """The LLM review's output: the answer's verdict over the rule result (which fills what it omits)."""
    delta = RelationshipDelta(**answer.relationship_delta.model_dump())
    q = answer.quality
    quality = QualityScores(
        memory_value=answer.memory_value,
        story_progress=q.story_progress if q.story_progress is not None else rule.quality.story_progress,
        relationship_progress=(
            q.relationship_progress if q.relationship_progress is not None else rule.quality.relationship_progress
        ),
        user_engagement=q.user_engagement if q.user_engagement is not None else rule.quality.user_engagement,
        character_fidelity=q.character_fidelity,
        immersion=q.immersion,
        world_consistency=q.world_consistency,
        risk=q.risk,
    )
    reasons = {key: answer.reasons.get(key) or NO_REASON for key in REASON_KEYS}
    return replace(
        rule,
        skipped=answer.skipped,
        should_write_memory=answer.should_write_memory,
        memory_value=answer.memory_value,
        relationship_delta=delta,
        total_delta=delta.total,
        suggest_plot_node=answer.suggest_plot_node,
        suggest_worldbook_update=answer.suggest_worldbook_update,
        quality=quality,
        reasons=reasons,
        source="llm",
        fallback_reason=None,
        participant_deltas={who: RelationshipDelta(**delta.model_dump()) for who, delta in answer.participants.items()},
    )
