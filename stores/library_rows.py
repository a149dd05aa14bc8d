"""The library's rows as a user sees them (seed 002 角色/背景/会话实例; issue 14 users): characters, backgrounds and
instances read, written and checked for their owner, in the caller's transaction. The SQL of
`personalab.graph.api.library` (issue 23: no SQL above the stores).

Ownership: `owner` None is the local operator, who sees and changes everything. A user sees their own rows and
the ones marked `shared`, and changes only their own; another user's id is `NotFound` / `InstanceNotFound`
naming the id, exactly as an id that does not exist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from personalab.nodes.rules.errors import InstanceNotFound, NotFound
from personalab.stores.saves import outline_of
from personalab.stores.tables import Background, OutlinePoint, Role, Save, utcnow
from personalab.stores.turn_tables import StoryState
from personalab.stores.turns import branch_story_states
from sqlalchemy import func, or_
from sqlmodel import Session, col, select

Owned = Role | Background | Save


def visible_to(row: Owned, owner: str | None) -> bool:
    """Whether the user `owner` may see `row` (None: the local operator, who sees everything)."""
    if owner is None:
        return True
    return row.owner == owner or bool(getattr(row, "shared", False))


def owns(row: Owned, owner: str | None) -> bool:
    """Whether the user `owner` may change `row`: their own (the operator: any)."""
    return owner is None or row.owner == owner


def visible(column: Any, shared: Any, owner: str | None) -> list[Any]:
    """Where-clauses of the rows `owner` sees (none for the operator)."""
    if owner is None:
        return []
    if shared is None:
        return [column == owner]
    return [or_(column == owner, shared == True)]  # noqa: E712 - SQL, not Python


def _instances_using(session: Session, column: Any, value: int, owner: str | None = None) -> list[int]:
    query = select(Save.id).where(column == value, *visible(col(Save.owner), None, owner))
    ids = session.exec(query.order_by(col(Save.id))).all()
    return [int(i) for i in ids if i is not None]


def instances_using_each(
    session: Session, column: Any, values: Iterable[int], owner: str | None = None
) -> dict[int, list[int]]:
    """`_instances_using` for many characters (`column` Save.role_id) or backgrounds at once, in one query: each
    value's instance ids, oldest first (a library page costs the same with 5 or 500 entries)."""
    wanted = [value for value in values if value is not None]
    found: dict[int, list[int]] = {value: [] for value in wanted}
    if not wanted:
        return found
    query = select(column, Save.id).where(col(column).in_(wanted), *visible(col(Save.owner), None, owner))
    for value, instance_id in session.exec(query.order_by(col(Save.id))).all():
        if value is not None and instance_id is not None:
            found[int(value)].append(int(instance_id))
    return found


def character_list_rows(session: Session, owner: str | None) -> list[tuple[Role, int]]:
    """`character_rows` without reading the avatar images (a library page never needs their bytes), each with its
    avatar's size in bytes (0: none)."""
    from sqlalchemy.orm import defer

    query = (
        select(Role, func.coalesce(func.length(col(Role.avatar_image)), 0))
        .where(*visible(col(Role.owner), col(Role.shared), owner))
        .options(defer(Role.avatar_image))  # type: ignore[arg-type]
        .order_by(col(Role.id))
    )
    return [(role, int(size)) for role, size in session.exec(query).all()]


def outlines(session: Session, background_ids: Iterable[int]) -> dict[int, list[str]]:
    """Each background's outline point texts in order, in one query."""
    wanted = [value for value in background_ids if value is not None]
    found: dict[int, list[str]] = {value: [] for value in wanted}
    if wanted:
        points = select(OutlinePoint.background_id, OutlinePoint.content).where(
            col(OutlinePoint.background_id).in_(wanted)
        )
        for background_id, content in session.exec(
            points.order_by(col(OutlinePoint.background_id), col(OutlinePoint.position))
        ).all():
            found[background_id].append(content)
    return found


def names(session: Session, kind: str, owner: str | None) -> list[tuple[int, str]]:
    """(id, name) of every character (`kind` "character") or background `owner` sees, oldest first: what a picker
    lists, without the rows' text, avatars or outlines."""
    table: Any = Role if kind == "character" else Background
    query = select(table.id, table.name).where(*visible(col(table.owner), col(table.shared), owner))
    return [(int(row_id), str(name)) for row_id, name in session.exec(query.order_by(col(table.id))).all()]


def instances_of_character(session: Session, character_id: int, owner: str | None = None) -> list[int]:
    """Ids of the instances of character `character_id` `owner` has (the operator: all)."""
    return _instances_using(session, Save.role_id, character_id, owner)


def instances_of_background(session: Session, background_id: int, owner: str | None = None) -> list[int]:
    return _instances_using(session, Save.background_id, background_id, owner)


