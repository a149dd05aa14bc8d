"""Requests on an instance's dialogue tree (seed 000; seed 002 对话功能): a line to rewind or swipe to, the user line
a regenerate answers, an edit's new text. The answers are the dictionaries `Dialogue` documents."""

from __future__ import annotations

from personalab.graph.api.schemas.common import INTEGER_MAX
from pydantic import BaseModel, ConfigDict, Field


class LineRequest(BaseModel):
    """A line of the instance (rewind, swipe)."""

    model_config = ConfigDict(extra="forbid")
    line_id: int = Field(ge=0, le=INTEGER_MAX, description="A line of the instance.")


class RegenerateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    line_id: int | None = Field(
        default=None, ge=0, le=INTEGER_MAX, description="The user line to answer again (default: the last)."
    )


class EditRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    line_id: int = Field(ge=0, le=INTEGER_MAX, description="The user line of the current branch to replace.")
    text: str = Field(description="The new text of the line.")
    user_name: str | None = None
