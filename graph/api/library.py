"""Characters, backgrounds and instances a host app manages (seed 002 功能需求: 角色管理, 背景管理, 会话实例管理;
seed 004 记忆导出和备份). The CLI (`personalab character|background|instance`) and the HTTP routes
(`/characters`, `/backgrounds`, `/instances`) are thin layers over these functions.

Every function takes an optional `database_url` (default: `PERSONALAB_DATABASE_URL` / the embedded SQLite file),
returns pydantic models, and raises PersonaLab's errors only: `InvalidInput` naming the field (an empty name, an
outline of 0 or 51 points, an avatar that is no image), `NotFound` / `InstanceNotFound` naming the id, `InUse`
naming the instances when a character or background still in use is deleted without `cascade`. A refused call
changes nothing.

Users (issue 14): every function takes an optional `owner`, the signed-in user the HTTP routes pass. None is the
local operator (CLI, the demo, a server without auth): everything is visible, and what it makes has no owner. A user
sees and changes their own characters, backgrounds and instances, sees and uses (starts instances with, reads) the
ones marked `shared`, and nothing else: another user's id is `NotFound` / `InstanceNotFound` naming the id, exactly
as an id that does not exist, so an answer never tells that it does.
"""

from __future__ import annotations

import base64
import io
import warnings
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from personalab.nodes.rules.character import DEFAULT_USER_NAME, seeded_core_memory, substitute
from personalab.nodes.rules.errors import InstanceBusy, InstanceNotFound, InvalidInput, NotFound
from personalab.nodes.rules.plot import new_plot_state
from personalab.stores import library as store
from personalab.stores.background import flush_event_writes, turn_ended
from personalab.stores.checkpoints import thread_id_for
from personalab.stores.db import INTEGER_MAX, session_scope
from personalab.stores.files import bad_character, read_json, write_file
from personalab.stores.history import forget_paths
from personalab.stores.memory import MemoryStore
from personalab.stores.saves import append_lines, create_save, get_save, outline_of
from personalab.stores.settings import settings
from personalab.stores.tables import Background, OutlinePoint, Role, Save, utcnow
from personalab.stores.turn_tables import StoryState
from personalab.stores.turns import acquire_turn_lock, branch_story_states, release_turn_lock
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, ValidationError
from sqlalchemy import func, or_
from sqlmodel import Session, col, select

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
    background_id: int = Field(ge=0, le=INTEGER_MAX)
    title: Text = ""
    """Default: "<character> · <background>"."""
    greeting: int = Field(default=0, ge=0, le=INTEGER_MAX)
    """Which of the character's greetings opens the instance (0: the first)."""


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


# ---- avatars ---------------------------------------------------------------------------------------------------


def check_avatar(data: bytes, field: str = "avatar") -> str:
    """The MIME type of the image `data`; `InvalidInput` naming `field` when it is not an image Pillow can read."""
    from PIL import Image, UnidentifiedImageError

    if not isinstance(data, bytes | bytearray) or not data:
        raise InvalidInput(f"{field}: empty, not an image")
    if len(data) > MAX_AVATAR_BYTES:
        raise InvalidInput(f"{field}: {len(data)} bytes, over the limit of {MAX_AVATAR_BYTES}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                image.verify()
                kind = image.format
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombWarning) as exc:
        raise InvalidInput(f"{field}: not an image ({type(exc).__name__})") from None
    return Image.MIME.get(kind or "", "application/octet-stream")


# ---- characters ------------------------------------------------------------------------------------------------

ROLE_TEXT = (
    "description",
    "persona",
    "traits",
    "backstory",
    "motives",
    "example_dialogue",
    "system_prompt",
    "post_history_instructions",
)


# ---- ownership (issue 14) -------------------------------------------------------------------------------------


def visible_to(row: Role | Background | Save, owner: str | None) -> bool:
    """Whether the user `owner` may see `row` (None: the local operator, who sees everything)."""
    if owner is None:
        return True
    return row.owner == owner or bool(getattr(row, "shared", False))


def owns(row: Role | Background | Save, owner: str | None) -> bool:
    """Whether the user `owner` may change `row`: their own (the operator: any)."""
    return owner is None or row.owner == owner