def others_using(session: Session, kind: str, row_id: int, owner: str | None) -> int:
    """How many instances of other users use a shared character (`kind` "character") or background (none for the
    operator)."""
    if owner is None:
        return 0
    column = col(Save.role_id) if kind == "character" else col(Save.background_id)
    others = or_(col(Save.owner) != owner, col(Save.owner).is_(None))
    return int(session.exec(select(func.count()).select_from(Save).where(column == row_id, others)).one())


# ---- characters ------------------------------------------------------------------------------------------------


def character_row(session: Session, character_id: int, owner: str | None = None, *, change: bool = False) -> Role:
    """The character `character_id` as `owner` sees it (`change`: as its owner); `NotFound` naming the id for one
    that does not exist or is another user's, and for a shared one a user would change."""
    role = session.get(Role, character_id) if _is_id(character_id) else None
    if role is None or not visible_to(role, owner):
        raise NotFound(f"character {character_id} does not exist")
    if change and not owns(role, owner):
        raise NotFound(f"character {character_id} is shared by another user: only its owner can change it")
    return role


def character_rows(session: Session, owner: str | None) -> list[Role]:
    query = select(Role).where(*visible(col(Role.owner), col(Role.shared), owner)).order_by(col(Role.id))
    return list(session.exec(query).all())


def add_character(session: Session, fields: Mapping[str, Any], owner: str | None) -> Role:
    """A new character row of `owner` with the (checked) `fields`."""
    role = Role(**fields, owner=owner)
    session.add(role)
    session.flush()
    return role


def change_row(session: Session, row: Owned, changes: Mapping[str, Any], *, stamp: bool = True) -> None:
    """Set `changes` on a character, background or instance row and (`stamp`) mark it as updated now."""
    for name, value in changes.items():
        setattr(row, name, value)
    if stamp:
        row.updated_at = utcnow()
    session.add(row)
    session.flush()


def delete_character_row(session: Session, character_id: int) -> None:
    session.delete(character_row(session, character_id))
    session.flush()


def matching_character(
    session: Session, data: Mapping[str, Any], keys: Iterable[str], owner: str | None
) -> Role | None:
    """A stored character `owner` sees whose `keys` equal the exported `data`'s (an import into the database it
    came from reuses its character instead of copying it)."""
    from personalab.stores.library import row_to_json  # its module opens the checkpointer: only for an import

    wanted = {key: data.get(key) for key in keys}
    query = select(Role).where(col(Role.name) == data.get("name"), *visible(col(Role.owner), col(Role.shared), owner))
    for role in session.exec(query).all():
        mine = row_to_json(role)
        if all(mine.get(key) == value for key, value in wanted.items()):
            return role
    return None


# ---- backgrounds -----------------------------------------------------------------------------------------------


def background_row(
    session: Session, background_id: int, owner: str | None = None, *, change: bool = False
) -> Background:
    """As `character_row`, for a background."""
    background = session.get(Background, background_id) if _is_id(background_id) else None
    if background is None or not visible_to(background, owner):
        raise NotFound(f"background {background_id} does not exist")
    if change and not owns(background, owner):
        raise NotFound(f"background {background_id} is shared by another user: only its owner can change it")
    return background


def background_rows(session: Session, owner: str | None) -> list[Background]:
    query = select(Background).where(*visible(col(Background.owner), col(Background.shared), owner))
    return list(session.exec(query.order_by(col(Background.id))).all())


def outline(session: Session, background_id: int) -> list[str]:
    return [point.content for point in outline_of(session, background_id)]


def add_background(session: Session, name: str, world_setting: str, points: Sequence[str], **extra: Any) -> Background:
    background = Background(name=name, world_setting=world_setting, **extra)
    session.add(background)
    session.flush()
    assert background.id is not None
    set_outline(session, background.id, points)
    return background


def set_outline(session: Session, background_id: int, points: Sequence[str]) -> None:
    for point in outline_of(session, background_id):
        session.delete(point)
    session.flush()
    for position, text in enumerate(points, start=1):
        session.add(OutlinePoint(background_id=background_id, position=position, content=text))
    session.flush()


def delete_background_row(session: Session, background_id: int) -> None:
    session.delete(background_row(session, background_id))
    session.flush()


def matching_background(session: Session, data: Mapping[str, Any], owner: str | None) -> Background | None:
    """A stored background `owner` sees with the exported `data`'s name, world setting and outline."""
    shown = visible(col(Background.owner), col(Background.shared), owner)
    for row in session.exec(select(Background).where(col(Background.name) == data.get("name"), *shown)).all():
        assert row.id is not None
        if row.world_setting == data.get("world_setting") and outline(session, row.id) == list(
            data.get("outline") or []
        ):
            return row
    return None


def add_story_state(session: Session, instance_id: int, turn: int, reply_line_id: int | None, state: Any) -> None:
    """A new story state row of the instance (a replanned plot: a new row, not an update, so the checkpoint's copy
    differs and the next turn starts from this one)."""
    session.add(StoryState(save_id=instance_id, turn=turn, reply_line_id=reply_line_id, state=state))
    session.flush()


