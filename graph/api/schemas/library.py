"""Request and response models of characters, backgrounds and instances (seed 002 角色/背景/会话实例; the
Create / Edit / Public pattern): what `PersonaLab.characters`, `.backgrounds` and `.instances` take and return,
and what the HTTP routes read and answer. `validate_model` turns pydantic's first error into PersonaLab's
`InvalidInput` naming the field."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from personalab.graph.api.schemas.common import INTEGER_MAX
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.validation import bad_character
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, ValidationError

MIN_OUTLINE, DEFAULT_OUTLINE, MAX_OUTLINE = 1, 10, 50  # seed 002 背景: 10 key points; 1–50 allowed
MAX_AVATAR_BYTES = 5 * 1024 * 1024
EXPORT_FORMAT = "personalab-instance"
EXPORT_VERSION = 1
MAX_EXPORT_BYTES = 200 * 1024 * 1024
# issue 14, hostile values: a name is a line of a list, a text field a card's longest (SillyTavern descriptions run
# to some 10,000 characters); past these a request is refused naming the field instead of stored
MAX_NAME_CHARS = 500
MAX_OUTLINE_POINT_CHARS = 2_000
MAX_TEXT_CHARS = 200_000
MAX_GREETINGS = 200


class InUse(InvalidInput):
    """A character or background that instances use, deleted without `cascade`: the message names them."""


# ---- models --------------------------------------------------------------------------------------------------


def _text(value: str) -> str:
    bad = bad_character(value)
    if bad:
        raise ValueError(f"contains {bad}")
    return value


def _name(value: str) -> str:
    if not _text(value).strip():
        raise ValueError("is empty")
    return value.strip()


Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS), AfterValidator(_text)]
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS), AfterValidator(_name)]
PointText = Annotated[str, Field(max_length=MAX_OUTLINE_POINT_CHARS), AfterValidator(_name)]
Outline = Annotated[list[PointText], Field(min_length=MIN_OUTLINE, max_length=MAX_OUTLINE)]
Greetings = Annotated[list[Text], Field(max_length=MAX_GREETINGS)]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class CharacterInput(_Input):
    """A new character (seed 002 角色): name, description, avatar, initial persona, and the card's fields."""

    name: Name
    description: Text = ""
    persona: Text = ""
    """Initial persona as free text (seed 002 初始人格设定)."""
    traits: Text = ""
    """Personality traits (性格特征), separated by commas, 、 or lines: they seed the core memory's traits."""
    backstory: Text = ""
    """Backstory (背景故事): seeds the core memory's identity."""
    motives: Text = ""
    """Core motives (核心动机): seed the core memory's goals."""
    greetings: Greetings = Field(default_factory=list)
    """Opening lines; the first (or the one chosen at instance creation) is the instance's first line."""
    example_dialogue: Text = ""
    system_prompt: Text = ""
    post_history_instructions: Text = ""
    avatar: bytes | None = None
    """The avatar image's bytes (PNG, JPEG, GIF, WebP…); stored with the character."""
    shared: StrictBool = False
    """Every user may see the character and start instances with it (issue 14); only its owner changes it."""


class CharacterEdit(_Input):
    """Changes to a character: only the fields given change; `remove_avatar` drops the avatar."""

    name: Name | None = None
    description: Text | None = None
    persona: Text | None = None
    traits: Text | None = None
    backstory: Text | None = None
    motives: Text | None = None
    greetings: Greetings | None = None
    example_dialogue: Text | None = None
    system_prompt: Text | None = None
    post_history_instructions: Text | None = None
    avatar: bytes | None = None
    remove_avatar: StrictBool = False
    shared: StrictBool | None = None


class Character(BaseModel):
    """A stored character; the avatar's bytes are read with `character_avatar`."""

    id: int
    name: str
    description: str
    persona: str
    traits: str
    backstory: str
    motives: str
    greetings: list[str]
    example_dialogue: str
    system_prompt: str
    post_history_instructions: str
    avatar_mime: str | None
    avatar_bytes: int
    created_at: datetime
    updated_at: datetime | None
    instances: list[int]
    """Ids of the instances that use the character (a user sees only their own)."""
    owner: str | None = None
    """The user it belongs to (None: the local operator's)."""
    shared: StrictBool = False


class BackgroundInput(_Input):
    """A new background (seed 002 背景): world setting and 1–50 outline points (the seed's story has 10)."""

    name: Name
    world_setting: Text = ""
    outline: Outline
    shared: StrictBool = False
    """Every user may see the background and start instances in it (issue 14); only its owner changes it."""


class BackgroundEdit(_Input):
    """Changes to a background. Running instances keep their plot state unless `apply_to_instances`."""

    name: Name | None = None
    world_setting: Text | None = None
    outline: Outline | None = None
    apply_to_instances: StrictBool = False
    shared: StrictBool | None = None


