"""World-book triggering (seed 004 基于世界书触发机制的记忆服务): which entries fire for this turn, and why.

Every rule here is a pure function: entries, a `WorldbookContext` (recent text, recent emotions, turn and
time facts, optional precomputed vectors) and a `WorldbookConfig` in, `TriggeredEntry` values out. An entry
is a pydantic model (`WorldbookEntry`, its `TemporalWindow`; `nodes.rules.validation`): a row, a file's
entry and a call are validated alike, and what a stored entry needs on top is `validate_entry`.

The seed's `MemoryTriggerEntry` / `MemoryTriggerConfig`, as implemented:
- `triggerType` keyword / semantic / temporal / emotional (多维度触发策略), `priority`, `isConstant`,
  `relevanceWeight`, `emotionalWeight`, `timeDecayFactor`, `emotionalContext` (here `emotions`) and the
  memory `type` (here `kind`: episodic / semantic / trait / goal) are fields of `WorldbookEntry`.
- `triggerStrategies`, `maxMemoriesPerType`, `relevanceThreshold`, `timeDecayEnabled`,
  `emotionalBoostEnabled` and the injection settings (`maxTotalLength`, `injectPosition`, `template`,
  `separateByType`) are fields of `WorldbookConfig`; the length budget is applied where the prompt is
  assembled (`nodes.rules.injection`), in tokens.

What the seed leaves open, decided here (SillyTavern's world info is the reference the seed reuses,
"复用WorldBookTriggerEngine"):
- keyword: any primary keyword fires the entry; secondary keywords then apply SillyTavern's logic
  (and_any / not_all / not_any / and_all). Keywords containing CJK match as substrings (Chinese has no
  word boundaries); pure ASCII keywords match whole words, case-insensitively, so "cat" does not fire on
  "concatenate" but "Alice" fires on "Alice说". `/pattern/flags` keywords are regular expressions.
  Score: 0.5 for one hit plus 0.5 x the share of keywords hit (seed 001 CalculateKeywordMatchScore's
  equal share per keyword), so a single hit is relevant on its own.
- semantic: cosine similarity of the recent text and the entry (seed 001 CalculateVectorSimilarity) at or
  above `semantic_threshold`; an entry that also has keywords fires on them too (SillyTavern's
  "vectorized" entries). Score: the higher of the two.
- temporal: the entry's `TemporalWindow` holds (turn range, wall-clock gap since the previous message,
  turns since the entry last fired); every condition given must hold. Score 1.
- emotional: an entry emotion matches a recent line's `original_emotion` (newest weighs 1, each older
  line x0.8) or an emotion word in the recent text (0.7, not when negated: 不开心 is not 开心); words of one
  family (开心 / 高兴 / 快乐) match each other. Score: the best match.
- final score = trigger score x relevance_weight x time decay x emotional boost, where
  decay = exp(-time_decay_factor x age in days) (seed 001 CalculateRecencyScore's exponential form) and
  boost = 1 + emotional_weight x emotion match (for keyword / semantic / temporal entries that also name
  emotions; an emotional entry's score already is its emotion match).
- constant entries always fire (score 1), ahead of the rest, outside the threshold and the per-kind
  maxima; disabled entries never fire.
- order of the result: constants, then priority (higher first, SillyTavern's `order`), then score.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import lru_cache
from typing import Annotated, Any, ClassVar, Literal, Self, get_args

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.keywords import has_unspaced_script
from personalab.nodes.rules.review.effects import GAP_THRESHOLDS
from personalab.nodes.rules.validation import Entry, EntryId, Flag, Number, Text, Whole, check_storable
from personalab.nodes.rules.worldbook_keys import (
    KeyIndex,
    RegexTimeout,
    key_matches,
    key_pattern,
)
from pydantic import AfterValidator, BeforeValidator, Field, PrivateAttr, Strict, StringConstraints, model_validator

TriggerType = Literal["keyword", "semantic", "temporal", "emotional"]
Kind = Literal["episodic", "semantic", "trait", "goal"]  # seed 004 MemoryType
Position = Literal["system", "user", "assistant"]
SelectiveLogic = Literal["and_any", "not_all", "not_any", "and_all"]
SourceFormat = Literal["world info", "character book"]  # a SillyTavern world-info file, a card's lorebook
TRIGGER_TYPES: tuple[str, ...] = get_args(TriggerType)
KINDS: tuple[str, ...] = get_args(Kind)
KIND_LABELS = {"episodic": "情景记忆", "semantic": "语义记忆", "trait": "特质记忆", "goal": "目标记忆"}
POSITIONS: tuple[str, ...] = get_args(Position)
SELECTIVE_LOGICS: tuple[str, ...] = get_args(SelectiveLogic)

# Documented limits: an entry beyond them is refused (import and add), so one pasted novel cannot eat the
# whole prompt budget or the database.
MAX_CONTENT_CHARS = 10_000
MAX_KEYWORDS = 100
MAX_KEYWORD_CHARS = 200
MAX_EMOTIONS = 20

KEYWORD_HIT_FLOOR = 0.5
LINE_EMOTION_DECAY = 0.8
TEXT_EMOTION_WEIGHT = 0.7
SECONDS_PER_DAY = 86_400.0

# Emotion families: a labelled emotion or an entry emotion matches any word of its family. Single
# characters (爱, 哭) are left out: as substrings they hit 可爱 / 哭笑不得.
EMOTION_FAMILIES: dict[str, tuple[str, ...]] = {
    "开心": (
        "开心",
        "高兴",
        "快乐",
        "愉快",
        "欢喜",
        "喜悦",
        "兴奋",
        "幸福",
        "开怀",
        "happy",
        "glad",
        "joyful",
        "excited",
    ),
    "悲伤": ("悲伤", "伤心", "难过", "哀伤", "失落", "沮丧", "痛苦", "心碎", "想哭", "sad", "upset", "heartbroken"),
    "愤怒": ("愤怒", "生气", "恼火", "气愤", "发火", "暴怒", "烦躁", "angry", "furious", "annoyed"),
    "害怕": ("害怕", "恐惧", "惊恐", "畏惧", "胆怯", "可怕", "afraid", "scared", "frightened"),
    "担心": ("担心", "焦虑", "不安", "忧虑", "紧张", "担忧", "worried", "anxious", "nervous"),
    "惊讶": ("惊讶", "吃惊", "震惊", "惊喜", "意外", "surprised", "shocked", "amazed"),
    "尴尬": ("尴尬", "难为情", "害羞", "羞涩", "不好意思", "embarrassed", "shy"),
    "厌恶": ("厌恶", "恶心", "讨厌", "嫌弃", "disgusted"),
    "孤独": ("孤独", "寂寞", "孤单", "lonely"),
    "好奇": ("好奇", "curious"),
    "感激": ("感激", "感谢", "感动", "grateful", "thankful"),
    "喜爱": ("喜欢", "心动", "爱慕", "思念", "想念", "love", "adore"),
    "无奈": ("无奈", "无语", "helpless"),
    "调皮": ("调皮", "淘气", "俏皮", "playful"),
    "平静": ("平静", "淡定", "放松", "calm", "relaxed"),
}
NEGATIONS = ("不", "没", "别", "未", "非", "not ", "never ", "no ")

MAX_SCAN_DEPTH = 100  # lines a context keeps for entries with their own scan depth
DEFAULT_BUDGET_SHARE = 0.25  # SillyTavern's world-info budget: 25 % of the context
DEFAULT_BUDGET_TOKENS = 2000  # when neither the context nor a cap is known
DEFAULT_RECURSION_STEPS = 3  # recursion passes a turn makes at most (each entry fires once, so loops end anyway)
MAX_RECURSION_STEPS = 20


def _checked_keyword(keyword: str) -> str:
    check_keyword(keyword)
    return keyword


def _without_blanks(words: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(word for word in words if word)


def _epoch(value: Any) -> Any:
    """A row's creation time as epoch seconds (SQLite hands back naive datetimes; they were written in UTC)."""
    if isinstance(value, datetime):
        return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).timestamp()
    return value