def _visible(column: Any, shared: Any, owner: str | None) -> list[Any]:
    """Where-clauses of the rows `owner` sees (none for the operator)."""
    if owner is None:
        return []
    if shared is None:
        return [column == owner]
    return [or_(column == owner, shared == True)]  # noqa: E712 - SQL, not Python


def _instances_of(session: Session, column: Any, value: int, owner: str | None = None) -> list[int]:
    query = select(Save.id).where(column == value, *_visible(col(Save.owner), None, owner))
    ids = session.exec(query.order_by(col(Save.id))).all()
    return [int(i) for i in ids if i is not None]


def _character(session: Session, role: Role, owner: str | None = None) -> Character:
    assert role.id is not None
    return Character(
        id=role.id,
        name=role.name,
        **{name: getattr(role, name) or "" for name in ROLE_TEXT},
        greetings=list(role.greetings or []),
        avatar_mime=role.avatar_mime if role.avatar_image else None,
        avatar_bytes=len(role.avatar_image or b""),
        created_at=role.created_at,
        updated_at=role.updated_at,
        instances=_instances_of(session, Save.role_id, role.id, owner),
        owner=role.owner,
        shared=bool(role.shared),
    )


def _role(session: Session, character_id: int, owner: str | None = None, *, change: bool = False) -> Role:
    """The character `character_id` as `owner` sees it (`change`: as its owner); `NotFound` naming the id for one
    that does not exist or is another user's, and for a shared one a user would change."""
    role = session.get(Role, character_id) if isinstance(character_id, int) else None
    if role is None or not visible_to(role, owner):
        raise NotFound(f"character {character_id} does not exist")
    if change and not owns(role, owner):
        raise NotFound(f"character {character_id} is shared by another user: only its owner can change it")
    return role


def create_character(
    data: CharacterInput | Mapping[str, Any], *, owner: str | None = None, database_url: str | None = None
) -> Character:
    """Store a new character (seed 002 创建角色), `owner`'s."""
    item = validate_model(CharacterInput, data, "character")
    mime = check_avatar(item.avatar) if item.avatar is not None else None
    with session_scope(database_url) as session:
        role = Role(
            name=item.name,
            **{name: getattr(item, name) for name in ROLE_TEXT},
            greetings=list(item.greetings),
            avatar_image=item.avatar,
            avatar_mime=mime,
            owner=owner,
            shared=item.shared or None,
        )
        session.add(role)
        session.flush()
        return _character(session, role, owner)


def list_characters(*, owner: str | None = None, database_url: str | None = None) -> list[Character]:
    """Every character `owner` sees (their own and the shared ones; the operator: all)."""
    with session_scope(database_url) as session:
        query = select(Role).where(*_visible(col(Role.owner), col(Role.shared), owner)).order_by(col(Role.id))
        return [_character(session, role, owner) for role in session.exec(query).all()]


def get_character(character_id: int, *, owner: str | None = None, database_url: str | None = None) -> Character:
    with session_scope(database_url) as session:
        return _character(session, _role(session, character_id, owner), owner)


def character_avatar(
    character_id: int, *, owner: str | None = None, database_url: str | None = None
) -> tuple[bytes, str]:
    """The character's avatar image and its MIME type; `NotFound` when it has none."""
    with session_scope(database_url) as session:
        role = _role(session, character_id, owner)
        if not role.avatar_image:
            raise NotFound(f"character {character_id} has no avatar")
        return bytes(role.avatar_image), role.avatar_mime or "application/octet-stream"


def edit_character(
    character_id: int,
    changes: CharacterEdit | Mapping[str, Any],
    *,
    owner: str | None = None,
    database_url: str | None = None,
) -> Character:
    """Change the given fields (seed 002 编辑角色). Running instances see the new definition from their next turn;
    their core memory, already grown from the old persona, is theirs and stays."""
    edit = validate_model(CharacterEdit, changes, "character")
    mime = check_avatar(edit.avatar) if edit.avatar is not None else None
    with session_scope(database_url) as session:
        role = _role(session, character_id, owner, change=True)
        for name, value in edit.model_dump(exclude_unset=True, exclude={"avatar", "remove_avatar"}).items():
            if value is not None:
                setattr(role, name, value)
        if edit.avatar is not None:
            role.avatar_image, role.avatar_mime = edit.avatar, mime
        elif edit.remove_avatar:
            role.avatar_image, role.avatar_mime = None, None
        role.updated_at = utcnow()
        session.add(role)
        session.flush()
        return _character(session, role, owner)