class BackgroundOut(BaseModel):
    id: int
    name: str
    world_setting: str
    outline: list[str]
    created_at: datetime
    updated_at: datetime | None
    instances: list[int]
    owner: str | None = None
    shared: StrictBool = False


class InstanceInput(_Input):
    """A new instance of a character in a background (seed 002 会话实例 创建)."""

    character_id: int = Field(ge=0, le=INTEGER_MAX)
    background_id: int | None = Field(default=None, ge=0, le=INTEGER_MAX)
    """None: a background made from the character's card scenario, open (issue 28: a card plays by itself)."""
    title: Text = ""
    """Default: "<character> · <background>"."""
    language: str | None = Field(default=None, max_length=16)
    """The prompt's scaffolding language (issue 28: zh, en); None: the language of the character's text."""
    greeting: int = Field(default=0, ge=0, le=INTEGER_MAX)
    """Which of the character's greetings opens the instance (0: the first)."""
    persona_id: int | None = Field(default=None, ge=0, le=INTEGER_MAX)
    """The user's persona it plays with (issue 28; None: the user name per turn)."""


class PlotProgress(BaseModel):
    completed: int
    total: int
    current_index: int
    current: str


class Instance(BaseModel):
    """A conversation instance with what the list shows (seed 002 查看会话实例列表). `turns`, `plot` and
    `last_turn_at` are those of the current branch (seed 000's tree): after a rewind or swipe, the story as it
    stands at the branch's last reply, as `dialogue.story_state` reports it."""

    id: int
    title: str
    character_id: int | None
    character_name: str | None
    background_id: int | None
    background_name: str | None
    created_at: datetime
    last_turn_at: datetime | None
    turns: int
    plot: PlotProgress | None
    owner: str | None = None
    thread_id: str | None = None
    """The LangGraph thread of its turns (issue 28: a client without Python runs a turn on it)."""
    persona_id: int | None = None
    """The user's persona it plays with (issue 28; None: the user name per turn)."""
    language: str = "zh"
    """The language of the prompt's own scaffolding (issue 28: zh, en)."""


class Deleted(BaseModel):
    """What a delete removed."""

    kind: Literal["character", "background", "instance"]
    id: int
    instances_deleted: list[int] = Field(default_factory=list)
    rows_deleted: dict[str, int] = Field(default_factory=dict)


class ImportResult(BaseModel):
    instance: Instance
    character_created: bool
    background_created: bool
    rows: dict[str, int]
    events: int


M = TypeVar("M", bound=BaseModel)


def validate_model(model: type[M], data: Any, what: str) -> M:
    """`model` of `data`; `InvalidInput` naming the first bad field (`what.field: problem`)."""
    if isinstance(data, model):
        data = data.model_dump(exclude_unset=True)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "input"
        message = error["msg"]
        if error["type"] == "too_short" and where.endswith("outline"):
            message = f"needs {MIN_OUTLINE} to {MAX_OUTLINE} points, got {len(error.get('input') or [])}"
        elif error["type"] == "too_long" and where.endswith("outline"):
            message = f"needs {MIN_OUTLINE} to {MAX_OUTLINE} points, got {len(error.get('input') or [])}"
        raise InvalidInput(f"{what}.{where}: {message.removeprefix('Value error, ')}") from None


class InstanceTitle(_Input):
    """A new title of an instance (`PATCH /instances/{id}`)."""

    title: Name


class PersonaFile(BaseModel):
    """The persona of an exported instance (issue 28): on import, the importing user's own persona."""

    model_config = ConfigDict(extra="ignore")  # a row's id, owner and stamps are the exporter's, never taken over
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=20_000)
    avatar_image: str | None = None  # base64
    avatar_mime: str | None = Field(default=None, max_length=100)


class ExportFile(BaseModel):
    """An exported instance document (seed 004 记忆导出和备份), as `Instances.import_data` reads it."""

    model_config = ConfigDict(extra="forbid")
    format: Literal["personalab-instance"]
    version: Literal[1]
    exported_at: str | None = None
    instance: dict[str, Any]
    character: dict[str, Any] | None
    background: dict[str, Any] | None
    tables: dict[str, list[dict[str, Any]]]
    events: list[dict[str, Any]] = Field(default_factory=list)
    # issue 28: the persona the instance plays with (name, description, avatar_image base64, avatar_mime)
    persona: PersonaFile | None = None


# the character's text fields, as stored
CHARACTER_TEXT = (
    "description",
    "persona",
    "traits",
    "backstory",
    "motives",
    "example_dialogue",
    "system_prompt",
    "post_history_instructions",
)