def _no_window(value: Any) -> Any:
    return {} if value is None else value  # an exported entry may say "temporal": null


Content = Annotated[
    str, StringConstraints(strict=True, strip_whitespace=True, min_length=1, max_length=MAX_CONTENT_CHARS)
]
Keyword = Annotated[
    str,
    StringConstraints(strict=True, strip_whitespace=True, max_length=MAX_KEYWORD_CHARS),
    AfterValidator(_checked_keyword),
]
# Keywords and emotions are stripped, blank ones dropped (a trailing comma in a file is not a keyword).
Keywords = Annotated[tuple[Keyword, ...], Field(max_length=MAX_KEYWORDS), AfterValidator(_without_blanks)]
Emotions = Annotated[
    tuple[Annotated[str, StringConstraints(strict=True, strip_whitespace=True)], ...],
    Field(max_length=MAX_EMOTIONS),
    AfterValidator(_without_blanks),
]
Weight = Annotated[Number, Field(ge=0)]


def check_one_scope(role_id: int | None, save_id: int | None) -> None:
    if role_id is not None and save_id is not None:
        raise InvalidInput("an entry is scoped to a character or to an instance, not both")


class TemporalWindow(Entry):
    """When a temporal entry fires: every condition that is set must hold (inclusive bounds)."""

    label: ClassVar[str] = "time window"

    min_turn: Whole | None = None
    max_turn: Whole | None = None
    min_gap_seconds: Number | None = None
    max_gap_seconds: Number | None = None
    min_turns_since_fired: Whole | None = None

    @model_validator(mode="after")
    def _in_order(self) -> Self:
        if self.min_turn is not None and self.max_turn is not None and self.min_turn > self.max_turn:
            raise InvalidInput("min_turn is after max_turn")
        low, high = self.min_gap_seconds, self.max_gap_seconds
        if low is not None and high is not None and low > high:
            raise InvalidInput("min_gap_seconds is above max_gap_seconds")
        return self

    def is_empty(self) -> bool:
        return all(v is None for v in self.as_dict().values())

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()


class WorldbookEntry(Entry):
    """One world-book entry (seed 004 MemoryTriggerEntry). `position=None` uses the config's position.

    The fields' own rules (kinds, limits, choices, regular expressions) hold for every entry; what an entry
    needs to be stored (the signal its trigger fires on) is `validate_entry`."""

    label: ClassVar[str] = "world-book entry"

    id: EntryId
    content: Content
    keywords: Keywords = ()
    secondary_keywords: Keywords = ()
    selective_logic: SelectiveLogic = "and_any"
    trigger_type: TriggerType = "keyword"
    kind: Kind = "semantic"
    priority: Whole = 100
    constant: Flag = False
    enabled: Flag = True
    position: Position | None = None
    title: Text = ""
    relevance_weight: Weight = 1.0
    emotional_weight: Weight = 0.5
    time_decay_factor: Weight = 0.0
    emotions: Emotions = ()
    temporal: Annotated[TemporalWindow, BeforeValidator(_no_window)] = TemporalWindow()
    created_at: Annotated[float | None, BeforeValidator(_epoch)] = None  # epoch seconds, for time decay
    role_id: int | None = None
    save_id: int | None = None
    # The SillyTavern entry it was imported from, whole (issue 15): what has no field here (position, depth,
    # role, probability, case, whole words, groups, timed effects, extensions) is kept for a lossless export,
    # and the trigger reads its options (`sillytavern_options`). None for an entry made here.
    source: Annotated[dict[str, Any] | None, Strict()] = None
    source_format: SourceFormat | None = None
    _options: Any = PrivateAttr(default=None)  # `sillytavern_options`, read once (the entry is frozen)

    @model_validator(mode="after")
    def _one_scope(self) -> Self:
        check_one_scope(self.role_id, self.save_id)
        return self

    @property
    def scope(self) -> str:
        return scope_label(self.role_id, self.save_id)

    def fields_dict(self) -> dict[str, Any]:
        """The entry's own fields as JSON data (the export format and `worldbook list --json`)."""
        data = self.model_dump(mode="json", include=set(EXPORTED_FIELDS))
        data["temporal"] = {k: v for k, v in data["temporal"].items() if v is not None}
        return {name: data[name] for name in EXPORTED_FIELDS}


def stored_entry(row: Mapping[str, Any], source: tuple[str, dict[str, Any]] | None = None) -> WorldbookEntry:
    """An entry from its stored row's columns (and its SillyTavern source: format, data), built without validating
    again: it was validated when stored, and a big book's thousands of entries would each pay for it at every load
    (issue 28). The same entry `WorldbookEntry.model_validate(row)` gives."""
    window = TemporalWindow.model_construct(**{name: row[name] for name in TemporalWindow.model_fields})
    return WorldbookEntry.model_construct(
        id=str(row["id"]),
        content=row["content"].strip(),
        keywords=tuple(k.strip() for k in row["keywords"] if k.strip()),
        secondary_keywords=tuple(k.strip() for k in row["secondary_keywords"] if k.strip()),
        selective_logic=row["selective_logic"],
        trigger_type=row["trigger_type"],
        kind=row["kind"],
        priority=row["priority"],
        constant=row["constant"],
        enabled=row["enabled"],
        position=row["position"],
        title=row["title"],
        relevance_weight=row["relevance_weight"],
        emotional_weight=row["emotional_weight"],
        time_decay_factor=row["time_decay_factor"],
        emotions=tuple(e.strip() for e in row["emotions"] if e.strip()),
        temporal=window,
        created_at=_epoch(row["created_at"]),
        role_id=row["role_id"],
        save_id=row["save_id"],
        source=dict(source[1]) if source is not None else None,
        source_format=source[0] if source is not None else None,
    )


# The entry's own fields in the order of an exported file (not the id, scope or creation time).
EXPORTED_FIELDS = (
    "title",
    "content",
    "keywords",
    "secondary_keywords",
    "selective_logic",
    "trigger_type",
    "kind",
    "priority",
    "constant",
    "enabled",
    "position",
    "relevance_weight",
    "emotional_weight",
    "time_decay_factor",
    "emotions",
    "temporal",
)


def scope_label(role_id: int | None, save_id: int | None) -> str:
    """Where an entry applies: an instance, a character, or everywhere."""
    if save_id is not None:
        return f"instance {save_id}"
    if role_id is not None:
        return f"character {role_id}"
    return "global"


