"""Keeping the director's `[PROGRESS:i:status]` markers (seed 002 需求1) out of a reply shown while it streams: they
are for the engine (the progress parser reads them from the whole reply), never for the reader."""

from __future__ import annotations

from personalab.nodes.rules.plot import MARKER_RE

_OPENERS = "[［【"
_CLOSERS = "]］】"
HOLD_CHARS = 48  # a possible marker longer than this is no marker: let it through


class MarkerFilter:
    """Feed chunks, get the text safe to show now; a possible marker is held back until it closes."""

    def __init__(self) -> None:
        self.pending = ""

    def feed(self, chunk: str) -> str:
        self.pending += chunk
        cut = max(self.pending.rfind(opener) for opener in _OPENERS)
        if (
            cut >= 0
            and not any(closer in self.pending[cut:] for closer in _CLOSERS)
            and len(self.pending) - cut < HOLD_CHARS
        ):
            ready, self.pending = self.pending[:cut], self.pending[cut:]
        else:
            ready, self.pending = self.pending, ""
        return self._clean(ready)

    def flush(self) -> str:
        ready, self.pending = self.pending, ""
        return self._clean(ready)

    def _clean(self, text: str) -> str:
        if not text:
            return ""
        # the marker pattern of the parser, malformed markers included: none may reach the user
        return MARKER_RE.sub("", text)