def _others_using(session: Session, column: Any, value: int, owner: str | None) -> int:
    """How many instances of other users use a shared character or background (none for the operator)."""
    if owner is None:
        return 0
    others = or_(col(Save.owner) != owner, col(Save.owner).is_(None))
    query = select(func.count()).select_from(Save).where(column == value, others)
    return int(session.exec(query).one())


def delete_character(
    character_id: int, *, cascade: bool = False, owner: str | None = None, database_url: str | None = None
) -> Deleted:
    """Delete a character (seed 002 删除角色). Refused (`InUse`, naming them) while instances use it, unless
    `cascade`: then those instances are deleted with everything of theirs first. Lines of other instances that
    name it as a speaker keep their text and display name and lose the link. A user's shared character that other
    users' instances use is refused even with `cascade` (their instances are not the owner's to delete)."""
    with session_scope(database_url) as session:
        _role(session, character_id, owner, change=True)
        others = _others_using(session, col(Save.role_id), character_id, owner)
        users = _instances_of(session, Save.role_id, character_id)
    if others:
        raise InUse(f"character {character_id} is used by {others} instance(s) of other users: unshare it instead")
    if users and not cascade:
        raise InUse(
            f"character {character_id} is used by instance(s) {', '.join(map(str, users))}: "
            "delete them first or use cascade"
        )
    for instance_id in users:
        delete_instance(instance_id, database_url=database_url)
    with session_scope(database_url) as session:
        rows = store.delete_library_rows(session, "role", character_id)
        session.delete(_role(session, character_id))
    return Deleted(kind="character", id=character_id, instances_deleted=users, rows_deleted=rows)


# ---- backgrounds -----------------------------------------------------------------------------------------------


def _background_row(
    session: Session, background_id: int, owner: str | None = None, *, change: bool = False
) -> Background:
    """As `_role`, for a background."""
    background = session.get(Background, background_id) if isinstance(background_id, int) else None
    if background is None or not visible_to(background, owner):
        raise NotFound(f"background {background_id} does not exist")
    if change and not owns(background, owner):
        raise NotFound(f"background {background_id} is shared by another user: only its owner can change it")
    return background


def _background(session: Session, background: Background, owner: str | None = None) -> BackgroundOut:
    assert background.id is not None
    return BackgroundOut(
        id=background.id,
        name=background.name,
        world_setting=background.world_setting,
        outline=[point.content for point in outline_of(session, background.id)],
        created_at=background.created_at,
        updated_at=background.updated_at,
        instances=_instances_of(session, Save.background_id, background.id, owner),
        owner=background.owner,
        shared=bool(background.shared),
    )


def _set_outline(session: Session, background_id: int, outline: list[str]) -> None:
    for point in outline_of(session, background_id):
        session.delete(point)
    session.flush()
    for position, text in enumerate(outline, start=1):
        session.add(OutlinePoint(background_id=background_id, position=position, content=text))
    session.flush()


def create_background(
    data: BackgroundInput | Mapping[str, Any], *, owner: str | None = None, database_url: str | None = None
) -> BackgroundOut:
    """Store a new background (seed 002 创建背景), `owner`'s."""
    item = validate_model(BackgroundInput, data, "background")
    with session_scope(database_url) as session:
        background = Background(
            name=item.name, world_setting=item.world_setting, owner=owner, shared=item.shared or None
        )
        session.add(background)
        session.flush()
        assert background.id is not None
        _set_outline(session, background.id, item.outline)
        return _background(session, background, owner)


def list_backgrounds(*, owner: str | None = None, database_url: str | None = None) -> list[BackgroundOut]:
    """Every background `owner` sees (their own and the shared ones; the operator: all)."""
    with session_scope(database_url) as session:
        query = select(Background).where(*_visible(col(Background.owner), col(Background.shared), owner))
        rows = session.exec(query.order_by(col(Background.id))).all()
        return [_background(session, row, owner) for row in rows]


