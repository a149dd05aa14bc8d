"""A reply that only repeats the user's words (issue 30: a small local model answered each line with the line itself).

Seed 000's reply is the character's own line (台词); a parrot of the user's input is no reply, and once stored it
teaches the next prompts to parrot too. `EchoGuard` watches the reply as it streams and holds back what could be the
start of an echo, so a reader never sees it:

- Compared is the line's text only: the reply without its `【emotion】` tags, `(action)` and `<speech text>` groups,
  whitespace and punctuation, lower case — against the user's input treated the same way.
- Only an input of at least `MIN_ECHO_CHARS` compared characters is guarded (a "好的" or "ok" is said back by
  many a good reply).
- The reply is held while its compared text is a prefix of the input's. Once it covers at least `ECHO_SHARE` of the
  input it is an echo unless it goes on with at least `OWN_CHARS` compared characters of its own: then it was a quote
  of the question before an answer, and all of it is let through. A reply that leaves the input's text earlier is
  let through at once.
- An echo is decided when the stream ends (or `finish()` is called): `echoed` is then True and nothing held was
  shown, and the reply node asks once more (nodes/generate.py) with the catalog's `echo_note` after the input —
  unless `afford_retry()` says the time left cannot hold a second reply: then the echo is let through after all
  (`kept`), as the reply.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

MIN_ECHO_CHARS = 6
ECHO_SHARE = 0.8
OWN_CHARS = 12

# groups that are not the line itself: 【emotion】, (action), （action）, <speech text>, ‹speech text›
_GROUPS = (("【", "】"), ("(", ")"), ("（", "）"), ("<", ">"), ("‹", "›"))
_OPENERS = {opener: closer for opener, closer in _GROUPS}


def compared_text(text: str) -> str:
    """The line's own characters: no bracketed groups (an open group at the end is left out, it may still close),
    no whitespace or punctuation, lower case."""
    out: list[str] = []
    closer: str | None = None
    for char in text:
        if closer is not None:
            if char == closer:
                closer = None
            continue
        if char in _OPENERS:
            closer = _OPENERS[char]
            continue
        category = unicodedata.category(char)
        if category[0] in "PZSC":  # punctuation, separators (spaces), symbols, control characters
            continue
        out.append(char.lower())
    return "".join(out)


def _unclosed(text: str) -> bool:
    """Whether `text` ends inside a bracketed group (its closer may come with the next chunk)."""
    closer: str | None = None
    for char in text:
        if closer is not None:
            if char == closer:
                closer = None
        elif char in _OPENERS:
            closer = _OPENERS[char]
    return closer is not None


class EchoGuard:
    """Feed the reply's text as it streams (`feed` returns what may be shown now); `finish()` at the end returns
    the rest to show, or "" with `echoed` True when the reply only repeated `user_input`."""

    def __init__(self, user_input: str, afford_retry: Callable[[], bool] | None = None) -> None:
        self._input = compared_text(user_input)
        self._held = ""
        self.watching = len(self._input) >= MIN_ECHO_CHARS
        self.afford_retry = afford_retry
        self.echoed = False
        self.kept = False  # an echo let through after all: no time to ask again

    def feed(self, text: str) -> str:
        if not self.watching:
            return text
        self._held += text
        if _unclosed(self._held):
            return ""
        reply = compared_text(self._held)
        if self._input.startswith(reply):
            return ""  # all of it so far is the input's own start
        echoed = self._covered(reply)
        if echoed and len(reply) - echoed < OWN_CHARS:
            return ""  # the input said back, and a little more: still may be an echo
        return self._release()

    def finish(self) -> str:
        """The end of the reply: what is still held, unless it only repeated the input (then `echoed`)."""
        if not self.watching:
            return ""
        reply = compared_text(self._held)
        covered = self._covered(reply) if not self._input.startswith(reply) else len(reply)
        if reply and covered >= ECHO_SHARE * len(self._input) and len(reply) - covered < OWN_CHARS:
            self.echoed = True
            if self.afford_retry is not None and not self.afford_retry():
                self.kept = True
                return self._release()
            self.watching = False
            return ""
        return self._release()

    def _covered(self, reply: str) -> int:
        """How many of the reply's first characters repeat the input's, when they are at least `ECHO_SHARE` of it
        (else 0)."""
        size = 0
        for a, b in zip(reply, self._input, strict=False):
            if a != b:
                break
            size += 1
        return size if size >= ECHO_SHARE * len(self._input) else 0

    def _release(self) -> str:
        held, self._held = self._held, ""
        self.watching = False
        return held
