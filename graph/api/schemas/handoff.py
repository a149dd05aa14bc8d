"""A turn handed from `personalab turn` to the running server (graph/api/handoff.py): the command's turn input."""

from __future__ import annotations

from typing import Any

from personalab.graph.api.schemas.common import INTEGER_MAX
from pydantic import BaseModel, ConfigDict, Field


class HandedTurn(BaseModel):
    """What `personalab turn` would pass to `run_turn`, and the run's identity (a replay stores nothing twice)."""

    model_config = ConfigDict(extra="forbid")
    instance_id: int = Field(ge=1, le=INTEGER_MAX)
    message: str
    run_id: str = Field(min_length=1, max_length=100)
    lines_before: list[dict[str, Any]] | None = None
    user_name: str | None = None
    selected_choice: dict[str, Any] | None = None
    time_gap: str | None = None
    reply_to: int | None = Field(default=None, ge=0, le=INTEGER_MAX)
    branch_from: int | None = Field(default=None, ge=0, le=INTEGER_MAX)
