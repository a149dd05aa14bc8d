"""The director's dynamic guidance (seed 002 需求1 动态引导) and the reply parser (seed 000 台词格式).

Progress markers (`[PROGRESS:{index}:{status}]`, seed 002):
- found anywhere in the reply (start, middle, end), any number of them, applied in order;
- tolerated spellings, because models write them: full-width brackets `［］` and `【】`, full-width colons `：`,
  spaces around the parts, any letter case, `in-progress` / `in progress`, full-width digits, and the Chinese
  status words 已完成/完成 (completed), 进行中 (in_progress), 待进行/未开始 (pending);
- every marker-shaped piece (`[PROGRESS...]` up to its closing bracket) is removed from the text the user
  sees, even when it is unusable; an unusable one (index outside 1..outline size, unknown status, no index) is
  reported in `ignored` with the reason, and changes nothing;
- a marker removal also eats the spaces/tabs just before it, and the text is stripped at both ends.

Plot state (seed 002 静态约束 JSON): `{"story_outline": [{"index", "content", "status"}], "current_plot_index",
"last_progress_turn"}`. The whole outline is always kept (全量存储).

Current-point rule of `apply_progress` (the seed leaves it open, decided here):
1. a marker saying `in_progress` this turn moves the current point to the highest index so marked (the model
   said where the story is; this may move backwards, e.g. an explicit return to an earlier point);
2. otherwise, when the current point is now `completed`, the current point becomes the first point after it
   that is not completed (a `pending` one is set to `in_progress`); with none left it stays (outline finished);
3. otherwise it does not move.
Points the model did not mention keep their status: nothing is auto-completed.
`last_progress_turn` is set to the turn of any reply with at least one usable marker, even one that changes
nothing: the fallback (director.is_stalled) counts replies without markers, not replies without changes.

Reply format (seed 000): segments `【emotion】content<tts>(action)`; see `parse_reply`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

from personalab.nodes.rules import prompts_en
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.types import IgnoredMarker, PlotPoint, PlotState, PlotStatus, ProgressMarker

STATUSES: tuple[PlotStatus, ...] = ("completed", "in_progress", "pending")
_STATUS_WORDS: dict[str, PlotStatus] = {
    "completed": "completed",
    "complete": "completed",
    "done": "completed",
    "in_progress": "in_progress",
    "inprogress": "in_progress",
    "pending": "pending",
    "已完成": "completed",
    "完成": "completed",
    "进行中": "in_progress",
    "待进行": "pending",
    "未开始": "pending",
}

MARKER_RE = re.compile(r"[ \t]*[\[［【]\s*PROGRESS\b([^\]］】\n]{0,40})[\]］】]", re.IGNORECASE)
_MARKER_BODY_RE = re.compile(r"^\s*[:：]\s*(\d+)\s*[:：]\s*(.*?)\s*$")


def _status(word: str) -> PlotStatus | None:
    key = re.sub(r"[\s\-]+", "_", word.strip().lower())
    return _STATUS_WORDS.get(key) or _STATUS_WORDS.get(key.replace("_", ""))


def extract_progress(text: str, outline_size: int) -> tuple[str, list[ProgressMarker], list[IgnoredMarker]]:
    """Scan a reply for progress markers (seed 002 后端处理 1–3).

    Returns `(clean_text, markers, ignored)`: the text without any marker, the usable markers in order as
    `{"index": int, "status": str}`, and the unusable ones as `{"raw": str, "reason": str}`.
    """
    if outline_size < 0:
        raise InvalidInput(f"extract_progress: outline_size must be >= 0, got {outline_size}")
    markers: list[ProgressMarker] = []
    ignored: list[IgnoredMarker] = []

    def take(match: re.Match[str]) -> str:
        raw = match.group(0).strip()
        body = _MARKER_BODY_RE.match(match.group(1))
        if not body:
            ignored.append({"raw": raw, "reason": "not of the form [PROGRESS:index:status]"})
            return ""
        index = int(body.group(1))
        status = _status(body.group(2))
        if status is None:
            ignored.append({"raw": raw, "reason": f"unknown status {body.group(2)!r} (expected {', '.join(STATUSES)})"})
        elif not 1 <= index <= outline_size:
            ignored.append({"raw": raw, "reason": f"index {index} outside the outline (1..{outline_size})"})
        else:
            markers.append({"index": index, "status": status})
        return ""

    clean = MARKER_RE.sub(take, text or "")
    return clean.strip(), markers, ignored


def markers_within_reach(
    markers: Sequence[ProgressMarker], current_index: int, max_step: int = 1
) -> tuple[list[ProgressMarker], list[IgnoredMarker]]:
    """The markers that name the current outline point or one at most `max_step` points after it (seed 002
    需求1: the story moves along its outline, it does not jump), and the others as ignored. Without this a model
    could complete the ending while the story is at its first point."""
    kept: list[ProgressMarker] = []
    ignored: list[IgnoredMarker] = []
    last = current_index + max_step
    for marker in markers:
        if current_index <= marker["index"] <= last:
            kept.append(marker)
        else:
            reach = f"{current_index}" if max_step == 0 else f"{current_index}..{last}"
            ignored.append(
                {
                    "raw": f"[PROGRESS:{marker['index']}:{marker['status']}]",
                    "reason": f"point {marker['index']} is out of reach: the story is at point {current_index} "
                    f"and may move to points {reach}",
                }
            )
    return kept, ignored


def new_plot_state(outline_texts: Sequence[str]) -> PlotState:
    """The plot state of a new instance (seed 002 会话实例 创建: 从第1点开始): point 1 in progress, the rest pending."""
    if isinstance(outline_texts, str) or not outline_texts:
        raise InvalidInput("new_plot_state: the outline must be a non-empty list of point texts")
    outline: list[PlotPoint] = []
    for position, content in enumerate(outline_texts, start=1):
        if not isinstance(content, str) or not content.strip():
            raise InvalidInput(f"new_plot_state: outline point {position} is empty")
        outline.append({"index": position, "content": content.strip(), "status": "pending"})
    outline[0]["status"] = "in_progress"
    return {"story_outline": outline, "current_plot_index": 1, "last_progress_turn": 0}


def check_plot_state(plot_state: Mapping[str, Any]) -> list[PlotPoint]:
    """The outline of a well-formed plot state; ValueError naming the bad part otherwise."""
    outline = plot_state.get("story_outline") if isinstance(plot_state, Mapping) else None
    if not isinstance(outline, list) or not outline:
        raise InvalidInput("plot state: story_outline must be a non-empty list")
    for position, point in enumerate(outline, start=1):
        if not isinstance(point, Mapping) or point.get("index") != position:
            raise InvalidInput(f"plot state: outline point {position} must be a dict with index {position}")
        if point.get("status") not in STATUSES:
            raise InvalidInput(f"plot state: outline point {position} has unknown status {point.get('status')!r}")
    current = plot_state.get("current_plot_index")
    if not isinstance(current, int) or not 1 <= current <= len(outline):
        raise InvalidInput(f"plot state: current_plot_index {current!r} outside 1..{len(outline)}")
    return outline


def apply_progress(plot_state: Mapping[str, Any], markers: Sequence[Mapping[str, Any]], turn: int) -> PlotState:
    """The plot state after the markers of the reply of `turn` (seed 002 后端处理 2–3); the input is not changed.

    No markers: the state is returned unchanged (保持上次状态不变). The current-point rule is in the module doc.
    A marker outside the outline or with an unknown status raises ValueError (extract_progress filters them).
    """
    check_plot_state(plot_state)
    state = cast(PlotState, copy.deepcopy(dict(plot_state)))  # check_plot_state has checked its shape
    if not markers:
        return state
    outline = state["story_outline"]
    in_progress: list[int] = []
    for marker in markers:
        index, status = marker.get("index"), marker.get("status")
        if not isinstance(index, int) or not 1 <= index <= len(outline):
            raise InvalidInput(f"apply_progress: marker index {index!r} outside 1..{len(outline)}")
        if status not in STATUSES:
            raise InvalidInput(f"apply_progress: marker status {status!r} is not one of {', '.join(STATUSES)}")
        outline[index - 1]["status"] = status
        if status == "in_progress":
            in_progress.append(index)

    current = state["current_plot_index"]
    if in_progress:
        current = max(in_progress)
    elif outline[current - 1]["status"] == "completed":
        following = [p["index"] for p in outline[current:] if p["status"] != "completed"]
        if following:
            current = following[0]
            if outline[current - 1]["status"] == "pending":
                outline[current - 1]["status"] = "in_progress"
    state["current_plot_index"] = current
    state["last_progress_turn"] = turn
    return state


def set_current_point(plot_state: Mapping[str, Any], index: Any, turn: int) -> PlotState:
    """The plot state with outline point `index` made current by hand (issue 23: a user or a game master fixes
    the story's position): the points before it completed, it in progress, the ones after it pending, and
    `last_progress_turn` the turn of the correction (the director counts stalls from it). `InvalidInput` naming
    the index when it is not a point of the outline; the input is not changed."""
    outline = check_plot_state(plot_state)
    if isinstance(index, bool) or not isinstance(index, int) or not 1 <= index <= len(outline):
        raise InvalidInput(f"outline point {index!r} is not a point of the outline (1..{len(outline)})")
    state = cast(PlotState, copy.deepcopy(dict(plot_state)))
    for point in state["story_outline"]:
        point["status"] = (
            "completed" if point["index"] < index else "in_progress" if point["index"] == index else "pending"
        )
    state["current_plot_index"] = index
    state["last_progress_turn"] = turn
    return state


# --- reply parser ------------------------------------------------------------------------------------------


def progress_events(
    plot_state: Mapping[str, Any], markers: Sequence[Mapping[str, Any]], turn: int, language: str | None = None
) -> list[str]:
    """State-change events for core-memory maintenance (seed 002: 状态变化事件), one per usable marker, in the
    instance's `language` (issue 28; Chinese unless "en")."""
    outline = plot_state.get("story_outline", [])
    events = []
    for marker in markers:
        index = int(marker["index"])
        content = outline[index - 1]["content"] if 0 < index <= len(outline) else ""
        if language == "en":
            events.append(
                prompts_en.PROGRESS_EVENT.format(turn=turn, index=index, content=content, status=marker["status"])
            )
        else:
            events.append(f"第{turn}轮：剧情点{index}「{content}」→ {marker['status']}")
    return events
