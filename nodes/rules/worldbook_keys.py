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
so the index gives a superset; the exact rule then runs on those items alone. A regex key is indexed by the literals
one of which every match of it must contain (`required_literals`: `/\\bsigil\\d+/i` needs "sigil", `/(Alice|Bob)/`
one of "alice", "bob"), so a book's regex entries cost nothing on a turn that names none of them; only a regex
without such a literal (`/\\d{4}/`) makes its item a candidate on every turn. Patterns are compiled once and cached.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from re import _constants as _sre  # type: ignore[attr-defined, unused-ignore]
from re import _parser as _sre_parse  # type: ignore[attr-defined, unused-ignore]
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
        flags = _regex_flags(found.group(2))
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


def _regex_flags(letters: str) -> int:
    flags = 0
    for letter in letters:
        flags |= {"i": re.I, "m": re.M, "s": re.S, "x": re.X}[letter]
    return flags


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


# Under IGNORECASE these two match an ASCII "i" / "I" while their case-folding is not "i" (checked over every code
# point for `re` and `regex`: tests/test_worldbook_scan.py): a text holding one may match a regex literal that the
# folded text does not contain, and a literal holding one may match a folded text without it
_FOLD_EXCEPTIONS = ("\u0130", "\u0131")
_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")


def required_literals(pattern: str, flags: int = 0) -> frozenset[str] | None:
    """Case-folded strings one of which every match of the regular expression must contain, or None when the
    pattern does not require any (then it must be tried on every text). Read from the pattern's parse (`re`'s
    own parser; a `/regex/` key is valid `re` syntax, `key_pattern`): a run of literal characters in sequence, the
    union over an alternation's branches, a group or a repeat of at least once as its content; of several, the one
    whose shortest string is longest. Case-folded, so a match in any case is found in the case-folded text."""
    try:
        parsed = _sre_parse.parse(pattern, flags)
    except Exception:  # noqa: BLE001 - a pattern `re` cannot read is tried on every text, never dropped
        return None
    found = _needed(list(parsed))
    if not found or any(not text or any(c in text for c in _FOLD_EXCEPTIONS) for text in found):
        return None
    return frozenset(text.casefold() for text in found)


def _better(one: frozenset[str] | None, other: frozenset[str] | None) -> frozenset[str] | None:
    if one is None or other is None:
        return other if one is None else one
    rank = (min(map(len, one)), -len(one))
    return one if rank >= (min(map(len, other)), -len(other)) else other


def _exact(op: Any, av: Any) -> str | None:
    """The one string a group of literal characters matches (`(sigil)`), else None."""
    if op is _sre.SUBPATTERN:
        items = list(av[-1])
        if items and all(item_op is _sre.LITERAL for item_op, _ in items):
            return "".join(chr(code) for _, code in items)
    return None


def _needed(items: list[tuple[Any, Any]]) -> frozenset[str] | None:
    """`required_literals` of a sequence of parsed items."""
    best: frozenset[str] | None = None
    run: list[str] = []
    for op, av in items:
        if op is _sre.LITERAL:
            run.append(chr(av))
            continue
        if op is _sre.AT:  # zero-width (\b, ^, $): the characters on both sides are still next to each other
            continue
        exact = _exact(op, av)
        if exact is not None:
            run.append(exact)
            continue
        if run:
            best = _better(best, frozenset({"".join(run)}))
            run = []
        best = _better(best, _needed_by(op, av))
    if run:
        best = _better(best, frozenset({"".join(run)}))
    return best


def _needed_by(op: Any, av: Any) -> frozenset[str] | None:
    """`required_literals` of one parsed item that is not a literal character."""
    if op is _sre.SUBPATTERN:
        return _needed(list(av[-1]))
    if op is _sre.ATOMIC_GROUP:
        return _needed(list(av))
    if str(op) in _REPEATS:
        low, _high, item = av
        return _needed(list(item)) if low >= 1 else None
    if op is _sre.BRANCH:
        union: set[str] = set()
        for branch in av[1]:
            found = _needed(list(branch))
            if not found:
                return None  # one branch may match without any literal
            union |= found
        return frozenset(union)
    if op is _sre.IN:
        if len(av) <= 8 and all(item_op is _sre.LITERAL for item_op, _ in av):
            return frozenset(chr(code) for _, code in av)
    return None


