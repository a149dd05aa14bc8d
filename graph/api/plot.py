"""An instance's plot (seed 002 需求1 剧情大纲, seed 003 剧情节点), through the API (issue 23): the outline with each
point's status and the current point; the current point set or corrected by hand (a user or a game master fixes
the story's position: the points before it completed, the ones after it pending; live from the next turn, the
checkpoint following, graph/api/story.py); the plot nodes the post-turn review recorded, per branch.
"""

from __future__ import annotations

from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.story import branch_state, correct_story, instance_of
from personalab.nodes.rules.plot import new_plot_state, set_current_point
from personalab.stores.db import session_scope
from personalab.stores.review import list_plot_nodes
from personalab.stores.saves import outline_of
from personalab.stores.tables import Save
from sqlmodel import Session

FREE_STORY = "自由发展的故事"  # the one point of an instance without an outline, as its first turn makes it


def _initial(session: Session, save: Save) -> dict[str, Any]:
    """The plot state the first turn starts from (nodes/history_fetch.py: the background's outline)."""
    outline = [point.content for point in outline_of(session, save.background_id)] if save.background_id else []
    return dict(new_plot_state(outline or [FREE_STORY]))


class PlotApi:
    """`api.plot`: outline, set_current_point, nodes."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    def outline(self, instance_id: int) -> dict[str, Any]:
        """The plot state of the current branch: `story_outline` (index, content, status), `current_plot_index`,
        `last_progress_turn` (before the first turn: the one it will start from)."""
        with session_scope(self.caller.database_url) as session:
            save = instance_of(session, self.caller, instance_id)
            state, _state_id = branch_state(session, instance_id)
            plot = state.get("plot_state") or _initial(session, save)
        return {"instance_id": instance_id, "turn": state.get("turn", 0), **plot}

    def set_current_point(self, instance_id: int, index: int) -> dict[str, Any]:
        """Make outline point `index` (1-based) the current one; `InvalidInput` naming it when the outline has no
        such point, `InstanceBusy` while a turn runs; nothing changes then."""

        def change(session: Session, save: Save, state: dict[str, Any]) -> dict[str, Any]:
            plot = state.get("plot_state") or _initial(session, save)
            return {"plot_state": set_current_point(plot, index, state.get("turn", 0))}

        state = correct_story(self.caller, instance_id, change)
        return {"instance_id": instance_id, "turn": state.get("turn", 0), **state["plot_state"]}

    def nodes(self, instance_id: int, *, all_branches: bool = False) -> list[dict[str, Any]]:
        """The plot nodes of the current branch (every branch's with `all_branches`), oldest turn first."""
        with session_scope(self.caller.database_url) as session:
            instance_of(session, self.caller, instance_id)
            return [node.to_dict() for node in list_plot_nodes(session, instance_id, all_branches=all_branches)]
