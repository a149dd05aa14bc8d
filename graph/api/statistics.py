"""Statistics of an instance's memory (seed 004 提供记忆统计信息; issue 23).

    api.statistics.memory(7)

Counts of the instance's memories by seed 001's layer, type, seed 004's kind (derived from the type,
`nodes.rules.provenance.memory_kind`), character and branch (made on the current branch's lines, without a line, on
other branches); how often memories of each layer, type, kind and retrieval path (the trigger: bm25, vector, tag,
worldbook, …) were retrieved for a reply and put into its prompt, and world-book entries by trigger type (from the
stored provenance of the replies on the current branch); growth over turns (memories made per turn, running total).

    api.statistics.series(7)

The data series of the statistics charts (issue 25): one point per stored turn of the current branch. Its node
times come two ways: `node_ms`, every node's own time, and the turn's wall time split along its critical path
(`node_path_ms` + `other_ms` = `graph_ms`), where of nodes that ran side by side (`PARALLEL_STEPS`) only the longest
counts and the others are `node_parallel_ms`; so a stacked chart of the path is as tall as the turn took.
"""

from __future__ import annotations

from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.library import check_instance
from personalab.graph.api.schemas.memory import ChartSeries, MemoryStatistics, TimelineMemory, TurnFigures
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.provenance import memory_kind, usage_counts
from personalab.stores.chart_series import (
    TIMELINE_LIMIT,
    branch_story_rows,
    branch_turns,
    made_per_turn,
    timeline_rows,
)
from personalab.stores.db import session_scope
from personalab.stores.history import get_path_ids
from personalab.stores.memory_statistics import branch_counts, growth_by_turn, memory_counts
from personalab.stores.provenance import provenance_rows

# nodes the turn graph runs in one superstep, side by side (graph/graph.py: query_rewrite → rag_retrieve and director
# → generate); their times overlap, so only the longest of each step is on the turn's critical path
PARALLEL_STEPS: tuple[tuple[str, ...], ...] = (("rag_retrieve", "director"),)


def split_node_time(
    node_ms: dict[str, float], graph_ms: float | None
) -> tuple[dict[str, float], dict[str, float], float | None]:
    """(the critical path's node times, the times of nodes that ran beside a longer one, the graph's time outside
    the recorded nodes): the path's times and the rest add up to `graph_ms` (None: the rest is unknown). The nodes'
    clock and the graph's differ by rounding; when the path adds up to a little more than the graph's time, the
    path's times are scaled down to it, so the stack never claims more than the turn took."""
    path = {name: float(ms) for name, ms in node_ms.items()}
    beside: dict[str, float] = {}
    for step in PARALLEL_STEPS:
        ran = [name for name in step if name in path]
        if len(ran) > 1:
            longest = max(ran, key=lambda name: path[name])
            for name in ran:
                if name != longest:
                    beside[name] = path.pop(name)
    if graph_ms is None:
        return path, beside, None
    total = sum(path.values())
    if total > graph_ms > 0:
        path = {name: ms * graph_ms / total for name, ms in path.items()}
        total = graph_ms
    return path, beside, max(0.0, float(graph_ms) - total)


class Statistics:
    """`api.statistics`: figures of the caller's instances."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def _check(self, instance_id: Any) -> int:
        if isinstance(instance_id, bool) or not isinstance(instance_id, int) or not 0 <= instance_id <= 2**31 - 1:
            raise InvalidInput(f"instance must be an id (a whole number), got {instance_id!r}")
        check_instance(instance_id, owner=self.caller.owner, database_url=self.caller.database_url)
        return instance_id

    def memory(self, instance_id: Any, *, all_branches: bool = False) -> MemoryStatistics:
        """The instance's memory statistics (module docstring); retrieval counts of the current branch's replies
        unless `all_branches`."""
        instance_id = self._check(instance_id)
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

    def series(self, instance_id: Any) -> ChartSeries:
        """The charts' data (issue 25): per stored turn of the current branch, oldest first, the memories made and
        the running totals by layer, retrieval and use (by trigger), prompt tokens per region, the graph's and each
        node's time, relationship and plot; and the newest memories across turns and branches. No turns: empty."""
        instance_id = self._check(instance_id)
        with session_scope(self.caller.database_url) as session:
            path = get_path_ids(session, instance_id)
            turns = branch_turns(session, instance_id, path)
            stories = branch_story_rows(session, instance_id, path)
            made = made_per_turn(session, instance_id, path)
            records = provenance_rows(session, instance_id, path)
            timeline = timeline_rows(session, instance_id)
        here = set(path)
        return ChartSeries(
            instance_id=instance_id,
            turns=_points(turns, made, records, stories),
            timeline=[
                TimelineMemory(
                    id=row["id"],
                    turn=row["turn"],
                    layer=row["layer"],
                    type=row["type"],
                    branch="no_line" if row["line_id"] is None else "current" if row["line_id"] in here else "other",
                )
                for row in timeline
            ],
            timeline_limit=TIMELINE_LIMIT,
        )