def get_background(background_id: int, *, owner: str | None = None, database_url: str | None = None) -> BackgroundOut:
    with session_scope(database_url) as session:
        return _background(session, _background_row(session, background_id, owner), owner)


def replan(plot_state: Mapping[str, Any], outline: list[str]) -> dict[str, Any]:
    """A plot state on a new outline: each point keeps the status it had at the same index; the current point
    stays where it was (or the new last one)."""
    new: dict[str, Any] = dict(new_plot_state(outline))
    old = {point["index"]: point["status"] for point in plot_state.get("story_outline") or []}
    points: list[dict[str, Any]] = [dict(point) for point in new["story_outline"]]
    if old:
        for point in points:
            point["status"] = old.get(point["index"], "pending")
    new["story_outline"] = points
    new["current_plot_index"] = min(max(1, int(plot_state.get("current_plot_index") or 1)), len(outline))
    new["last_progress_turn"] = int(plot_state.get("last_progress_turn") or 0)
    return new


def edit_background(
    background_id: int,
    changes: BackgroundEdit | Mapping[str, Any],
    *,
    owner: str | None = None,
    database_url: str | None = None,
) -> BackgroundOut:
    """Change the given fields (seed 002 编辑背景). Instances that already have a plot state keep it (their story
    is under way) unless `apply_to_instances`: then each one's current story state (its current branch's) gets
    the new outline, every point keeping its status by index; instances without a turn yet start from the new outline anyway."""
    edit = validate_model(BackgroundEdit, changes, "background")
    with session_scope(database_url) as session:
        background = _background_row(session, background_id, owner, change=True)
        if edit.name is not None:
            background.name = edit.name
        if edit.shared is not None:
            background.shared = edit.shared
        if edit.world_setting is not None:
            background.world_setting = edit.world_setting
        if edit.outline is not None:
            _set_outline(session, background_id, edit.outline)
        background.updated_at = utcnow()
        session.add(background)
        session.flush()
        if edit.apply_to_instances:
            outline = [point.content for point in outline_of(session, background_id)]
            # a user's edit replans only their own instances: other users' plots are theirs
            users = _instances_of(session, Save.background_id, background_id, owner)
            branches = branch_story_states(session, users) if users else {}
            for instance_id in users:
                row = branches[instance_id][0] if instance_id in branches else None
                if row is None or not row.state.get("plot_state"):
                    continue
                state = {**row.state, "plot_state": replan(row.state["plot_state"], outline)}
                # a new row, not an update: the checkpoint's copy then differs from the stored state, so the
                # next turn starts from this one (nodes/history_fetch.kept_state)
                session.add(
                    StoryState(save_id=instance_id, turn=row.turn, reply_line_id=row.reply_line_id, state=state)
                )
        return _background(session, background, owner)


def delete_background(
    background_id: int, *, cascade: bool = False, owner: str | None = None, database_url: str | None = None
) -> Deleted:
    """Delete a background and its outline (seed 002 删除背景); refused while instances use it unless `cascade`,
    and, for a user, while other users' instances use it."""
    with session_scope(database_url) as session:
        _background_row(session, background_id, owner, change=True)
        others = _others_using(session, col(Save.background_id), background_id, owner)
        users = _instances_of(session, Save.background_id, background_id)
    if others:
        raise InUse(f"background {background_id} is used by {others} instance(s) of other users: unshare it instead")
    if users and not cascade:
        raise InUse(
            f"background {background_id} is used by instance(s) {', '.join(map(str, users))}: "
            "delete them first or use cascade"
        )
    for instance_id in users:
        delete_instance(instance_id, database_url=database_url)
    with session_scope(database_url) as session:
        rows = store.delete_library_rows(session, "background", background_id)
        session.delete(_background_row(session, background_id))
    return Deleted(kind="background", id=background_id, instances_deleted=users, rows_deleted=rows)


# ---- instances -------------------------------------------------------------------------------------------------


def owned_save(session: Session, instance_id: int, owner: str | None = None) -> Save:
    """The instance `instance_id` if it is `owner`'s (the operator: any); `InstanceNotFound` naming the id for one
    that does not exist or is another user's."""
    save = (
        session.get(Save, instance_id) if isinstance(instance_id, int) and not isinstance(instance_id, bool) else None
    )
    if save is None or not owns(save, owner):
        raise InstanceNotFound(f"instance {instance_id} does not exist")
    return save


