"""Request and response models of user personas (issue 28, SillyTavern's personas; the Create / Edit / Public
pattern): what `PersonaLab.personas` takes and returns and what the HTTP routes read and answer."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from personalab.graph.api.schemas.common import INTEGER_MAX
from personalab.graph.api.schemas.library import Name, _Input, _text
from pydantic import AfterValidator, BaseModel, Field, StrictBool

MAX_PERSONA_DESCRIPTION_CHARS = 20_000  # SillyTavern's personas are a paragraph or two; a card's text is longer
Description = Annotated[str, Field(max_length=MAX_PERSONA_DESCRIPTION_CHARS), AfterValidator(_text)]


class PersonaInput(_Input):
    """A new persona: the name `{{user}}` becomes, what the character knows of the user, an optional avatar."""

    name: Name
    description: Description = ""
    avatar: bytes | None = None


class PersonaEdit(_Input):
    """Changes to a persona: only the fields given change; `remove_avatar` drops the avatar."""

    name: Name | None = None
    description: Description | None = None
    avatar: bytes | None = None
    remove_avatar: StrictBool = False


class PersonaChoice(_Input):
    """The persona an instance plays with (None: none, the user name per turn)."""

    persona_id: int | None = Field(default=None, ge=0, le=INTEGER_MAX)


class PersonaOut(BaseModel):
    """A stored persona; the avatar's bytes are read with `personas.avatar`."""

    id: int
    name: str
    description: str
    avatar_mime: str | None
    avatar_bytes: int
    created_at: datetime
    updated_at: datetime | None
    owner: str | None = None
    instances: list[int] = Field(default_factory=list)


class PersonaDeleted(BaseModel):
    kind: str = "persona"
    id: int
    instances_cleared: list[int] = Field(default_factory=list)
