"""The post-turn review's data (seed 003, ReviewPipeline 审查管道): what goes in, what comes out, the settings.

Inputs (`ReviewInput`, its parts, `ReviewConfig`) are pydantic models: built from keywords or from a mapping
(`from_dict`), unknown keys refused. Results (`RelationshipDelta`, `QualityScores`, `LLMAssessment`,
`ReviewOutput`) are frozen pydantic dataclasses: positional construction like the seed's host code,
`dataclasses.replace` and `asdict` work, and every construction is validated. Either way a bad value raises
`InvalidInput` (a `ValueError`) naming the field path and the problem — never pydantic's `ValidationError`,
which the CLI would take for a bug.

What the seed leaves open about the input, decided here:
- `real_time_context` None, without `gap`, or with gap None means gap "none".
- Bad input raises when the `ReviewInput` is constructed (so the pipeline never sees it): a
  `selected_choice.level` outside normal / important / turning_point / ending, a `real_time_context.gap`
  outside none / minutes / hours / days / long_absence, a choice without `level`, missing or blank ids, a
  bool id, non-text messages, or `ai_reply` and `assistant_message` both given and different.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Literal, Self, TypeVar, get_args

from personalab.nodes.rules.errors import InvalidInput
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic.dataclasses import dataclass

ChoiceLevelName = Literal["normal", "important", "turning_point", "ending"]
GapName = Literal["none", "minutes", "hours", "days", "long_absence"]
CHOICE_LEVELS: tuple[str, ...] = get_args(ChoiceLevelName)  # seed 003 剧情选择 levels
GAPS: tuple[str, ...] = get_args(GapName)  # seed 003 real_time_context.gap values

# One short sentence per decision in `ReviewOutput.reasons`.
REASON_KEYS: tuple[str, ...] = (
    "memory_value",
    "should_write_memory",
    "relationship",
    "plot_node",
    "worldbook",
    "skipped",
)

_T = TypeVar("_T")


# ------------------------------------------------------------------------------------ errors as InvalidInput


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def invalid_input(exc: ValidationError, where: str | None = None, allowed: Iterable[str] = ()) -> InvalidInput:
    """pydantic's `ValidationError` as one `InvalidInput`: each problem as `Where.field.path problem`.

    Our validators' own sentences ("must be one of …") follow the path directly; a missing field reads
    "Where.parent needs a 'field'"; unknown keys are listed together (with `allowed`, when given);
    pydantic's other messages follow a colon, with the value given.
    """
    where = where or exc.title
    problems: list[str] = []
    unknown: list[str] = []
    missing: dict[str, list[str]] = {}  # parent path → its missing fields, named together
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        path = ".".join(str(part) for part in loc)
        name = f"{where}.{path}" if path else where
        if loc and loc[-1] == "[key]":  # a mapping's key, not a value: loc is (..., key, "[key]")
            name = f"{where}.{'.'.join(str(part) for part in loc[:-2])} key"
        kind = error["type"]
        if kind in ("extra_forbidden", "unexpected_keyword_argument"):
            unknown.append(path)
        elif kind == "value_error":
            problems.append(f"{name} {error['ctx']['error']}")
        elif kind == "missing":
            parent, _, field = path.rpartition(".")
            missing.setdefault(f"{where}.{parent}" if parent else where, []).append(repr(field))
        else:
            problems.append(f"{name}: {error['msg']}, got {_short(error['input'])}")
    for owner, fields in missing.items():
        problems.append(f"{owner} needs a {fields[0]}" if len(fields) == 1 else f"{owner} needs {', '.join(fields)}")
    if unknown:
        listed = f"; allowed: {', '.join(sorted(allowed))}" if allowed else ""
        problems.insert(0, f"{where} got unknown fields {sorted(unknown)}{listed}")
    return InvalidInput("; ".join(problems))


class Entity(BaseModel):
    """A frozen pydantic model whose bad input raises `InvalidInput`, built directly or with `from_dict`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid_input(exc) from None

    # pydantic calls a model's own __init__ when it validates the model from a dict (a nested part, or
    # model_validate), and would then wrap our InvalidInput in a ValidationError. Marked as a base __init__
    # (what pydantic marks its own with), it is used only for direct construction.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Build from a mapping (graph state, JSON); unknown keys and bad values raise `InvalidInput`."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise invalid_input(exc, cls.__name__, cls.model_fields) from None


def raises_invalid_input(cls: type[_T]) -> type[_T]:
    """A pydantic dataclass whose construction (and `dataclasses.replace`) raises `InvalidInput`."""
    validate: Callable[..., None] = cls.__init__
    names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        positional = names[: len(args)]
        if len(args) <= len(names) and not kwargs.keys() & set(positional):
            # by name, so that an error names the field, not the argument's position
            kwargs = {**dict(zip(positional, args, strict=True)), **kwargs}
            args = ()
        try:
            validate(self, *args, **kwargs)
        except ValidationError as exc:
            raise invalid_input(exc, cls.__name__) from None

    __init__.__doc__ = validate.__doc__
    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def value_from_dict(cls: type[_T], data: Mapping[str, Any]) -> _T:
    """A result dataclass read back from its `asdict` (graph state, JSON); bad data raises `InvalidInput`."""
    adapter = _ADAPTERS.get(cls) or _ADAPTERS.setdefault(cls, TypeAdapter(cls))
    try:
        result: _T = adapter.validate_python(data)
        return result
    except ValidationError as exc:
        raise invalid_input(exc, cls.__name__, (f.name for f in dataclasses.fields(cls))) from None  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- field types