def check_instance(instance_id: int, *, owner: str | None = None, database_url: str | None = None) -> None:
    """`InstanceNotFound` unless instance `instance_id` exists and is `owner`'s (the dialogue and world-book routes
    check their instance with it)."""
    with session_scope(database_url) as session:
        owned_save(session, instance_id, owner)


def instance_owner(instance_id: int, *, database_url: str | None = None) -> tuple[bool, str | None]:
    """(whether instance `instance_id` exists, its owner): what the server's auth handlers check a run against."""
    with session_scope(database_url) as session:
        save = session.get(Save, instance_id)
        return (save is not None, save.owner if save is not None else None)


def instance_ids_of(owner: str | None, *, database_url: str | None = None) -> list[int]:
    """The ids of `owner`'s instances (the operator: every instance)."""
    with session_scope(database_url) as session:
        ids = session.exec(select(Save.id).where(*_visible(col(Save.owner), None, owner))).all()
        return [int(i) for i in ids if i is not None]


def _instance(session: Session, save: Save) -> Instance:
    assert save.id is not None
    return _instances(session, [save], [save.id])[0]


def _plot_progress(plot_state: Mapping[str, Any] | None) -> PlotProgress | None:
    if not plot_state:
        return None
    points = plot_state["story_outline"]
    current = int(plot_state.get("current_plot_index") or 1)
    return PlotProgress(
        completed=sum(1 for point in points if point["status"] == "completed"),
        total=len(points),
        current_index=current,
        current=next((point["content"] for point in points if point["index"] == current), ""),
    )


def _instances(session: Session, saves: Sequence[Save], scope: Any) -> list[Instance]:
    """`saves` as the list shows them. `scope` names their ids (a list, or a select of them): each thing shown
    (character and background names, the story state of the current branch and when its turn ran, the outline
    of an instance not played yet) is read for all of them in one grouped query, so listing many costs what
    listing one does. Turns, plot progress and last turn time are the current branch's (seed 000 + 002: after
    a rewind, swipe or edit they are those of the branch point, as `dialogue.story_state`)."""
    if not saves:
        return []
    role_ids = {save.role_id for save in saves if save.role_id is not None}
    background_ids = {save.background_id for save in saves if save.background_id is not None}
    roles = dict(session.exec(select(Role.id, Role.name).where(col(Role.id).in_(role_ids))).all()) if role_ids else {}
    backgrounds = (
        dict(session.exec(select(Background.id, Background.name).where(col(Background.id).in_(background_ids))).all())
        if background_ids
        else {}
    )
    # what the story is on each instance's current branch (after a rewind or swipe, not the newest turn's)
    branches = branch_story_states(session, scope)
    states = {save_id: state for save_id, (state, _when) in branches.items()}
    unplayed = {save.background_id for save in saves if save.id not in states and save.background_id in backgrounds}
    outlines: dict[int, list[str]] = {}
    if unplayed:
        points = select(OutlinePoint).where(col(OutlinePoint.background_id).in_(unplayed))
        for point in session.exec(points.order_by(col(OutlinePoint.background_id), col(OutlinePoint.position))).all():
            outlines.setdefault(point.background_id, []).append(point.content)
    found = []
    for save in saves:
        assert save.id is not None
        state = states.get(save.id)
        plot_state = (state.state.get("plot_state") if state else None) or None
        outline = outlines.get(save.background_id) if save.background_id is not None else None
        if plot_state is None and outline:
            plot_state = new_plot_state(outline)
        found.append(
            Instance(
                id=save.id,
                title=save.title,
                character_id=save.role_id,
                character_name=roles.get(save.role_id) if save.role_id is not None else None,
                background_id=save.background_id,
                background_name=backgrounds.get(save.background_id) if save.background_id is not None else None,
                created_at=save.created_at,
                last_turn_at=branches[save.id][1] if save.id in branches else None,
                turns=int(state.turn) if state else 0,
                plot=_plot_progress(plot_state),
                owner=save.owner,
                thread_id=thread_id_for(save.id),
            )
        )
    return found


