"""Characters, backgrounds and instances a host app manages (seed 002 功能需求: 角色管理, 背景管理, 会话实例管理;
seed 004 记忆导出和备份): `PersonaLab(...).characters`, `.backgrounds` and `.instances` (`Characters`,
`Backgrounds`, `Instances`, each bound to a `Caller`). The CLI (`personalab character|background|instance`) and the
HTTP routes (`/characters`, `/backgrounds`, `/instances`) are thin layers over them. The SQL is in
`stores/library_rows.py` and `stores/library.py`; the models in `graph/api/schemas/library.py`.

Every operation returns pydantic models and raises PersonaLab's errors only: `InvalidInput` naming the field (an
empty name, an outline of 0 or 51 points, an avatar that is no image), `NotFound` / `InstanceNotFound` naming the
id, `InUse` naming the instances when a character or background still in use is deleted without `cascade`. Each
runs as one transaction: a refused call changes nothing, and a cascading delete removes the character (or
background) and every instance using it together or not at all.

Users (issue 14): the caller's `owner` is the signed-in user (None: the local operator, who sees everything and
whose rows have no owner). A user sees and changes their own characters, backgrounds and instances, sees and uses
the ones marked `shared`, and nothing else: another user's id is `NotFound` / `InstanceNotFound` naming the id,
exactly as an id that does not exist.

The module-level functions (`create_character(data, owner=…, database_url=…)`, …) are the previous release's
API, kept as wrappers for one release.
"""

from __future__ import annotations

import base64
import builtins
import io
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.card_play import imported_language, instance_language, open_background
from personalab.graph.api.schemas.library import (
    CHARACTER_TEXT,
    DEFAULT_OUTLINE,
    EXPORT_FORMAT,
    EXPORT_VERSION,
    MAX_AVATAR_BYTES,
    MAX_EXPORT_BYTES,
    MAX_OUTLINE,
    MIN_OUTLINE,
    BackgroundEdit,
    BackgroundInput,
    BackgroundOut,
    Character,
    CharacterEdit,
    CharacterInput,
    Deleted,
    ExportFile,
    ImportResult,
    Instance,
    InstanceInput,
    InstanceTitle,
    InUse,
    PersonaFile,
    PlotProgress,
    validate_model,
)
from personalab.graph.api.schemas.personas import PersonaEdit
from personalab.nodes.rules.character import seeded_core_memory, substitute
from personalab.nodes.rules.errors import InstanceBusy, InvalidInput, NotFound
from personalab.nodes.rules.plot import new_plot_state
from personalab.nodes.rules.prompt_catalog import DEFAULT_LANGUAGE, catalog_for, check_language
from personalab.stores import library_rows as rows
from personalab.stores.db import session_scope
from personalab.stores.library_rows import owns, visible_to
from personalab.stores.personas import add_persona, matching_persona, persona_of_instance, persona_row
from personalab.stores.saves import append_lines, create_save, get_save
from personalab.stores.tables import Background, Persona, Role, Save
from personalab.stores.threads import thread_id_for

ROLE_TEXT = CHARACTER_TEXT  # the previous release's name
ROLE_DEFINITION = ("name", *CHARACTER_TEXT, "greetings", "avatar_image", "avatar_mime", "avatar")


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


def stored_avatar(row: Role | Persona, what: str) -> tuple[bytes, str]:
    """A stored row's avatar image and its MIME type (a character's, a persona's); `NotFound` naming `what` (e.g.
    "character 3") when it has none."""
    if not row.avatar_image:
        raise NotFound(f"{what} has no avatar")
    return bytes(row.avatar_image), row.avatar_mime or "application/octet-stream"


def edited_values(edit: CharacterEdit | PersonaEdit, mime: str | None) -> dict[str, Any]:
    """The columns an edit of a character or a persona sets: its given fields (a None leaves one as it is), the
    avatar with its checked `mime`, or no avatar when `remove_avatar`."""
    values: dict[str, Any] = {
        name: value
        for name, value in edit.model_dump(exclude_unset=True, exclude={"avatar", "remove_avatar"}).items()
        if value is not None
    }
    if edit.avatar is not None:
        values |= {"avatar_image": edit.avatar, "avatar_mime": mime}
    elif edit.remove_avatar:
        values |= {"avatar_image": None, "avatar_mime": None}
    return values


def avatar_from_base64(text: str, field: str = "avatar_base64") -> bytes:
    """Bytes of a base64 avatar (HTTP and CLI); `InvalidInput` naming `field` for text that is not base64."""
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        raise InvalidInput(f"{field}: not base64") from None


# ---- the areas ---------------------------------------------------------------------------------------------------


