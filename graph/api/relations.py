"""An instance's relations as they stand on its current branch (issue 26: "relations between characters and NPCs are
tracked like the user's"): the character's relationship with the user (seed 003) and with each other participant of
the scene — another character, a script NPC, a named NPC (`nodes/rules/review/relations.py`). Read from the branch's
story state, so after a rewind or a swipe they are those of the branch point.
"""

from __future__ import annotations

from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.story import branch_state, instance_of
from personalab.nodes.rules.review.effects import RELATIONSHIP_KEYS, RELATIONSHIP_START
from personalab.nodes.rules.review.relations import relation_identity
from personalab.stores.db import session_scope


def _participant(identity: str, record: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": identity,
        "name": record.get("name") or identity,
        **{key: int(record.get(key, RELATIONSHIP_START[key])) for key in RELATIONSHIP_KEYS},
        "first_turn": record.get("first_turn"),
        "last_turn": record.get("last_turn"),
    }


class RelationsApi:
    """`api.relations`: list."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def list(self, instance_id: int, *, npc: str | None = None) -> dict[str, Any]:
        """The relations of the current branch: `user` (the relationship with the user; start values before the
        first turn) and `participants` (each other participant's: id, name, trust, affection, familiarity,
        first_turn, last_turn; first seen first). `npc` (an identity such as ``npc:laochen`` / ``role:3`` /
        ``name:守卫``, a script_role_id or a name): only that participant's, `InvalidInput` naming it when it has
        no relation on this branch (it never spoke in the scene)."""
        with session_scope(self.caller.database_url) as session:
            instance_of(session, self.caller, instance_id)
            state, _state_id = branch_state(session, instance_id)
        relations: dict[str, Any] = dict(state.get("relations") or {})
        user = dict(RELATIONSHIP_START, **(state.get("relationship") or {}))
        ordered = sorted(relations.items(), key=lambda item: (item[1].get("first_turn") or 0, item[0]))
        if npc is not None:
            wanted = relation_identity(relations, npc, instance_id)
            ordered = [(wanted, relations[wanted])]
        return {
            "instance_id": instance_id,
            "turn": state.get("turn", 0),
            "user": {key: int(user[key]) for key in RELATIONSHIP_KEYS},
            "participants": [_participant(identity, dict(record)) for identity, record in ordered],
        }