def create_instance(
    data: InstanceInput | Mapping[str, Any], *, owner: str | None = None, database_url: str | None = None
) -> Instance:
    """A new instance of a stored character in a stored background (seed 002 创建会话实例): its own dialogue tree,
    opened by the character's greeting (`{{char}}` / `{{user}}` replaced); the plot starts at point 1 and the core
    memory is seeded from the persona at the first turn. `owner`'s, of a character and background that are theirs
    or shared."""
    item = validate_model(InstanceInput, data, "instance")
    with session_scope(database_url) as session:
        role = _role(session, item.character_id, owner)
        background = _background_row(session, item.background_id, owner)
        greetings = list(role.greetings or [])
        if greetings and item.greeting >= len(greetings):
            raise InvalidInput(
                f"instance.greeting: {item.greeting} is out of range (the character has {len(greetings)})"
            )
        if not greetings and item.greeting:
            raise InvalidInput(f"instance.greeting: character {role.id} has no greetings")
        title = item.title.strip() or f"{role.name} · {background.name}"
        save = create_save(session, role.id, background.id, title=title)
        assert save.id is not None
        save.owner = owner
        session.add(save)
        if greetings and greetings[item.greeting].strip():
            text = substitute(greetings[item.greeting], role.name, DEFAULT_USER_NAME)
            append_lines(
                session,
                save.id,
                [{"attribute": "assistant", "content": text, "role_id": role.id, "display_name": role.name}],
            )
        return _instance(session, save)


def list_instances(
    *,
    character_id: int | None = None,
    background_id: int | None = None,
    owner: str | None = None,
    database_url: str | None = None,
) -> list[Instance]:
    """Every instance of `owner` (the operator: all; of one character and/or background), newest first, with title,
    character, background, created, and the last turn time, turns and plot progress of its current branch (seed 002
    查看会话实例列表)."""
    with session_scope(database_url) as session:
        chosen = _visible(col(Save.owner), None, owner)
        if character_id is not None:
            chosen.append(col(Save.role_id) == character_id)
        if background_id is not None:
            chosen.append(col(Save.background_id) == background_id)
        saves = session.exec(select(Save).where(*chosen).order_by(col(Save.id).desc())).all()
        return _instances(session, saves, select(Save.id).where(*chosen))


def get_instance(instance_id: int, *, owner: str | None = None, database_url: str | None = None) -> Instance:
    with session_scope(database_url) as session:
        return _instance(session, owned_save(session, instance_id, owner))


def initial_core_memory_of(instance_id: int, *, database_url: str | None = None) -> dict[str, Any]:
    """The core memory the instance starts from (seeded from its character's persona)."""
    with session_scope(database_url) as session:
        save = get_save(session, instance_id)
        role = session.get(Role, save.role_id) if save.role_id is not None else None
        return seeded_core_memory(role.name if role else "角色", role.model_dump() if role else {})


def rename_instance(
    instance_id: int, title: str, *, owner: str | None = None, database_url: str | None = None
) -> Instance:
    name = validate_model(_Title, {"title": title}, "instance").title
    with session_scope(database_url) as session:
        save = owned_save(session, instance_id, owner)
        save.title = name
        save.updated_at = utcnow()
        session.add(save)
        session.flush()
        return _instance(session, save)


class _Title(_Input):
    title: Name


def delete_instance(instance_id: int, *, owner: str | None = None, database_url: str | None = None) -> Deleted:
    """Delete an instance with everything of it (seed 002 删除会话实例): its rows in every table that points at it
    (lines, sessions, turn records, story states, memories, plot nodes, suggestions, its knowledge and world-book
    entries), its vectors in Chroma (memories, archived events) and its checkpoints. Refused (`InstanceBusy`)
    while a turn runs on it."""
    check_instance(instance_id, owner=owner, database_url=database_url)  # before the lock: it names no stranger's
    flush_event_writes()  # a queued event or memory write must not land after the delete
    lease = float(settings().turn_lease)
    token = acquire_turn_lock(instance_id, lease, database_url)  # InstanceNotFound / InstanceBusy
    try:
        with session_scope(database_url) as session:
            save = get_save(session, instance_id)
            role_id, background_id = save.role_id, save.background_id
            rows = store.delete_instance_rows(session, instance_id)  # the lock row goes with them
    except BaseException:
        release_turn_lock(instance_id, token, database_url)
        raise
    store.delete_instance_vectors(instance_id, role_id, background_id, MemoryStore(database_url)._chroma_path())
    store.delete_checkpoints(instance_id, database_url)
    turn_ended(instance_id)  # the lock went with the instance's rows
    forget_paths()
    return Deleted(kind="instance", id=instance_id, rows_deleted=rows)


