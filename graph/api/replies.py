"""What fed each reply (issue 23): the memories, world-book and knowledge entries, core-memory version, recall window,
rewritten query and budget cuts that went into a reply's prompt, stored with the reply (`nodes.write_back`).

    api.replies.provenance(line_id)      # any line of a stored reply; `Provenance.record` is the stored record

The line must be a reply line of one of the caller's instances: another user's line, a user or host line, or a line
that does not exist is `NotFound` naming it. A reply stored before provenance was recorded has none (`NotFound` says
so). Every branch keeps its replies' provenance (lines are never deleted); `on_current_branch` says whether the reply
is on the instance's current path.
"""

from __future__ import annotations

from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.library import check_instance
from personalab.graph.api.schemas.memory import Provenance
from personalab.nodes.rules.errors import InstanceNotFound, InvalidInput, NotFound
from personalab.stores.db import session_scope
from personalab.stores.history import get_path_ids
from personalab.stores.provenance import provenance_of_line
from personalab.stores.tables import Line


class Replies:
    """`api.replies`: what fed the replies of the caller's instances."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def provenance(self, line_id: Any) -> Provenance:
        """What fed the reply the line `line_id` belongs to."""
        if isinstance(line_id, bool) or not isinstance(line_id, int) or not 0 <= line_id <= 2**31 - 1:
            raise InvalidInput(f"line must be an id (a whole number), got {line_id!r}")
        with session_scope(self.caller.database_url) as session:
            line = session.get(Line, line_id)
            if line is None:
                raise NotFound(f"line {line_id} does not exist")
            instance_id = line.save_id
        try:
            check_instance(instance_id, owner=self.caller.owner, database_url=self.caller.database_url)
        except InstanceNotFound:
            raise NotFound(f"line {line_id} does not exist") from None  # another user's: as if there were none
        if line.attribute != "assistant":
            raise NotFound(f"line {line_id} is a {line.attribute} line, not a reply: only replies have provenance")
        with session_scope(self.caller.database_url) as session:
            row = provenance_of_line(session, instance_id, line_id)
            if row is None:
                raise NotFound(
                    f"line {line_id} has no provenance (its reply was stored before provenance was recorded)"
                )
            on_branch = row.reply_line_id in set(get_path_ids(session, instance_id))
        return Provenance(
            instance_id=instance_id,
            turn=row.turn,
            reply_line_id=row.reply_line_id,
            line_ids=list(row.line_ids),
            on_current_branch=on_branch,
            created_at=row.created_at,
            record=dict(row.data),
        )

    def scene_weights(self, scene: Any) -> dict[str, float]:
        """Seed 001's scoring weights of the retrieval scene `scene` (as a reply's provenance names it); empty for
        an unknown scene."""
        from dataclasses import asdict

        from personalab.nodes.rules.retrieval import SCENE_WEIGHTS

        for known, weights in SCENE_WEIGHTS.items():
            if str(getattr(known, "value", known)) == str(scene):
                return {key: float(value) for key, value in asdict(weights).items()}
        return {}