def _default_max_per_kind() -> dict[str, int]:
    return {"episodic": 5, "semantic": 5, "trait": 3, "goal": 3}


@dataclass(frozen=True)
class EntryOptions:
    """What a SillyTavern entry says beyond our fields (issue 15), read from its source by
    `sillytavern_options`: case sensitivity and whole words (None: ours, case-insensitive, whole words for
    ASCII keys), the probability in percent it fires with once triggered, and where SillyTavern put it."""

    case_sensitive: bool | None = None
    match_whole_words: bool | None = None
    probability: float = 100.0
    st_position: int = 0
    depth: int | None = None
    role: int | None = None
    scan_depth: int | None = None  # lines of the recent dialogue this entry's keys are matched in
    groups: tuple[str, ...] = ()  # inclusion groups (comma-separated in the file): one entry of a group goes in
    group_override: bool = False  # "prioritise": the highest order of the group wins instead of a weighted draw
    group_weight: float = 100.0
    # timed effects, in turns (SillyTavern counts messages; a turn here is one exchange)
    sticky: int = 0  # stays active this many turns after it fired
    cooldown: int = 0  # cannot fire for this many turns after it was active (after its sticky turns)
    delay: int = 0  # cannot fire before the chat has this many lines
    exclude_recursion: bool = False  # not activated by other entries' content
    prevent_recursion: bool = False  # its content activates no other entry
    delay_until_recursion: bool = False  # activated only by other entries' content


def _timer(value: Any) -> int:
    number = _whole_number(value)
    return number if number is not None and number > 0 else 0


def _truthy(value: Any) -> bool:
    """A recursion flag: SillyTavern writes booleans, newer files a recursion level (a positive number)."""
    return value is True or (_whole_number(value) or 0) > 0


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _whole_number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def sillytavern_options(entry: WorldbookEntry) -> EntryOptions:
    """The entry's SillyTavern options (world info: caseSensitive, matchWholeWords, probability, useProbability,
    position, depth, role; a card's entry: the same in `extensions` with its names); defaults for ours. Read once
    per entry: a turn asks for them several times per entry (trigger, recursion, groups, budget)."""
    private = entry.__pydantic_private__  # read directly: pydantic's attribute lookup costs more than the rest
    cached = private.get("_options") if private is not None else None
    # kept with the source it was read from: a copy with another source (model_copy keeps private attributes)
    # reads its own
    if cached is None or cached[0] is not entry.source or cached[1] != entry.source_format:
        cached = entry._options = (entry.source, entry.source_format, _read_options(entry))
    options: EntryOptions = cached[2]
    return options


def whole_words_option(entry: WorldbookEntry) -> bool | None:
    """The entry's own "match whole words" (None: the book's setting), read alone: a book's index needs it for
    every entry, the other options only for the entries a turn looks at (`sillytavern_options`)."""
    source = entry.source
    if not source:
        return None
    if entry.source_format == "character book":
        found = source.get("extensions")
        return _flag(found.get("match_whole_words")) if isinstance(found, dict) else None
    return _flag(source.get("matchWholeWords"))


def _read_options(entry: WorldbookEntry) -> EntryOptions:
    source = entry.source
    if not source:
        return EntryOptions()
    if entry.source_format == "character book":
        found = source.get("extensions")
        ext: dict[str, Any] = found if isinstance(found, dict) else {}
        case = ext.get("case_sensitive", source.get("case_sensitive"))
        probability, use = ext.get("probability"), ext.get("useProbability")
        word = source.get("position")
        position = ext.get("position", word if isinstance(word, int) else 1 if word == "after_char" else 0)
        depth, role, scan = ext.get("depth"), ext.get("role"), ext.get("scan_depth")
        group, override, weight = ext.get("group"), ext.get("group_override"), ext.get("group_weight")
        timers = (ext.get("sticky"), ext.get("cooldown"), ext.get("delay"))
        recursion = (ext.get("exclude_recursion"), ext.get("prevent_recursion"), ext.get("delay_until_recursion"))
    else:
        case = source.get("caseSensitive")
        probability, use = source.get("probability"), source.get("useProbability")
        position, depth, role = source.get("position"), source.get("depth"), source.get("role")
        scan = source.get("scanDepth")
        group, override, weight = source.get("group"), source.get("groupOverride"), source.get("groupWeight")
        timers = (source.get("sticky"), source.get("cooldown"), source.get("delay"))
        recursion = (source.get("excludeRecursion"), source.get("preventRecursion"), source.get("delayUntilRecursion"))
    percent = 100.0
    if use is not False and isinstance(probability, int | float) and not isinstance(probability, bool):
        percent = min(100.0, max(0.0, float(probability)))
    return EntryOptions(
        case_sensitive=_flag(case),
        match_whole_words=whole_words_option(entry),
        probability=percent,
        st_position=_whole_number(position) or 0,
        depth=_whole_number(depth),
        role=_whole_number(role),
        scan_depth=min(scan, MAX_SCAN_DEPTH) if (scan := _whole_number(scan)) is not None and scan >= 0 else None,
        groups=tuple(g.strip() for g in group.split(",") if g.strip()) if isinstance(group, str) else (),
        group_override=override is True,
        group_weight=float(weight)
        if isinstance(weight, int | float) and not isinstance(weight, bool) and weight > 0
        else 100.0,
        sticky=_timer(timers[0]),
        cooldown=_timer(timers[1]),
        delay=_timer(timers[2]),
        exclude_recursion=_truthy(recursion[0]),
        prevent_recursion=_truthy(recursion[1]),
        delay_until_recursion=_truthy(recursion[2]),
    )


def count_script_tokens(text: str) -> int:
    """Tokens of `text` as BPE tokenizers count them, near enough for a budget: a CJK character (or kana,
    Hangul) about one token, other text about four characters per token. (A flat 1.5 characters per token,
    right for Chinese, counts English about 3x too many.)"""
    if not text:
        return 0
    unspaced = sum(1 for char in text if has_unspaced_script(char))
    return unspaced + math.ceil((len(text) - unspaced) / 4)