def export_instance_data(
    instance_id: int, *, owner: str | None = None, database_url: str | None = None
) -> dict[str, Any]:
    """The instance as one JSON document (seed 004 记忆导出和备份): its character and background, every row of
    it in every table, and its archived events. `import_instance_data` reads it back."""
    check_instance(instance_id, owner=owner, database_url=database_url)
    flush_event_writes()
    with session_scope(database_url) as session:
        save = get_save(session, instance_id)
        role = session.get(Role, save.role_id) if save.role_id is not None else None
        background = session.get(Background, save.background_id) if save.background_id is not None else None
        document: dict[str, Any] = {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "exported_at": datetime.now(UTC).isoformat(),
            "instance": store.row_to_json(save),
            "character": store.row_to_json(role) if role else None,
            "background": (
                {**store.row_to_json(background), "outline": [p.content for p in outline_of(session, background.id)]}
                if background and background.id is not None
                else None
            ),
            "tables": store.export_rows(session, instance_id),
        }
    document["events"] = store.instance_events(instance_id, save.role_id, save.background_id)
    return document


def export_instance(
    instance_id: int, path: str | Path, *, overwrite: bool = False, database_url: str | None = None
) -> Path:
    """Write `export_instance_data` to the file `path` in one step (stores.files.write_file)."""
    import json

    document = export_instance_data(instance_id, database_url=database_url)
    data = json.dumps(document, ensure_ascii=False, indent=1).encode("utf-8")
    return write_file(path, data, overwrite=overwrite)


class _ExportFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Literal["personalab-instance"]
    version: Literal[1]
    exported_at: str | None = None
    instance: dict[str, Any]
    character: dict[str, Any] | None
    background: dict[str, Any] | None
    tables: dict[str, list[dict[str, Any]]]
    events: list[dict[str, Any]] = Field(default_factory=list)


ROLE_DEFINITION = ("name", *ROLE_TEXT, "greetings", "avatar_image", "avatar_mime", "avatar")


def _matching_role(session: Session, data: Mapping[str, Any], owner: str | None = None) -> Role | None:
    """A stored character `owner` sees with the same definition as the file's (an import into the database it came
    from reuses its character instead of copying it)."""
    wanted = {key: data.get(key) for key in ROLE_DEFINITION}
    query = select(Role).where(col(Role.name) == data.get("name"), *_visible(col(Role.owner), col(Role.shared), owner))
    for role in session.exec(query).all():
        mine = store.row_to_json(role)
        if all(mine.get(key) == value for key, value in wanted.items()):
            return role
    return None


def _matching_background(session: Session, data: Mapping[str, Any], owner: str | None = None) -> Background | None:
    visible = _visible(col(Background.owner), col(Background.shared), owner)
    for row in session.exec(select(Background).where(col(Background.name) == data.get("name"), *visible)).all():
        assert row.id is not None
        if row.world_setting == data.get("world_setting") and [p.content for p in outline_of(session, row.id)] == list(
            data.get("outline") or []
        ):
            return row
    return None


