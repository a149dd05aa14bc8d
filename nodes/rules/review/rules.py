"""The rule review (seed 003, 规则版审查 run_rule_review): the verdict on one turn from keywords and context,
without a model.

The seed's tables, as `run_rule_review` applies them (every number and word list in `ReviewConfig`):
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
  conversation (the seed's AutoState cache, `pipeline.AssessmentCache`), None when there is none.

What the seed leaves open, decided here:
- Keywords are matched in the user's message only (not the character's reply), as substrings, after
  NFKC normalisation and case folding (full-width Latin matches half-width). Each keyword list counts
  once per turn however many of its words appear. No negation handling: "不喜欢" contains "喜欢" and
  counts as affection, and "爱" also matches "可爱" — the keyword lists are configurable.
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
  user_engagement = min(1, characters / 100).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from dataclasses import asdict

from personalab.nodes.rules.review.types import (
    DEFAULT_CONFIG,
    LLMAssessment,
    QualityScores,
    RelationshipDelta,
    ReviewConfig,
    ReviewInput,
    ReviewOutput,
)

LONG_GAPS = frozenset({"days", "long_absence"})  # 现实时间间隔 rows of 关系变化判断, 记忆写入判断, 跳过逻辑
WRITE_LEVELS = frozenset({"important", "turning_point", "ending"})  # 记忆写入判断
PLOT_NODE_LEVELS = frozenset({"important", "turning_point", "ending"})  # 剧情更新
WORLDBOOK_LEVELS = frozenset({"turning_point", "ending"})  # 世界书更新


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