class KeyIndex:
    """Every key of a book in one automaton: `candidates(text)` are the positions of the items one of whose keys
    may match `text` (a superset of those that do; see the module docstring). Built once per book version.

    `whole_words` (per item: True, False, or None for the book's setting) lets the index leave out an ASCII key's
    occurrence inside a longer word for the items that match whole words only: in a big book many keys occur inside
    other words of a turn ("Kalo" in "Kalomira"), and each such item would be scored for nothing."""

    def __init__(
        self, keys_per_item: Sequence[Iterable[str]], whole_words: Sequence[bool | None] | None = None
    ) -> None:
        self.size = len(keys_per_item)
        by_key: dict[str, list[int]] = {}
        # per case-folded key: 1 | 2 when a match needs a word boundary on its left | right (`_plain_search`: where
        # the key's own, not its folded, end is an ASCII word character; keys folding alike need it only if each
        # does); 0 for a regex's required literal, which a match may hold anywhere
        bounds: dict[str, int] = {}
        regex_items: list[int] = []
        literal_items: list[int] = []
        for position, keys in enumerate(keys_per_item):
            for keyword in keys:
                key = keyword.strip()
                if not key:
                    continue
                found = REGEX_KEY.match(key)
                if found:
                    literals = required_literals(found.group(1), _regex_flags(found.group(2)))
                    if literals is None:
                        regex_items.append(position)
                        continue
                    literal_items.append(position)
                    for literal in literals:
                        by_key.setdefault(literal, []).append(position)
                        bounds[literal] = 0
                    continue
                folded = key.casefold()
                by_key.setdefault(folded, []).append(position)
                need = (key[0] in _WORD_CHAR) | (key[-1] in _WORD_CHAR) << 1
                if need and not key.isascii() and has_unspaced_script(key):
                    need = 0
                bounds[folded] = bounds.get(folded, 3) & need
        self.regex_items: frozenset[int] = frozenset(regex_items)
        # tried on a text holding a character whose case-folding is not what IGNORECASE matches (`_FOLD_EXCEPTIONS`)
        self._literal_regex_items: frozenset[int] = frozenset(literal_items)
        self.keys = len(by_key)
        self._items: list[list[int]] = [
            positions if len(positions) == 1 else list(dict.fromkeys(positions)) for positions in by_key.values()
        ]
        self._bounds: list[int] = list(bounds.values())  # the same order as by_key's: each key set in both at once
        self._whole: Sequence[bool | None] = whole_words if whole_words is not None else [None] * self.size
        # every match, overlapping ones included (MatchKind.Standard): a key inside another key's match counts
        self._automaton = (
            ahocorasick_rs.AhoCorasick(list(by_key), matchkind=ahocorasick_rs.MatchKind.Standard) if by_key else None
        )

    def candidates(self, text: str, whole_words: bool = True) -> set[int]:
        """Positions of the items with a plain key or a regex key's required literal occurring in `text`
        (case-folded), or with a regex key that requires none. An occurrence inside a longer ASCII word counts only
        for the items that match anywhere (`whole_words`: the book's setting for items that do not say)."""
        found = set(self.regex_items)
        if self._literal_regex_items and any(c in text for c in _FOLD_EXCEPTIONS):
            found |= self._literal_regex_items
        if self._automaton is None or not text:
            return found
        folded = text.casefold()
        # the folded text's offsets are the text's only when folding kept every character one character
        aligned = len(folded) == len(text)
        size = len(text)
        for key, start, end in self._automaton.find_matches_as_indexes(folded, overlapping=True):
            items = self._items[key]
            need = self._bounds[key]
            if (
                not need
                or not aligned
                or (
                    (not need & 1 or start == 0 or text[start - 1] not in _WORD_CHAR)
                    and (not need & 2 or end == size or text[end] not in _WORD_CHAR)
                )
            ):
                found.update(items)
                continue
            # inside a longer word: only the items that match anywhere
            whole = self._whole
            found.update(p for p in items if whole[p] is False or (whole[p] is None and not whole_words))
        return found
