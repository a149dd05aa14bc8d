"""The state of one conversation instance's graph (checkpointed per instance)."""

from __future__ import annotations

from typing import Any, TypedDict


class TurnState(TypedDict, total=False):
    instance_id: int
    history: list[dict[str, Any]]
    messages: list[dict[str, str]]
