"""Seed 004 MemoryTriggerConfig as data a user sets (issue 23): per scope (global, a character, an instance), the
effective value of each field the most specific one set, live from the next turn.

The seed's fields, in snake case: `enabled`; `triggerStrategies` → `keyword_matching`, `semantic_similarity`,
`temporal_proximity`, `emotional_relevance`; `retrievalConfig` → `max_per_type` (episodic / semantic / trait /
goal), `relevance_threshold`, `time_decay_enabled`, `emotional_boost_enabled`; `injectionConfig` →
`max_total_length` (in tokens, like every budget of the prompt), `inject_position`, `template`,
`separate_by_type`. They are what the world-book trigger (`nodes.rules.worldbook.WorldbookConfig`) reads: the
seed's trigger-driven memory is the world book's engine. A field left unset (None) is the wider scope's, else
the code default (`DEFAULTS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.worldbook import KINDS, Kind, Position, WorldbookConfig
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, ValidationError, field_validator

MAX_PER_TYPE = 100  # entries of one kind in a prompt: more would not fit any budget
MAX_TEMPLATE_CHARS = 2_000
MAX_TOTAL_LENGTH = 1_000_000  # tokens

Limit = Annotated[StrictInt, Field(ge=0, le=MAX_PER_TYPE)]

GLOBAL_LABEL = "global"
DEFAULT_LABEL = "default"


class TriggerConfig(BaseModel):
    """The trigger configuration set on one scope; None = not set here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: StrictBool | None = Field(default=None, description="the world-book / memory trigger at all")
    keyword_matching: StrictBool | None = Field(default=None, description="strategy: keywords (关键词匹配)")
    semantic_similarity: StrictBool | None = Field(default=None, description="strategy: similarity (语义相似度)")
    temporal_proximity: StrictBool | None = Field(default=None, description="strategy: time windows (时间邻近性)")
    emotional_relevance: StrictBool | None = Field(default=None, description="strategy: emotions (情感相关性)")
    max_per_type: dict[Kind, Limit] | None = Field(
        default=None, description="most entries of each memory type fired per turn (episodic, semantic, trait, goal)"
    )
    relevance_threshold: Annotated[StrictFloat | StrictInt, Field(ge=0, le=1, allow_inf_nan=False)] | None = Field(
        default=None, description="score an entry needs to fire, 0..1"
    )
    time_decay_enabled: StrictBool | None = None
    emotional_boost_enabled: StrictBool | None = None
    max_total_length: Annotated[StrictInt, Field(ge=0, le=MAX_TOTAL_LENGTH)] | None = Field(
        default=None, description="tokens the fired entries may take at most (seed maxTotalLength)"
    )
    inject_position: Position | None = Field(default=None, description="system, user or assistant")
    template: Annotated[str, Field(min_length=1, max_length=MAX_TEMPLATE_CHARS)] | None = Field(
        default=None, description="one entry as text: {content} {title} {kind} {trigger} {keywords}"
    )
    separate_by_type: StrictBool | None = Field(default=None, description="one heading per memory type")

    @field_validator("template")
    @classmethod
    def _placeholders(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if "\x00" in value:
            raise ValueError("contains a NUL character")
        try:
            value.format(content="", title="", kind="", trigger="", keywords="")
        except (KeyError, IndexError, ValueError, AttributeError) as exc:
            raise ValueError(f"unknown or malformed placeholder ({exc})") from None
        return value

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELDS}

    def set_fields(self) -> dict[str, Any]:
        """The fields set on this scope (JSON data: what is stored)."""
        return {name: value for name, value in self.model_dump(mode="json").items() if value is not None}


FIELDS: tuple[str, ...] = tuple(TriggerConfig.model_fields)

_defaults = WorldbookConfig()
DEFAULTS = TriggerConfig(
    enabled=_defaults.enabled,
    keyword_matching=_defaults.keyword_matching,
    semantic_similarity=_defaults.semantic_similarity,
    temporal_proximity=_defaults.temporal_proximity,
    emotional_relevance=_defaults.emotional_relevance,
    max_per_type=dict(_defaults.max_per_kind),  # type: ignore[arg-type]
    relevance_threshold=_defaults.relevance_threshold,
    time_decay_enabled=_defaults.time_decay_enabled,
    emotional_boost_enabled=_defaults.emotional_boost_enabled,
    max_total_length=None,  # no cap of its own: the world book's budget share (its settings) applies
    inject_position=_defaults.inject_position,  # type: ignore[arg-type]
    template=_defaults.template,
    separate_by_type=_defaults.separate_by_type,
)
"""What an unset field means: the code's defaults, the world-book trigger's (`WorldbookConfig`)."""