def _one_of(allowed: tuple[str, ...]) -> Callable[[object], object]:
    def check(value: object) -> object:
        if not isinstance(value, str) or value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}, got {_short(value)}")
        return value

    return check


def _id(value: object) -> object:
    # bool is an int in Python, but True is no conversation id
    if isinstance(value, bool) or not isinstance(value, str | int) or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"must be a non-empty string or an integer, got {_short(value)}")
    return value


def _keyword(value: str) -> str:
    if not value.strip():
        raise ValueError(f"is an empty keyword (it would match every message), got {value!r}")
    return value


# The validators raise ValueError, pydantic's way to reject a value; `invalid_input` turns it into InvalidInput.
ChoiceLevel = Annotated[ChoiceLevelName, BeforeValidator(_one_of(CHOICE_LEVELS))]
Gap = Annotated[GapName, BeforeValidator(_one_of(GAPS))]
Id = Annotated[str | int, BeforeValidator(_id)]
Score = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Keywords = tuple[Annotated[StrictStr, AfterValidator(_keyword)], ...]
RelationshipKey = Literal["trust", "affection", "familiarity"]


# --------------------------------------------------------------------------------------------- config


class ReviewConfig(Entity):
    """Every number and word list of the rule review; the defaults are the seed's tables."""

    # 关系变化判断: the seed's words (its "…" leaves the lists open; extend them here). A list, not one
    # string; an empty keyword is refused (it is a substring of every message).
    trust_keywords: Keywords = ("谢谢", "感谢", "信任", "放心")
    affection_keywords: Keywords = ("喜欢", "爱", "想你", "宝贝")
    negative_keywords: Keywords = ("讨厌", "烦死", "滚", "生气")
    choice_relationship: dict[ChoiceLevel, dict[RelationshipKey, int]] = {
        "important": {"trust": 1, "affection": 1},
        "turning_point": {"trust": 1, "affection": 2},
    }
    familiarity_per_turn: int = 1
    familiarity_long_gap: int = 1

    # 记忆价值计算
    choice_memory_value: dict[ChoiceLevel, Score] = {"important": 0.8, "turning_point": 0.9, "ending": 0.95}
    long_message_chars: NonNegativeInt = 100
    long_message_bonus: Score = 0.3
    medium_message_chars: NonNegativeInt = 50
    medium_message_bonus: Score = 0.2
    trust_keyword_bonus: Score = 0.2
    affection_keyword_bonus: Score = 0.2
    gap_memory_value: dict[Gap, Score] = {"days": 0.65, "long_absence": 0.75}

    # 记忆写入判断 / 跳过逻辑
    write_memory_threshold: float = 0.65
    write_total_delta_threshold: int = 3
    skip_memory_threshold: float = 0.3

    # 质量评分 (the seed names only the basis of each score; these scales are ours). pydantic copies these
    # mapping defaults for every config, so no two configs share one.
    story_progress: dict[ChoiceLevel, Score] = {"normal": 0.2, "important": 0.6, "turning_point": 0.9, "ending": 1.0}
    relationship_progress_full_delta: PositiveInt = 5
    engagement_full_chars: PositiveInt = 100

    # LLM mode: larger per-turn deltas in an answer are taken as a broken answer
    llm_max_abs_delta: NonNegativeInt = 5


DEFAULT_CONFIG = ReviewConfig()


# ---------------------------------------------------------------------------------------------- input


class SelectedChoice(Entity):
    """The plot choice the user picked (seed 003 selected_choice); the host's other keys (id, text, …) kept."""

    model_config = ConfigDict(extra="allow")
    level: ChoiceLevel


class RealTimeContext(Entity):
    """Real time since the previous turn (seed 003 real_time_context); other keys (seconds, …) kept."""

    model_config = ConfigDict(extra="allow")
    gap: Gap | None = None


