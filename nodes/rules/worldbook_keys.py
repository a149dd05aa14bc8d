"""World-book keys (seed 004 关键词匹配): how one key matches a text, and an index over every key of a book.

A key is matched by `key_matches` under SillyTavern's rules as decided in `nodes.rules.worldbook`: keys containing
CJK match as substrings, pure ASCII keys as whole words (unless the entry says otherwise), case-insensitively unless
the entry is case-sensitive, and `/pattern/flags` keys are regular expressions, bounded in time.

`KeyIndex` (issue 28) finds, in one pass over the turn's text, the items (entries) one of whose keys can match:
every plain key of a book goes into one Aho-Corasick automaton (ahocorasick-rs, Rust's aho-corasick:
pyahocorasick's trie scans a node's children one by one, which for thousands of CJK first characters costs
milliseconds a turn) as its case-folded text, so the
cost of a scan grows with the text and the keys it contains, not with the number of entries. A plain key can only
match where its case-folded text occurs in the case-folded text (whole words and case sensitivity only narrow it),
so the index gives a superset; the exact rule then runs on those items alone. Regex keys cannot be indexed: the
items having one are always candidates (their patterns are compiled once and cached).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import ahocorasick_rs
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.keywords import has_unspaced_script

REGEX_KEY = re.compile(r"^/(.+)/([imsx]*)$", re.S)
# A `/regex/` key runs at most this long on one turn's text (issue 15: bounded in time): a pattern that
# backtracks for ever is a skipped entry, named, never a stuck turn. `regex` (the `re` superset, a dependency
# of tiktoken) has the timeout; without it the pattern runs under `re` on at most MAX_REGEX_TEXT characters.
REGEX_TIMEOUT_S = 0.05
MAX_REGEX_TEXT = 20_000
try:
    import regex as _regex  # type: ignore[import-untyped, unused-ignore]
except ImportError:  # pragma: no cover - regex comes with tiktoken
    _regex = None


class RegexTimeout(InvalidInput):
    """A `/regex/` key that ran past `REGEX_TIMEOUT_S` on the text scanned."""


def is_regex_key(keyword: str) -> bool:
    return REGEX_KEY.match(keyword.strip()) is not None


@lru_cache(maxsize=65_536)
def key_pattern(keyword: str, case_sensitive: bool = False, whole_words: bool = True) -> Any:
    """The compiled matcher of a keyword, None for a blank one; `InvalidInput` for a bad regex.

    `/pattern/flags` is a regular expression with its own flags (`regex` when installed, for the timeout).
    A plain keyword is case-insensitive unless `case_sensitive`, and a whole word when `whole_words` and it is
    not in a script written without spaces (CJK, kana, Hangul: always a substring there)."""
    key = keyword.strip()
    if not key:
        return None
    found = REGEX_KEY.match(key)
    if found:
        flags = 0
        for letter in found.group(2):
            flags |= {"i": re.I, "m": re.M, "s": re.S, "x": re.X}[letter]
        try:
            re.compile(found.group(1), flags)  # the error message users know
            return _regex.compile(found.group(1), flags) if _regex is not None else re.compile(found.group(1), flags)
        except (re.error, ValueError) as exc:
            raise InvalidInput(f"keyword {keyword!r} is not a valid regular expression: {exc}") from None
        except Exception as exc:  # regex's own error class
            raise InvalidInput(f"keyword {keyword!r} is not a valid regular expression: {exc}") from None
    escaped = re.escape(key)
    flags = 0 if case_sensitive else re.I
    if has_unspaced_script(key) or not whole_words:
        return re.compile(escaped, flags)
    # ASCII lookarounds, not \b: in Python \b treats CJK characters as word characters, so
    # r"\bAlice\b" would miss "Alice说".
    left = r"(?<![A-Za-z0-9_])" if re.match(r"[A-Za-z0-9_]", key) else ""
    right = r"(?![A-Za-z0-9_])" if re.search(r"[A-Za-z0-9_]$", key) else ""
    return re.compile(f"{left}{escaped}{right}", flags)


def key_matches(text: str, keyword: str, case_sensitive: bool = False, whole_words: bool = True) -> bool:
    """Whether `keyword` occurs in `text` under the rules above. `RegexTimeout` when a `/regex/` key runs past
    `REGEX_TIMEOUT_S`."""
    key = keyword.strip()
    if not key:
        return False
    if REGEX_KEY.match(key):
        pattern = key_pattern(keyword, case_sensitive, whole_words)
        scanned = text[-MAX_REGEX_TEXT:]
        if _regex is not None and isinstance(pattern, _regex.Pattern):
            try:
                return bool(pattern.search(scanned, timeout=REGEX_TIMEOUT_S))
            except TimeoutError:
                raise RegexTimeout(
                    f"regex key {keyword!r} ran over {REGEX_TIMEOUT_S * 1000:.0f} ms on the recent text"
                ) from None
        return bool(pattern.search(scanned))
    found = _plain_search(text, key, case_sensitive, whole_words)
    if found is None:
        return bool(key_pattern(keyword, case_sensitive, whole_words).search(text))
    return found


_WORD_CHAR = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def _plain_search(text: str, key: str, case_sensitive: bool, whole_words: bool) -> bool | None:
    """A plain key by string search, what its pattern (`key_pattern`) matches, without compiling one per key (a
    big book's keys would each cost a compile the first time a turn names them); None when lower-casing changes the
    text's length (a few non-ASCII letters), where only the pattern's offsets are right."""
    hay, needle = (text, key) if case_sensitive else (text.lower(), key.lower())
    if len(hay) != len(text) or len(needle) != len(key):
        return None
    whole = whole_words and not has_unspaced_script(key)
    left = whole and key[0] in _WORD_CHAR
    right = whole and key[-1] in _WORD_CHAR
    start = hay.find(needle)
    while start >= 0:
        end = start + len(needle)
        if (not left or start == 0 or text[start - 1] not in _WORD_CHAR) and (
            not right or end == len(text) or text[end] not in _WORD_CHAR
        ):
            return True
        start = hay.find(needle, start + 1)
    return False


class KeyIndex:
    """Every key of a book in one automaton: `candidates(text)` are the positions of the items one of whose keys
    may match `text` (a superset of those that do; see the module docstring). Built once per book version."""

    def __init__(self, keys_per_item: Sequence[Iterable[str]]) -> None:
        self.size = len(keys_per_item)
        by_key: dict[str, list[int]] = {}
        regex_items: list[int] = []
        for position, keys in enumerate(keys_per_item):
            for keyword in keys:
                key = keyword.strip()
                if not key:
                    continue
                if REGEX_KEY.match(key):
                    regex_items.append(position)
                    continue
                by_key.setdefault(key.casefold(), []).append(position)
        self.regex_items: frozenset[int] = frozenset(regex_items)
        self.keys = len(by_key)
        self._items: list[tuple[int, ...]] = [tuple(dict.fromkeys(positions)) for positions in by_key.values()]
        # every match, overlapping ones included (MatchKind.Standard): a key inside another key's match counts
        self._automaton = (
            ahocorasick_rs.AhoCorasick(list(by_key), matchkind=ahocorasick_rs.MatchKind.Standard) if by_key else None
        )

    def candidates(self, text: str) -> set[int]:
        """Positions of the items with a plain key occurring in `text` (case-folded) or with a regex key."""
        found = set(self.regex_items)
        if self._automaton is not None and text:
            for key, _start, _end in self._automaton.find_matches_as_indexes(text.casefold(), overlapping=True):
                found.update(self._items[key])
        return found
