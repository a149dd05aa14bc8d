"""The post-turn review (seed 003, "ReviewPipeline 审查管道"): one finished turn in, a structured verdict out —
whether to write a memory, how the relationship moved, whether the plot or the world book needs an update,
and quality scores.

Pure code: plain data in, plain data out; no database, no LangGraph. The graph node (wired by the lead)
builds a `ReviewInput` from the turn, calls `ReviewPipeline.run` and applies the `ReviewOutput`.

The rules (section 规则版审查 run_rule_review), as implemented by `run_rule_review`:
- 关系变化判断: a trust keyword in the user's message → trust +1; an affection keyword → affection +1; a
  negative keyword → affection -1; choice `important` → affection +1, trust +1; choice `turning_point` →
  affection +2, trust +1; every turn familiarity +1; gap `days` / `long_absence` → familiarity +1.
- 记忆价值计算: additive — choice `important` 0.8 / `turning_point` 0.9 / `ending` 0.95; user message longer
  than 100 characters +0.3, else longer than 50 characters +0.2; trust keyword +0.2; affection keyword
  +0.2; gap `days` +0.65, `long_absence` +0.75; the sum is clamped to 1.0.
- 记忆写入判断: write when any of: memory_value >= 0.65; choice level important / turning_point / ending;
  total_delta >= 3 (total_delta = |trust| + |affection| + |familiarity|); gap days / long_absence.
- 剧情更新 / 世界书更新: plot node for important / turning_point / ending; world book for turning_point / ending.
- 跳过逻辑: skipped when there is no choice, memory_value < 0.3, the gap is not days / long_absence and no
  memory is written. The relationship delta is reported even for a skipped turn.
- 质量评分: memory_value, story_progress, relationship_progress and user_engagement from the rules;
  character_fidelity, immersion, world_consistency and risk from the cached LLM assessment of the
  conversation (the seed's AutoState cache, here `AssessmentCache`), None when there is none.

What the seed leaves open, decided here:
- Keywords are matched in the user's message only (not the character's reply), as substrings, after
  NFKC normalisation and case folding (full-width Latin matches half-width). Each keyword list counts
  once per turn however many of its words appear. No negation handling: "不喜欢" contains "喜欢" and
  counts as affection, and "爱" also matches "可爱" — the keyword lists are configurable (`ReviewConfig`).
- The relationship rows add up: an affection and a negative keyword in one message cancel out
  (affection 0); a keyword and a choice add (turning_point + affection keyword → affection +3).
- `ending` changes no relationship value (the relationship table has no row for it).
- The two length rows are tiers, not cumulative: more than 100 characters gives +0.3 (not +0.5), 51 to
  100 give +0.2, 50 or fewer give nothing. Length is the character count (`len`) of the user's message
  with leading and trailing whitespace removed.
- A `normal` choice has memory value 0 and triggers nothing, but it is still a choice, so a turn with a
  `normal` choice is never skipped (跳过逻辑 requires "无剧情选择").
- Memory values are rounded to 4 decimals so that 0.2 + 0.2 + 0.2 is 0.6, not 0.6000000000000001.
- Rule-side quality scores (the seed only names their basis): story_progress by choice level — none 0.0,
  normal 0.2, important 0.6, turning_point 0.9, ending 1.0; relationship_progress = min(1, total_delta / 5);
  user_engagement = min(1, characters / 100). All in `ReviewConfig`.
- `real_time_context` None, without `gap`, or with gap None means gap "none".
- Bad input raises `ValueError` when the `ReviewInput` is constructed (so `run` never sees it): a
  `selected_choice.level` outside normal / important / turning_point / ending, a `real_time_context.gap`
  outside none / minutes / hours / days / long_absence, a choice without `level`, missing ids, non-text
  messages, or `ai_reply` and `assistant_message` both given and different. `run` also accepts a mapping,
  which it converts the same way (raising the same errors).

LLM mode (section 扩展为 LLM 版本): the model gets the turn and the rule result as a baseline (prompt in
`nodes.review_prompts`) and answers the whole output as JSON. A valid answer decides every field; the four
rule-side quality scores it may omit are taken from the rule result, quality.memory_value is always the
answer's memory_value, and total_delta is recomputed from its deltas. The answer is invalid — and the
rule result is returned with `fallback_reason` set and a warning logged — when it is not a JSON object,
misses a field, has a wrong type or a score outside [0, 1], a delta beyond ±`llm_max_abs_delta`, or says
skipped together with a write / plot / world-book suggestion; likewise when the call raises. A valid
answer's four LLM scores are cached per conversation_id, and every later review of that conversation (rule
mode too) reports them until a newer answer replaces them; they may thus describe an earlier turn.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Annotated, Any, Literal

from langchain_core.language_models import BaseChatModel
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.review.prompts import build_review_messages
from pydantic import BaseModel, ConfigDict, Field, ValidationError

logger = logging.getLogger(__name__)

CHOICE_LEVELS: tuple[str, ...] = ("normal", "important", "turning_point", "ending")
GAPS: tuple[str, ...] = ("none", "minutes", "hours", "days", "long_absence")
LONG_GAPS = frozenset({"days", "long_absence"})
WRITE_LEVELS = frozenset({"important", "turning_point", "ending"})
PLOT_NODE_LEVELS = frozenset({"important", "turning_point", "ending"})
WORLDBOOK_LEVELS = frozenset({"turning_point", "ending"})

EVENT_STARTED = "review.started"
EVENT_MEMORY_SCORED = "review.memory.scored"
EVENT_RELATIONSHIP_SCORED = "review.relationship.scored"
EVENT_PLOT_SCORED = "review.plot.scored"
EVENT_FINISHED = "review.finished"
EVENT_NAMES: tuple[str, ...] = (
    EVENT_STARTED,
    EVENT_MEMORY_SCORED,
    EVENT_RELATIONSHIP_SCORED,
    EVENT_PLOT_SCORED,
    EVENT_FINISHED,
)

REASON_KEYS: tuple[str, ...] = (
    "memory_value",
    "should_write_memory",
    "relationship",
    "plot_node",
    "worldbook",
    "skipped",
)


# --------------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class ReviewConfig:
    """Every number and word list of the rule review; the defaults are the seed's tables."""

    # 关系变化判断: the seed's words (its "…" leaves the lists open; extend them here).
    trust_keywords: tuple[str, ...] = ("谢谢", "感谢", "信任", "放心")
    affection_keywords: tuple[str, ...] = ("喜欢", "爱", "想你", "宝贝")
    negative_keywords: tuple[str, ...] = ("讨厌", "烦死", "滚", "生气")
    choice_relationship: Mapping[str, Mapping[str, int]] = field(
        default_factory=lambda: {
            "important": {"trust": 1, "affection": 1},
            "turning_point": {"trust": 1, "affection": 2},
        }
    )
    familiarity_per_turn: int = 1
    familiarity_long_gap: int = 1

    # 记忆价值计算
    choice_memory_value: Mapping[str, float] = field(
        default_factory=lambda: {"important": 0.8, "turning_point": 0.9, "ending": 0.95}
    )
    long_message_chars: int = 100
    long_message_bonus: float = 0.3
    medium_message_chars: int = 50
    medium_message_bonus: float = 0.2
    trust_keyword_bonus: float = 0.2
    affection_keyword_bonus: float = 0.2
    gap_memory_value: Mapping[str, float] = field(default_factory=lambda: {"days": 0.65, "long_absence": 0.75})

    # 记忆写入判断 / 跳过逻辑
    write_memory_threshold: float = 0.65
    write_total_delta_threshold: int = 3
    skip_memory_threshold: float = 0.3

    # 质量评分 (the seed names only the basis of each score; these scales are ours)
    story_progress: Mapping[str, float] = field(
        default_factory=lambda: {"normal": 0.2, "important": 0.6, "turning_point": 0.9, "ending": 1.0}
    )
    relationship_progress_full_delta: int = 5
    engagement_full_chars: int = 100

    # LLM mode: larger per-turn deltas in an answer are taken as a broken answer
    llm_max_abs_delta: int = 5

    def __post_init__(self) -> None:
        for name in ("trust_keywords", "affection_keywords", "negative_keywords"):
            words = getattr(self, name)
            if isinstance(words, str):
                raise InvalidInput(f"ReviewConfig.{name} must be a list of words, not one string")
            words = tuple(words)
            for word in words:
                # An empty keyword is a substring of every message.
                if not isinstance(word, str) or not word.strip():
                    raise InvalidInput(f"ReviewConfig.{name} holds an empty or non-text keyword: {word!r}")
            object.__setattr__(self, name, words)
        for name in ("choice_relationship", "choice_memory_value", "story_progress"):
            unknown = set(getattr(self, name)) - set(CHOICE_LEVELS)
            if unknown:
                raise InvalidInput(
                    f"ReviewConfig.{name} has unknown choice levels {sorted(unknown)}; "
                    f"allowed: {', '.join(CHOICE_LEVELS)}"
                )
        unknown_gaps = set(self.gap_memory_value) - set(GAPS)
        if unknown_gaps:
            raise InvalidInput(
                f"ReviewConfig.gap_memory_value has unknown gaps {sorted(unknown_gaps)}; allowed: {', '.join(GAPS)}"
            )
        if self.relationship_progress_full_delta <= 0 or self.engagement_full_chars <= 0:
            raise InvalidInput("ReviewConfig.relationship_progress_full_delta and engagement_full_chars must be > 0")


