"""World-book settings as data (issue 15): stored per scope (everything, a character's book, an instance) in table
`worldbook_settings`, read by a turn as the instance's over its character's over the global ones over the defaults
(`nodes.rules.worldbook.WorldbookSettings`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.worldbook import DEFAULT_SETTINGS, SETTING_FIELDS, WorldbookSettings
from personalab.stores.saves import get_save
from personalab.stores.tables import utcnow
from personalab.stores.worldbook import GLOBAL, Scope, check_scope, instance_scope_filter
from personalab.stores.worldbook_tables import WorldbookSettingsRow
from sqlmodel import Session, col, select


def _row(session: Session, scope: Scope) -> WorldbookSettingsRow | None:
    stmt = select(WorldbookSettingsRow)
    for column, value in ((WorldbookSettingsRow.role_id, scope.role_id), (WorldbookSettingsRow.save_id, scope.save_id)):
        stmt = stmt.where(col(column).is_(None) if value is None else col(column) == value)
    return session.exec(stmt.order_by(col(WorldbookSettingsRow.id))).first()


def _settings(row: WorldbookSettingsRow | None) -> WorldbookSettings:
    if row is None:
        return WorldbookSettings()
    return WorldbookSettings(**{name: getattr(row, name) for name in SETTING_FIELDS})


def get_worldbook_settings(session: Session, scope: Scope = GLOBAL) -> WorldbookSettings:
    """The settings set on exactly `scope` (None where not set); `NotFound` for an unknown character or instance."""
    check_scope(session, scope)
    return _settings(_row(session, scope))


def set_worldbook_settings(
    session: Session, scope: Scope, changes: Mapping[str, Any], *, clear: bool = False
) -> WorldbookSettings:
    """Set the `changes` (field → value; None unsets a field) on `scope`, after `clear` unsets them all; returns the
    scope's settings. An unknown field or a bad value is `InvalidInput` naming it, and nothing changes."""
    check_scope(session, scope)
    unknown = sorted(set(changes) - set(SETTING_FIELDS))
    if unknown:
        raise InvalidInput(f"unknown world-book setting {unknown[0]!r} (one of {', '.join(SETTING_FIELDS)})")
    row = _row(session, scope)
    current = {} if clear else _settings(row).as_dict()
    settings = WorldbookSettings(**{**current, **changes})  # validated before anything is written
    if row is None:
        row = WorldbookSettingsRow(role_id=scope.role_id, save_id=scope.save_id)
    for name, value in settings.as_dict().items():
        setattr(row, name, value)
    row.updated_at = utcnow()
    session.add(row)
    session.flush()
    return settings


def worldbook_settings_for_instance(session: Session, save_id: int) -> WorldbookSettings:
    """What a turn of instance `save_id` uses: its own settings over its character's over the global ones (unset
    fields: the defaults). The three scopes' rows in one read (issue 28: a turn's fixed reads)."""
    role_id = get_save(session, save_id).role_id
    stmt = select(WorldbookSettingsRow).where(instance_scope_filter(WorldbookSettingsRow, save_id, role_id))
    first: dict[tuple[int | None, int | None], WorldbookSettingsRow] = {}
    for row in session.exec(stmt.order_by(col(WorldbookSettingsRow.id))).all():
        first.setdefault((row.role_id, row.save_id), row)  # a scope's first row, as `_row` reads it
    own = _settings(first.get((None, save_id)))
    character = _settings(first.get((role_id, None))) if role_id else WorldbookSettings()
    return own.over(character.over(_settings(first.get((None, None)))))


def effective_worldbook_settings(session: Session, scope: Scope = GLOBAL) -> WorldbookSettings:
    """The settings in effect for `scope` (an instance's over its character's over the global ones over the
    defaults), every field set."""
    check_scope(session, scope)
    if scope.save_id is not None:
        found = worldbook_settings_for_instance(session, scope.save_id)
    elif scope.role_id is not None:
        found = _settings(_row(session, scope)).over(_settings(_row(session, GLOBAL)))
    else:
        found = _settings(_row(session, GLOBAL))
    return found.over(DEFAULT_SETTINGS)


def worldbook_settings_sources(session: Session, scope: Scope = GLOBAL) -> dict[str, str]:
    """Where each setting in effect for `scope` comes from (issue 25's configuration page): "instance 3",
    "character 2", "global" or "default", the most specific scope that sets it, as `effective_worldbook_settings`
    reads them."""
    check_scope(session, scope)
    layers: list[tuple[str, WorldbookSettings]] = []
    if scope.save_id is not None:
        save = get_save(session, scope.save_id)
        layers.append((scope.label, _settings(_row(session, scope))))
        if save.role_id:
            layers.append((f"character {save.role_id}", _settings(_row(session, Scope(role_id=save.role_id)))))
    elif scope.role_id is not None:
        layers.append((scope.label, _settings(_row(session, scope))))
    layers.append(("global", _settings(_row(session, GLOBAL))))
    sources: dict[str, str] = {}
    for name in SETTING_FIELDS:
        sources[name] = next((label for label, found in layers if getattr(found, name) is not None), "default")
    return sources