# ---- instances -------------------------------------------------------------------------------------------------


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def instance_row(session: Session, instance_id: int, owner: str | None = None) -> Save:
    """The instance `instance_id` if it is `owner`'s (the operator: any); `InstanceNotFound` naming the id for one
    that does not exist or is another user's."""
    row = session.get(Save, instance_id) if _is_id(instance_id) else None
    if row is None or not owns(row, owner):
        raise InstanceNotFound(f"instance {instance_id} does not exist")
    return row


def instance_owner(session: Session, instance_id: int) -> tuple[bool, str | None]:
    instance_row = session.get(Save, instance_id) if _is_id(instance_id) else None
    return (instance_row is not None, instance_row.owner if instance_row is not None else None)


def instance_ids(session: Session, owner: str | None) -> list[int]:
    ids = session.exec(select(Save.id).where(*visible(col(Save.owner), None, owner))).all()
    return [int(i) for i in ids if i is not None]


def instance_rows(
    session: Session,
    owner: str | None,
    character_id: int | None = None,
    background_id: int | None = None,
    *,
    offset: int = 0,
    limit: int | None = None,
) -> tuple[list[Save], Any]:
    """`owner`'s instances (of one character and/or background), newest first (`offset`/`limit`: one page of
    them, cut in SQL), and the ids of those listed (what `instance_summaries` reads the rest for)."""
    chosen = _instance_filter(owner, character_id, background_id)
    statement = select(Save).where(*chosen).order_by(col(Save.id).desc())
    if offset or limit is not None:
        statement = statement.offset(offset).limit(limit)
        listed = list(session.exec(statement).all())
        return listed, [row.id for row in listed]
    return list(session.exec(statement).all()), select(Save.id).where(*chosen)


def instance_count(
    session: Session, owner: str | None, character_id: int | None = None, background_id: int | None = None
) -> int:
    """How many instances `instance_rows` lists for the same filter (the pages of a paged list)."""
    chosen = _instance_filter(owner, character_id, background_id)
    return int(session.exec(select(func.count()).select_from(Save).where(*chosen)).one())


def _instance_filter(owner: str | None, character_id: int | None, background_id: int | None) -> list[Any]:
    chosen = visible(col(Save.owner), None, owner)
    if character_id is not None:
        chosen.append(col(Save.role_id) == character_id)
    if background_id is not None:
        chosen.append(col(Save.background_id) == background_id)
    return chosen


def instance_summaries(session: Session, listed: Sequence[Save], scope: Any) -> list[dict[str, Any]]:
    """What the instance list shows of each of `listed` (`scope`: their ids, a list or a select): character and
    background names, the story state of the current branch and when its turn ran, or the outline of an instance
    not played yet; each read for all of them in one grouped query (listing many costs what listing one does)."""
    if not listed:
        return []
    role_ids = {instance_row.role_id for instance_row in listed if instance_row.role_id is not None}
    background_ids = {instance_row.background_id for instance_row in listed if instance_row.background_id is not None}
    roles = dict(session.exec(select(Role.id, Role.name).where(col(Role.id).in_(role_ids))).all()) if role_ids else {}
    backgrounds = (
        dict(session.exec(select(Background.id, Background.name).where(col(Background.id).in_(background_ids))).all())
        if background_ids
        else {}
    )
    branches = branch_story_states(session, scope)  # the current branch's, after a rewind or swipe
    unplayed = {
        instance_row.background_id
        for instance_row in listed
        if instance_row.id not in branches and instance_row.background_id in backgrounds
    }
    outlines: dict[int, list[str]] = {}
    if unplayed:
        points = select(OutlinePoint).where(col(OutlinePoint.background_id).in_(unplayed))
        for point in session.exec(points.order_by(col(OutlinePoint.background_id), col(OutlinePoint.position))).all():
            outlines.setdefault(point.background_id, []).append(point.content)
    found = []
    for instance_row in listed:
        assert instance_row.id is not None
        state, when = branches.get(instance_row.id, (None, None))
        last: datetime | None = when
        found.append(
            {
                "id": instance_row.id,
                "title": instance_row.title,
                "character_id": instance_row.role_id,
                "character_name": roles.get(instance_row.role_id) if instance_row.role_id is not None else None,
                "background_id": instance_row.background_id,
                "background_name": backgrounds.get(instance_row.background_id)
                if instance_row.background_id is not None
                else None,
                "created_at": instance_row.created_at,
                "last_turn_at": last,
                "turns": int(state.turn) if state is not None else 0,
                "plot_state": (state.state.get("plot_state") if state is not None else None) or None,
                "outline": outlines.get(instance_row.background_id) if instance_row.background_id is not None else None,
                "owner": instance_row.owner,
                "persona_id": instance_row.persona_id,
            }
        )
    return found