@dataclass(frozen=True)
class WorldbookConfig:
    """Seed 004 MemoryTriggerConfig. `max_total_tokens` is the seed's maxTotalLength, counted in tokens
    like the rest of the prompt budget. `template` renders one entry ({content}, {title}, {kind},
    {trigger}, {keywords}); `heading` titles the world-book group, per kind when `separate_by_type`."""

    enabled: bool = True
    keyword_matching: bool = True
    semantic_similarity: bool = True
    temporal_proximity: bool = True
    emotional_relevance: bool = True
    max_per_kind: Mapping[str, int] = field(default_factory=_default_max_per_kind)
    relevance_threshold: float = 0.3
    semantic_threshold: float = 0.35
    time_decay_enabled: bool = True
    emotional_boost_enabled: bool = True
    max_total_tokens: int | None = None  # a cap in tokens (seed 004 maxTotalLength), besides the share
    budget_share: float = DEFAULT_BUDGET_SHARE  # of `context_tokens` (SillyTavern's budget %)
    context_tokens: int | None = None  # the reply model's context window, when known
    inject_position: str = "system"
    template: str = "- {content}"
    heading: str = "世界书"
    separate_by_type: bool = False
    recursive: bool = True  # SillyTavern's recursive scanning: fired entries' content activates other entries
    max_recursion_steps: int = DEFAULT_RECURSION_STEPS
    case_sensitive: bool = False  # an entry's keys, unless the entry says (SillyTavern's global "case-sensitive")
    match_whole_words: bool = True  # ASCII keys as whole words, unless the entry says (never for CJK)

    def __post_init__(self) -> None:
        if self.inject_position not in POSITIONS:
            raise InvalidInput(f"inject_position {self.inject_position!r} is not one of {', '.join(POSITIONS)}")
        if self.max_total_tokens is not None and self.max_total_tokens < 0:
            raise InvalidInput("max_total_tokens is negative")
        if not 0 <= self.max_recursion_steps <= MAX_RECURSION_STEPS:
            raise InvalidInput(f"max_recursion_steps {self.max_recursion_steps} is not in 0..{MAX_RECURSION_STEPS}")
        if not 0 < self.budget_share <= 1:
            raise InvalidInput(f"budget_share {self.budget_share} is not in (0, 1]")
        for kind, limit in self.max_per_kind.items():
            if kind not in KINDS:
                raise InvalidInput(f"max_per_kind: unknown kind {kind!r} (expected one of {', '.join(KINDS)})")
            if limit < 0:
                raise InvalidInput(f"max_per_kind[{kind!r}] is negative")
        try:
            self.template.format(content="", title="", kind="", trigger="", keywords="")
        except (KeyError, IndexError, ValueError) as exc:
            raise InvalidInput(f"template {self.template!r}: unknown or malformed placeholder ({exc})") from None

    def budget_tokens(self) -> int:
        """The world book's token budget: `budget_share` of the context window and at most `max_total_tokens`
        (either alone when the other is unknown; `DEFAULT_BUDGET_TOKENS` when neither is)."""
        limits = []
        if self.context_tokens:
            limits.append(int(self.budget_share * self.context_tokens))
        if self.max_total_tokens is not None:
            limits.append(self.max_total_tokens)
        return min(limits) if limits else DEFAULT_BUDGET_TOKENS


DEFAULT_SCAN_DEPTH = 4  # lines of the recent dialogue (plus the user's message) an entry's keys are matched in
SETTING_FIELDS = (
    "budget_share",
    "max_tokens",
    "scan_depth",
    "recursive",
    "max_recursion_steps",
    "case_sensitive",
    "match_whole_words",
)


@dataclass(frozen=True)
class WorldbookSettings:
    """A world book's settings as data (issue 15), for everything (global), a character's book or an instance; None
    = not set here (the wider scope's, else the default). `budget_share` of the context window and `max_tokens` cap
    the world book's tokens; `scan_depth` lines are scanned for keys; `recursive` / `max_recursion_steps` are
    SillyTavern's recursive scanning; `case_sensitive` / `match_whole_words` apply to entries that do not say."""

    budget_share: float | None = None
    max_tokens: int | None = None
    scan_depth: int | None = None
    recursive: bool | None = None
    max_recursion_steps: int | None = None
    case_sensitive: bool | None = None
    match_whole_words: bool | None = None

    def __post_init__(self) -> None:
        for name in ("recursive", "case_sensitive", "match_whole_words"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise InvalidInput(f"{name} must be true or false, got {value!r}")
        share = self.budget_share
        if share is not None and (isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1):
            raise InvalidInput(f"budget_share must be a number in (0, 1], got {share!r}")
        limits = {"max_tokens": 2_147_483_647, "scan_depth": MAX_SCAN_DEPTH, "max_recursion_steps": MAX_RECURSION_STEPS}
        for name, high in limits.items():
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high):
                raise InvalidInput(f"{name} must be a whole number from 0 to {high}, got {value!r}")

    def over(self, base: WorldbookSettings) -> WorldbookSettings:
        """These settings where set, `base`'s elsewhere (an instance's over its character's over the global)."""
        return WorldbookSettings(
            **{
                name: getattr(base, name) if getattr(self, name) is None else getattr(self, name)
                for name in SETTING_FIELDS
            }
        )

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in SETTING_FIELDS}

    def config(self, **fields: Any) -> WorldbookConfig:
        """The trigger's config with these settings (and `fields`, e.g. the context window) over the defaults."""
        given: dict[str, Any] = {
            "budget_share": self.budget_share,
            "max_total_tokens": self.max_tokens,
            "recursive": self.recursive,
            "max_recursion_steps": self.max_recursion_steps,
            "case_sensitive": self.case_sensitive,
            "match_whole_words": self.match_whole_words,
        }
        return WorldbookConfig(**{k: v for k, v in given.items() if v is not None}, **fields)

    def lines_scanned(self) -> int:
        return DEFAULT_SCAN_DEPTH if self.scan_depth is None else self.scan_depth


DEFAULT_SETTINGS = WorldbookSettings(
    budget_share=DEFAULT_BUDGET_SHARE,
    scan_depth=DEFAULT_SCAN_DEPTH,
    recursive=True,
    max_recursion_steps=DEFAULT_RECURSION_STEPS,
    case_sensitive=False,
    match_whole_words=True,
)  # what an unset setting means (no token cap: the share alone)


@dataclass(frozen=True)
class WorldbookContext:
    """What the trigger looks at this turn.

    `text`: the recent dialogue to scan (oldest first). `emotions`: `original_emotion` of the recent lines,
    oldest first. `gap_seconds`: wall-clock time since the previous message. `now`: epoch seconds, for
    time decay. `last_fired_turns`: entry id → turn it last fired. Semantic entries are scored with
    `similarity(entry)` when given, else cosine of `query_vector` and `entry_vectors[entry.id]`."""

    text: str = ""
    emotions: Sequence[str] = ()
    current_turn: int = 0
    gap_seconds: float | None = None
    now: float | None = None
    last_fired_turns: Mapping[str, int] = field(default_factory=dict)
    query_vector: Sequence[float] | None = None
    entry_vectors: Mapping[str, Sequence[float]] = field(default_factory=dict)
    similarity: Callable[[WorldbookEntry], float | None] | None = None
    roll: Callable[[], float] | None = None  # a number in [0, 1) for an entry's probability (default random)
    lines: Sequence[str] = ()  # the recent lines, newest last (user message included), for a per-entry scan depth
    chat_lines: int | None = None  # lines on the dialogue path so far (an entry's delay); None: unknown


@dataclass(frozen=True)
class TriggeredEntry:
    """A fired entry: `trigger` is 'constant' or the trigger type, `reason` says why in words,
    `breakdown` holds the factors of `score`."""

    entry: WorldbookEntry
    score: float
    trigger: str
    reason: str
    matched: tuple[str, ...] = ()
    breakdown: Mapping[str, float] = field(default_factory=dict)

    @property
    def position(self) -> str | None:
        return self.entry.position


@dataclass(frozen=True)
class SkippedEntry:
    entry_id: str
    reason: str
    score: float | None = None


@dataclass(frozen=True)
class WorldbookResult:
    triggered: list[TriggeredEntry]
    skipped: list[SkippedEntry]


# --- matching -------------------------------------------------------------------------------------


