"""An instance's plot (seed 002 需求1 剧情大纲, seed 003 剧情节点), through the API (issue 23): the outline with each
point's status and the current point; the current point set or corrected by hand (a user or a game master fixes
the story's position: the points before it completed, the ones after it pending; live from the next turn, the
checkpoint following, graph/api/story.py); the plot nodes the post-turn review recorded, per branch.
"""

from __future__ import annotations

from typing import Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.story import branch_state, correct_story, instance_of
from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.nodes.rules.plot import new_plot_state, set_current_point
from personalab.nodes.rules.prompt_catalog import ZH, catalog_for
from personalab.stores.branches import branch_paths
from personalab.stores.db import session_scope
from personalab.stores.history import get_lines, get_path_ids
from personalab.stores.review import list_plot_nodes
from personalab.stores.saves import outline_of
from personalab.stores.tables import Save
from sqlmodel import Session

FREE_STORY = ZH.free_story  # the one point of an instance without an outline, as its first turn makes it


def _initial(session: Session, save: Save) -> dict[str, Any]:
    """The plot state the first turn starts from (nodes/history_fetch.py: the background's outline; without one,
    the free story's point in the instance's language, issue 28)."""
    outline = [point.content for point in outline_of(session, save.background_id)] if save.background_id else []
    return dict(new_plot_state(outline or [catalog_for(save.language).free_story]))


PREVIEW_CHARS = 40


class PlotApi:
    """`api.plot`: outline, set_current_point, nodes, branches."""

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

    def branches(self, instance_id: int, *, leaf: int | None = None) -> list[dict[str, Any]]:
        """The plot nodes per branch (issue 25; branches come from regenerations, swipes, edits and rewinds): one
        item per branch, the current one first, then by leaf: `leaf` (its last line's id), `current`, `lines`,
        `last_line` (a preview of it), `nodes` (the plot nodes reached on it, oldest turn first). The current branch
        ends at the instance's leaf, which after a rewind is inside the tree. `leaf`: only the branch ending there
        (`NotFound` naming it when no branch of this instance ends there)."""
        if leaf is not None and (isinstance(leaf, bool) or not isinstance(leaf, int)):
            raise InvalidInput(f"branch must be a line id (a whole number), got {leaf!r}")
        with session_scope(self.caller.database_url) as session:
            instance_of(session, self.caller, instance_id)
            current = get_path_ids(session, instance_id)
            paths = branch_paths(session, instance_id)
            if current and current not in paths:
                paths.append(current)
            paths.sort(key=lambda path: (path != current, path[-1]))
            if leaf is not None:
                paths = [path for path in paths if path[-1] == leaf]
                if not paths:
                    raise NotFound(f"branch {leaf}: no branch of instance {instance_id} ends at that line")
            nodes = [node.to_dict() for node in list_plot_nodes(session, instance_id, all_branches=True)]
            last = {row["id"]: row for row in get_lines(session, [path[-1] for path in paths], ["id", "content"])}
        out = []
        for path in paths:
            on = set(path)
            text = " ".join(str(last.get(path[-1], {}).get("content") or "").split())
            out.append(
                {
                    "leaf": path[-1],
                    "current": path == current,
                    "lines": len(path),
                    "last_line": text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…",
                    "nodes": [node for node in nodes if node.get("line_id") is None or node["line_id"] in on],
                }
            )
        return out
