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
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nodes.memory_build import format_own_line

STATUSES = ("completed", "in_progress", "pending")
_STATUS_WORDS = {
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


def _status(word: str) -> str | None:
    key = re.sub(r"[\s\-]+", "_", word.strip().lower())
    return _STATUS_WORDS.get(key) or _STATUS_WORDS.get(key.replace("_", ""))


def extract_progress(text: str, outline_size: int) -> tuple[str, list[dict[str, int | str]], list[dict[str, str]]]:
    """Scan a reply for progress markers (seed 002 后端处理 1–3).

    Returns `(clean_text, markers, ignored)`: the text without any marker, the usable markers in order as
    `{"index": int, "status": str}`, and the unusable ones as `{"raw": str, "reason": str}`.
    """
    if outline_size < 0:
        raise ValueError(f"extract_progress: outline_size must be >= 0, got {outline_size}")
    markers: list[dict[str, int | str]] = []
    ignored: list[dict[str, str]] = []

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


def new_plot_state(outline_texts: Sequence[str]) -> dict[str, Any]:
    """The plot state of a new instance (seed 002 会话实例 创建: 从第1点开始): point 1 in progress, the rest pending."""
    if isinstance(outline_texts, str) or not outline_texts:
        raise ValueError("new_plot_state: the outline must be a non-empty list of point texts")
    outline = []
    for position, content in enumerate(outline_texts, start=1):
        if not isinstance(content, str) or not content.strip():
            raise ValueError(f"new_plot_state: outline point {position} is empty")
        outline.append({"index": position, "content": content.strip(), "status": "pending"})
    outline[0]["status"] = "in_progress"
    return {"story_outline": outline, "current_plot_index": 1, "last_progress_turn": 0}


def check_plot_state(plot_state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The outline of a well-formed plot state; ValueError naming the bad part otherwise."""
    outline = plot_state.get("story_outline") if isinstance(plot_state, Mapping) else None
    if not isinstance(outline, list) or not outline:
        raise ValueError("plot state: story_outline must be a non-empty list")
    for position, point in enumerate(outline, start=1):
        if not isinstance(point, Mapping) or point.get("index") != position:
            raise ValueError(f"plot state: outline point {position} must be a dict with index {position}")
        if point.get("status") not in STATUSES:
            raise ValueError(f"plot state: outline point {position} has unknown status {point.get('status')!r}")
    current = plot_state.get("current_plot_index")
    if not isinstance(current, int) or not 1 <= current <= len(outline):
        raise ValueError(f"plot state: current_plot_index {current!r} outside 1..{len(outline)}")
    return outline


def apply_progress(plot_state: Mapping[str, Any], markers: Sequence[Mapping[str, Any]], turn: int) -> dict[str, Any]:
    """The plot state after the markers of the reply of `turn` (seed 002 后端处理 2–3); the input is not changed.

    No markers: the state is returned unchanged (保持上次状态不变). The current-point rule is in the module doc.
    A marker outside the outline or with an unknown status raises ValueError (extract_progress filters them).
    """
    check_plot_state(plot_state)
    state = copy.deepcopy(dict(plot_state))
    if not markers:
        return state
    outline = state["story_outline"]
    in_progress: list[int] = []
    for marker in markers:
        index, status = marker.get("index"), marker.get("status")
        if not isinstance(index, int) or not 1 <= index <= len(outline):
            raise ValueError(f"apply_progress: marker index {index!r} outside 1..{len(outline)}")
        if status not in STATUSES:
            raise ValueError(f"apply_progress: marker status {status!r} is not one of {', '.join(STATUSES)}")
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


# --- reply parser ------------------------------------------------------------------------------------------

_EMOTION_RE = re.compile(r"【([^【】\n]*[^【】\s][^【】\n]*)】")  # a blank 【 】 is plain text


def _split_tail(body: str, closers: str, openers: str) -> tuple[str, str | None]:
    """`body` ending in a balanced `(...)`-like group → (before, inside); else (body, None)."""
    if not body or body[-1] not in closers:
        return body, None
    depth = 0
    for pos in range(len(body) - 1, -1, -1):
        char = body[pos]
        if char in "【】":
            return body, None  # tts / action text never holds the emotion brackets
        if char in closers:
            depth += 1
        elif char in openers:
            depth -= 1
            if depth == 0:
                return body[:pos], body[pos + 1 : -1]
    return body, None


def _take_tail(body: str, closers: str, openers: str) -> tuple[str, str | None]:
    """Like `_split_tail`, but an empty group at the end is dropped and the one before it looked at."""
    while True:
        before, inside = _split_tail(body, closers, openers)
        if inside is None:
            return body, None
        body = before.rstrip()
        if inside.strip():
            return body, inside.strip()


_EMPTY_TAIL_RE = re.compile(r"(?:[(（]\s*[)）]|<\s*>|\s)+$")


def _segment(emotion: str | None, body: str) -> dict[str, str | None] | None:
    body = body.strip()
    if not body:
        return None
    content, action = _split_tail(_EMPTY_TAIL_RE.sub("", body), ")）", "(（")
    content, tts = _take_tail(content.rstrip(), ">", "<")
    content = content.strip()
    if not content:
        # a segment that is only `<...>` / `(...)` keeps it as its content: a line always has content
        content, tts, action = body, None, None
    return {
        "original_emotion": emotion.strip() if emotion else None,
        "content": content,
        "tts_content": tts,
        "action_content": (action.strip() or None) if action else None,
    }


def parse_reply(text: str) -> list[dict[str, str | None]]:
    """A reply `【emotion】content<tts>(action)...` → one dict per segment (seed 000, inverse of format_own_line).

    Each dict has original_emotion, content, tts_content, action_content (None when absent).
    - a segment starts at each `【...】` (one line, not blank); text before the first one is a segment without
      emotion, and text with no `【...】` at all is one segment;
    - at the end of a segment, a balanced `(...)` (or full-width `（...）`) is the action, and before it a
      balanced `<...>` is the tts text (neither may contain `【` or `】`); anything else stays in the content;
    - normalisation: each field is stripped of surrounding whitespace (so whitespace/newlines between segments
      vanish), a segment with no text at all (`【开心】` followed directly by another `【` or the end) is dropped,
      empty `<>`/`()` groups at the end of a segment are dropped, a segment that would have empty content keeps
      its whole text as content (a stored line always has content), and `format_own_line` writes the action with
      ASCII parentheses. A blank `【 】` is plain text, not a segment start.
    So `"".join(format_own_line(...) for each segment)` gives back the reply up to that normalisation, and parsing
    that again gives the same segments (tests/test_progress_parse.py, random texts). Segments whose content
    itself contains `【x】`, or ends with `<...>` / `(...)`, cannot be recovered from the text.
    """
    text = text or ""
    segments: list[dict[str, str | None]] = []
    matches = list(_EMOTION_RE.finditer(text))
    head_end = matches[0].start() if matches else len(text)
    first = _segment(None, text[:head_end])
    if first:
        segments.append(first)
    for number, match in enumerate(matches):
        end = matches[number + 1].start() if number + 1 < len(matches) else len(text)
        segment = _segment(match.group(1), text[match.end() : end])
        if segment:
            segments.append(segment)
    return segments


def format_reply(segments: Sequence[Mapping[str, Any]]) -> str:
    """The reply text of parsed segments (seed 000 format), the inverse of `parse_reply`."""
    return "".join(
        format_own_line(s.get("original_emotion"), s["content"], s.get("tts_content"), s.get("action_content"))
        for s in segments
    )


def progress_events(plot_state: Mapping[str, Any], markers: Sequence[Mapping[str, Any]], turn: int) -> list[str]:
    """State-change events for core-memory maintenance (seed 002: 状态变化事件), one per usable marker."""
    outline = plot_state.get("story_outline", [])
    events = []
    for marker in markers:
        index = int(marker["index"])
        content = outline[index - 1]["content"] if 0 < index <= len(outline) else ""
        events.append(f"第{turn}轮：剧情点{index}「{content}」→ {marker['status']}")
    return events


def progress_parse(state: Mapping[str, Any], runtime: Any = None) -> dict[str, Any]:
    """Graph node: markers of the model's reply → plot state; the reply without markers → the lines to store.

    Only the model's reply is scanned: a marker typed by the user or in a host line is never honoured."""
    plot_state = state["plot_state"]
    turn = state["turn"]
    clean, markers, ignored = extract_progress(state["reply_raw"], len(plot_state["story_outline"]))
    for item in ignored:
        logging.getLogger(__name__).warning(
            "instance %s turn %s: ignored %s (%s)", state.get("instance_id"), turn, item["raw"], item["reason"]
        )
    segments = parse_reply(clean)
    update: dict[str, Any] = {
        "reply": format_reply(segments),
        "reply_lines": segments,
        "debug": {"progress": {"markers": markers, "ignored": ignored}},
    }
    if markers:
        update["plot_state"] = apply_progress(plot_state, markers, turn)
        update["state_events"] = [*state.get("state_events", []), *progress_events(plot_state, markers, turn)]
    return update
