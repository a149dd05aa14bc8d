"""Showing a streamed reply as it arrives, without the director's `[PROGRESS:i:status]` markers."""

from __future__ import annotations

from personalab.nodes.rules.plot import MARKER_RE

_OPENERS = "[［【"


class MarkerFilter:
    """Feed chunks, get the text safe to show now; a possible marker is held back until it closes."""

    def __init__(self) -> None:
        self.pending = ""

    def feed(self, chunk: str) -> str:
        self.pending += chunk
        cut = max(self.pending.rfind(opener) for opener in _OPENERS)
        if cut >= 0 and not any(closer in self.pending[cut:] for closer in "]］】") and len(self.pending) - cut < 48:
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
