"""Seed 004's trigger configuration (MemoryTriggerConfig) as data a user sets, per scope (issue 23).

Scope: `instance_id` (an instance's), `character_id` (a character's: every instance of it), neither (global,
the operator's). The value in effect for an instance is, field by field, the instance's over its character's over
the global one over the code defaults; a turn reads it when it starts, so a change is live from the next turn in
every process. A bad value is `InvalidInput` naming the field (`trigger_config.relevance_threshold: …`) and
nothing is saved. Owner checks as for the world-book settings (`knowledge.check_scope_owner`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.knowledge import scope_of
from personalab.graph.api.schemas.trigger_config import TriggerConfigPublic
from personalab.nodes.rules.trigger_config import DEFAULTS, FIELDS, TriggerConfig, merge
from personalab.nodes.rules.worldbook import KINDS, POSITIONS
from personalab.stores.db import session_scope
from personalab.stores.trigger_config import (
    effective_trigger_config,
    get_trigger_config,
    reset_trigger_config,
    set_trigger_config,
)

__all__ = ["DEFAULTS", "FIELDS", "KINDS", "POSITIONS", "TriggerConfigApi"]


class TriggerConfigApi:
    """`api.trigger_config`: show, set and reset the trigger configuration of a scope."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def get(self, *, character_id: int | None = None, instance_id: int | None = None) -> TriggerConfigPublic:
        """What is set on the scope and what is in effect there (with each field's source)."""
        self.caller.check_scope(character_id, instance_id, change=False)
        scope = scope_of(character_id, instance_id)
        with session_scope(self.caller.database_url) as session:
            own = get_trigger_config(session, scope)
            value, sources = effective_trigger_config(session, scope)
        return TriggerConfigPublic(
            scope=scope.label, set=own.set_fields(), effective=value.model_dump(mode="json"), sources=sources
        )

    def effective(self, instance_id: int) -> TriggerConfigPublic:
        """What a turn of `instance_id` uses, field by field, and where each field comes from."""
        return self.get(instance_id=instance_id)

    @staticmethod
    def validate(changes: Mapping[str, Any]) -> None:
        """Check fields as `set` would (`InvalidInput` naming the field: `trigger_config.relevance_threshold: …`),
        storing nothing: the configuration page's check as the user types (issue 25)."""
        merge(changes, TriggerConfig(), clear=True)

    def set(
        self,
        changes: Mapping[str, Any],
        *,
        character_id: int | None = None,
        instance_id: int | None = None,
        clear: bool = False,
    ) -> TriggerConfigPublic:
        """Set fields of the scope (None unsets one; `max_per_type` merges per type), after `clear` unsets all;
        one transaction: a bad value changes nothing."""
        self.caller.check_scope(character_id, instance_id, change=True)
        with session_scope(self.caller.database_url) as session:
            set_trigger_config(session, scope_of(character_id, instance_id), changes, clear=clear)
        return self.get(character_id=character_id, instance_id=instance_id)

    def reset(self, *, character_id: int | None = None, instance_id: int | None = None) -> TriggerConfigPublic:
        """Unset everything set on the scope: the wider scopes' values (or the defaults) apply again."""
        self.caller.check_scope(character_id, instance_id, change=True)
        with session_scope(self.caller.database_url) as session:
            reset_trigger_config(session, scope_of(character_id, instance_id))
        return self.get(character_id=character_id, instance_id=instance_id)
