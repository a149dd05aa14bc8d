"""What a post-turn review (seed 003, ReviewPipeline 审查管道) changes beyond the turn itself — as pure rules.

Plain data in, plain data out: no database, no LangGraph. The graph's `review` node calls these, keeps the
relationship dict in its checkpointed state and hands plot nodes and world-book suggestions to
`stores.review`.

Relationship (seed 003 "CharacterRuntime._apply_relationship_delta", 关系变化判断):
- `apply_relationship(current, delta)`: the three values are integers. An instance starts at trust 0,
  affection 0, familiarity 0 (strangers: neither trusted nor distrusted). trust and affection are clamped
  to [-100, 100] (they can go negative: the seed's negative keywords lower affection); familiarity to
  [0, 100] (it only grows in the seed's table, and "less than a stranger" means nothing). Values stored
  outside the range (say after the range changed) are clamped on the next update; other keys of the
  state dict are kept as they are.
- `relationship_memory_text(...)`: a short Chinese memory about the change, only when the change is
  large: total_delta (sum of absolute changes, the seed's 关系总变化量) >= 3 — the seed's own memory-write
  threshold — or any single value moved by 2 or more. Both thresholds are keyword arguments.

Time gap (seed 003 real_time_context.gap, values none / minutes / hours / days / long_absence):
`gap_from_seconds` maps the seconds since the previous message: unknown (None) or under 60 s → none;
under 1 hour → minutes; under 1 day → hours; under 7 days → days; 7 days or more → long_absence.

Plot node and world book (剧情更新 / 世界书更新): `plot_node_summary` and
`worldbook_suggestion_from_turn` turn one exchange into the text a director or the world book can use.
A suggestion's keywords are the exchange's top TF-IDF words (jieba, `rules.keywords.extract_keywords`;
the choice text and the user's words first); an exchange without any keyword becomes a semantic entry
(fires on meaning), since a keyword entry without keywords never fires. Suggestions are scoped to the
instance by default: what happened in one play-through is not lore of every other one.

`plan_review_effects` puts it all together for one reviewed turn.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from personalab.nodes.rules import prompts_en
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.importance import raised_importance
from personalab.nodes.rules.keywords import extract_keywords, has_han
from personalab.nodes.rules.request_catalog import requests_for
from personalab.nodes.rules.review.types import CHOICE_LEVELS, GAPS, RelationshipDelta, ReviewOutput

RELATIONSHIP_KEYS: tuple[str, ...] = ("trust", "affection", "familiarity")
RELATIONSHIP_START: dict[str, int] = {"trust": 0, "affection": 0, "familiarity": 0}
RELATIONSHIP_RANGES: dict[str, tuple[int, int]] = {
    "trust": (-100, 100),
    "affection": (-100, 100),
    "familiarity": (0, 100),
}
MEMORY_TOTAL_DELTA = 3
MEMORY_SINGLE_DELTA = 2

# (upper bound in seconds, exclusive; gap): the first bound above the elapsed time wins.
GAP_THRESHOLDS: tuple[tuple[float, str], ...] = (
    (60.0, "none"),
    (3_600.0, "minutes"),
    (86_400.0, "hours"),
    (7 * 86_400.0, "days"),
)
LONGEST_GAP = "long_absence"

SUGGESTION_SCOPES: tuple[str, ...] = ("instance", "character", "global")
SUGGESTION_KEYWORDS = 5
SUGGESTION_KIND = "episodic"  # seed 004 情景记忆: something that happened in this play-through
USER_EXCERPT_CHARS = 150
REPLY_EXCERPT_CHARS = 200
PLOT_USER_CHARS = 80
PLOT_REPLY_CHARS = 120
MAX_SUMMARY_CHARS = 2_000
NO_EXCHANGE = "（本轮没有对话内容）"
SENTENCE_ENDS = ("。", "！", "？", "…", "!", "?", ".")
CLOSERS = "」』”’）)\"'"

LEVEL_LABELS: dict[str, str] = {
    "normal": "普通选择",
    "important": "重要选择",
    "turning_point": "转折点",
    "ending": "结局",
}
VALUE_LABELS: dict[str, str] = {"trust": "信任", "affection": "好感", "familiarity": "熟悉度"}
GAP_LABELS: dict[str, str] = {"days": "隔了几天", "long_absence": "隔了很久"}
CHOICE_TEXT_KEYS: tuple[str, ...] = ("text", "label", "title", "content", "option")


def _english(language: str | None) -> bool:
    """True for an English instance (issue 28: the rules' texts a user reads follow the instance's language);
    None is Chinese, as every text here was before."""
    return requests_for(language).language == "en"


# The rule review's English relationship reason (review.rules._score_relationship), read back into causes.
_REASON_KEYWORDS = re.compile(r"\((trust|affection|negative) keyword ([^)]*)\)")
_REASON_CHOICE = re.compile(r"\((\w+) choice\)")
_REASON_GAP = re.compile(r"\(gap (\w+)\)")


# --- validation ------------------------------------------------------------------------------------


def check_gap(value: object, field: str = "time_gap") -> str:
    """The gap `value` if it is one of seed 003's gaps; None means "none" (no known gap). ValueError
    naming `field` and the allowed values otherwise."""
    if value is None:
        return "none"
    if not isinstance(value, str) or value not in GAPS:
        raise InvalidInput(f"{field} must be one of {', '.join(GAPS)}, got {value!r}")
    return value


def check_choice(value: object, field: str = "choice level") -> str | None:
    """The choice level of `value` — a level string, a choice mapping with 'level', or None (no choice,
    returned as None). ValueError naming `field` and the allowed levels otherwise."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        if "level" not in value:
            raise InvalidInput(
                f"{field}: the choice has no 'level' (one of {', '.join(CHOICE_LEVELS)}): {dict(value)!r}"
            )
        value = value["level"]
    if not isinstance(value, str) or value not in CHOICE_LEVELS:
        raise InvalidInput(f"{field} must be one of {', '.join(CHOICE_LEVELS)}, got {value!r}")
    return value