class ReviewInput(Entity):
    """One finished turn (seed 003, 基本用法 and 与 CharacterRuntime 集成).

    `ai_reply` (the seed's usage example) is accepted as another name for `assistant_message`.
    """

    conversation_id: Id
    character_id: Id
    user_id: Id
    user_message: StrictStr
    assistant_message: StrictStr = ""
    selected_choice: SelectedChoice | None = None
    turn_context: Annotated[dict[Any, Any], BeforeValidator(lambda value: {} if value is None else value)] = Field(
        default_factory=dict
    )
    real_time_context: RealTimeContext | None = None

    def __init__(
        self,
        conversation_id: str | int,
        character_id: str | int,
        user_id: str | int,
        user_message: str,
        assistant_message: str | None = None,
        selected_choice: Mapping[str, Any] | SelectedChoice | None = None,
        turn_context: Mapping[str, Any] | None = None,
        real_time_context: Mapping[str, Any] | RealTimeContext | None = None,
        *,
        ai_reply: str | None = None,
    ) -> None:
        # The seed's constructor, positional arguments included; validation is the model's.
        super().__init__(
            conversation_id=conversation_id,
            character_id=character_id,
            user_id=user_id,
            user_message=user_message,
            assistant_message=assistant_message,
            selected_choice=selected_choice,
            turn_context=turn_context,
            real_time_context=real_time_context,
            ai_reply=ai_reply,
        )

    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]  # see Entity.__init__

    @model_validator(mode="before")
    @classmethod
    def _one_reply(cls, data: Any) -> Any:
        """`ai_reply` folded into `assistant_message`; None for either means not given."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        reply = data.pop("ai_reply", None)
        given = data.get("assistant_message")
        if given is not None and reply is not None and given != reply:
            raise ValueError("got both assistant_message and ai_reply, and they differ; give one")
        if given is None:
            data.pop("assistant_message", None)
            if reply is not None:
                data["assistant_message"] = reply
        return data

    @property
    def ai_reply(self) -> str:
        return self.assistant_message

    @property
    def choice_level(self) -> ChoiceLevelName | None:
        """The selected choice's level, None when the user picked no choice."""
        return None if self.selected_choice is None else self.selected_choice.level

    @property
    def gap(self) -> GapName:
        """The real-time gap since the previous turn; "none" when unknown."""
        if self.real_time_context is None:
            return "none"
        return self.real_time_context.gap or "none"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Build from a mapping (graph state, JSON); `ai_reply` allowed, other unknown keys raise `InvalidInput`."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise invalid_input(exc, cls.__name__, [*cls.model_fields, "ai_reply"]) from None

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the LLM prompt shows it): the choice and the time context as dicts."""
        return self.model_dump()


# --------------------------------------------------------------------------------------------- output

_RESULT = ConfigDict(extra="forbid")


@raises_invalid_input
@dataclass(frozen=True, config=_RESULT)
class RelationshipDelta:
    """Per-turn change of the three relationship values (seed 003, 关系变化判断)."""

    trust: StrictInt = 0
    affection: StrictInt = 0
    familiarity: StrictInt = 0

    @property
    def total(self) -> int:
        """total_delta: the sum of absolute changes (记忆写入判断 "关系总变化量")."""
        return abs(self.trust) + abs(self.affection) + abs(self.familiarity)

    def __bool__(self) -> bool:
        # The seed's host code does `if output.relationship_delta:` — true when anything changed.
        return self.total > 0

    def to_dict(self) -> dict[str, int]:
        return {"trust": self.trust, "affection": self.affection, "familiarity": self.familiarity}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RelationshipDelta:
        """From a mapping of trust / affection / familiarity (integers; a missing one is 0)."""
        return value_from_dict(cls, data)


@raises_invalid_input
@dataclass(frozen=True, config=_RESULT)
class QualityScores:
    """质量评分: four scores from the rules, four from the cached LLM assessment (None without one)."""

    memory_value: Score
    story_progress: Score
    relationship_progress: Score
    user_engagement: Score
    character_fidelity: Score | None = None
    immersion: Score | None = None
    world_consistency: Score | None = None
    risk: Score | None = None


@raises_invalid_input
@dataclass(frozen=True, config=_RESULT)
class LLMAssessment:
    """The four quality scores only a model can judge (the seed's AutoState cache entries)."""

    character_fidelity: Score
    immersion: Score
    world_consistency: Score
    risk: Score


@raises_invalid_input
@dataclass(frozen=True, config=_RESULT)
class ReviewOutput:
    """The review of one turn. `to_dict()` is JSON-serialisable (graph state, `--json` output).

    `reasons` has one short sentence per decision (keys in `REASON_KEYS`); `source` is "rule" or "llm";
    `fallback_reason` says why LLM mode returned the rule result (None otherwise); `participant_deltas`: the
    model's relation changes for the scene's other participants (LLM mode only).
    """

    skipped: bool
    should_write_memory: bool
    memory_value: Score
    relationship_delta: RelationshipDelta
    total_delta: NonNegativeInt
    suggest_plot_node: bool
    suggest_worldbook_update: bool
    quality: QualityScores
    reasons: dict[str, str]
    choice_level: ChoiceLevel | None = None
    gap: Gap = "none"
    matched_keywords: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    source: Literal["rule", "llm"] = "rule"
    fallback_reason: str | None = None
    # issue 26, LLM mode: the model's change of the character's relation to each other participant of the turn
    # (identity → delta); empty in rule mode and for a participant the model left out (the rules score those:
    # `review.relations.apply_relations`)
    participant_deltas: dict[str, RelationshipDelta] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReviewOutput:
        """The inverse of `to_dict` (e.g. reading the review back from graph state)."""
        return value_from_dict(cls, data)