def check_keyword(keyword: str) -> None:
    """Raise InvalidInput if `keyword` is a `/regex/` that does not compile."""
    key_pattern(keyword)


def contains_keyword(text: str, keyword: str, options: EntryOptions | None = None) -> bool:
    """Whether `keyword` occurs in `text`: substring for CJK, whole word for ASCII, case-insensitive, unless the
    entry's `options` say otherwise. `RegexTimeout` when a `/regex/` key runs past `REGEX_TIMEOUT_S`."""
    options = options or EntryOptions()
    return key_matches(text, keyword, bool(options.case_sensitive), options.match_whole_words is not False)


def matched_keywords(text: str, keywords: Iterable[str], options: EntryOptions | None = None) -> tuple[str, ...]:
    return tuple(k for k in keywords if contains_keyword(text, k, options))


def _matched(text: str, keywords: Iterable[str], flags: tuple[bool, bool]) -> tuple[str, ...]:
    return tuple(k for k in keywords if key_matches(text, k, flags[0], flags[1]))


def _match_flags(entry: WorldbookEntry, config: WorldbookConfig | None) -> tuple[bool, bool]:
    """(case-sensitive, whole words) of the entry's keys: its own, else the book's settings (`entry_options`)."""
    options = sillytavern_options(entry)
    case, whole = options.case_sensitive, options.match_whole_words
    if config is not None:
        case = config.case_sensitive if case is None else case
        whole = config.match_whole_words if whole is None else whole
    return bool(case), whole is not False


def entry_options(entry: WorldbookEntry, config: WorldbookConfig | None = None) -> EntryOptions:
    """The entry's options, its case sensitivity and whole words from the world book's settings when it has none."""
    options = sillytavern_options(entry)
    if config is None:
        return options
    return replace(
        options,
        case_sensitive=config.case_sensitive if options.case_sensitive is None else options.case_sensitive,
        match_whole_words=config.match_whole_words if options.match_whole_words is None else options.match_whole_words,
    )


def _secondary_ok(
    text: str, entry: WorldbookEntry, config: WorldbookConfig | None = None
) -> tuple[bool, tuple[str, ...]]:
    """SillyTavern's selectiveLogic over the secondary keywords (checked only after a primary hit)."""
    keys = [k for k in entry.secondary_keywords if k.strip()]
    if not keys:
        return True, ()
    hits = _matched(text, keys, _match_flags(entry, config))
    logic = entry.selective_logic
    if logic == "and_any":
        return bool(hits), hits
    if logic == "not_all":
        return len(hits) < len(keys), hits
    if logic == "not_any":
        return not hits, hits
    return len(hits) == len(keys), hits  # and_all


def keyword_score(
    text: str, entry: WorldbookEntry, config: WorldbookConfig | None = None
) -> tuple[float, tuple[str, ...], str | None]:
    """(score, primary hits, why-not) of the keyword rule; score 0 when it does not fire."""
    keys = [k for k in entry.keywords if k.strip()]
    if not keys:
        return 0.0, (), None
    hits = _matched(text, keys, _match_flags(entry, config))
    if not hits:
        return 0.0, (), None
    ok, secondary_hits = _secondary_ok(text, entry, config)
    if not ok:
        why = f"keyword {', '.join(hits)} hit but secondary keywords fail {entry.selective_logic}"
        return 0.0, hits, why
    return KEYWORD_HIT_FLOOR + (1 - KEYWORD_HIT_FLOOR) * len(hits) / len(keys), hits + secondary_hits, None


# --- emotions -------------------------------------------------------------------------------------


def _family_of(word: str) -> str | None:
    low = word.strip().lower()
    for family, words in EMOTION_FAMILIES.items():
        if low == family or low in words:
            return family
    return None


def _same_emotion(a: str, b: str) -> bool:
    a, b = a.strip().lower(), b.strip().lower()
    if not a or not b:
        return False
    if a == b:
        return True
    fa, fb = _family_of(a), _family_of(b)
    return fa is not None and fa == fb


def _negated(text: str, start: int) -> bool:
    before = text[max(0, start - 6) : start].lower()
    return any(before.endswith(neg) or before.endswith(neg + "太") for neg in NEGATIONS) or before.endswith("不是")


@lru_cache(maxsize=64)
def _emotions_in_text(text: str) -> tuple[str, ...]:
    return tuple(_scan_emotions(text))


def emotions_in_text(text: str) -> list[str]:
    """Emotion words found in `text` (lexicon words of `EMOTION_FAMILIES`), skipping negated ones."""
    return list(_emotions_in_text(text))


def _scan_emotions(text: str) -> list[str]:
    found: list[str] = []
    low = text.lower()
    for words in EMOTION_FAMILIES.values():
        for word in words:
            pattern = key_pattern(word)
            if pattern is None:
                continue
            for match in pattern.finditer(low):
                if not _negated(low, match.start()):
                    found.append(word)
                    break
    return found


def emotion_match(entry_emotions: Sequence[str], context: WorldbookContext) -> tuple[float, tuple[str, ...]]:
    """Best weight (0..1) with which any of `entry_emotions` is present now, and the signals that matched."""
    wanted = [e for e in entry_emotions if e.strip()]
    if not wanted:
        return 0.0, ()
    best = 0.0
    hits: list[str] = []
    labelled = [e for e in context.emotions if e and e.strip()]
    for distance, felt in enumerate(reversed(labelled)):
        if any(_same_emotion(w, felt) for w in wanted):
            weight = LINE_EMOTION_DECAY**distance
            if weight > best:
                best = weight
            hits.append(felt)
    for word in _emotions_in_text(context.text):
        if any(_same_emotion(w, word) or contains_keyword(word, w) for w in wanted):
            best = max(best, TEXT_EMOTION_WEIGHT)
            hits.append(word)
    return best, tuple(dict.fromkeys(hits))


# --- semantic / temporal / decay --------------------------------------------------------------------


def _similarity(entry: WorldbookEntry, context: WorldbookContext) -> float | None:
    if context.similarity is not None:
        return context.similarity(entry)
    vector = context.entry_vectors.get(entry.id)
    if context.query_vector is None or vector is None:
        return None
    # numpy (and retrieval, which needs it) only when a vector is compared: listing the book never loads it (issue 29)
    import numpy as np
    from personalab.nodes.rules.retrieval import cosine

    return cosine(np.asarray(context.query_vector, dtype=float), np.asarray(vector, dtype=float))


def temporal_fires(window: TemporalWindow, entry_id: str, context: WorldbookContext) -> tuple[bool, str]:
    """Whether every set condition of `window` holds now, and a description of what was checked."""
    parts: list[str] = []
    turn = context.current_turn
    if window.min_turn is not None or window.max_turn is not None:
        lo = window.min_turn if window.min_turn is not None else -math.inf
        hi = window.max_turn if window.max_turn is not None else math.inf
        if not lo <= turn <= hi:
            return False, f"turn {turn} outside {window.min_turn}..{window.max_turn}"
        parts.append(f"turn {turn} in {window.min_turn}..{window.max_turn}")
    if window.min_gap_seconds is not None or window.max_gap_seconds is not None:
        gap = context.gap_seconds
        if gap is None:
            return False, "no wall-clock gap known"
        lo = window.min_gap_seconds if window.min_gap_seconds is not None else -math.inf
        hi = window.max_gap_seconds if window.max_gap_seconds is not None else math.inf
        if not lo <= gap <= hi:
            return False, f"gap {gap:.0f}s outside window"
        parts.append(f"gap {gap:.0f}s")
    if window.min_turns_since_fired is not None:
        last = context.last_fired_turns.get(entry_id)
        if last is not None and turn - last < window.min_turns_since_fired:
            return False, f"fired {turn - last} turns ago"
        parts.append("never fired" if last is None else f"{turn - last} turns since last fired")
    if not parts:
        return False, "no time window set"
    return True, "; ".join(parts)


