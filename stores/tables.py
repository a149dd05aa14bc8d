"""SQLModel tables.

`line`, `save` and `role` keep the column names and types of the seed author's database (seed 000,
基础信息): a save is one conversation instance, its lines form a tree through `parent_line_id`
(regenerate / swipe = siblings) and `save.last_message_id` is the leaf of the current branch.
The rest models seed 002 (基本概念): a background with its world setting and ordered outline points,
the character (role) and background of each instance, and the sessions of an instance.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import JSON, Column, LargeBinary, Text
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(UTC)


class Role(SQLModel, table=True):
    """A character of the global library (seed 002 角色): name, description, avatar, initial persona."""

    __tablename__ = "role"

    id: int | None = Field(default=None, primary_key=True)
    name: str
    description: str = ""
    avatar: str | None = None
    persona: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    # Added by issue 13 (character library): nullable, so a database made before them gains them by
    # `stores.db.add_missing_columns`; None reads as empty. The avatar image is stored with the character.
    avatar_image: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))
    avatar_mime: str | None = None
    traits: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    backstory: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    motives: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    greetings: list[str] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    example_dialogue: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    system_prompt: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    post_history_instructions: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    updated_at: datetime | None = None
    # issue 14 (users): the user the character belongs to (None: the local operator's, made without auth) and
    # whether every user may see it and start instances with it; nullable, so older databases gain them
    owner: str | None = Field(default=None, index=True)
    shared: bool | None = None


class Background(SQLModel, table=True):
    """A story setting of the global library (seed 002 背景): one world-setting text plus an outline."""

    __tablename__ = "background"

    id: int | None = Field(default=None, primary_key=True)
    name: str
    world_setting: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime | None = None  # issue 13: nullable, added to an older database by add_missing_columns
    owner: str | None = Field(default=None, index=True)  # issue 14: as Role.owner / Role.shared
    shared: bool | None = None
    # issue 28: a background made from a card's scenario; its outline is open (the director never forces it)
    open_outline: bool | None = None


class OutlinePoint(SQLModel, table=True):
    """One key plot point of a background's story outline (seed 002: 故事主线大纲), 1-based `position`."""

    __tablename__ = "outline_point"

    id: int | None = Field(default=None, primary_key=True)
    background_id: int = Field(foreign_key="background.id", index=True)
    position: int
    content: str


class Save(SQLModel, table=True):
    """A conversation instance (seed 002 会话实例): one play-through of a role in a background.

    `last_message_id` has no foreign-key constraint: `line.save_id` already points here and a
    constraint both ways would make the two tables impossible to create in order on PostgreSQL.
    The history query checks that it names a line of this save.
    """

    __tablename__ = "save"

    id: int | None = Field(default=None, primary_key=True)
    title: str = ""
    role_id: int | None = Field(default=None, foreign_key="role.id", index=True)
    background_id: int | None = Field(default=None, foreign_key="background.id", index=True)
    last_message_id: int | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    # issue 14: the user the instance belongs to (None: the local operator's); its lines, memories, records,
    # suggestions, knowledge and world-book entries and checkpoint thread belong to it through the instance
    owner: str | None = Field(default=None, index=True)
    # issue 28: the language of the prompt's own scaffolding (nodes/rules/prompt_catalog.py); None reads as zh
    language: str | None = None
    # issue 28: the user's persona played in this instance (None: the user name given per turn, or 用户); no
    # constraint, like last_message_id: deleting a persona clears it in the same transaction
    persona_id: int | None = Field(default=None, index=True)
    # issue 28: per line left by a swipe, the leaf it had (str(line id) → leaf id): a swipe back lands there
    viewed_leaves: dict[str, int] | None = Field(default=None, sa_column=Column(JSON, nullable=True))


class Persona(SQLModel, table=True):
    """A user persona (issue 28, SillyTavern's personas): the name `{{user}}` becomes and a description the
    character knows of the user; owned per user like characters (None: the local operator's)."""

    __tablename__ = "user_persona"

    id: int | None = Field(default=None, primary_key=True)
    name: str
    description: str = Field(default="", sa_column=Column(Text, nullable=False, default=""))
    avatar_image: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))
    avatar_mime: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime | None = None
    owner: str | None = Field(default=None, index=True)


class Line(SQLModel, table=True):
    """台词表: a node of the dialogue tree, exactly the seed's `Line` model (seed 000, 基础信息)."""

    __tablename__ = "line"

    id: int | None = Field(default=None, primary_key=True)

    original_emotion: str | None = None
    predicted_emotion: str | None = None
    content: str
    tts_content: str | None = None
    action_content: str | None = None
    audio_file: str | None = None

    attribute: str  # assistant, user, system

    role_id: int | None = Field(default=None, foreign_key="role.id", nullable=True)
    script_role_id: str | None = None
    display_name: str | None = None

    save_id: int = Field(foreign_key="save.id", index=True)

    parent_line_id: int | None = Field(default=None, foreign_key="line.id", nullable=True, index=True)
    # issue 26: when the line was stored (UTC), so "what did we do last week" has an answer; None on older lines
    created_at: datetime | None = Field(default_factory=utcnow, nullable=True)


class PlaySession(SQLModel, table=True):
    """One sitting of an instance (seed 002: 可暂停/继续 — an instance has many sessions)."""

    __tablename__ = "play_session"

    id: int | None = Field(default=None, primary_key=True)
    save_id: int = Field(foreign_key="save.id", index=True)
    started_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime | None = None