DEFAULT_CONFIG = ReviewConfig()


# ---------------------------------------------------------------------------------------------- input


def _check_id(name: str, value: Any) -> str | int:
    if isinstance(value, bool) or not isinstance(value, str | int) or (isinstance(value, str) and not value.strip()):
        raise InvalidInput(f"ReviewInput.{name} must be a non-empty string or an integer, got {value!r}")
    return value


def _check_text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"ReviewInput.{name} must be text, got {type(value).__name__}")
    return value


def _check_choice(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidInput(f"ReviewInput.selected_choice must be None or a mapping with 'level', got {value!r}")
    if "level" not in value:
        raise InvalidInput(
            f"ReviewInput.selected_choice needs a 'level' (one of {', '.join(CHOICE_LEVELS)}), got {dict(value)!r}"
        )
    level = value["level"]
    if level not in CHOICE_LEVELS:
        raise InvalidInput(f"ReviewInput.selected_choice.level must be one of {', '.join(CHOICE_LEVELS)}, got {level!r}")
    return dict(value)


def _check_real_time(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidInput(f"ReviewInput.real_time_context must be None or a mapping with 'gap', got {value!r}")
    gap = value.get("gap")
    if gap is not None and gap not in GAPS:
        raise InvalidInput(f"ReviewInput.real_time_context.gap must be one of {', '.join(GAPS)}, got {gap!r}")
    return dict(value)


@dataclass(frozen=True, init=False)
class ReviewInput:
    """One finished turn (seed 003, 基本用法 and 与 CharacterRuntime 集成).

    `ai_reply` (the seed's usage example) is accepted as another name for `assistant_message`.
    Validated here: a bad choice level or gap raises `ValueError` naming the field and the allowed values.
    """

    conversation_id: str | int
    character_id: str | int
    user_id: str | int
    user_message: str
    assistant_message: str
    selected_choice: dict[str, Any] | None
    turn_context: dict[str, Any]
    real_time_context: dict[str, Any] | None

    def __init__(
        self,
        conversation_id: str | int,
        character_id: str | int,
        user_id: str | int,
        user_message: str,
        assistant_message: str | None = None,
        selected_choice: Mapping[str, Any] | None = None,
        turn_context: Mapping[str, Any] | None = None,
        real_time_context: Mapping[str, Any] | None = None,
        *,
        ai_reply: str | None = None,
    ) -> None:
        if assistant_message is not None and ai_reply is not None and assistant_message != ai_reply:
            raise InvalidInput("ReviewInput got both assistant_message and ai_reply, and they differ; give one")
        reply = assistant_message if assistant_message is not None else ai_reply
        if turn_context is not None and not isinstance(turn_context, Mapping):
            raise InvalidInput(f"ReviewInput.turn_context must be None or a mapping, got {type(turn_context).__name__}")
        # frozen dataclass: fields are set once, here
        set_ = object.__setattr__
        set_(self, "conversation_id", _check_id("conversation_id", conversation_id))
        set_(self, "character_id", _check_id("character_id", character_id))
        set_(self, "user_id", _check_id("user_id", user_id))
        set_(self, "user_message", _check_text("user_message", user_message))
        set_(self, "assistant_message", _check_text("assistant_message", "" if reply is None else reply))
        set_(self, "selected_choice", _check_choice(selected_choice))
        set_(self, "turn_context", dict(turn_context or {}))
        set_(self, "real_time_context", _check_real_time(real_time_context))

    @property
    def ai_reply(self) -> str:
        return self.assistant_message

    @property
    def choice_level(self) -> str | None:
        """The selected choice's level, None when the user picked no choice."""
        return None if self.selected_choice is None else self.selected_choice["level"]

    @property
    def gap(self) -> str:
        """The real-time gap since the previous turn; "none" when unknown."""
        if not self.real_time_context:
            return "none"
        return self.real_time_context.get("gap") or "none"

    def to_dict(self) -> dict[str, Any]:
        return {
            "conversation_id": self.conversation_id,
            "character_id": self.character_id,
            "user_id": self.user_id,
            "user_message": self.user_message,
            "assistant_message": self.assistant_message,
            "selected_choice": self.selected_choice,
            "turn_context": self.turn_context,
            "real_time_context": self.real_time_context,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReviewInput:
        """Build from a mapping (graph state, JSON); unknown keys raise `ValueError`."""
        allowed = {
            "conversation_id",
            "character_id",
            "user_id",
            "user_message",
            "assistant_message",
            "ai_reply",
            "selected_choice",
            "turn_context",
            "real_time_context",
        }
        unknown = set(data) - allowed
        if unknown:
            raise InvalidInput(f"ReviewInput got unknown fields {sorted(unknown)}; allowed: {', '.join(sorted(allowed))}")
        missing = [name for name in ("conversation_id", "character_id", "user_id", "user_message") if name not in data]
        if missing:
            raise InvalidInput(f"ReviewInput is missing {', '.join(missing)}")
        return cls(**data)


# --------------------------------------------------------------------------------------------- output


@dataclass(frozen=True)
class RelationshipDelta:
    """Per-turn change of the three relationship values (seed 003, 关系变化判断)."""

    trust: int = 0
    affection: int = 0
    familiarity: int = 0

    @property
    def total(self) -> int:
        """total_delta: the sum of absolute changes (记忆写入判断 "关系总变化量")."""
        return abs(self.trust) + abs(self.affection) + abs(self.familiarity)

    def __bool__(self) -> bool:
        # The seed's host code does `if output.relationship_delta:` — true when anything changed.
        return self.total > 0

    def to_dict(self) -> dict[str, int]:
        return {"trust": self.trust, "affection": self.affection, "familiarity": self.familiarity}


@dataclass(frozen=True)
class QualityScores:
    """质量评分: four scores from the rules, four from the cached LLM assessment (None without one)."""

    memory_value: float
    story_progress: float
    relationship_progress: float
    user_engagement: float
    character_fidelity: float | None = None
    immersion: float | None = None
    world_consistency: float | None = None
    risk: float | None = None


@dataclass(frozen=True)
class LLMAssessment:
    """The four quality scores only a model can judge (the seed's AutoState cache entries)."""

    character_fidelity: float
    immersion: float
    world_consistency: float
    risk: float


@dataclass(frozen=True)
class ReviewOutput:
    """The review of one turn. `to_dict()` is JSON-serialisable (graph state, `--json` output).

    `reasons` has one short sentence per decision (keys in `REASON_KEYS`); `source` is "rule" or "llm";
    `fallback_reason` says why LLM mode returned the rule result (None otherwise).
    """

    skipped: bool
    should_write_memory: bool
    memory_value: float
    relationship_delta: RelationshipDelta
    total_delta: int
    suggest_plot_node: bool
    suggest_worldbook_update: bool
    quality: QualityScores
    reasons: dict[str, str]
    choice_level: str | None = None
    gap: str = "none"
    matched_keywords: dict[str, list[str]] = field(default_factory=dict)
    source: Literal["rule", "llm"] = "rule"
    fallback_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReviewOutput:
        """The inverse of `to_dict` (e.g. reading the review back from graph state)."""
        values = dict(data)
        values["relationship_delta"] = RelationshipDelta(**values["relationship_delta"])
        values["quality"] = QualityScores(**values["quality"])
        return cls(**values)


# ---------------------------------------------------------------------------------------- rule review


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def match_keywords(text: str, keywords: tuple[str, ...]) -> list[str]:
    """The keywords that occur in `text` as substrings (Chinese has no spaces to split on)."""
    haystack = _normalise(text)
    return [word for word in keywords if _normalise(word) in haystack]


def _message_chars(text: str) -> int:
    return len(text.strip())


def _signed(value: int) -> str:
    return f"{value:+d}"


def _score_relationship(
    inp: ReviewInput, config: ReviewConfig, matches: Mapping[str, list[str]]
) -> tuple[RelationshipDelta, str]:
    """关系变化判断: every row of the table that applies, added up."""
    trust = affection = familiarity = 0
    parts: list[str] = []
    if matches["trust"]:
        trust += 1
        parts.append(f"trust +1 (trust keyword {'、'.join(matches['trust'])})")
    if matches["affection"]:
        affection += 1
        parts.append(f"affection +1 (affection keyword {'、'.join(matches['affection'])})")
    if matches["negative"]:
        affection -= 1
        parts.append(f"affection -1 (negative keyword {'、'.join(matches['negative'])})")
    level = inp.choice_level
    if level is not None and level in config.choice_relationship:
        change = config.choice_relationship[level]
        trust += change.get("trust", 0)
        affection += change.get("affection", 0)
        familiarity += change.get("familiarity", 0)
        listed = ", ".join(f"{key} {_signed(value)}" for key, value in change.items())
        parts.append(f"{listed} ({level} choice)")
    familiarity += config.familiarity_per_turn
    parts.append(f"familiarity {_signed(config.familiarity_per_turn)} (every turn)")
    if inp.gap in LONG_GAPS:
        familiarity += config.familiarity_long_gap
        parts.append(f"familiarity {_signed(config.familiarity_long_gap)} (gap {inp.gap})")
    return RelationshipDelta(trust, affection, familiarity), "; ".join(parts)


def _score_memory_value(inp: ReviewInput, config: ReviewConfig, matches: Mapping[str, list[str]]) -> tuple[float, str]:
    """记忆价值计算: the rows add up; the sum is clamped to 1.0."""
    parts: list[tuple[str, float]] = []
    level = inp.choice_level
    if level is not None and level in config.choice_memory_value:
        parts.append((f"{level} choice", config.choice_memory_value[level]))
    chars = _message_chars(inp.user_message)
    if chars > config.long_message_chars:
        parts.append((f"user message {chars} chars > {config.long_message_chars}", config.long_message_bonus))
    elif chars > config.medium_message_chars:
        parts.append((f"user message {chars} chars > {config.medium_message_chars}", config.medium_message_bonus))
    if matches["trust"]:
        parts.append(("trust keyword", config.trust_keyword_bonus))
    if matches["affection"]:
        parts.append(("affection keyword", config.affection_keyword_bonus))
    if inp.gap in config.gap_memory_value:
        parts.append((f"gap {inp.gap}", config.gap_memory_value[inp.gap]))
    raw = round(sum(value for _, value in parts), 4)
    value = min(1.0, max(0.0, raw))
    if not parts:
        return value, "nothing in the memory-value table applies (0.0)"
    reason = " + ".join(f"{label} {value_:g}" for label, value_ in parts)
    reason += f" = {raw:g}" + (" (clamped to 1.0)" if raw > 1.0 else "")
    return value, reason


def _decide_write(inp: ReviewInput, config: ReviewConfig, memory_value: float, total_delta: int) -> tuple[bool, str]:
    """记忆写入判断: write when any of the four conditions holds."""
    met: list[str] = []
    if memory_value >= config.write_memory_threshold:
        met.append(f"memory_value {memory_value:g} >= {config.write_memory_threshold:g}")
    if inp.choice_level in WRITE_LEVELS:
        met.append(f"choice level {inp.choice_level}")
    if total_delta >= config.write_total_delta_threshold:
        met.append(f"total_delta {total_delta} >= {config.write_total_delta_threshold}")
    if inp.gap in LONG_GAPS:
        met.append(f"gap {inp.gap}")
    if met:
        return True, "write: " + "; ".join(met)
    return False, (
        f"no write: memory_value {memory_value:g} < {config.write_memory_threshold:g}, "
        f"choice level {inp.choice_level or 'none'}, total_delta {total_delta} < "
        f"{config.write_total_delta_threshold}, gap {inp.gap}"
    )


def _decide_skip(inp: ReviewInput, config: ReviewConfig, memory_value: float, write: bool) -> tuple[bool, str]:
    """跳过逻辑: plain small talk — no choice, low memory value, no long gap, nothing to write."""
    keep: list[str] = []
    if inp.choice_level is not None:
        keep.append(f"{inp.choice_level} choice")
    if memory_value >= config.skip_memory_threshold:
        keep.append(f"memory_value {memory_value:g} >= {config.skip_memory_threshold:g}")
    if inp.gap in LONG_GAPS:
        keep.append(f"gap {inp.gap}")
    if write:
        keep.append("memory to write")
    if keep:
        return False, "not skipped: " + "; ".join(keep)
    return True, (
        f"skipped: small talk (no choice, memory_value {memory_value:g} < {config.skip_memory_threshold:g}, "
        f"gap {inp.gap}, nothing to write)"
    )


def run_rule_review(
    inp: ReviewInput, config: ReviewConfig | None = None, assessment: LLMAssessment | None = None
) -> ReviewOutput:
    """规则版审查 (seed 003, run_rule_review): the review from keywords and context, without a model.

    `assessment` is the conversation's cached LLM assessment; it fills the four LLM quality scores.
    """
    config = config or DEFAULT_CONFIG
    matches = {
        "trust": match_keywords(inp.user_message, config.trust_keywords),
        "affection": match_keywords(inp.user_message, config.affection_keywords),
        "negative": match_keywords(inp.user_message, config.negative_keywords),
    }
    delta, relationship_reason = _score_relationship(inp, config, matches)
    memory_value, memory_reason = _score_memory_value(inp, config, matches)
    total_delta = delta.total
    write, write_reason = _decide_write(inp, config, memory_value, total_delta)
    skipped, skip_reason = _decide_skip(inp, config, memory_value, write)
    level = inp.choice_level
    plot_node = level in PLOT_NODE_LEVELS
    worldbook = level in WORLDBOOK_LEVELS
    chars = _message_chars(inp.user_message)
    quality = QualityScores(
        memory_value=memory_value,
        story_progress=0.0 if level is None else config.story_progress.get(level, 0.0),
        relationship_progress=round(min(1.0, total_delta / config.relationship_progress_full_delta), 4),
        user_engagement=round(min(1.0, chars / config.engagement_full_chars), 4),
        **(asdict(assessment) if assessment is not None else {}),
    )
    reasons = {
        "memory_value": memory_reason,
        "should_write_memory": write_reason,
        "relationship": relationship_reason,
        "plot_node": (
            f"{level} choice: create a plot node"
            if plot_node
            else f"no plot node: choice level {level or 'none'} is not important / turning_point / ending"
        ),
        "worldbook": (
            f"{level} choice: update the world book"
            if worldbook
            else f"no world-book update: choice level {level or 'none'} is not turning_point / ending"
        ),
        "skipped": skip_reason,
    }
    return ReviewOutput(
        skipped=skipped,
        should_write_memory=write,
        memory_value=memory_value,
        relationship_delta=delta,
        total_delta=total_delta,
        suggest_plot_node=plot_node,
        suggest_worldbook_update=worldbook,
        quality=quality,
        reasons=reasons,
        choice_level=level,
        gap=inp.gap,
        matched_keywords=matches,
        source="rule",
    )


# ----------------------------------------------------------------------------------------- event bus

EventHandler = Callable[[str, dict[str, Any]], object]


class EventBus:
    """A small synchronous event bus (seed 003, 事件发射).

    `subscribe(name, handler)` with an event name or "*" for every event; a handler is called as
    `handler(event_name, payload)` with its own copy of the payload. A handler that raises is logged and
    skipped: the emitter and the other handlers go on.
    """

    def __init__(self) -> None:
        self._handlers: list[tuple[str, EventHandler]] = []
        self._lock = threading.Lock()

    def subscribe(self, event_name: str, handler: EventHandler) -> Callable[[], None]:
        """Register `handler`; returns a function that unsubscribes it."""
        if not isinstance(event_name, str) or not event_name:
            raise InvalidInput(f"EventBus.subscribe needs an event name or '*', got {event_name!r}")
        if not callable(handler):
            raise InvalidInput(f"EventBus.subscribe needs a callable handler, got {handler!r}")
        entry = (event_name, handler)
        with self._lock:
            self._handlers.append(entry)

        def unsubscribe() -> None:
            with self._lock:
                if entry in self._handlers:
                    self._handlers.remove(entry)

        return unsubscribe

    def emit(self, event_name: str, payload: Mapping[str, Any]) -> None:
        with self._lock:
            handlers = [handler for name, handler in self._handlers if name in (event_name, "*")]
        for handler in handlers:
            try:
                # A copy each, so one subscriber editing its payload cannot change what the next one sees.
                handler(event_name, json.loads(json.dumps(payload, default=str)))
            except Exception:
                logger.exception("review event subscriber %r failed on %s", handler, event_name)


# ---------------------------------------------------------------------------------------- LLM review


class AssessmentCache:
    """The latest LLM assessment per conversation (the seed's AutoState cache), keyed by str(conversation_id)."""

    def __init__(self) -> None:
        self._items: dict[str, LLMAssessment] = {}
        self._lock = threading.Lock()

    def get(self, conversation_id: str | int) -> LLMAssessment | None:
        with self._lock:
            return self._items.get(str(conversation_id))

    def put(self, conversation_id: str | int, assessment: LLMAssessment) -> None:
        with self._lock:
            self._items[str(conversation_id)] = assessment

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


Score = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class _AnswerDelta(BaseModel):
    model_config = ConfigDict(strict=True)
    trust: int
    affection: int
    familiarity: int


class _AnswerQuality(BaseModel):
    model_config = ConfigDict(strict=True)
    character_fidelity: Score
    immersion: Score
    world_consistency: Score
    risk: Score
    story_progress: Score | None = None
    relationship_progress: Score | None = None
    user_engagement: Score | None = None


class _Answer(BaseModel):
    """The JSON a model must answer (see `nodes.review_prompts.REVIEW_ANSWER_SCHEMA`)."""

    model_config = ConfigDict(strict=True)
    skipped: bool
    should_write_memory: bool
    memory_value: Score
    relationship_delta: _AnswerDelta
    suggest_plot_node: bool
    suggest_worldbook_update: bool
    quality: _AnswerQuality
    reasons: dict[str, str] = Field(default_factory=dict)


class InvalidAnswerError(InvalidInput):
    """The model's answer is not the review JSON; the message says what is wrong."""


_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)


def _answer_text(message: Any) -> str:
    text = getattr(message, "text", message)
    return text if isinstance(text, str) else str(text)


def parse_answer(text: str, config: ReviewConfig | None = None) -> _Answer:
    """Parse and validate a model's review answer; raises `InvalidAnswerError` saying what is wrong."""
    config = config or DEFAULT_CONFIG
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
    try:
        answer = _Answer.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(root)'}: {error['msg']}" for error in exc.errors()
        )
        raise InvalidAnswerError(f"answer does not fit the schema: {problems}") from None
    delta = answer.relationship_delta
    for name in ("trust", "affection", "familiarity"):
        if abs(getattr(delta, name)) > config.llm_max_abs_delta:
            raise InvalidAnswerError(
                f"answer does not fit the schema: relationship_delta.{name} {getattr(delta, name)} "
                f"is beyond ±{config.llm_max_abs_delta}"
            )
    if answer.skipped and (answer.should_write_memory or answer.suggest_plot_node or answer.suggest_worldbook_update):
        raise InvalidAnswerError(
            "answer contradicts itself: skipped is true together with should_write_memory, "
            "suggest_plot_node or suggest_worldbook_update"
        )
    return answer


def _output_from_answer(answer: _Answer, rule: ReviewOutput) -> ReviewOutput:
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
    reasons = {key: answer.reasons.get(key) or "(the model gave no reason)" for key in REASON_KEYS}
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
    )


