"""A turn streamed to the page as server-sent events (issue 24 "Chat"): the turn runs in a worker thread through
`personalab.graph.runner` (or the dialogue API's regenerate / edit, which run it), its reply tokens go through a
queue to the response as they come.

Events: `emotion` (a `【emotion】` tag, complete: the page shows it as the character's emotion, never the raw
tag), `token` (reply text; the director's `[PROGRESS:i:status]` markers are already held back by the runner's
`ReplyTokens`), then `done` (the turn is stored) or `error` (one message; the user's text stays in the page).
A reader that goes away does not stop the turn: it finishes (or fails) in its thread and frees the instance.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from personalab.graph.api.worker_events import END, WorkerEvents
from personalab.nodes.rules.errors import PersonaLabError
from starlette.concurrency import run_in_threadpool

log = logging.getLogger(__name__)
EMOTION_OPEN, EMOTION_CLOSE = "【", "】"
MAX_EMOTION_CHARS = 24  # a longer bracket is text, not an emotion tag (nodes/rules/reply.py allows any one line)


class EmotionSplitter:
    """Splits streamed reply text into text and complete `【emotion】` tags: an open `【` is held back until its
    `】` (a tag split over tokens is never shown raw), or given up as text at a line end or past
    `MAX_EMOTION_CHARS`."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        buffer = self._held + text
        self._held = ""
        plain = ""
        i = 0
        while i < len(buffer):
            char = buffer[i]
            if char != EMOTION_OPEN:
                plain += char
                i += 1
                continue
            close = buffer.find(EMOTION_CLOSE, i + 1)
            inside = buffer[i + 1 : close] if close >= 0 else buffer[i + 1 :]
            if "\n" in inside or len(inside) > MAX_EMOTION_CHARS or EMOTION_OPEN in inside:
                plain += char  # not a tag: the bracket is text
                i += 1
                continue
            if close < 0:
                self._held = buffer[i:]  # may still close in the next token
                break
            if plain:
                out.append(("token", plain))
                plain = ""
            if inside.strip():
                out.append(("emotion", inside.strip()))
            i = close + 1
        if plain:
            out.append(("token", plain))
        return out

    def flush(self) -> list[tuple[str, str]]:
        held, self._held = self._held, ""
        return [("token", held)] if held else []


def sse(event: str, data: Any) -> str:
    """One server-sent event; the data is JSON on one line (no newline of the text can break the frame)."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def stream_turn(
    work: Callable[[Callable[[str], None]], dict[str, Any]], describe_error: Callable[[BaseException], str]
) -> AsyncIterator[str]:
    """Run `work(on_token)` in a thread and yield its events; `describe_error` turns an exception into the one
    message the page shows."""
    splitter = EmotionSplitter()

    def run(put: Callable[[tuple[str, Any]], None]) -> None:
        def on_token(text: str) -> None:
            for kind, value in splitter.feed(text):
                put((kind, value))

        try:
            state = work(on_token)
            for kind, value in splitter.flush():
                put((kind, value))
            if state.get("error"):
                put(("error", {"message": str(state["error"]), "stored": True}))
            else:
                recap = [str(line) for line in state.get("session_recap") or []]
                put(("done", {"turn": state.get("turn"), "model": state.get("model"), "recap": recap}))
        except BaseException as exc:  # noqa: BLE001 - every failure becomes the page's one message
            if not _expected(exc):
                log.exception("web turn failed")
            put(("error", {"message": describe_error(exc), "kind": type(exc).__name__}))

    events = WorkerEvents(run, "personalab-web-turn")
    yield ": turn started\n\n"  # the response starts at once: the page knows the turn is under way
    while (item := await run_in_threadpool(events.next)) is not END:
        kind, value = item
        yield sse(kind, value if isinstance(value, dict) else {"text": value})


def _expected(exc: BaseException) -> bool:
    return isinstance(exc, PersonaLabError)
