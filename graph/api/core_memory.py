"""An instance's core memory (seed 002 需求2 核心记忆): shown, its versions listed with the turn that made each, two
versions compared field by field, an earlier version made current again (issue 23).

Read from the story state of the instance's current branch (the database, not the checkpoint): before the first
turn the core memory is the one the first turn will start from, seeded from the character's persona
(`nodes.rules.character.seeded_core_memory`). A rollback adds a version equal to the old one (the history stays
append-only, so it can be undone too) and is live from the next turn (graph/api/story.py); in its transaction the
archived persona changes (seed 002 历史人格变化事件) of the versions the restored core does not carry are closed
(`stores.persona_changes.apply_rollback`), never deleted. A version that is not
kept: `NotFound` naming it, nothing changed.
"""

from __future__ import annotations

from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.story import branch_state, check_id, correct_story, instance_of
from personalab.nodes.rules.character import seeded_core_memory
from personalab.nodes.rules.core_memory import CoreMemoryHistory
from personalab.nodes.rules.errors import NotFound
from personalab.nodes.rules.persona_changes import lineage
from personalab.stores.background import wait_for_writes
from personalab.stores.db import session_scope
from personalab.stores.history import get_path_ids
from personalab.stores.persona_changes import apply_rollback
from personalab.stores.tables import Role, Save
from sqlmodel import Session


def _initial(session: Session, save: Save) -> dict[str, Any]:
    role = session.get(Role, save.role_id) if save.role_id is not None else None
    name = role.name if role is not None else (save.title or "")
    return seeded_core_memory(name, role.model_dump() if role is not None else {})


def diff_fields(old: dict[str, Any], new: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per top-level field that differs: {"from": old value, "to": new value} (None where a side lacks it);
    a list field also names what was `added` and `removed`."""
    changes: dict[str, dict[str, Any]] = {}
    for name in [*old, *(key for key in new if key not in old)]:
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        change: dict[str, Any] = {"from": before, "to": after}
        if isinstance(before, list | type(None)) and isinstance(after, list | type(None)):
            was, now = list(before or []), list(after or [])
            change["added"] = [item for item in now if item not in was]
            change["removed"] = [item for item in was if item not in now]
        changes[name] = change
    return changes


class CoreMemoryApi:
    """`api.core_memory`: show, versions, version, diff, rollback."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def _read(self, instance_id: int) -> tuple[dict[str, Any], CoreMemoryHistory, dict[str, Any]]:
        with session_scope(self.caller.database_url) as session:
            save = instance_of(session, self.caller, instance_id)
            state, _state_id = branch_state(session, instance_id)
            core = state.get("core_memory") or _initial(session, save)
        return core, CoreMemoryHistory.from_state(state.get("core_memory_versions")), state

    def show(self, instance_id: int) -> dict[str, Any]:
        """The current core memory: its version (None: not yet rewritten by maintenance) and the turn."""
        core, history, state = self._read(instance_id)
        newest = history.versions[-1] if history.versions else None
        return {
            "instance_id": instance_id,
            "turn": state.get("turn", 0),
            "version": newest["version"] if newest and newest["core"] == core else None,
            "initial": not state.get("core_memory"),
            "core": core,
        }

    def versions(self, instance_id: int) -> list[dict[str, Any]]:
        """The kept versions, oldest first: version, the turn that made it, why (maintenance, a rollback)."""
        _core, history, _state = self._read(instance_id)
        return [{key: item[key] for key in ("version", "turn", "reason")} for item in history.versions]

    def version(self, instance_id: int, version: int) -> dict[str, Any]:
        """One kept version whole (version, turn, reason, core); `NotFound` naming it when it is not kept."""
        check_id(version, "version")
        _core, history, _state = self._read(instance_id)
        return dict(self._find(history, instance_id, version))

    @staticmethod
    def _find(history: CoreMemoryHistory, instance_id: int, version: int) -> dict[str, Any]:
        for item in history.versions:
            if item["version"] == version:
                return item
        kept = ", ".join(str(item["version"]) for item in history.versions) or "none"
        raise NotFound(f"core memory version {version} is not kept for instance {instance_id} (kept: {kept})")

    def diff(self, instance_id: int, old: int, new: int | None = None) -> dict[str, Any]:
        """What changed from version `old` to version `new` (default: the current core memory), per field."""
        check_id(old, "version")
        core, history, _state = self._read(instance_id)
        before = self._find(history, instance_id, old)
        after_label: int | str
        if new is None:
            after_core, after_label = core, "current"
        else:
            check_id(new, "version")
            after_core, after_label = self._find(history, instance_id, new)["core"], new
        return {
            "instance_id": instance_id,
            "from": old,
            "to": after_label,
            "changes": diff_fields(before["core"], after_core),
        }

    def rollback(self, instance_id: int, to: int | None = None) -> dict[str, Any]:
        """Make version `to` (default: the one before the newest) current again, as a new version; live from the
        next turn. Returns the new version (version, turn, reason, core)."""
        if to is not None:
            check_id(to, "version")

        def change(_session: Session, _save: Save, state: dict[str, Any]) -> dict[str, Any]:
            history = CoreMemoryHistory.from_state(state.get("core_memory_versions"))
            if to is not None:
                self._find(history, instance_id, to)  # the error names the instance and what is kept
            history = history.rollback(to, turn=state.get("turn", 0))
            # seed 002 archival memory: the persona changes the restored core does not carry are closed as of this
            # turn (kept, answerable about the past), those it carries again reopened; in this transaction
            carried, oldest = lineage(history.versions, int(history.versions[-1]["version"]))
            apply_rollback(
                _session, instance_id, carried, oldest, int(state.get("turn", 0)), get_path_ids(_session, instance_id)
            )
            return {"core_memory": dict(history.current or {}), "core_memory_versions": history.to_state()}

        # this process's queued archive of the last maintenance lands first, so the rollback sees it
        wait_for_writes(instance_id, whole=True)
        state = correct_story(self.caller, instance_id, change)
        return dict(state["core_memory_versions"][-1])
