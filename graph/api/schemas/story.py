"""Request models of the story's areas over HTTP (issue 23): core memory, plot, review suggestions."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

Version = Annotated[StrictInt, Field(ge=0, le=2**31 - 1)]


class RollbackRequest(BaseModel):
    """The version to make current again; null (or absent): the one before the newest."""

    model_config = ConfigDict(extra="forbid")
    to: Version | None = None


class CurrentPointRequest(BaseModel):
    """The outline point (1-based) the story is at now."""

    model_config = ConfigDict(extra="forbid")
    index: Annotated[StrictInt, Field(ge=1, le=2**31 - 1)]


class ApproveRequest(BaseModel):
    """A person's edit before approving: the entry's text and / or keywords instead of the proposed ones."""

    model_config = ConfigDict(extra="forbid")
    content: Annotated[StrictStr, Field(min_length=1, max_length=10_000)] | None = None
    keywords: Annotated[list[Annotated[StrictStr, Field(max_length=200)]], Field(max_length=100)] | None = None