def gap_range(gap: str) -> tuple[float, float]:
    """The seconds a named gap of seed 003 (none / minutes / hours / days / long_absence) covers, [low, high)."""
    low = 0.0
    for upper, name in GAP_THRESHOLDS:
        if name == gap:
            return low, upper
        low = upper
    return low, math.inf  # the longest gap: beyond the last bound


def elapsed_seconds(measured: float | None, host_gap: str | None) -> float | None:
    """The elapsed time a turn's time windows see (seed 004 时间邻近性): the wall-clock time since the previous
    turn (None before the first); when the host named a gap (`time_gap`), the host is right: the measured time when
    it lies in that gap, else the gap's lower bound (a host that says "days" means at least a day)."""
    if host_gap is None:
        return measured
    low, high = gap_range(host_gap)
    return measured if measured is not None and low <= measured < high else low


def time_decay(entry: WorldbookEntry, now: float | None) -> float:
    """exp(-time_decay_factor x age in days); 1 without a factor, a creation time or a clock."""
    if entry.time_decay_factor <= 0 or entry.created_at is None or now is None:
        return 1.0
    age_days = max(0.0, now - entry.created_at) / SECONDS_PER_DAY
    return math.exp(-entry.time_decay_factor * age_days)


# --- the trigger ----------------------------------------------------------------------------------


def scanned_text(entry: WorldbookEntry, context: WorldbookContext) -> str:
    """What an entry's keys are matched in: the context's text, or the last `scanDepth` lines when the entry
    has its own scan depth (SillyTavern; 0 scans nothing) and the context has its lines."""
    depth = sillytavern_options(entry).scan_depth
    if depth is None or not context.lines:
        return context.text
    return "\n".join(context.lines[-depth:]) if depth > 0 else ""


def _base_score(
    entry: WorldbookEntry, context: WorldbookContext, config: WorldbookConfig
) -> tuple[float, str, tuple[str, ...], str | None]:
    """(trigger score, reason, matched, why-not-if-notable) for a non-constant entry."""
    kind = entry.trigger_type
    text = scanned_text(entry, context)
    if kind == "keyword":
        if not config.keyword_matching:
            return 0.0, "", (), None
        score, hits, why = keyword_score(text, entry, config)
        return score, f"keyword: {', '.join(hits)} ({len(hits)}/{len(entry.keywords)})", hits, why
    if kind == "semantic":
        if not config.semantic_similarity:
            return 0.0, "", (), None
        kw, hits, why = keyword_score(text, entry, config) if config.keyword_matching else (0.0, (), None)
        sim = _similarity(entry, context)
        sem = sim if sim is not None and sim >= config.semantic_threshold else 0.0
        if sem <= 0 and kw <= 0:
            if sim is None and why is None:
                why = "semantic entry without an embedding of the recent text or of the entry"
            return 0.0, "", (), why
        if sem >= kw:
            return sem, f"semantic: similarity {sem:.3f} >= {config.semantic_threshold}", hits, None
        return kw, f"keyword: {', '.join(hits)} (semantic entry)", hits, None
    if kind == "temporal":
        if not config.temporal_proximity:
            return 0.0, "", (), None
        fired, desc = temporal_fires(entry.temporal, entry.id, context)
        return (1.0, f"temporal: {desc}", (), None) if fired else (0.0, "", (), None)
    if kind == "emotional":
        if not config.emotional_relevance:
            return 0.0, "", (), None
        score, hits = emotion_match(entry.emotions, context)
        return score, f"emotional: {', '.join(hits)}", hits, None
    raise InvalidInput(f"entry {entry.id}: unknown trigger_type {kind!r}")


def timed_effect(entry: WorldbookEntry, context: WorldbookContext) -> tuple[str, str] | None:
    """SillyTavern's timed effects in turns: ("sticky", why) when the entry fired within its sticky turns (it stays
    in without its keys), ("blocked", why) while its delay or cooldown holds it back, None otherwise. The turn it
    last fired by its own trigger is `last_fired_turns` (kept with the story state, so it follows the branch)."""
    options = sillytavern_options(entry)
    if options.delay and context.chat_lines is not None and context.chat_lines < options.delay:
        return "blocked", f"delay: the chat has {context.chat_lines} of the {options.delay} lines it waits for"
    last = context.last_fired_turns.get(entry.id)
    if last is None or not (options.sticky or options.cooldown):
        return None
    since = context.current_turn - last
    if 0 < since <= options.sticky:
        return "sticky", f"sticky: fired at turn {last}, active {options.sticky} turns after"
    if options.sticky < since <= options.sticky + options.cooldown:
        ends = last + options.sticky + options.cooldown
        return "blocked", f"cooldown: {options.cooldown} turns after it was active (until turn {ends})"
    return None


def _score_entry(
    entry: WorldbookEntry,
    context: WorldbookContext,
    config: WorldbookConfig,
    roll: Callable[[], float],
    skipped: list[SkippedEntry],
) -> TriggeredEntry | None:
    """A non-constant entry's firing this turn (its trigger, threshold and probability), or None (a notable miss
    named in `skipped`)."""
    try:
        base, reason, hits, why = _base_score(entry, context, config)
    except RegexTimeout as exc:
        skipped.append(SkippedEntry(entry.id, str(exc)))
        return None
    if base <= 0:
        if why:
            skipped.append(SkippedEntry(entry.id, why))
        return None
    decay = time_decay(entry, context.now) if config.time_decay_enabled else 1.0
    boost = 1.0
    if config.emotional_boost_enabled and entry.emotions and entry.trigger_type != "emotional":
        match, _ = emotion_match(entry.emotions, context)
        boost = 1.0 + entry.emotional_weight * match
    score = base * entry.relevance_weight * decay * boost
    breakdown = {"trigger": base, "relevance_weight": entry.relevance_weight, "decay": decay, "boost": boost}
    if score < config.relevance_threshold:
        skipped.append(
            SkippedEntry(entry.id, f"{reason}; score {score:.3f} < threshold {config.relevance_threshold}", score)
        )
        return None
    if _lost_roll(entry, roll, skipped, score):
        return None
    return TriggeredEntry(entry, score, entry.trigger_type, reason, hits, breakdown)


def _delay_and_exclusion(entry: WorldbookEntry) -> tuple[int, bool]:
    """The entry's delay and "exclude from recursion", as `sillytavern_options` reads them, without reading the
    rest (a big book is prepared faster; the scan reads the whole options of the few entries it scores)."""
    source = entry.source
    if not source:
        return 0, False
    if entry.source_format == "character book":
        found = source.get("extensions")
        ext: dict[str, Any] = found if isinstance(found, dict) else {}
        return _timer(ext.get("delay")), _truthy(ext.get("exclude_recursion"))
    return _timer(source.get("delay")), _truthy(source.get("excludeRecursion"))