class _Area:
    """An area of the API bound to its caller: `self.owner` acts on `self.database_url`."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    @property
    def owner(self) -> str | None:
        return self.caller.owner

    @property
    def database_url(self) -> str | None:
        return self.caller.database_url

    def _session(self) -> Any:
        return session_scope(self.database_url)


def _character(
    session: Any,
    character_row: Role,
    owner: str | None,
    *,
    avatar_bytes: int | None = None,
    instances: builtins.list[int] | None = None,
) -> Character:
    """The public view of a character row; `avatar_bytes` / `instances` when the caller read them for many rows
    at once (the row's avatar image is then not loaded)."""
    assert character_row.id is not None
    size = len(character_row.avatar_image or b"") if avatar_bytes is None else avatar_bytes
    return Character(
        id=character_row.id,
        name=character_row.name,
        **{name: getattr(character_row, name) or "" for name in CHARACTER_TEXT},
        greetings=list(character_row.greetings or []),
        avatar_mime=character_row.avatar_mime if size else None,
        avatar_bytes=size,
        created_at=character_row.created_at,
        updated_at=character_row.updated_at,
        instances=rows.instances_of_character(session, character_row.id, owner) if instances is None else instances,
        owner=character_row.owner,
        shared=bool(character_row.shared),
    )


def _background(
    session: Any,
    background: Background,
    owner: str | None,
    *,
    outline: builtins.list[str] | None = None,
    instances: builtins.list[int] | None = None,
) -> BackgroundOut:
    """The public view of a background row; `outline` / `instances` when the caller read them for many at once."""
    assert background.id is not None
    return BackgroundOut(
        id=background.id,
        name=background.name,
        world_setting=background.world_setting,
        outline=rows.outline(session, background.id) if outline is None else outline,
        created_at=background.created_at,
        updated_at=background.updated_at,
        instances=rows.instances_of_background(session, background.id, owner) if instances is None else instances,
        owner=background.owner,
        shared=bool(background.shared),
    )


class Characters(_Area):
    """Characters (seed 002 角色管理): create, list, show, edit, delete; the avatar image."""

    def create(self, data: CharacterInput | Mapping[str, Any]) -> Character:
        """Store a new character (seed 002 创建角色), the caller's."""
        with self._session() as session:
            return _character(session, self.add(session, data), self.owner)

    def add(self, session: Any, data: CharacterInput | Mapping[str, Any]) -> Role:
        """`create` inside the caller's transaction `session` (a card import adds its book in the same one)."""
        item = validate_model(CharacterInput, data, "character")
        mime = check_avatar(item.avatar) if item.avatar is not None else None
        fields = {
            "name": item.name,
            **{name: getattr(item, name) for name in CHARACTER_TEXT},
            "greetings": list(item.greetings),
            "avatar_image": item.avatar,
            "avatar_mime": mime,
            "shared": item.shared or None,
        }
        return rows.add_character(session, fields, self.owner)

    def list(self) -> list[Character]:
        """Every character the caller sees (their own and the shared ones; the operator: all)."""
        with self._session() as session:
            listed = rows.character_list_rows(session, self.owner)  # three queries however many there are
            ids = [row.id for row, _ in listed if row.id is not None]
            used = rows.instances_using_each(session, Save.role_id, ids, self.owner)
            return [
                _character(session, row, self.owner, avatar_bytes=size, instances=used[row.id])
                for row, size in listed
                if row.id is not None
            ]

    def names(self) -> builtins.list[tuple[int, str]]:
        """(id, name) of every character the caller sees, as a picker lists them (one small query)."""
        with self._session() as session:
            return rows.names(session, "character", self.owner)

    def get(self, character_id: int) -> Character:
        with self._session() as session:
            return _character(session, rows.character_row(session, character_id, self.owner), self.owner)

    def avatar(self, character_id: int) -> tuple[bytes, str]:
        """The character's avatar image and its MIME type; `NotFound` when it has none."""
        with self._session() as session:
            character_row = rows.character_row(session, character_id, self.owner)
            return stored_avatar(character_row, f"character {character_id}")

    def edit(self, character_id: int, changes: CharacterEdit | Mapping[str, Any]) -> Character:
        """Change the given fields (seed 002 编辑角色). Running instances see the new definition from their next
        turn; their core memory, already grown from the old persona, is theirs and stays."""
        edit = validate_model(CharacterEdit, changes, "character")
        mime = check_avatar(edit.avatar) if edit.avatar is not None else None
        with self._session() as session:
            character_row = rows.character_row(session, character_id, self.owner, change=True)
            rows.change_row(session, character_row, edited_values(edit, mime))
            return _character(session, character_row, self.owner)

    def delete(self, character_id: int, *, cascade: bool = False) -> Deleted:
        """Delete a character (seed 002 删除角色). Refused (`InUse`, naming them) while instances use it, unless
        `cascade`: then those instances go with it, in the same transaction. Lines of other instances that name it
        as a speaker keep their text and display name and lose the link. A user's shared character that other
        users' instances use is refused even with `cascade` (their instances are not the owner's to delete)."""
        return _delete_library_item(self, "character", character_id, cascade)


class Backgrounds(_Area):
    """Backgrounds (seed 002 背景管理): world setting and outline; create, list, show, edit, delete."""

    def create(self, data: BackgroundInput | Mapping[str, Any]) -> BackgroundOut:
        """Store a new background (seed 002 创建背景), the caller's."""
        item = validate_model(BackgroundInput, data, "background")
        with self._session() as session:
            background = rows.add_background(
                session, item.name, item.world_setting, item.outline, owner=self.owner, shared=item.shared or None
            )
            return _background(session, background, self.owner)

    def list(self) -> list[BackgroundOut]:
        """Every background the caller sees (their own and the shared ones; the operator: all)."""
        with self._session() as session:
            listed = [row for row in rows.background_rows(session, self.owner) if row.id is not None]
            ids = [row.id for row in listed if row.id is not None]
            outlines = rows.outlines(session, ids)  # three queries however many there are
            used = rows.instances_using_each(session, Save.background_id, ids, self.owner)
            return [
                _background(session, row, self.owner, outline=outlines[row.id], instances=used[row.id])
                for row in listed
                if row.id is not None
            ]

    def names(self) -> builtins.list[tuple[int, str]]:
        """(id, name) of every background the caller sees, as a picker lists them (one small query)."""
        with self._session() as session:
            return rows.names(session, "background", self.owner)

    def get(self, background_id: int) -> BackgroundOut:
        with self._session() as session:
            return _background(session, rows.background_row(session, background_id, self.owner), self.owner)

    def edit(self, background_id: int, changes: BackgroundEdit | Mapping[str, Any]) -> BackgroundOut:
        """Change the given fields (seed 002 编辑背景). Instances that already have a plot state keep it (their
        story is under way) unless `apply_to_instances`: then each one's current story state (its current
        branch's) gets the new outline, every point keeping its status by index; instances without a turn yet
        start from the new outline anyway."""
        from personalab.stores.turns import branch_story_states

        edit = validate_model(BackgroundEdit, changes, "background")
        with self._session() as session:
            background = rows.background_row(session, background_id, self.owner, change=True)
            values = {
                name: getattr(edit, name)
                for name in ("name", "shared", "world_setting")
                if getattr(edit, name) is not None
            }
            if edit.outline is not None:
                rows.set_outline(session, background_id, edit.outline)
            rows.change_row(session, background, values)
            if edit.apply_to_instances:
                outline = rows.outline(session, background_id)
                # a user's edit replans only their own instances: other users' plots are theirs
                users = rows.instances_of_background(session, background_id, self.owner)
                branches = branch_story_states(session, users) if users else {}
                for instance_id in users:
                    row = branches[instance_id][0] if instance_id in branches else None
                    if row is None or not row.state.get("plot_state"):
                        continue
                    state = {**row.state, "plot_state": replan(row.state["plot_state"], outline)}
                    # a new row: the checkpoint's copy then differs from the stored state, so the next turn starts
                    # from this one (nodes/history_fetch.kept_state)
                    rows.add_story_state(session, instance_id, row.turn, row.reply_line_id, state)
            return _background(session, background, self.owner)

    def delete(self, background_id: int, *, cascade: bool = False) -> Deleted:
        """Delete a background and its outline (seed 002 删除背景); refused while instances use it unless
        `cascade` (then they go with it, in the same transaction), and, for a user, while other users' instances
        use it."""
        return _delete_library_item(self, "background", background_id, cascade)


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


def _instances(session: Any, listed: Sequence[Save], scope: Any) -> list[Instance]:
    """`listed` as the list shows them (seed 002 查看会话实例列表): turns, plot progress and last turn time of the
    current branch (seed 000 + 002: after a rewind, swipe or edit, those of the branch point)."""
    found = []
    languages = {row.id: row.language for row in listed}
    for item in rows.instance_summaries(session, listed, scope):
        plot_state, outline = item.pop("plot_state"), item.pop("outline")
        if plot_state is None and outline:
            plot_state = new_plot_state(outline)
        language = languages.get(item["id"]) or DEFAULT_LANGUAGE  # issue 28; None on older rows: Chinese
        found.append(
            Instance(**item, plot=_plot_progress(plot_state), thread_id=thread_id_for(item["id"]), language=language)
        )
    return found


def _instance(session: Any, instance_row: Save) -> Instance:
    assert instance_row.id is not None
    return _instances(session, [instance_row], [instance_row.id])[0]


@contextmanager
def _locked(instance_ids: Sequence[int], database_url: str | None) -> Iterator[None]:
    """The turn locks of every instance in `instance_ids`, held around their deletion (`InstanceBusy` naming the
    first one a turn runs on; the locks taken so far are given back). The lock rows go with the instances' rows."""
    from personalab.stores.settings import settings
    from personalab.stores.turns import acquire_turn_lock, release_turn_lock

    lease = float(settings().turn_lease)
    held: list[tuple[int, str]] = []
    try:
        for instance_id in instance_ids:
            held.append((instance_id, acquire_turn_lock(instance_id, lease, database_url)))
        yield
    except BaseException:
        for instance_id, token in held:
            release_turn_lock(instance_id, token, database_url)
        raise


def _delete_instances_in(
    session: Any, instance_ids: Sequence[int]
) -> tuple[dict[str, int], list[tuple[int, Any, Any]]]:
    """Every row of the instances, in the caller's transaction: the rows deleted per table, and each instance's
    (id, character, background) for the vectors to delete after the commit."""
    from personalab.stores import library as store

    total: dict[str, int] = {}
    gone = []
    for instance_id in instance_ids:
        instance_row = get_save(session, instance_id)
        gone.append((instance_id, instance_row.role_id, instance_row.background_id))
        for table, count in store.delete_instance_rows(session, instance_id).items():
            total[table] = total.get(table, 0) + count
    return total, gone


def _after_delete(gone: Sequence[tuple[int, Any, Any]], database_url: str | None) -> None:
    """What lives outside the database, once the rows' transaction committed: vectors, checkpoints, the path
    cache and the background writes' marks."""
    from personalab.stores import library as store
    from personalab.stores.background import turn_ended
    from personalab.stores.history import forget_paths
    from personalab.stores.memory import MemoryStore

    chroma = MemoryStore(database_url)._chroma_path() if gone else None
    for instance_id, role_id, background_id in gone:
        store.delete_instance_vectors(instance_id, role_id, background_id, chroma)
        store.delete_checkpoints(instance_id, database_url)
        turn_ended(instance_id)  # the lock went with the instance's rows
    forget_paths()


def _delete_library_item(area: _Area, kind: str, row_id: int, cascade: bool) -> Deleted:
    """Delete a character or background (and with `cascade` its instances) in one transaction."""
    from personalab.stores import library as store
    from personalab.stores.background import flush_event_writes

    find = rows.character_row if kind == "character" else rows.background_row
    with area._session() as session:
        find(session, row_id, area.owner, change=True)
        others = rows.others_using(session, kind, row_id, area.owner)
        users = (rows.instances_of_character if kind == "character" else rows.instances_of_background)(session, row_id)
    if others:
        raise InUse(f"{kind} {row_id} is used by {others} instance(s) of other users: unshare it instead")
    if users and not cascade:
        raise InUse(
            f"{kind} {row_id} is used by instance(s) {', '.join(map(str, users))}: delete them first or use cascade"
        )
    flush_event_writes()  # a queued event or memory write must not land after the delete
    with _locked(users, area.database_url):
        with area._session() as session:
            # checked again under the locks: an instance made meanwhile would otherwise block the delete
            now = (rows.instances_of_character if kind == "character" else rows.instances_of_background)(
                session, row_id
            )
            if set(now) - set(users):
                raise InUse(f"{kind} {row_id} got new instance(s) {', '.join(map(str, sorted(set(now) - set(users))))}")
            counts, gone = _delete_instances_in(session, users)
            for table, count in store.delete_library_rows(
                session, "role" if kind == "character" else "background", row_id
            ).items():
                counts[table] = counts.get(table, 0) + count
            (rows.delete_character_row if kind == "character" else rows.delete_background_row)(session, row_id)
    _after_delete(gone, area.database_url)
    return Deleted(kind=kind, id=row_id, instances_deleted=users, rows_deleted=counts)  # type: ignore[arg-type]


class Instances(_Area):
    """Conversation instances (seed 002 会话实例管理): create, list, show, rename, delete, export, import."""

    def create(self, data: InstanceInput | Mapping[str, Any]) -> Instance:
        """A new instance of a stored character in a stored background (seed 002 创建会话实例): its own dialogue
        tree, opened by the character's greeting (`{{char}}` / `{{user}}` replaced); the plot starts at point 1
        and the core memory is seeded from the persona at the first turn. The caller's, of a character and
        background that are theirs or shared. Without a background, one made from the character's card scenario,
        open; without a language, the character text's (issue 28, graph/api/card_play.py)."""
        item = validate_model(InstanceInput, data, "instance")
        with self._session() as session:
            character_row = rows.character_row(session, item.character_id, self.owner)
            language = instance_language(session, character_row, item.language)  # issue 28
            persona = persona_row(session, item.persona_id, self.owner) if item.persona_id is not None else None
            background = (
                rows.background_row(session, item.background_id, self.owner)
                if item.background_id is not None
                else open_background(
                    session, character_row, self.owner, language, persona.name if persona is not None else None
                )
            )
            greetings = list(character_row.greetings or [])
            if greetings and item.greeting >= len(greetings):
                raise InvalidInput(
                    f"instance.greeting: {item.greeting} is out of range (the character has {len(greetings)})"
                )
            if not greetings and item.greeting:
                raise InvalidInput(f"instance.greeting: character {character_row.id} has no greetings")
            # a background made for this instance already carries the character's name
            default_title = (
                background.name if item.background_id is None else f"{character_row.name} · {background.name}"
            )
            title = item.title.strip() or default_title
            instance_row = create_save(session, character_row.id, background.id, title=title)
            assert instance_row.id is not None
            rows.change_row(
                session,
                instance_row,
                {"owner": self.owner, "language": language, "persona_id": item.persona_id},
                stamp=False,
            )
            if greetings and greetings[item.greeting].strip():
                # issue 28: the persona's name, else the language's default (用户 / User)
                user_name = persona.name if persona is not None else catalog_for(language).default_user_name
                text = substitute(greetings[item.greeting], character_row.name, user_name)
                append_lines(
                    session,
                    instance_row.id,
                    [
                        {
                            "attribute": "assistant",
                            "content": text,
                            "role_id": character_row.id,
                            "display_name": character_row.name,
                        }
                    ],
                )
            return _instance(session, instance_row)

    def list(self, *, character_id: int | None = None, background_id: int | None = None) -> list[Instance]:
        """Every instance of the caller (the operator: all; of one character and/or background), newest first,
        with title, character, background, created, and the last turn time, turns and plot progress of its
        current branch (seed 002 查看会话实例列表)."""
        with self._session() as session:
            listed, scope = rows.instance_rows(session, self.owner, character_id, background_id)
            return _instances(session, listed, scope)

    def page(
        self,
        *,
        offset: int = 0,
        limit: int = 50,
        character_id: int | None = None,
        background_id: int | None = None,
    ) -> tuple[builtins.list[Instance], int]:
        """One page of `list` (newest first, `limit` from `offset`) and how many there are in all: the page is cut
        in SQL and only its instances' branch state is read, so a page costs the same with 50 or 5,000 instances
        (issue 24: the instance list of the web app)."""
        if offset < 0 or limit < 1:
            raise InvalidInput(f"instance page: offset {offset} and limit {limit} must be ≥ 0 and ≥ 1")
        with self._session() as session:
            total = rows.instance_count(session, self.owner, character_id, background_id)
            listed, scope = rows.instance_rows(
                session, self.owner, character_id, background_id, offset=offset, limit=limit
            )
            return _instances(session, listed, scope), total

    def get(self, instance_id: int) -> Instance:
        with self._session() as session:
            return _instance(session, rows.instance_row(session, instance_id, self.owner))

    def create_sample(self) -> Instance:
        """A new instance of the shipped sample character and background (雷娜 · 废土复仇记, 10 outline points),
        the operator's."""
        from personalab.graph.runner import create_sample_instance

        return self.get(create_sample_instance(self.database_url))

    def create_sample_scene(self) -> tuple[int, int]:
        """Seed 000's example 2 (a multi-character scene) stored as a new instance: (its id, 钦灵's character id).
        The scene's lines name 钦灵 as `role_id` 1; they are stored with the new character's id."""
        from personalab.graph.runner import load_sample
        from personalab.stores.saves import create_background, create_role

        sample = load_sample("seed_multi_character.json")
        with self._session() as session:
            character_row = create_role(session, **sample["role"])
            background = create_background(session, **sample["background"])
            instance_row = create_save(session, character_row.id, background.id, title="seed 000 example 2")
            lines = [
                {**line, "role_id": character_row.id} if line.get("role_id") == 1 else line for line in sample["lines"]
            ]
            assert instance_row.id is not None and character_row.id is not None
            append_lines(session, instance_row.id, lines)
            return instance_row.id, character_row.id

    def check(self, instance_id: int) -> None:
        """`InstanceNotFound` unless instance `instance_id` exists and is the caller's."""
        with self._session() as session:
            rows.instance_row(session, instance_id, self.owner)

    def owner_of(self, instance_id: int) -> tuple[bool, str | None]:
        """(whether instance `instance_id` exists, its owner): what the server's auth handlers check a run
        against (whoever the caller is)."""
        with self._session() as session:
            return rows.instance_owner(session, instance_id)

    def ids(self) -> builtins.list[int]:  # `list` is the method above here
        """The ids of the caller's instances (the operator: every instance)."""
        with self._session() as session:
            return rows.instance_ids(session, self.owner)

    def initial_core_memory(self, instance_id: int) -> dict[str, Any]:
        """The core memory the instance starts from (seeded from its character's persona)."""
        with self._session() as session:
            instance_row = rows.instance_row(session, instance_id, self.owner)
            character_row = session.get(Role, instance_row.role_id) if instance_row.role_id is not None else None
            return seeded_core_memory(
                character_row.name if character_row else catalog_for(instance_row.language).default_character_name,
                character_row.model_dump() if character_row else {},
            )

    def rename(self, instance_id: int, title: str) -> Instance:
        name = validate_model(InstanceTitle, {"title": title}, "instance").title
        with self._session() as session:
            instance_row = rows.instance_row(session, instance_id, self.owner)
            rows.change_row(session, instance_row, {"title": name})
            return _instance(session, instance_row)

    def set_language(self, instance_id: int, language: str) -> Instance:
        """The language of the instance's prompt scaffolding from its next turn on (issue 28): `zh` or `en`;
        `InvalidInput` listing the supported ones otherwise."""
        code = check_language(language, "instance.language")
        with self._session() as session:
            instance_row = rows.instance_row(session, instance_id, self.owner)
            rows.change_row(session, instance_row, {"language": code})
            return _instance(session, instance_row)

    def delete(self, instance_id: int) -> Deleted:
        """Delete an instance with everything of it (seed 002 删除会话实例): its rows in every table that points
        at it, in one transaction, then its vectors in Chroma and its checkpoints. Refused (`InstanceBusy`) while
        a turn runs on it."""
        from personalab.stores.background import flush_event_writes

        self.check(instance_id)  # before the lock: it names no stranger's
        flush_event_writes()  # a queued event or memory write must not land after the delete
        with _locked([instance_id], self.database_url):
            with self._session() as session:
                counts, gone = _delete_instances_in(session, [instance_id])
        _after_delete(gone, self.database_url)
        return Deleted(kind="instance", id=instance_id, rows_deleted=counts)

    def export_data(self, instance_id: int) -> dict[str, Any]:
        """The instance as one JSON document (seed 004 记忆导出和备份): its character and background, every row
        of it in every table, and its archived events. `import_data` reads it back."""
        from personalab.stores import library as store
        from personalab.stores.background import flush_event_writes

        self.check(instance_id)
        flush_event_writes()
        with self._session() as session:
            instance_row = get_save(session, instance_id)
            character_row = session.get(Role, instance_row.role_id) if instance_row.role_id is not None else None
            background = (
                session.get(Background, instance_row.background_id) if instance_row.background_id is not None else None
            )
            document: dict[str, Any] = {
                "format": EXPORT_FORMAT,
                "version": EXPORT_VERSION,
                "exported_at": datetime.now(UTC).isoformat(),
                "instance": store.row_to_json(instance_row),
                "character": store.row_to_json(character_row) if character_row else None,
                "background": (
                    {**store.row_to_json(background), "outline": rows.outline(session, background.id)}
                    if background and background.id is not None
                    else None
                ),
                "tables": store.export_rows(session, instance_id),
            }
            persona = persona_of_instance(session, instance_id)
            if persona is not None:  # issue 28: the persona goes with its instance (not its id, the exporter's)
                document["persona"] = {
                    key: value
                    for key, value in store.row_to_json(persona).items()
                    if key in ("name", "description", "avatar_image", "avatar_mime")
                }
        document["events"] = store.instance_events(instance_id, instance_row.role_id, instance_row.background_id)
        return document

    def _imported_persona(self, session: Any, persona: PersonaFile) -> int:
        """The caller's persona with the file's name, description and avatar: an identical one of theirs, else a
        new one (issue 28). A bad avatar is `InvalidInput` naming `file.persona.avatar_image`."""
        import base64
        import binascii

        avatar = None
        if persona.avatar_image is not None:
            try:
                avatar = base64.b64decode(persona.avatar_image, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidInput("file.persona.avatar_image: not base64") from None
        fields = {
            "name": persona.name.strip(),
            "description": persona.description,
            "avatar_image": avatar,
            "avatar_mime": persona.avatar_mime if avatar is not None else None,
        }
        if not fields["name"]:
            raise InvalidInput("file.persona.name: empty")
        row = matching_persona(session, fields, self.owner) or add_persona(session, fields, self.owner)
        return int(row.id)  # type: ignore[arg-type]

    def export(self, instance_id: int, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write `export_data` to the file `path` in one step (a plain file is replaced only with `overwrite`)."""
        import json

        from personalab.stores.files import write_file

        document = self.export_data(instance_id)
        data = json.dumps(document, ensure_ascii=False, indent=1).encode("utf-8")
        return write_file(path, data, overwrite=overwrite)

    def import_data(self, document: Mapping[str, Any]) -> ImportResult:
        """A new instance from an exported document: the same dialogue tree, story states, memories, records,
        events and the rest, with new ids. Its character and background are the stored ones with the same
        definition, or new copies. All or nothing: the rows in one transaction, and should the events or the
        memory index fail after it, the instance is deleted again; a bad document is one `InvalidInput` naming
        what is wrong. Everything it makes is the caller's (whatever the file says); it reuses only a character or
        background the caller sees."""
        from personalab.stores import library as store
        from personalab.stores.memory import MemoryStore

        doc = validate_model(ExportFile, document, "file")
        character_created = background_created = False
        with self._session() as session:
            roles: dict[int, int] = {}
            backgrounds: dict[int, int] = {}
            role_id = background_id = None
            if doc.character is not None:
                character_row = rows.matching_character(session, doc.character, ROLE_DEFINITION, self.owner)
                if character_row is None:
                    fields = {k: v for k, v in doc.character.items() if k not in ("id", "owner", "shared")}
                    table = Role.__table__  # type: ignore[attr-defined]
                    values = {k: store._from_json(table, k, v) for k, v in fields.items() if k in table.c}
                    values["name"] = validate_model(
                        InstanceTitle, {"title": values.get("name") or ""}, "file.character.name"
                    ).title
                    character_row = rows.add_character(session, values, self.owner)
                    character_created = True
                role_id = character_row.id
                if isinstance(doc.character.get("id"), int):
                    roles[doc.character["id"]] = int(character_row.id)  # type: ignore[arg-type]
            if doc.background is not None:
                background = rows.matching_background(session, doc.background, self.owner)
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
                    background = rows.add_background(
                        session,
                        outline.name,
                        outline.world_setting,
                        outline.outline,
                        owner=self.owner,
                        open_outline=doc.background.get("open_outline") is True or None,  # issue 28
                    )
                    background_created = True
                background_id = background.id
                if isinstance(doc.background.get("id"), int):
                    backgrounds[doc.background["id"]] = int(background.id)  # type: ignore[arg-type]
            instance_row = create_save(session, role_id, background_id, title=str(doc.instance.get("title") or ""))
            assert instance_row.id is not None
            stamps = {
                key: store._from_json(Save.__table__, key, doc.instance[key])  # type: ignore[attr-defined]
                for key in ("created_at", "updated_at")
                if doc.instance.get(key)
            }
            maps = store.import_rows(
                session, instance_row.id, doc.tables, roles=roles, backgrounds=backgrounds, owner=self.owner
            )
            persona_id = None
            if doc.persona is not None:  # issue 28: the importing user's persona, matched or made, never the file's id
                persona_id = self._imported_persona(session, doc.persona)
            leaf = doc.instance.get("last_message_id")
            rows.change_row(
                session,
                instance_row,
                {
                    "owner": self.owner,
                    "last_message_id": maps.get("line", {}).get(leaf) if isinstance(leaf, int) else None,
                    "language": imported_language(doc.instance.get("language")),  # issue 28
                    "persona_id": persona_id,  # the file's persona_id is the exporter's: never linked
                    **stamps,
                },
                stamp=False,
            )
            instance_id = instance_row.id
            counts = {name: len(items) for name, items in doc.tables.items()}
        try:
            events = store.write_events(instance_id, role_id, background_id, doc.events, maps.get("line", {}))
            if counts.get("memory_entry"):
                MemoryStore(self.database_url).reindex(instance_id)
        except BaseException:
            Instances(Caller(None, self.database_url)).delete(instance_id)
            raise
        return ImportResult(
            instance=self.get(instance_id),
            character_created=character_created,
            background_created=background_created,
            rows=counts,
            events=events,
        )

    def import_file(self, path: str | Path) -> ImportResult:
        """`import_data` of the file `path` (a regular file within the export limit)."""
        from personalab.stores.files import read_json

        return self.import_data(read_json(path, MAX_EXPORT_BYTES, what="instance export"))


# ---- the previous release's functions (one release more) ---------------------------------------------------------


def _caller(owner: str | None, database_url: str | None) -> Caller:
    return Caller(owner=owner, database_url=database_url)


def owned_save(session: Any, instance_id: int, owner: str | None = None) -> Save:
    """The instance row if it is `owner`'s: `InstanceNotFound` naming the id otherwise (stores.library_rows)."""
    return rows.instance_row(session, instance_id, owner)


def create_character(data: Any, *, owner: str | None = None, database_url: str | None = None) -> Character:
    return Characters(_caller(owner, database_url)).create(data)


def list_characters(*, owner: str | None = None, database_url: str | None = None) -> list[Character]:
    return Characters(_caller(owner, database_url)).list()


def get_character(character_id: int, *, owner: str | None = None, database_url: str | None = None) -> Character:
    return Characters(_caller(owner, database_url)).get(character_id)


def character_avatar(
    character_id: int, *, owner: str | None = None, database_url: str | None = None
) -> tuple[bytes, str]:
    return Characters(_caller(owner, database_url)).avatar(character_id)


def edit_character(
    character_id: int, changes: Any, *, owner: str | None = None, database_url: str | None = None
) -> Character:
    return Characters(_caller(owner, database_url)).edit(character_id, changes)


def delete_character(
    character_id: int, *, cascade: bool = False, owner: str | None = None, database_url: str | None = None
) -> Deleted:
    return Characters(_caller(owner, database_url)).delete(character_id, cascade=cascade)


def create_background(data: Any, *, owner: str | None = None, database_url: str | None = None) -> BackgroundOut:
    return Backgrounds(_caller(owner, database_url)).create(data)


def list_backgrounds(*, owner: str | None = None, database_url: str | None = None) -> list[BackgroundOut]:
    return Backgrounds(_caller(owner, database_url)).list()


def get_background(background_id: int, *, owner: str | None = None, database_url: str | None = None) -> BackgroundOut:
    return Backgrounds(_caller(owner, database_url)).get(background_id)


def edit_background(
    background_id: int, changes: Any, *, owner: str | None = None, database_url: str | None = None
) -> BackgroundOut:
    return Backgrounds(_caller(owner, database_url)).edit(background_id, changes)


def delete_background(
    background_id: int, *, cascade: bool = False, owner: str | None = None, database_url: str | None = None
) -> Deleted:
    return Backgrounds(_caller(owner, database_url)).delete(background_id, cascade=cascade)


def check_instance(instance_id: int, *, owner: str | None = None, database_url: str | None = None) -> None:
    Instances(_caller(owner, database_url)).check(instance_id)


def instance_owner(instance_id: int, *, database_url: str | None = None) -> tuple[bool, str | None]:
    return Instances(_caller(None, database_url)).owner_of(instance_id)


def instance_ids_of(owner: str | None, *, database_url: str | None = None) -> list[int]:
    return Instances(_caller(owner, database_url)).ids()


def create_instance(data: Any, *, owner: str | None = None, database_url: str | None = None) -> Instance:
    return Instances(_caller(owner, database_url)).create(data)


def list_instances(
    *,
    character_id: int | None = None,
    background_id: int | None = None,
    owner: str | None = None,
    database_url: str | None = None,
) -> list[Instance]:
    return Instances(_caller(owner, database_url)).list(character_id=character_id, background_id=background_id)


def character_names(*, owner: str | None = None, database_url: str | None = None) -> list[tuple[int, str]]:
    return Characters(_caller(owner, database_url)).names()


def background_names(*, owner: str | None = None, database_url: str | None = None) -> list[tuple[int, str]]:
    return Backgrounds(_caller(owner, database_url)).names()


def list_instances_page(
    *,
    offset: int = 0,
    limit: int = 50,
    character_id: int | None = None,
    background_id: int | None = None,
    owner: str | None = None,
    database_url: str | None = None,
) -> tuple[list[Instance], int]:
    return Instances(_caller(owner, database_url)).page(
        offset=offset, limit=limit, character_id=character_id, background_id=background_id
    )


def get_instance(instance_id: int, *, owner: str | None = None, database_url: str | None = None) -> Instance:
    return Instances(_caller(owner, database_url)).get(instance_id)


def initial_core_memory_of(instance_id: int, *, database_url: str | None = None) -> dict[str, Any]:
    return Instances(_caller(None, database_url)).initial_core_memory(instance_id)


def rename_instance(
    instance_id: int, title: str, *, owner: str | None = None, database_url: str | None = None
) -> Instance:
    return Instances(_caller(owner, database_url)).rename(instance_id, title)


def delete_instance(instance_id: int, *, owner: str | None = None, database_url: str | None = None) -> Deleted:
    return Instances(_caller(owner, database_url)).delete(instance_id)


def export_instance_data(
    instance_id: int, *, owner: str | None = None, database_url: str | None = None
) -> dict[str, Any]:
    return Instances(_caller(owner, database_url)).export_data(instance_id)


def export_instance(
    instance_id: int, path: str | Path, *, overwrite: bool = False, database_url: str | None = None
) -> Path:
    return Instances(_caller(None, database_url)).export(instance_id, path, overwrite=overwrite)


def import_instance_data(
    document: Mapping[str, Any], *, owner: str | None = None, database_url: str | None = None
) -> ImportResult:
    return Instances(_caller(owner, database_url)).import_data(document)


def import_instance(path: str | Path, *, owner: str | None = None, database_url: str | None = None) -> ImportResult:
    return Instances(_caller(owner, database_url)).import_file(path)


__all__ = [
    "DEFAULT_OUTLINE",
    "MAX_OUTLINE",
    "MIN_OUTLINE",
    "BackgroundEdit",
    "BackgroundInput",
    "BackgroundOut",
    "Backgrounds",
    "Character",
    "CharacterEdit",
    "CharacterInput",
    "Characters",
    "Deleted",
    "ImportResult",
    "InUse",
    "Instance",
    "InstanceBusy",
    "InstanceInput",
    "Instances",
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
    "list_instances_page",
    "character_names",
    "background_names",
    "owns",
    "rename_instance",
    "visible_to",
]
