"""A reply that only repeats the user's words or the character's own earlier line (issue 30: a small local model
answered each line with the line itself, or fell into saying one line of its own again and again).

Seed 000's reply is the character's own line (台词); a parrot of the user's input is no reply, and once stored it
teaches the next prompts to parrot too. `EchoGuard` watches the reply as it streams and holds back what could still
become an echo, so a reader never sees one:

- Compared is the line's text only: the reply without its `【emotion】` tags, `(action)` and `<speech text>` groups,
  whitespace and punctuation, lower case — against the user's input treated the same way. An input of fewer than
  `MIN_ECHO_CHARS` or more than `MAX_WATCHED_CHARS` compared characters is not watched (a "好的" is said back by many a
  good reply; a long paste is not what a model parrots, and holding its length back would stall the stream).
- The copy is the longest run of the input's characters the reply repeats (the model seen here dropped the input's
  opening filler, "对了，", and changed its tail: "天色暗下来了，我们歇一会儿吧。你呢？" for "对了，天色暗下来了，我们
  歇一会儿吧。没什么别的意思。").
- A reply is an echo when its copy is at least `MIN_ECHO_CHARS` characters, at least `ECHO_SHARE_OF_INPUT` of the
  input and at least `ECHO_SHARE_OF_REPLY` of the reply: most of the input, and little of its own. "I love you too"
  for "I love you" is a reply; "我妹妹叫什么名字？你妹妹叫林小满。" (the question quoted, then answered) is one, and
  so is a question's frame with its question words (`QUESTION_WORDS`, of an input ending with a question mark)
  replaced: "我最害怕的是深水。" for "我最害怕的是什么？".
- While streaming, the reply is held until its characters outside the copy pass a third of the input's length: from
  there it can no longer be an echo (those characters never decrease, and an echo has at most a third of its copy
  outside it), and all of it is let through.
- An echo is decided when the stream ends (`finish()`): `echoed` is then True and nothing held was shown, and the
  reply node asks once more (nodes/generate.py) with the catalog's `echo_note` after the input — unless
  `afford_retry(first reply)` says the time left cannot hold a second reply: then the echo is let through after all
  (`kept`).

The character's own last lines (`own_lines`, its last `REPEAT_LINES` replies; seed 001 避免重复对话的机制: 历史消息重复)
are watched the same way: a reply is a repeat when its longest run copied from one of them is at least
`MIN_REPEAT_CHARS` characters and at least `ECHO_SHARE_OF_REPLY` of the reply (the 1.5B model seen here said "I see
you're looking for a place to rest. Did Theo find anything interesting there? Just saying." four times by turn 30,
whatever the user said). It is held while it could still be one: until its characters outside the copy pass a third
of the line or `REPEAT_HOLD_CHARS`, whichever is fewer (a long line held to its third would stall every reply's
start); a repeat that begins after that many characters of the reply's own is shown. A repeat is asked again with
the catalog's `repeat_note` (`reason` "own line").
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from difflib import SequenceMatcher

# a question's own words: a reply that repeats a question's frame without them answered it ("我最害怕的是什么？" →
# "我最害怕的是深水。"), where an echo keeps them
QUESTION_WORDS = (
    "什么",
    "哪",
    "谁",
    "几",
    "多少",
    "怎么",
    "为什么",
    "为何",
    "吗",
    "what",
    "where",
    "who",
    "when",
    "which",
    "how",
    "why",
)
MIN_ECHO_CHARS = 6
MAX_WATCHED_CHARS = 200
ECHO_SHARE_OF_INPUT = 0.5
ECHO_SHARE_OF_REPLY = 0.75
MIN_REPEAT_CHARS = 12
REPEAT_LINES = 5
REPEAT_HOLD_CHARS = 16
REASON_INPUT = "input"
REASON_OWN_LINE = "own line"

# groups that are not the line itself: 【emotion】, (action), （action）, <speech text>, ‹speech text›
_GROUPS = (("【", "】"), ("(", ")"), ("（", "）"), ("<", ">"), ("‹", "›"))
_OPENERS = {opener: closer for opener, closer in _GROUPS}


def compared_text(text: str) -> str:
    """The line's own characters: no bracketed groups (an open group at the end is left out, it may still close),
    no whitespace or punctuation, lower case."""
    return _line_state(text)[0]


def _line_state(text: str) -> tuple[str, bool]:
    """(`compared_text(text)`, whether `text` ends inside a bracketed group whose closer may come with the next
    chunk), in one pass."""
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
        if unicodedata.category(char)[0] in "PZSC":  # punctuation, separators (spaces), symbols, control characters
            continue
        out.append(char.lower())
    return "".join(out), closer is not None


def copied_chars(reply: str, said: str) -> int:
    """The longest run of characters `reply` repeats from `said` (both compared texts)."""
    if not reply or not said:
        return 0
    return SequenceMatcher(None, reply, said, autojunk=False).find_longest_match(0, len(reply), 0, len(said)).size


def question_words(said: str) -> list[str]:
    """The question words of an input that asks (ends with a question mark), compared as `compared_text` is."""
    if not said.rstrip().endswith(("?", "？")):
        return []  # "没什么别的意思。" holds 什么 and asks nothing
    text = compared_text(said)
    return [word for word in QUESTION_WORDS if word in text]


def is_echo(reply: str, said: str) -> bool:
    """Whether the reply's line only repeats the input (the rules in the module doc), on the raw texts."""
    reply_text, said_text = compared_text(reply), compared_text(said)
    return _echo(reply_text, said_text, copied_chars(reply_text, said_text), question_words(said))