class PreparedWorldbook:
    """A book ready to scan (issue 28), built once per book version and reused across turns: its entries in
    order, every key in one automaton (`KeyIndex`), and which entries must be looked at on every turn whatever the
    text says (constant, temporal and emotional triggers, a delay). A turn scores only the entries one of whose keys
    occurs in its text, those, the semantic entries its vectors put at or above the threshold (or that have no
    vector), and those it has timers for: the entries it does not match cost nothing. The result is the one the
    plain loop over every entry gives (same entries, same order, same draws of the probability roll)."""

    def __init__(self, entries: Iterable[WorldbookEntry]) -> None:
        self.entries: list[WorldbookEntry] = list(entries)
        always: list[int] = []
        semantic: list[int] = []
        recursive: list[int] = []
        keys: list[tuple[str, ...]] = []
        self.positions: dict[str, list[int]] = {}
        for position, entry in enumerate(self.entries):
            self.positions.setdefault(entry.id, []).append(position)
            live = entry.enabled and bool(entry.content.strip())
            keyed = live and not entry.constant and entry.trigger_type in ("keyword", "semantic")
            keys.append(entry.keywords if keyed else ())
            if not live:
                continue
            delay, excluded = _delay_and_exclusion(entry)
            if entry.constant or delay or entry.trigger_type in ("temporal", "emotional"):
                always.append(position)
            elif entry.trigger_type == "semantic":
                semantic.append(position)
            if keyed and entry.keywords and not excluded:
                recursive.append(position)
        self.keys = KeyIndex(keys, [whole_words_option(entry) for entry in self.entries])
        self.always = tuple(always)
        self.semantic = tuple(semantic)
        self.recursive = frozenset(recursive)
        # the semantic entries' vectors per embedding model, filled once by the store that embeds them
        self.vectors: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def key_hits(self, text: str, config: WorldbookConfig) -> set[int]:
        return self.keys.candidates(text, config.match_whole_words)

    def open_semantic(self, context: WorldbookContext, config: WorldbookConfig) -> set[int]:
        """The semantic entries the similarity may fire this turn: at or above the threshold, or without a vector
        (named in the debug as such)."""
        if not config.semantic_similarity:
            return set()
        out: set[int] = set()
        for position in self.semantic:
            similarity = _similarity(self.entries[position], context)
            if similarity is None or similarity >= config.semantic_threshold:
                out.add(position)
        return out

    def timed(self, context: WorldbookContext) -> set[int]:
        """The entries with a firing turn on record (their sticky or cooldown turns may hold)."""
        return {position for entry_id in context.last_fired_turns for position in self.positions.get(entry_id, ())}


def prepared(entries: Iterable[WorldbookEntry] | PreparedWorldbook) -> PreparedWorldbook:
    return entries if isinstance(entries, PreparedWorldbook) else PreparedWorldbook(entries)


def _all_text(context: WorldbookContext) -> str:
    """Every text an entry's keys may be matched in this turn (the recent text and the lines of a deeper scan)."""
    return "\n".join((context.text, *context.lines))


def recursion(
    book: PreparedWorldbook,
    missed: set[str],
    fired: list[TriggeredEntry],
    context: WorldbookContext,
    config: WorldbookConfig,
    roll: Callable[[], float],
    skipped: list[SkippedEntry],
    reach: set[int],
) -> list[TriggeredEntry]:
    """SillyTavern's recursive scanning: the content of the entries that fired (not those that prevent recursion)
    is scanned, with the recent text, for the keys of the entries that did not (not those excluded from recursion),
    step by step, at most `config.max_recursion_steps` steps. Each entry fires once, so a loop (A names B, B names
    A) ends; entries a further step would still have activated are named with the limit. `reach`: the entries the
    turn's own text or vectors may fire; each step adds those whose keys the scanned content holds."""
    done = {item.entry.id for item in fired}
    found: list[TriggeredEntry] = []
    buffer = [item.entry.content for item in fired if not sillytavern_options(item.entry).prevent_recursion]
    step = 0
    while buffer:
        scanned = "\n".join(buffer)
        reach = reach | book.key_hits(scanned, config)
        waiting = [
            book.entries[position]
            for position in sorted(reach & book.recursive)
            if book.entries[position].id not in done and book.entries[position].id not in missed
        ]
        if not waiting:
            break
        deeper = replace(context, text=f"{context.text}\n{scanned}", lines=(*context.lines, scanned))
        if step >= config.max_recursion_steps:
            reached = [e.id for e in waiting if keyword_score(scanned_text(e, deeper), e, config)[0] > 0]
            for entry_id in reached:
                skipped.append(
                    SkippedEntry(entry_id, f"recursion stopped at its limit of {config.max_recursion_steps} steps")
                )
            break
        step += 1
        new: list[TriggeredEntry] = []
        for entry in waiting:
            item = _score_entry(entry, deeper, config, roll, skipped)
            if item is not None:
                reason = f"recursion step {step}: {item.reason}"
                new.append(TriggeredEntry(entry, item.score, item.trigger, reason, item.matched, item.breakdown))
        done.update(item.entry.id for item in new)
        found.extend(new)
        buffer = [item.entry.content for item in new if not sillytavern_options(item.entry).prevent_recursion]
    return found


def explain_worldbook(
    entries: Iterable[WorldbookEntry] | PreparedWorldbook,
    context: WorldbookContext,
    config: WorldbookConfig | None = None,
) -> WorldbookResult:
    """The fired entries, ordered for injection, plus the notable ones that did not make it and why
    (below the threshold, over the per-kind maximum, secondary keywords failed, no embedding, held back by a delay
    or cooldown, recursion at its limit). Entries that simply do not match are not listed. An entry in its sticky
    turns is in with trigger "sticky"; entries named in the content of those that fired come in by recursion.
    `entries` may be a `PreparedWorldbook` (built once per book version): only the entries the turn can match are
    looked at."""
    config = config or WorldbookConfig()
    if not config.enabled:
        return WorldbookResult([], [])
    book = prepared(entries)
    fired: list[TriggeredEntry] = []
    skipped: list[SkippedEntry] = []
    roll = context.roll or random.random
    reach = book.key_hits(_all_text(context), config) | book.open_semantic(context, config)
    for position in sorted(reach | set(book.always) | book.timed(context)):  # the book's order: same rolls
        entry = book.entries[position]
        if not entry.enabled or not entry.content.strip():
            continue
        timed = timed_effect(entry, context)
        if timed is not None:
            effect, why = timed
            if effect == "sticky":
                fired.append(TriggeredEntry(entry, 1.0, "sticky", why, (), {"trigger": 1.0}))
            else:
                skipped.append(SkippedEntry(entry.id, why))
            continue
        if entry.constant:
            if _lost_roll(entry, roll, skipped):
                continue
            fired.append(TriggeredEntry(entry, 1.0, "constant", "constant entry", (), {"trigger": 1.0}))
            continue
        if sillytavern_options(entry).delay_until_recursion:
            continue  # only the content of other entries can activate it
        item = _score_entry(entry, context, config, roll, skipped)
        if item is not None:
            fired.append(item)
    if config.recursive and fired:
        missed = {item.entry_id for item in skipped}  # a lost roll or failed secondary keys is not tried again
        fired.extend(recursion(book, missed, fired, context, config, roll, skipped, reach))

    fired = inclusion_groups(fired, roll, skipped)
    fired.sort(key=lambda t: (t.trigger != "constant", -t.entry.priority, -t.score))
    kept: list[TriggeredEntry] = []
    per_kind: dict[str, int] = {}
    for item in fired:
        # SillyTavern's entries have no memory kind of their own (an import makes them all one kind): their
        # budget, not a per-kind maximum, decides how many go in
        if item.trigger != "constant" and item.entry.source is None:
            limit = config.max_per_kind.get(item.entry.kind)
            count = per_kind.get(item.entry.kind, 0)
            if limit is not None and count >= limit:
                skipped.append(
                    SkippedEntry(item.entry.id, f"over the maximum of {limit} '{item.entry.kind}' entries", item.score)
                )
                continue
            per_kind[item.entry.kind] = count + 1
        kept.append(item)
    return WorldbookResult(kept, skipped)


