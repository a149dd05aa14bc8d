"""Request models of single world-book entries over HTTP (issue 23). Loosely typed on purpose: the entry's own
model (`nodes.rules.worldbook.WorldbookEntry`, `validate_entry`) checks every value and names the field, the same
words for the API, the CLI and an imported file."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

Words = Annotated[list[Any], Field(max_length=100)]


class EntryUpdate(BaseModel):
    """The fields to change (absent: unchanged); `temporal`: the window's bounds to change (null unsets one);
    `position` null: the configuration's; `probability` 0..100 (SillyTavern's chance to fire once triggered)."""

    model_config = ConfigDict(extra="forbid")
    content: Any = None
    title: Any = None
    keywords: Words | None = None
    secondary_keywords: Words | None = None
    selective_logic: Any = None
    trigger_type: Any = None
    kind: Any = None
    priority: Any = None
    constant: StrictBool | None = None
    enabled: StrictBool | None = None
    position: Any = None
    relevance_weight: Any = None
    emotional_weight: Any = None
    time_decay_factor: Any = None
    emotions: Words | None = None
    temporal: dict[str, Any] | None = None
    probability: Any = None


class EntryCreate(EntryUpdate):
    """A new entry: its text, and any of its other fields."""

    content: Any


class ReorderItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: Annotated[StrictInt, Field(ge=0, le=2**31 - 1)]
    order: Annotated[StrictInt, Field(ge=-(2**31), le=2**31 - 1)]


class ReorderRequest(BaseModel):
    """Entries and their new order values (`priority`: higher first)."""

    model_config = ConfigDict(extra="forbid")
    entries: Annotated[list[ReorderItem], Field(min_length=1, max_length=10_000)]