def parse_trigger_config(data: Any) -> TriggerConfig:
    """`data` (field → value, None unsets) as a `TriggerConfig`; `InvalidInput` naming the field
    (``trigger_config.relevance_threshold: …``) on the first bad one."""
    if not isinstance(data, Mapping):
        raise InvalidInput(f"trigger_config: expected an object of settings, got {type(data).__name__}")
    unknown = sorted(str(name) for name in data if name not in FIELDS)
    if unknown:
        raise InvalidInput(f"trigger_config.{unknown[0]}: unknown setting (one of {', '.join(FIELDS)})")
    try:
        return TriggerConfig.model_validate(dict(data))
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        # the field, and for the per-type maxima the type; not pydantic's own steps (union arms, "[key]")
        loc = [str(part) for part in error["loc"]]
        where = ".".join(loc[:2] if loc[0] == "max_per_type" and len(loc) > 1 else loc[:1])
        raise InvalidInput(f"trigger_config.{where}: {error['msg']}") from None


def merge(changes: Mapping[str, Any], current: TriggerConfig, *, clear: bool = False) -> TriggerConfig:
    """`current` with `changes` (None unsets a field) over it, after `clear` unsets all, validated whole.
    `max_per_type` is merged per type: setting one type's limit keeps the others set."""
    if not isinstance(changes, Mapping):
        raise InvalidInput(f"trigger_config: expected an object of settings, got {type(changes).__name__}")
    unknown = sorted(str(name) for name in changes if name not in FIELDS)
    if unknown:
        raise InvalidInput(f"trigger_config.{unknown[0]}: unknown setting (one of {', '.join(FIELDS)})")
    base = {} if clear else current.set_fields()
    merged: dict[str, Any] = {**base}
    for name, value in changes.items():
        if name == "max_per_type" and isinstance(value, Mapping) and isinstance(base.get(name), Mapping):
            merged[name] = {**base[name], **value}
        else:
            merged[name] = value
    return parse_trigger_config({name: value for name, value in merged.items() if value is not None})


def effective(layers: list[tuple[str, TriggerConfig]]) -> tuple[TriggerConfig, dict[str, str]]:
    """The config in effect from `layers` (label, config), most specific first, over `DEFAULTS`: each field
    the first one set (`max_per_type` per type), and where each came from (`max_per_type.goal`: per type)."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in FIELDS:
        if name == "max_per_type":
            limits: dict[str, int] = {}
            for kind in KINDS:
                for label, config in [*layers, (DEFAULT_LABEL, DEFAULTS)]:
                    if config.max_per_type is not None and kind in config.max_per_type:
                        limits[kind] = config.max_per_type[kind]
                        sources[f"max_per_type.{kind}"] = label
                        break
            values[name] = limits
            continue
        for label, config in [*layers, (DEFAULT_LABEL, DEFAULTS)]:
            value = getattr(config, name)
            if value is not None:
                values[name], sources[name] = value, label
                break
        else:
            values[name], sources[name] = None, DEFAULT_LABEL
    return TriggerConfig.model_validate(values), sources


def worldbook_fields(config: TriggerConfig) -> dict[str, Any]:
    """What an effective config sets of the world-book trigger's `WorldbookConfig` (its field names)."""
    fields: dict[str, Any] = {
        "enabled": config.enabled,
        "keyword_matching": config.keyword_matching,
        "semantic_similarity": config.semantic_similarity,
        "temporal_proximity": config.temporal_proximity,
        "emotional_relevance": config.emotional_relevance,
        "max_per_kind": dict(config.max_per_type) if config.max_per_type is not None else None,
        "relevance_threshold": config.relevance_threshold,
        "time_decay_enabled": config.time_decay_enabled,
        "emotional_boost_enabled": config.emotional_boost_enabled,
        "inject_position": config.inject_position,
        "template": config.template,
        "separate_by_type": config.separate_by_type,
    }
    return {name: value for name, value in fields.items() if value is not None}


def apply_to(config: WorldbookConfig, trigger: TriggerConfig) -> WorldbookConfig:
    """The world-book trigger's config with the effective trigger configuration: its switches, limits and
    injection; `max_total_length` caps the world book's tokens beside its settings' cap (the smaller wins)."""
    fields = worldbook_fields(trigger)
    if trigger.max_total_length is not None:
        caps = [cap for cap in (config.max_total_tokens, trigger.max_total_length) if cap is not None]
        fields["max_total_tokens"] = min(caps)
    return replace(config, **fields)