def _repeat(reply: str, earlier: str) -> bool:
    """Whether the reply's line mostly repeats the character's `earlier` line (both compared texts; the module doc)."""
    copied = copied_chars(reply, earlier)
    return copied >= MIN_REPEAT_CHARS and copied >= ECHO_SHARE_OF_REPLY * len(reply)


def _echo(reply: str, said: str, copied: int, asked: list[str]) -> bool:
    if asked and not any(word in reply for word in asked):
        return False  # the question's frame with its question words replaced: an answer
    return (
        copied >= MIN_ECHO_CHARS
        and copied >= ECHO_SHARE_OF_INPUT * len(said)
        and copied >= ECHO_SHARE_OF_REPLY * len(reply)
    )


class EchoGuard:
    """Feed the reply's text as it streams (`feed` returns what may be shown now); `finish()` at the end returns
    the rest to show, or "" with `echoed` True when the reply only repeated `user_input` (`reason` "input") or one of
    the character's `own_lines` (`reason` "own line")."""

    def __init__(
        self, user_input: str, afford_retry: Callable[[str], bool] | None = None, own_lines: Sequence[str] = ()
    ) -> None:
        self._input = compared_text(user_input)
        self._asked = question_words(user_input)
        self._lines = [line for line in map(compared_text, own_lines) if len(line) >= MIN_REPEAT_CHARS]
        self._held = ""
        self._input_watched = MIN_ECHO_CHARS <= len(self._input) <= MAX_WATCHED_CHARS
        # what the reply could still turn out to repeat; all of it is let through once nothing is left
        self._could_echo = self._input_watched
        self._could_repeat = list(self._lines)
        self.watching = self._input_watched or bool(self._lines)
        self.afford_retry = afford_retry
        self.echoed = False
        self.reason: str | None = None  # REASON_INPUT or REASON_OWN_LINE once `echoed`
        self.kept = False  # an echo let through after all: no time to ask again

    def feed(self, text: str) -> str:
        if not self.watching:
            return text
        self._held += text
        reply, unclosed = _line_state(self._held)
        if unclosed:
            return ""
        if self._could_echo and len(reply) - copied_chars(reply, self._input) > len(self._input) / 3:
            self._could_echo = False  # too much of its own to be an echo any more
        self._could_repeat = [
            line
            for line in self._could_repeat
            if len(reply) - copied_chars(reply, line) <= min(len(line) / 3, REPEAT_HOLD_CHARS)
        ]
        if not self._could_echo and not self._could_repeat:
            return self._release()
        return ""

    def finish(self) -> str:
        """The end of the reply: what is still held, unless it only repeated the input or an own line (`echoed`)."""
        if not self.watching:
            return ""
        reply = compared_text(self._held)
        if self._input_watched and _echo(reply, self._input, copied_chars(reply, self._input), self._asked):
            self.reason = REASON_INPUT
        elif any(_repeat(reply, line) for line in self._lines):
            self.reason = REASON_OWN_LINE
        if self.reason is not None:
            self.echoed = True
            if self.afford_retry is not None and not self.afford_retry(self._held):
                self.kept = True
                return self._release()
            self.watching = False
            return ""
        return self._release()

    def _release(self) -> str:
        held, self._held = self._held, ""
        self.watching = False
        return held