def import_instance_data(
    document: Mapping[str, Any], *, owner: str | None = None, database_url: str | None = None
) -> ImportResult:
    """A new instance from an exported document: the same dialogue tree, story states, memories, records, events
    and the rest, with new ids. Its character and background are the stored ones with the same definition, or
    new copies. All or nothing: a bad document is one `InvalidInput` naming what is wrong, and nothing is stored.
    Everything it makes is `owner`'s (whatever the file says); it reuses only a character or background `owner`
    sees."""
    doc = validate_model(_ExportFile, document, "file")
    character_created = background_created = False
    with session_scope(database_url) as session:
        roles: dict[int, int] = {}
        backgrounds: dict[int, int] = {}
        role_id = background_id = None
        if doc.character is not None:
            role = _matching_role(session, doc.character, owner)
            if role is None:
                fields = {k: v for k, v in doc.character.items() if k not in ("id", "owner", "shared")}
                table = Role.__table__  # type: ignore[attr-defined]
                values = {k: store._from_json(table, k, v) for k, v in fields.items() if k in table.c}
                role = Role(**values)
                role.name = validate_model(_Title, {"title": role.name or ""}, "file.character.name").title
                role.owner = owner
                session.add(role)
                session.flush()
                character_created = True
            role_id = role.id
            if isinstance(doc.character.get("id"), int):
                roles[doc.character["id"]] = int(role.id)  # type: ignore[arg-type]
        if doc.background is not None:
            background = _matching_background(session, doc.background, owner)
            if background is None:
                outline = validate_model(
                    BackgroundInput,
                    {
                        "name": doc.background.get("name", ""),
                        "world_setting": doc.background.get("world_setting", ""),
                        "outline": doc.background.get("outline") or [],
                    },
                    "file.background",
                )
                background = Background(name=outline.name, world_setting=outline.world_setting, owner=owner)
                session.add(background)
                session.flush()
                assert background.id is not None
                _set_outline(session, background.id, outline.outline)
                background_created = True
            background_id = background.id
            if isinstance(doc.background.get("id"), int):
                backgrounds[doc.background["id"]] = int(background.id)  # type: ignore[arg-type]
        title = doc.instance.get("title") or ""
        save = create_save(session, role_id, background_id, title=str(title))
        assert save.id is not None
        save.owner = owner
        for key in ("created_at", "updated_at"):
            if doc.instance.get(key):
                setattr(save, key, store._from_json(Save.__table__, key, doc.instance[key]))  # type: ignore[attr-defined]
        maps = store.import_rows(session, save.id, doc.tables, roles=roles, backgrounds=backgrounds, owner=owner)
        leaf = doc.instance.get("last_message_id")
        save.last_message_id = maps.get("line", {}).get(leaf) if isinstance(leaf, int) else None
        session.add(save)
        session.flush()
        instance_id = save.id
        rows = {name: len(items) for name, items in doc.tables.items()}
    try:
        events = store.write_events(instance_id, role_id, background_id, doc.events, maps.get("line", {}))
        if rows.get("memory_entry"):
            MemoryStore(database_url).reindex(instance_id)
    except BaseException:
        delete_instance(instance_id, database_url=database_url)
        raise
    return ImportResult(
        instance=get_instance(instance_id, owner=owner, database_url=database_url),
        character_created=character_created,
        background_created=background_created,
        rows=rows,
        events=events,
    )


def import_instance(path: str | Path, *, owner: str | None = None, database_url: str | None = None) -> ImportResult:
    """`import_instance_data` of the file `path` (read by stores.files.read_json: a regular file within the limit)."""
    document = read_json(path, MAX_EXPORT_BYTES, what="instance export")
    return import_instance_data(document, owner=owner, database_url=database_url)


def avatar_from_base64(text: str, field: str = "avatar_base64") -> bytes:
    """Bytes of a base64 avatar (HTTP and CLI); `InvalidInput` naming `field` for text that is not base64."""
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        raise InvalidInput(f"{field}: not base64") from None


__all__ = [
    "DEFAULT_OUTLINE",
    "MAX_OUTLINE",
    "MIN_OUTLINE",
    "BackgroundEdit",
    "BackgroundInput",
    "BackgroundOut",
    "Character",
    "CharacterEdit",
    "CharacterInput",
    "Deleted",
    "ImportResult",
    "InUse",
    "Instance",
    "InstanceBusy",
    "InstanceInput",
    "PlotProgress",
    "character_avatar",
    "check_avatar",
    "check_instance",
    "create_background",
    "create_character",
    "create_instance",
    "delete_background",
    "delete_character",
    "delete_instance",
    "edit_background",
    "edit_character",
    "export_instance",
    "export_instance_data",
    "get_background",
    "get_character",
    "get_instance",
    "import_instance",
    "import_instance_data",
    "initial_core_memory_of",
    "instance_ids_of",
    "instance_owner",
    "list_backgrounds",
    "list_characters",
    "list_instances",
    "rename_instance",
]
