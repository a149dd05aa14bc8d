"""Seed 004's trigger configuration as data (issue 23): stored per scope in table `trigger_config`, read by a turn
as the instance's over its character's over the global one over the code defaults
(`nodes.rules.trigger_config`). A turn reads it once (one indexed select of at most three rows), so a write is
seen by the very next turn of every process."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from personalab.nodes.rules.trigger_config import (
    GLOBAL_LABEL,
    TriggerConfig,
    effective,
    merge,
    parse_trigger_config,
)
from personalab.stores.saves import get_save
from personalab.stores.tables import utcnow
from personalab.stores.trigger_config_tables import TriggerConfigRow
from personalab.stores.worldbook import GLOBAL, Scope, check_scope
from sqlalchemy import and_, or_
from sqlmodel import Session, col, select


def _row(session: Session, scope: Scope) -> TriggerConfigRow | None:
    stmt = select(TriggerConfigRow)
    for column, value in ((TriggerConfigRow.role_id, scope.role_id), (TriggerConfigRow.save_id, scope.save_id)):
        stmt = stmt.where(col(column).is_(None) if value is None else col(column) == value)
    return session.exec(stmt.order_by(col(TriggerConfigRow.id))).first()


def _config(row: TriggerConfigRow | None) -> TriggerConfig:
    # validated when written; read back through the model so a row edited by hand is refused naming the field
    return TriggerConfig() if row is None else parse_trigger_config(row.fields or {})


def get_trigger_config(session: Session, scope: Scope = GLOBAL) -> TriggerConfig:
    """The configuration set on exactly `scope` (None where not set); `NotFound` for an unknown character or
    instance."""
    check_scope(session, scope)
    return _config(_row(session, scope))


def set_trigger_config(
    session: Session, scope: Scope, changes: Mapping[str, Any], *, clear: bool = False
) -> TriggerConfig:
    """Set `changes` (field → value; None unsets) on `scope`, after `clear` unsets all; the scope's configuration.
    A bad value is `InvalidInput` naming the field (`trigger_config.<field>: …`) and nothing is written."""
    check_scope(session, scope)
    row = _row(session, scope)
    config = merge(changes, _config(row), clear=clear)  # validated whole before anything is written
    if row is None:
        row = TriggerConfigRow(role_id=scope.role_id, save_id=scope.save_id)
    row.fields = config.set_fields()
    row.updated_at = utcnow()
    session.add(row)
    session.flush()
    return config


def reset_trigger_config(session: Session, scope: Scope) -> bool:
    """Unset everything on `scope` (its row goes); whether there was anything set."""
    check_scope(session, scope)
    row = _row(session, scope)
    if row is None:
        return False
    session.delete(row)
    session.flush()
    return True


def _layers(session: Session, role_id: int | None, save_id: int | None) -> list[tuple[str, TriggerConfig]]:
    """The set configurations that apply to an instance (or a character), most specific first, in one select."""
    wanted = [and_(col(TriggerConfigRow.role_id).is_(None), col(TriggerConfigRow.save_id).is_(None))]
    if role_id is not None:
        wanted.append(col(TriggerConfigRow.role_id) == role_id)
    if save_id is not None:
        wanted.append(col(TriggerConfigRow.save_id) == save_id)
    rows = session.exec(select(TriggerConfigRow).where(or_(*wanted)).order_by(col(TriggerConfigRow.id))).all()
    found: dict[str, TriggerConfigRow] = {}
    for row in rows:
        label = (
            f"instance {row.save_id}"
            if row.save_id is not None
            else f"character {row.role_id}"
            if row.role_id is not None
            else GLOBAL_LABEL
        )
        found.setdefault(label, row)
    order = [f"instance {save_id}", f"character {role_id}", GLOBAL_LABEL]
    return [(label, _config(found[label])) for label in order if label in found]


def effective_trigger_config(session: Session, scope: Scope = GLOBAL) -> tuple[TriggerConfig, dict[str, str]]:
    """The configuration in effect for `scope` (an instance's over its character's over the global over the
    defaults), every field set, and where each field comes from ("instance 3", "character 2", "global",
    "default")."""
    check_scope(session, scope)
    role_id = scope.role_id
    if scope.save_id is not None:
        role_id = get_save(session, scope.save_id).role_id
    return effective(_layers(session, role_id, scope.save_id))


def trigger_config_for_instance(session: Session, save_id: int, role_id: int | None) -> TriggerConfig:
    """What a turn of instance `save_id` (of character `role_id`) uses: one select, no existence checks (the turn
    has read the instance already)."""
    return effective(_layers(session, role_id, save_id))[0]
