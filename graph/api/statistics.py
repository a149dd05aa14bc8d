"""Statistics of an instance's memory (seed 004 提供记忆统计信息; issue 23).

    api.statistics.memory(7)

Counts of the instance's memories by seed 001's layer, type, seed 004's kind (derived from the type,
`nodes.rules.provenance.memory_kind`), character and branch (made on the current branch's lines, without a line, on
other branches); how often memories of each layer, type, kind and retrieval path (the trigger: bm25, vector, tag,
worldbook, …) were retrieved for a reply and put into its prompt, and world-book entries by trigger type (from the
stored provenance of the replies on the current branch); growth over turns (memories made per turn, running total).
"""

from __future__ import annotations

from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.library import check_instance
from personalab.graph.api.schemas.memory import MemoryStatistics
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.provenance import memory_kind, usage_counts
from personalab.stores.db import session_scope
from personalab.stores.history import get_path_ids
from personalab.stores.memory_statistics import branch_counts, growth_by_turn, memory_counts
from personalab.stores.provenance import provenance_rows


class Statistics:
    """`api.statistics`: figures of the caller's instances."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def memory(self, instance_id: Any, *, all_branches: bool = False) -> MemoryStatistics:
        """The instance's memory statistics (module docstring); retrieval counts of the current branch's replies
        unless `all_branches`."""
        if isinstance(instance_id, bool) or not isinstance(instance_id, int) or not 0 <= instance_id <= 2**31 - 1:
            raise InvalidInput(f"instance must be an id (a whole number), got {instance_id!r}")
        check_instance(instance_id, owner=self.caller.owner, database_url=self.caller.database_url)
        with session_scope(self.caller.database_url) as session:
            counts = memory_counts(session, instance_id)
            path = get_path_ids(session, instance_id)
            branches = branch_counts(session, instance_id, path)
            growth = growth_by_turn(session, instance_id)
            records = provenance_rows(session, instance_id, None if all_branches else path)
        usage = usage_counts(row.data for row in records)
        by_kind: dict[str, int] = {}
        for memory_type, n in counts["type"].items():
            by_kind[memory_kind(memory_type)] = by_kind.get(memory_kind(memory_type), 0) + n
        return MemoryStatistics(
            instance_id=instance_id,
            total=sum(counts["layer"].values()),
            by_layer=counts["layer"],
            by_type=counts["type"],
            by_kind=by_kind,
            by_character=counts["character"],
            by_branch=branches,
            pinned=counts["pinned"].get("true", 0),
            edited=counts["edited"].get("true", 0),
            replies_with_provenance=usage["replies"],
            retrieval={name: usage[name] for name in ("layer", "type", "kind", "trigger", "worldbook_trigger")},
            growth=growth,
        )