def _points(
    turns: list[dict[str, Any]],
    made: list[tuple[int, str, str, int]],
    records: list[Any],
    stories: dict[int, dict[str, Any]],
) -> list[TurnFigures]:
    """The series' points, one per turn (`Statistics.series`), in one pass over the turns: the memories made are
    summed per turn once and the running totals carried along, so a long instance costs turns + groups, not their
    product."""
    by_turn: dict[int, tuple[dict[str, int], dict[str, int]]] = {}
    for at, layer, memory_type, n in made:
        layers, types = by_turn.setdefault(at, ({}, {}))
        layers[layer] = layers.get(layer, 0) + n
        types[memory_type] = types.get(memory_type, 0) + n
    replies: dict[int, list[dict[str, Any]]] = {}
    for row in records:
        replies.setdefault(int(row.turn), []).append(row.data)
    pending = sorted(by_turn)  # turns with memories, added to the totals as the walk passes them
    passed = 0
    total: dict[str, int] = {}
    points = []
    for turn in turns:
        number = int(turn["turn"])
        while passed < len(pending) and pending[passed] <= number:
            for layer, n in by_turn[pending[passed]][0].items():
                total[layer] = total.get(layer, 0) + n
            passed += 1
        layers, types = by_turn.get(number, ({}, {}))
        points.append(_turn_figures(turn, layers, types, dict(total), replies.get(number, []), stories))
    return points


def _turn_figures(
    turn: dict[str, Any],
    by_layer: dict[str, int],
    by_type: dict[str, int],
    total: dict[str, int],
    replies: list[dict[str, Any]],
    stories: dict[int, dict[str, Any]],
) -> TurnFigures:
    """One turn's point of the chart series."""
    number = int(turn["turn"])
    usage = usage_counts(replies)
    triggers = {name: counts["retrieved"] for name, counts in usage["trigger"].items()}
    figures = turn["figures"]
    state = stories.get(number) or {}
    plot = state.get("plot_state") or {}
    outline = list(plot.get("story_outline") or [])
    relationship = state.get("relationship")
    node_ms = {str(name): float(ms) for name, ms in dict(figures.get("node_ms") or {}).items()}
    graph_ms = figures.get("graph_ms")
    path_ms, beside_ms, other_ms = split_node_time(node_ms, float(graph_ms) if graph_ms is not None else None)
    return TurnFigures(
        turn=number,
        created_at=turn["created_at"],
        memories_made=by_layer,
        memories_made_by_type=by_type,
        memories_total=total,
        retrieved=sum(c["retrieved"] for c in usage["layer"].values()),
        used=sum(c["used"] for c in usage["layer"].values()),
        retrieved_by_trigger=triggers,
        prompt_tokens=turn["prompt_tokens"],
        reply_tokens=turn["reply_tokens"],
        region_tokens=dict(figures.get("regions") or {}),
        graph_ms=graph_ms,
        reply_model_ms=figures.get("reply_model_ms") or _model_ms(figures),
        node_ms=node_ms,
        node_path_ms=path_ms,
        node_parallel_ms=beside_ms,
        other_ms=other_ms,
        relationship={k: int(v) for k, v in relationship.items()} if isinstance(relationship, dict) else None,
        plot_index=plot.get("current_plot_index") if plot else None,
        plot_completed=sum(1 for point in outline if point.get("status") == "completed") if plot else None,
        plot_points=len(outline) if plot else None,
    )


def _model_ms(figures: dict[str, Any]) -> float | None:
    """The reply model's time: the graph's time less the rest (end_turn stores those two)."""
    graph_ms, rest = figures.get("graph_ms"), figures.get("without_reply_model_ms")
    return round(float(graph_ms) - float(rest), 2) if graph_ms is not None and rest is not None else None