# ------------------------------------------------------------------------------------------ pipeline


class ReviewPipeline:
    """ReviewPipeline.run() (seed 003, 审查流程): emits review.started, review.memory.scored,
    review.relationship.scored, review.plot.scored and review.finished, in that order, and returns the output.

    mode "rule" runs `run_rule_review`; mode "llm" asks `llm` and falls back to the rule result (see the
    module docstring). `cache` holds the LLM assessments per conversation; a new one when not given.
    """

    def __init__(
        self,
        mode: Literal["rule", "llm"] = "rule",
        event_bus: EventBus | None = None,
        llm: BaseChatModel | None = None,
        config: ReviewConfig | None = None,
        cache: AssessmentCache | None = None,
    ) -> None:
        if mode not in ("rule", "llm"):
            raise InvalidInput(f"ReviewPipeline mode must be 'rule' or 'llm', got {mode!r}")
        if mode == "llm" and llm is None:
            raise InvalidInput("ReviewPipeline mode 'llm' needs an llm (a langchain BaseChatModel)")
        self.mode = mode
        self.event_bus = event_bus if event_bus is not None else EventBus()
        self.llm = llm
        self.config = config or DEFAULT_CONFIG
        self.cache = cache if cache is not None else AssessmentCache()

    def run(self, inp: ReviewInput | Mapping[str, Any]) -> ReviewOutput:
        inp = self._start(inp)
        rule = run_rule_review(inp, self.config, self.cache.get(inp.conversation_id))
        output = rule
        if self.mode == "llm":
            assert self.llm is not None
            try:
                reply = self.llm.invoke(build_review_messages(inp.to_dict(), rule.to_dict()))
            except Exception as exc:
                output = self._fallback(inp, rule, f"LLM call failed: {type(exc).__name__}: {exc}")
            else:
                output = self._use_answer(inp, rule, _answer_text(reply))
        self._finish(inp, output)
        return output

    async def arun(self, inp: ReviewInput | Mapping[str, Any]) -> ReviewOutput:
        """`run` for async graphs: the model is called with `ainvoke`."""
        inp = self._start(inp)
        rule = run_rule_review(inp, self.config, self.cache.get(inp.conversation_id))
        output = rule
        if self.mode == "llm":
            assert self.llm is not None
            try:
                reply = await self.llm.ainvoke(build_review_messages(inp.to_dict(), rule.to_dict()))
            except Exception as exc:
                output = self._fallback(inp, rule, f"LLM call failed: {type(exc).__name__}: {exc}")
            else:
                output = self._use_answer(inp, rule, _answer_text(reply))
        self._finish(inp, output)
        return output

    def _start(self, inp: ReviewInput | Mapping[str, Any]) -> ReviewInput:
        if not isinstance(inp, ReviewInput):
            if not isinstance(inp, Mapping):
                raise InvalidInput(f"ReviewPipeline.run needs a ReviewInput or a mapping, got {type(inp).__name__}")
            inp = ReviewInput.from_dict(inp)
        self.event_bus.emit(EVENT_STARTED, {**self._ids(inp), "user_id": inp.user_id, "mode": self.mode})
        return inp

    def _use_answer(self, inp: ReviewInput, rule: ReviewOutput, text: str) -> ReviewOutput:
        try:
            answer = parse_answer(text, self.config)
        except InvalidAnswerError as exc:
            return self._fallback(inp, rule, str(exc))
        self.cache.put(
            inp.conversation_id,
            LLMAssessment(
                character_fidelity=answer.quality.character_fidelity,
                immersion=answer.quality.immersion,
                world_consistency=answer.quality.world_consistency,
                risk=answer.quality.risk,
            ),
        )
        return _output_from_answer(answer, rule)

    @staticmethod
    def _fallback(inp: ReviewInput, rule: ReviewOutput, reason: str) -> ReviewOutput:
        logger.warning("LLM review of conversation %s fell back to the rule review: %s", inp.conversation_id, reason)
        return replace(rule, fallback_reason=reason)

    @staticmethod
    def _ids(inp: ReviewInput) -> dict[str, Any]:
        return {"conversation_id": inp.conversation_id, "character_id": inp.character_id}

    def _finish(self, inp: ReviewInput, out: ReviewOutput) -> None:
        ids = self._ids(inp)
        quality = asdict(out.quality)
        self.event_bus.emit(
            EVENT_MEMORY_SCORED,
            {
                **ids,
                "memory_value": out.memory_value,
                "should_write_memory": out.should_write_memory,
                "reasons": {key: out.reasons[key] for key in ("memory_value", "should_write_memory")},
            },
        )
        self.event_bus.emit(
            EVENT_RELATIONSHIP_SCORED,
            {
                **ids,
                "relationship_delta": out.relationship_delta.to_dict(),
                "total_delta": out.total_delta,
                "relationship_progress": out.quality.relationship_progress,
                "matched_keywords": out.matched_keywords,
                "reason": out.reasons["relationship"],
            },
        )
        self.event_bus.emit(
            EVENT_PLOT_SCORED,
            {
                **ids,
                "choice_level": out.choice_level,
                "story_progress": out.quality.story_progress,
                "suggest_plot_node": out.suggest_plot_node,
                "suggest_worldbook_update": out.suggest_worldbook_update,
                "reasons": {key: out.reasons[key] for key in ("plot_node", "worldbook")},
            },
        )
        self.event_bus.emit(
            EVENT_FINISHED,
            {
                **ids,
                "skipped": out.skipped,
                "should_write_memory": out.should_write_memory,
                "memory_value": out.memory_value,
                "relationship_delta": out.relationship_delta.to_dict(),
                "total_delta": out.total_delta,
                "suggest_plot_node": out.suggest_plot_node,
                "suggest_worldbook_update": out.suggest_worldbook_update,
                "quality": quality,
                "source": out.source,
                "fallback_reason": out.fallback_reason,
            },
        )


_SHARED_CACHE = AssessmentCache()


def get_review_pipeline(
    event_bus: EventBus | None = None,
    *,
    mode: Literal["rule", "llm"] = "rule",
    llm: BaseChatModel | None = None,
    config: ReviewConfig | None = None,
    cache: AssessmentCache | None = None,
) -> ReviewPipeline:
    """A pipeline for one turn (seed 003, 基本用法): rule mode unless told otherwise.

    The seed calls this once per turn, so by default every pipeline it returns shares one process-wide
    `AssessmentCache`: an LLM assessment made in one turn is still there in the next.
    """
    return ReviewPipeline(
        mode=mode,
        event_bus=event_bus,
        llm=llm,
        config=config,
        cache=cache if cache is not None else _SHARED_CACHE,
    )