def inclusion_groups(
    fired: list[TriggeredEntry], roll: Callable[[], float], skipped: list[SkippedEntry]
) -> list[TriggeredEntry]:
    """SillyTavern's inclusion groups: of the fired entries sharing a group, one goes in: the highest order of
    those marked "prioritise" (groupOverride), else one drawn with the entries' group weights. The others are
    named with the group and the winner."""
    by_group: dict[str, list[TriggeredEntry]] = {}
    for item in fired:
        for group in sillytavern_options(item.entry).groups:
            by_group.setdefault(group, []).append(item)
    out = {id(item) for item in fired}
    for group, members in by_group.items():
        members = [m for m in members if id(m) in out]
        if len(members) < 2:
            continue
        options = {id(m): sillytavern_options(m.entry) for m in members}
        first = [m for m in members if options[id(m)].group_override]
        if first:
            winner = max(first, key=lambda m: (m.entry.priority, m.score))
            how = "prioritised, highest order"
        else:
            total = sum(options[id(m)].group_weight for m in members)
            point, winner = roll() * total, members[-1]
            for member in members:
                point -= options[id(member)].group_weight
                if point < 0:
                    winner = member
                    break
            how = f"drawn by weight {options[id(winner)].group_weight:g} of {total:g}"
        for member in members:
            if member is not winner:
                out.discard(id(member))
                reason = f"inclusion group {group!r}: entry {winner.entry.id} went in ({how})"
                skipped.append(SkippedEntry(member.entry.id, reason, member.score))
    return [item for item in fired if id(item) in out]


def _lost_roll(
    entry: WorldbookEntry, roll: Callable[[], float], skipped: list[SkippedEntry], score: float | None = None
) -> bool:
    """SillyTavern's probability: a triggered entry goes in with `probability` percent; one that loses its roll
    is named with the roll."""
    chance = sillytavern_options(entry).probability
    if chance >= 100:
        return False
    rolled = roll() * 100
    if rolled < chance:
        return False
    skipped.append(SkippedEntry(entry.id, f"probability {chance:g}%: rolled {rolled:.0f}", score))
    return True


def trigger_worldbook(
    entries: Iterable[WorldbookEntry], context: WorldbookContext, config: WorldbookConfig | None = None
) -> list[TriggeredEntry]:
    """Seed 004 触发引擎: the entries that fire this turn, each with its score and why it fired."""
    return explain_worldbook(entries, context, config).triggered


# --- context and rendering ------------------------------------------------------------------------


def _field(line: Any, name: str) -> Any:
    if isinstance(line, Mapping):
        return line.get(name)
    return getattr(line, name, None)


def context_from_lines(
    lines: Sequence[Any],
    *,
    user_message: str = "",
    depth: int = DEFAULT_SCAN_DEPTH,
    current_turn: int = 0,
    gap_seconds: float | None = None,
    now: float | None = None,
    last_fired_turns: Mapping[str, int] | None = None,
    chat_lines: int | None = None,
) -> WorldbookContext:
    """A context from the last `depth` lines (dicts or `Line` rows, oldest first) plus the new user message.
    Each line is scanned as `display_name: content` when it has a display name (SillyTavern's "include
    names", so entries keyed on a character's name fire when that character speaks)."""
    every = [
        f"{_field(line, 'display_name')}: {_field(line, 'content') or ''}"
        if _field(line, "display_name")
        else _field(line, "content") or ""
        for line in list(lines)[-MAX_SCAN_DEPTH:]
    ]
    recent = list(lines)[-depth:] if depth > 0 else []
    texts = every[-depth:] if depth > 0 else []
    emotions: list[str] = []
    for line in recent:
        emotion = _field(line, "original_emotion")
        if emotion:
            emotions.append(str(emotion))
    if user_message:
        texts.append(user_message)
        every.append(user_message)
    return WorldbookContext(
        text="\n".join(texts),
        lines=tuple(every),
        emotions=tuple(emotions),
        current_turn=current_turn,
        gap_seconds=gap_seconds,
        now=now,
        last_fired_turns=dict(last_fired_turns or {}),
        chat_lines=chat_lines,
    )


def render_entry(item: TriggeredEntry, config: WorldbookConfig) -> str:
    """One entry through the config's template."""
    entry = item.entry
    return config.template.format(
        content=entry.content.strip(),
        title=entry.title,
        kind=KIND_LABELS.get(entry.kind, entry.kind),
        trigger=item.trigger,
        keywords=", ".join(entry.keywords),
    )


def group_label(item: TriggeredEntry, config: WorldbookConfig) -> str:
    """The heading an entry is shown under: the world-book heading, per kind when `separate_by_type`."""
    if config.separate_by_type:
        return f"{config.heading}·{KIND_LABELS.get(item.entry.kind, item.entry.kind)}"
    return config.heading


def entry_position(item: TriggeredEntry, config: WorldbookConfig) -> str:
    return item.entry.position or config.inject_position


def validate_entry(entry: WorldbookEntry | Mapping[str, Any], where: str) -> WorldbookEntry:
    """The entry as it can be stored: its fields as the model checks them (a mapping is validated here), and
    the signal its trigger fires on (a keyword entry needs a keyword, a temporal entry a time window, an
    emotional entry an emotion; a constant entry needs none). `InvalidInput` naming `where` and the field."""
    if not isinstance(entry, WorldbookEntry):
        entry = WorldbookEntry.parse(entry, where)
    check_storable(entry, where)
    if entry.constant:
        return entry
    if entry.trigger_type == "keyword" and not entry.keywords:
        raise InvalidInput(f"{where}: a keyword entry needs at least one keyword (field 'keywords')")
    if entry.trigger_type == "temporal" and entry.temporal.is_empty():
        raise InvalidInput(f"{where}: a temporal entry needs a time window (field 'temporal')")
    if entry.trigger_type == "emotional" and not entry.emotions:
        raise InvalidInput(f"{where}: an emotional entry needs at least one emotion (field 'emotions')")
    return entry