def check_turn(value: object, field: str = "turn") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{field} must be a whole number >= 0, got {value!r}")
    return value


def _check_text(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be text, got {type(value).__name__}")
    return value


def _check_int(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{field} must be an integer, got {value!r}")
    return value


# --- relationship ---------------------------------------------------------------------------------


def _delta_dict(delta: Mapping[str, Any] | RelationshipDelta) -> dict[str, int]:
    """A delta mapping (or a `RelationshipDelta`), checked as a `RelationshipDelta`: known keys, integer
    values; missing keys are 0."""
    if isinstance(delta, RelationshipDelta):
        return delta.to_dict()
    if not isinstance(delta, Mapping):
        raise InvalidInput(f"relationship delta must be a mapping of {', '.join(RELATIONSHIP_KEYS)}, got {delta!r}")
    return RelationshipDelta.from_dict(delta).to_dict()


def _clamp(key: str, value: int) -> int:
    low, high = RELATIONSHIP_RANGES[key]
    return max(low, min(high, value))


def apply_relationship(
    current: Mapping[str, Any] | None, delta: Mapping[str, Any] | RelationshipDelta
) -> dict[str, Any]:
    """The relationship after one turn's `delta` (seed 003 关系变化判断): start values when `current` is
    None or lacks a key, each value clamped to its range (see the module doc). `current` is not changed."""
    if current is not None and not isinstance(current, Mapping):
        raise InvalidInput(f"relationship state must be a mapping or None, got {type(current).__name__}")
    change = _delta_dict(delta)
    result: dict[str, Any] = dict(current or {})
    for key in RELATIONSHIP_KEYS:
        before = _check_int(result.get(key, RELATIONSHIP_START[key]), f"relationship {key}")
        result[key] = _clamp(key, before + change[key])
    return result


def is_large_change(
    delta: Mapping[str, Any] | RelationshipDelta,
    *,
    total_threshold: int = MEMORY_TOTAL_DELTA,
    single_threshold: int = MEMORY_SINGLE_DELTA,
) -> bool:
    """Whether a delta is worth a memory: total_delta >= `total_threshold` or one |value| >= `single_threshold`."""
    change = _delta_dict(delta)
    total = sum(abs(v) for v in change.values())
    return total >= total_threshold or any(abs(v) >= single_threshold for v in change.values())


def _name(value: object, fallback: str, field: str) -> str:
    if value is None:
        return fallback
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be text or None, got {type(value).__name__}")
    return value.strip() or fallback


def _keyword_causes(kind: str, words: Sequence[str], user: str, en: bool = False) -> str | None:
    if not words:
        return None
    if en:
        template = prompts_en.KEYWORD_CAUSES.get(kind)
        return template.format(user=user, quoted=", ".join(f'"{w}"' for w in words)) if template else None
    quoted = "、".join(f"“{w}”" for w in words)
    return {
        "trust": f"{user}说了{quoted}",
        "affection": f"{user}表达了亲近（{quoted}）",
        "negative": f"{user}表达了不满（{quoted}）",
    }.get(kind)


def _choice_cause(level: str | None, user: str, en: bool = False) -> str | None:
    if en:
        template = prompts_en.CHOICE_CAUSES.get(level or "")
        return template.format(user=user) if template else None
    return {
        "important": f"{user}做出了重要选择",
        "turning_point": "剧情迎来转折点",
        "ending": "故事走向结局",
    }.get(level or "")


def _gap_cause(gap: str | None, user: str, en: bool = False) -> str | None:
    if en:
        label = prompts_en.GAP_LABELS.get(gap or "")
        return prompts_en.GAP_CAUSE.format(user=user, label=label) if label else None
    label = GAP_LABELS.get(gap or "")
    return f"{user}{label}才回来" if label else None


def relationship_causes(
    review: ReviewOutput | Mapping[str, Any], user_name: str | None = None, language: str | None = None
) -> list[str]:
    """Short causes of a review's relationship change: matched keywords, choice level, long gap, in the
    instance's `language` (Chinese by default). `review` is a `ReviewOutput` or its `to_dict()`."""
    en = _english(language)
    user = _name(user_name, prompts_en.DEFAULT_USER_NAME if en else "用户", "user_name")
    if not isinstance(review, ReviewOutput | Mapping):
        raise InvalidInput(f"review must be a ReviewOutput or its to_dict(), got {type(review).__name__}")
    data = review.to_dict() if isinstance(review, ReviewOutput) else dict(review)
    matched = data.get("matched_keywords") or {}
    causes = [_keyword_causes(kind, matched.get(kind) or [], user, en) for kind in ("trust", "affection", "negative")]
    causes += [_choice_cause(data.get("choice_level"), user, en), _gap_cause(data.get("gap"), user, en)]
    return [c for c in causes if c]


def _causes_from_reason(reason: str, user: str, en: bool = False) -> list[str]:
    """Causes from one relationship reason: a Chinese one (an LLM review's) as it is, the rule review's
    English one read back into Chinese causes; unreadable parts are dropped."""
    reason = reason.strip()
    if not reason:
        return []
    rule_reason = any(pattern.search(reason) for pattern in (_REASON_KEYWORDS, _REASON_CHOICE, _REASON_GAP))
    if not _REASON_KEYWORDS.search(reason) and (has_han(reason) or (en and not rule_reason)):
        return [reason]  # a model's reason, as it wrote it
    causes = [
        _keyword_causes(kind, [w.strip() for w in words.split("、") if w.strip()], user, en)
        for kind, words in _REASON_KEYWORDS.findall(reason)
    ]
    causes += [_choice_cause(level, user, en) for level in _REASON_CHOICE.findall(reason)]
    causes += [_gap_cause(gap, user, en) for gap in _REASON_GAP.findall(reason)]
    return [c for c in causes if c]


def _causes(reasons: object, user: str, language: str | None = None) -> list[str]:
    en = _english(language)
    if reasons is None:
        return []
    if isinstance(reasons, ReviewOutput):
        return relationship_causes(reasons, user, language)
    if isinstance(reasons, str):
        return [reasons.strip()] if reasons.strip() else []
    if isinstance(reasons, Mapping):
        if "matched_keywords" in reasons or "choice_level" in reasons:  # a ReviewOutput.to_dict()
            return relationship_causes(reasons, user, language)
        relationship = reasons.get("relationship")  # a ReviewOutput.reasons
        return _causes_from_reason(relationship, user, en) if isinstance(relationship, str) else []
    if isinstance(reasons, Sequence):
        out = []
        for item in reasons:
            if not isinstance(item, str):
                raise InvalidInput(f"relationship reasons must be text, got {type(item).__name__}: {item!r}")
            if item.strip():
                out.append(item.strip())
        return out
    raise InvalidInput(f"relationship reasons must be text, a list of texts or a review, got {type(reasons).__name__}")


def _change_phrase(key: str, value: int, en: bool = False) -> str:
    if en:
        return prompts_en.CHANGE_PHRASE.format(
            label=prompts_en.VALUE_LABELS[key],
            strength=prompts_en.CHANGE_STRONG if abs(value) >= MEMORY_SINGLE_DELTA else "",
            direction=prompts_en.CHANGE_UP if value > 0 else prompts_en.CHANGE_DOWN,
            value=value,
        )
    direction = "上升" if value > 0 else "下降"
    strength = "明显" if abs(value) >= MEMORY_SINGLE_DELTA else ""
    return f"{VALUE_LABELS[key]}{strength}{direction}（{value:+d}）"


def relationship_memory_text(
    delta: Mapping[str, Any] | RelationshipDelta,
    reasons: object,
    character_name: str | None,
    user_name: str | None,
    *,
    total_threshold: int = MEMORY_TOTAL_DELTA,
    single_threshold: int = MEMORY_SINGLE_DELTA,
    language: str | None = None,
) -> str | None:
    """A short Chinese memory of a large relationship change, None for a small one (module doc).

    `reasons`: None, one text, a list of texts (Chinese causes, used as given), a `ReviewOutput` or its
    `to_dict()` (causes from its keywords, choice and gap), or a `ReviewOutput.reasons` dict (its
    "relationship" reason: a Chinese one as given, the rule review's English one read into causes).
    Empty names fall back to 角色 / 用户 (Character / User in English: `language`, issue 28).
    """
    change = _delta_dict(delta)
    if not is_large_change(change, total_threshold=total_threshold, single_threshold=single_threshold):
        return None
    if _english(language):
        character = _name(character_name, prompts_en.DEFAULT_CHARACTER_NAME, "character_name")
        user = _name(user_name, prompts_en.DEFAULT_USER_NAME, "user_name")
        phrases = [_change_phrase(key, change[key], True) for key in RELATIONSHIP_KEYS if change[key]]
        text = prompts_en.RELATIONSHIP_MEMORY.format(character=character, user=user, phrases=", ".join(phrases))
        causes = list(dict.fromkeys(_causes(reasons, user, language)))
        return text + (prompts_en.RELATIONSHIP_CAUSES.format(causes="; ".join(causes)) if causes else "")
    character = _name(character_name, "角色", "character_name")
    user = _name(user_name, "用户", "user_name")
    phrases = [_change_phrase(key, change[key]) for key in RELATIONSHIP_KEYS if change[key]]
    text = f"{character}与{user}的关系有了变化：{character}对{user}的" + "、".join(phrases) + "。"
    causes = list(dict.fromkeys(_causes(reasons, user)))
    if causes:
        text += "起因：" + "；".join(causes) + "。"
    return text


# --- time gap -------------------------------------------------------------------------------------


def gap_from_seconds(seconds: float | None, thresholds: Sequence[tuple[float, str]] = GAP_THRESHOLDS) -> str:
    """Seed 003's gap for the seconds since the previous message (thresholds in the module doc).
    None (no previous message, or unknown) is "none"; a negative, NaN or non-number value is a ValueError."""
    if seconds is None:
        return "none"
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or math.isnan(seconds):
        raise InvalidInput(f"gap seconds must be a number >= 0 or None, got {seconds!r}")
    if seconds < 0:
        raise InvalidInput(f"gap seconds must be >= 0 (the previous message is in the future?), got {seconds!r}")
    for bound, gap in thresholds:
        if seconds < bound:
            return gap
    return LONGEST_GAP


# --- plot node and world-book suggestion ----------------------------------------------------------


def _sentence(text: str) -> str:
    """`text` ending in a full stop (unless it already ends a sentence)."""
    # 「好。」 already ends a sentence; 选择了「离开」 does not.
    return text if text.rstrip(CLOSERS).endswith(SENTENCE_ENDS) else text + "。"


def _unstop(text: str) -> str:
    """`text` without a trailing full stop, to be joined with ；."""
    return text.rstrip("。.;；")


def _excerpt(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def choice_text(choice: object) -> str:
    """The text of a selected choice ('text', 'label', 'title', 'content' or 'option'), "" without one."""
    if not isinstance(choice, Mapping):
        return ""
    for key in CHOICE_TEXT_KEYS:
        value = choice.get(key)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())
    return ""


def _exchange(
    user_message: str,
    assistant_reply: str,
    choice: object,
    user: str,
    character: str,
    user_chars: int,
    reply_chars: int,
    en: bool = False,
) -> list[str]:
    parts = []
    picked = choice_text(choice)
    if en:
        if picked:
            parts.append(prompts_en.EXCHANGE_CHOICE.format(user=user, picked=picked))
        if user_message.strip():
            parts.append(prompts_en.EXCHANGE_USER.format(user=user, text=_excerpt(user_message, user_chars)))
        if assistant_reply.strip():
            parts.append(
                prompts_en.EXCHANGE_CHARACTER.format(character=character, text=_excerpt(assistant_reply, reply_chars))
            )
        return parts
    if picked:
        parts.append(f"{user}选择了「{picked}」")
    if user_message.strip():
        parts.append(f"{user}说：{_excerpt(user_message, user_chars)}")
    if assistant_reply.strip():
        parts.append(f"{character}：{_excerpt(assistant_reply, reply_chars)}")
    return parts


def plot_node_summary(
    user_message: str,
    assistant_reply: str,
    choice: object,
    *,
    user_name: str | None = None,
    character_name: str | None = None,
    language: str | None = None,
) -> str:
    """The summary of a plot node (seed 003 剧情更新): the choice level, what was chosen, an excerpt of the
    exchange. ValueError for a bad choice level or non-text messages."""
    level = check_choice(choice, "selected_choice.level")
    _check_text(user_message, "user_message")
    _check_text(assistant_reply, "assistant_reply")
    if _english(language):
        user = _name(user_name, prompts_en.DEFAULT_USER_NAME, "user_name")
        character = _name(character_name, prompts_en.DEFAULT_CHARACTER_NAME, "character_name")
        label = prompts_en.LEVEL_LABELS.get(level or "", prompts_en.PLOT_NODE_LABEL)
        parts = _exchange(
            user_message, assistant_reply, choice, user, character, PLOT_USER_CHARS, PLOT_REPLY_CHARS, True
        )
        return prompts_en.PLOT_SUMMARY.format(
            label=label[:1].upper() + label[1:], parts="; ".join(_unstop(p) for p in parts or [prompts_en.NO_EXCHANGE])
        )
    user = _name(user_name, "用户", "user_name")
    character = _name(character_name, "角色", "character_name")
    label = LEVEL_LABELS.get(level or "", "剧情节点")
    parts = _exchange(user_message, assistant_reply, choice, user, character, PLOT_USER_CHARS, PLOT_REPLY_CHARS)
    return f"{label}：" + "；".join(_unstop(p) for p in parts or [NO_EXCHANGE])


def worldbook_suggestion_from_turn(
    user_message: str,
    assistant_reply: str,
    choice: object,
    turn: int,
    *,
    user_name: str | None = None,
    character_name: str | None = None,
    scope: str = "instance",
    top_k: int = SUGGESTION_KEYWORDS,
    language: str | None = None,
) -> dict[str, Any]:
    """A proposed world-book entry for one turn (seed 003 世界书更新): title, content, keywords (see the
    module doc), trigger_type, kind, scope, choice_level, turn and a reason — the fields
    `stores.review.create_suggestion` takes. ValueError for a bad choice level, turn, scope or message."""
    level = check_choice(choice, "selected_choice.level")
    check_turn(turn)
    _check_text(user_message, "user_message")
    _check_text(assistant_reply, "assistant_reply")
    if scope not in SUGGESTION_SCOPES:
        raise InvalidInput(f"suggestion scope must be one of {', '.join(SUGGESTION_SCOPES)}, got {scope!r}")
    en = _english(language)
    user = _name(user_name, prompts_en.DEFAULT_USER_NAME if en else "用户", "user_name")
    character = _name(character_name, prompts_en.DEFAULT_CHARACTER_NAME if en else "角色", "character_name")
    labels, fallback = (prompts_en.LEVEL_LABELS, prompts_en.PLOT_EVENT_LABEL) if en else (LEVEL_LABELS, "剧情事件")
    label = labels.get(level or "", fallback)
    parts = _exchange(
        user_message, assistant_reply, choice, user, character, USER_EXCERPT_CHARS, REPLY_EXCERPT_CHARS, en
    )
    if en:
        content = prompts_en.SUGGESTION_CONTENT.format(
            turn=turn, label=label, parts=" ".join(_sentence(p) for p in parts or [prompts_en.NO_EXCHANGE])
        )
    else:
        content = f"第{turn}轮（{label}）：" + "".join(_sentence(p) for p in parts or [NO_EXCHANGE])
    # The choice and the user's words name the event; the reply adds the character's side of it.
    keywords = extract_keywords("\n".join([choice_text(choice), user_message, assistant_reply]), top_k=top_k)
    return {
        "title": prompts_en.SUGGESTION_TITLE.format(turn=turn, label=label) if en else f"第{turn}轮{label}",
        "content": content,
        "keywords": keywords,
        "trigger_type": "keyword" if keywords else "semantic",
        "kind": SUGGESTION_KIND,
        "scope": scope,
        "choice_level": level,
        "turn": turn,
        "reason": (
            (prompts_en.SUGGESTION_REASON_LEVEL.format(label=label) if level else prompts_en.SUGGESTION_REASON)
            if en
            else (f"{label}之后建议更新世界书" if level else "审查建议更新世界书")
        ),
    }


# --- one reviewed turn ----------------------------------------------------------------------------


def plan_review_effects(
    review: ReviewOutput | Mapping[str, Any],
    *,
    relationship: Mapping[str, Any] | None,
    user_message: str,
    assistant_reply: str,
    choice: object,
    turn: int,
    character_name: str | None = None,
    user_name: str | None = None,
    language: str | None = None,
) -> dict[str, Any]:
    """Everything one review changes, as data: `relationship` (the new state), `relationship_memory`
    (text or None), `plot_node` ({"turn", "level", "summary"} or None) and `worldbook_suggestion`
    (`worldbook_suggestion_from_turn`'s dict or None). `stores.review.save_review_effects` stores the
    last two; the graph keeps the relationship and writes the memory."""
    if isinstance(review, ReviewOutput):
        output = review
    else:
        try:
            output = ReviewOutput.from_dict(review)
        except InvalidInput as exc:
            raise InvalidInput(
                f"review must be a ReviewOutput or its to_dict(), got {type(review).__name__}: {exc}"
            ) from None
    check_turn(turn)
    delta = output.relationship_delta.to_dict()
    plot = None
    if output.suggest_plot_node:
        plot = {
            "turn": turn,
            "level": check_choice(choice, "selected_choice.level"),
            "summary": plot_node_summary(
                user_message,
                assistant_reply,
                choice,
                user_name=user_name,
                character_name=character_name,
                language=language,
            ),
        }
    suggestion = None
    if output.suggest_worldbook_update:
        suggestion = worldbook_suggestion_from_turn(
            user_message,
            assistant_reply,
            choice,
            turn,
            user_name=user_name,
            character_name=character_name,
            language=language,
        )
    return {
        "relationship": apply_relationship(relationship, delta),
        "relationship_memory": relationship_memory_text(delta, output, character_name, user_name, language=language),
        "plot_node": plot,
        "worldbook_suggestion": suggestion,
    }


MIN_TURN_IMPORTANCE = 0.1


def turn_memories(
    review: ReviewOutput, plan: Mapping[str, Any], event_text: str, turn: int, user_message: str = ""
) -> list[dict[str, Any]]:
    """The memories a reviewed turn leaves (seeds 001 + 003): the turn itself when the review says it is worth
    writing (`should_write_memory`; issue 26: not every turn — the dialogue record keeps every line anyway, a turn
    memory of small talk only repeated it), in the active layer and worth what the review says it is worth,
    raised to the fact estimate of the user's message where the review's table gives less
    (`nodes.rules.importance`: "我妹妹今年十二岁" is worth keeping though the table gives it 0); plus a
    relationship memory when the relationship moved a lot."""
    memories: list[dict[str, Any]] = []
    if review.should_write_memory:
        memories.append(
            {
                "content": event_text,
                "type": "conversation",
                "importance": max(MIN_TURN_IMPORTANCE, raised_importance(review.memory_value, user_message)),
                "tags": ["important"],
                "turn": turn,
            }
        )
    if plan.get("relationship_memory"):
        memories.append(
            {
                "content": plan["relationship_memory"],
                "type": "relationship",
                "importance": max(0.5, review.memory_value),
                "turn": turn,
            }
        )
    return memories


def relationship_event(turn: int, delta: RelationshipDelta, language: str | None = None) -> str | None:
    """A state-change event for core-memory maintenance (seed 002 状态变化事件), None when nothing moved; in the
    instance's `language` (issue 28)."""
    if not delta:
        return None
    if _english(language):
        return prompts_en.RELATIONSHIP_EVENT.format(
            turn=turn, trust=delta.trust, affection=delta.affection, familiarity=delta.familiarity
        )
    return f"第{turn}轮：关系变化 信任{delta.trust:+d} 好感{delta.affection:+d} 熟悉{delta.familiarity:+d}"
