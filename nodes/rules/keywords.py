"""Keyword extraction and CJK-safe tokenisation (seed 001 记忆条目数据结构 `keywords`, 关键词匹配算法, 记忆去重).

Pure functions, no I/O. Text is split into runs of Han characters and runs of everything else:
- Han runs go through jieba (never split on spaces: Chinese has none). `tokenize` uses jieba's search
  mode (``北京大学`` → ``北京``, ``大学``, ``北京大学``) so that a query word matches a longer memory word and
  the other way round; `tokenize(..., search=False)` uses the precise mode (one segmentation, for
  similarity).
- Other runs are split into words (Unicode letters and digits, apostrophes inside a word kept), lower-cased,
  possessive ``'s`` removed and lightly stemmed (``paintings`` → ``paint``), so that English queries match
  inflected forms.
Full-width punctuation and whitespace never become tokens. Stop words (a short English and Chinese
function-word list) are dropped.

The seed's `CalculateKeywordMatchScore` matches a keyword with `context.Contains(keyword)`. That is right
for Chinese (``种植`` in ``种植计划怎么样``) but wrong for English (``art`` in ``party``), so `keyword_in`
matches Chinese keywords as substrings and other keywords as whole (stemmed) words.
"""

from __future__ import annotations

import hashlib
import pkgutil
import re
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAN_RUN = re.compile(f"[{_HAN}]+")
_HAN_CHAR = re.compile(f"[{_HAN}]")
# A word of a non-Han run: letters/digits (any script but Han), apostrophes only between letters.
_WORD = re.compile(rf"[^\W_{_HAN}]+(?:['’][^\W_{_HAN}]+)*")

ENGLISH_STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before being below
    between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each
    few for from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself
    him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most
    mustn't my myself no nor not of off on once only or other ought our ours ourselves out over own same shan't
    she she'd she'll she's should shouldn't so some such than that that's the their theirs them themselves then
    there there's these they they'd they'll they're they've this those through to too under until up very was
    wasn't we we'd we'll we're we've were weren't what what's when when's where where's which while who who's
    whom why why's with won't would wouldn't you you'd you'll you're you've your yours yourself yourselves
    also just yeah yes oh ok okay really so will""".split()
)
CHINESE_STOPWORDS = frozenset(
    """的 了 着 过 是 在 和 与 及 或 也 就 都 而 又 还 把 被 让 给 对 从 向 于 以 之 其 这 那 这个 那个 这些 那些
    一个 一些 有 没 没有 不 吗 呢 吧 啊 呀 哦 嗯 哈 啦 嘛 么 得 地 所 为 为了 因为 所以 但是 但 如果 然后 可以
    就是 还是 什么 怎么 怎么样 自己 我们 你们 他们 她们 它们""".split()
)
STOPWORDS = ENGLISH_STOPWORDS | CHINESE_STOPWORDS

_MIN_STEM = 3


def has_han(text: str) -> bool:
    """Han characters (what jieba segments)."""
    return _HAN_CHAR.search(text) is not None


# scripts written without spaces between words (CJK ideographs and radicals, kana, Hangul, Han extensions): no
# whole-word matching there (seed 004 keyword triggers), a wider class than the Han that jieba segments
_UNSPACED = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff]")


def has_unspaced_script(text: str) -> bool:
    return _UNSPACED.search(text) is not None


def stem(word: str) -> str:
    """A light English suffix stripper (plural, -ing, -ed, -ly); consistency between query and memory
    matters, not linguistic accuracy. Non-ASCII words are returned unchanged."""
    if not word.isascii() or not word.isalpha() or len(word) <= _MIN_STEM:
        return word
    w = word
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("sses"):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > _MIN_STEM + 1:
        w = w[:-1]
    for suffix in ("ingly", "edly", "ing", "ied", "ed", "ly"):
        if w.endswith(suffix) and len(w) - len(suffix) >= _MIN_STEM:
            base = w[: -len(suffix)]
            if suffix == "ied":
                base += "y"
            elif len(base) > _MIN_STEM and base[-1] == base[-2] and base[-1] not in "lsz":
                base = base[:-1]  # running → run, planned → plan
            w = base
            break
    return w


def _latin_words(run: str) -> Iterable[str]:
    for match in _WORD.finditer(run):
        word = match.group().lower().replace("’", "'")
        if word.endswith("'s"):
            word = word[:-2]
        if word and word not in ENGLISH_STOPWORDS:
            yield stem(word)


class DictionaryKeeper(Protocol):
    """Where jieba's dictionaries are kept between processes in a form that loads fast (issue 29: a one-shot turn
    spent 0.65 s in jieba's `marshal.load` of its 498,113 words and prefixes, and 0.3 s parsing the IDF table).
    `stores.kept_dictionaries` keeps them in the data directory; without a keeper jieba loads its own."""

    def prefix_dictionary(self, jieba: ModuleType) -> None:
        """Give `jieba.dt` its prefix dictionary (`FREQ`, `total`, `initialized`) before its first segmentation,
        or let it load its own (`jieba.dt.initialize()`); called with `jieba.dt.lock` held."""

    def idf_table(self, build: Callable[[], IdfTable]) -> IdfTable:
        """The IDF table: the kept one, or `build()`'s (and keep it)."""


_keeper: DictionaryKeeper | None = None


def keep_dictionaries_with(keeper: DictionaryKeeper | None) -> None:
    """Load jieba's dictionaries through `keeper` from now on (None: jieba's own loading). Takes effect for
    the first segmentation and the first keyword extraction of the process."""
    global _keeper
    _keeper = keeper


@lru_cache(maxsize=1)
def _jieba() -> ModuleType:
    """jieba, imported by the first text with Han characters, not by importing this module: a command that only
    lists or shows rows imports the stores that use it and never segments a word (issue 29)."""
    import jieba

    jieba.setLogLevel(60)  # jieba prints its dictionary loading on stderr; the CLI must stay one-line on errors
    keeper = _keeper
    if keeper is not None:
        with jieba.dt.lock:  # jieba's own loading takes this lock: a segmentation elsewhere waits for this one
            # only jieba's default dictionary, and only before it is loaded (never replace a loaded one)
            if not jieba.dt.initialized and jieba.dt.dictionary is None:
                keeper.prefix_dictionary(jieba)
    return jieba


def prefix_dictionary_bytes(freq: dict[str, int], total: int) -> bytes:
    """jieba's prefix dictionary (word or prefix → frequency, 0 for a prefix) and its total as bytes that
    `prefix_dictionary_from_bytes` reads back: the words joined by newlines (no word holds one: jieba's
    dictionary is one word per line) and the frequencies as one int64 array, under a header with a checksum."""
    import array
    import zlib

    words = "\n".join(freq).encode("utf-8")
    counts = array.array("q", freq.values()).tobytes()
    payload = words + counts
    header = _PREFIX_HEADER.pack(_PREFIX_MAGIC, total, len(freq), len(words), zlib.crc32(payload))
    return header + payload


def prefix_dictionary_from_bytes(data: bytes) -> tuple[dict[str, int], int]:
    """The prefix dictionary and total that `prefix_dictionary_bytes` wrote; ValueError for anything else."""
    import array
    import zlib

    size = _PREFIX_HEADER.size
    if len(data) < size:
        raise ValueError("not a kept prefix dictionary (too short)")
    magic, total, count, words_length, checksum = _PREFIX_HEADER.unpack_from(data)
    payload = memoryview(data)[size:]
    if magic != _PREFIX_MAGIC or len(payload) != words_length + 8 * count or zlib.crc32(payload) != checksum:
        raise ValueError("not a kept prefix dictionary (header, length or checksum)")
    counts = array.array("q")
    counts.frombytes(payload[words_length:])
    words = str(payload[:words_length], "utf-8").split("\n") if count else []
    freq = dict(zip(words, counts, strict=True))
    if len(freq) != count:
        raise ValueError("not a kept prefix dictionary (a word listed twice)")
    return freq, total


_PREFIX_MAGIC = b"PLjieba1"
_PREFIX_HEADER = struct.Struct("<8sqqqI")


def _han_words(run: str, search: bool) -> Iterable[str]:
    jieba = _jieba()
    pieces = jieba.cut_for_search(run) if search else jieba.cut(run)
    for piece in pieces:
        if piece and piece not in CHINESE_STOPWORDS:
            yield piece


def tokenize(text: str, *, search: bool = True) -> list[str]:
    """Tokens of `text` for BM25 and similarity: jieba for Han runs, stemmed lower-case words otherwise,
    no punctuation, whitespace or stop words. `search=True` adds jieba's sub-words of long Han words."""
    return list(_tokens(text, search))


@lru_cache(maxsize=8192)
def _tokens(text: str, search: bool) -> tuple[str, ...]:
    # Cached: a retrieval tokenizes every candidate memory and the character's recent lines, and the same
    # ones come back turn after turn; jieba's segmentation of a text never changes within a process.
    # A text of several lines is cached line by line: a turn's context is the last lines of the dialogue,
    # all but one of them in the previous turn's context too. No token spans a line break, so the tokens
    # are the same either way.
    if "\n" in text:
        return tuple(token for line in text.split("\n") for token in _tokens(line, search))
    return _line_tokens(text, search)


def _line_tokens(text: str, search: bool) -> tuple[str, ...]:
    tokens: list[str] = []
    position = 0
    for match in _HAN_RUN.finditer(text):
        if match.start() > position:
            tokens.extend(_latin_words(text[position : match.start()]))
        tokens.extend(_han_words(match.group(), search))
        position = match.end()
    if position < len(text):
        tokens.extend(_latin_words(text[position:]))
    return tuple(tokens)


# What a question asks with, not what its answer holds (the answer to 我妹妹叫什么名字 says 林小满, never 什么):
# left out of a retrieval's keyword query. Chinese question words and recall framing (还记得…吗, …来着) are cut
# from the text before segmentation — search mode splits 什么时候 into 什么 + 时候, and 时候 alone is a content
# word (小时候, 过河的时候); English question words are stop words already, plus the framing of "what kind of",
# "is it likely that".
_QUESTION_ZH = re.compile(
    "记不记得|还记得|记得吗|什么时候|为什么|怎么样|怎么|什么|哪儿|哪里|哪个|哪些|哪|谁|多少|几时|几点|几岁|几次|几个"
    "|是不是|有没有|来着|吗|呢"
)
_QUESTION_EN = re.compile(r"\b(?:likely|kinds? of)\b", re.IGNORECASE)


def query_tokens(text: str) -> list[str]:
    """The keyword tokens of a query (`search_tokens`) without its question words (see `_QUESTION_ZH`): a
    question asks with them, its answer does not hold them. All of the query's tokens when nothing else is left."""
    tokens = search_tokens(_QUESTION_EN.sub(" ", _QUESTION_ZH.sub("，", text)))
    return tokens or search_tokens(text)


def search_tokens(text: str) -> list[str]:
    """The keyword-search tokens of a text: `tokenize`'s, plus the characters of its Chinese words of two or
    more characters (stop characters left out). 害怕 and 最怕, 失散 and 走散 share no word but a character:
    the characters let a question find a fact said in other words, the words still rank exact matches first."""
    tokens = tokenize(text)
    words = tokenize(text, search=False)  # one segmentation: each character of the text counted once
    return tokens + [c for word in words if len(word) > 1 and has_han(word) for c in word if c not in CHINESE_STOPWORDS]


OWN_TEXT_REPEAT = 2  # a memory with context: its own words are indexed this many times, the context's once


def memory_search_text(content: str, tags: Sequence[str] = (), context: str = "") -> str:
    """The space-separated keyword-search tokens of a memory (`search_tokens` of content + tags, after those of
    its context if any, its own words `OWN_TEXT_REPEAT` times: they weigh double in BM25)."""
    own = search_tokens(" ".join([content, *tags]))
    if not context:
        return " ".join(own)
    return " ".join([*search_tokens(context), *own * OWN_TEXT_REPEAT])


def token_set(text: str) -> frozenset[str]:
    """The precise-mode token set of `text` (for similarity between two texts)."""
    return frozenset(tokenize(text, search=False))


def jaccard(a: frozenset[str] | set[str], b: frozenset[str] | set[str]) -> float:
    """|a ∩ b| / |a ∪ b| (seed 001 `CalculateTextSimilarity`, on CJK-safe tokens); 0 when both are empty."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def text_similarity(a: str, b: str) -> float:
    return jaccard(token_set(a), token_set(b))


_IDF_LINE = re.compile(r"^[ \t]*(\S+) (\S+)[ \t\r]*$", re.MULTILINE)  # jieba's "word idf" lines


def word_hash(word: str) -> int:
    """A 64-bit hash of `word` that is the same in every process (Python's `hash` of a str is salted per
    process), so that a table of hashes can be kept on disk."""
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


class IdfTable:
    """jieba's IDF table (`jieba/analyse/idf.txt`, 270,000 words), held compactly: the words' hashes sorted in one
    array and their IDFs in another (4 MiB), looked up by bisection. Importing `jieba.analyse` for it cost a process
    ~96 MiB for good: its `TFIDF` keeps the table as a dict of 270,000 str → float (~43 MiB), and it imports
    `jieba.posseg`, whose part-of-speech tables (~53 MiB) nothing here uses (issue 26: that load landed in `bench
    retrieval`'s growth on the first insert). Same values as jieba's dict: a word listed twice keeps its last IDF,
    and the median is jieba's (`sorted(values)[n // 2]`). Two words sharing a 64-bit hash (odds ~1e-9 for the table)
    would share an IDF. The hashes are `word_hash`'s, the same in every process: `to_bytes` / `from_bytes` keep the
    parsed table (parsing the text costs a new process ~0.4 s; reading the bytes back, milliseconds)."""

    def __init__(self, hashes: np.ndarray, values: np.ndarray) -> None:
        """From sorted unique hashes and their IDFs (`parse` and `from_bytes` make them)."""
        import numpy as np  # here, not at the module's import: listing commands import this module (issue 29)

        self._hashes, self._values = hashes, values
        self.median = float(np.sort(values)[len(values) // 2]) if len(values) else 0.0
        self.size = len(hashes)

    @classmethod
    def parse(cls, text: str) -> IdfTable:
        """The table of jieba's `word idf` lines."""
        import numpy as np

        # line by line (a regex over the text: no list of 270,000 lines, no copy of the text)
        rows = np.fromiter(
            ((word_hash(m[1]), float(m[2])) for m in _IDF_LINE.finditer(text)),
            dtype=[("hash", np.int64), ("idf", np.float64)],
        )
        hashes, values = rows["hash"], rows["idf"]
        order = np.argsort(hashes, kind="stable")  # a repeated word's last line last
        hashes, values = hashes[order], values[order]
        # keep each word's last IDF, as jieba's dict does
        last = np.append(hashes[1:] != hashes[:-1], True)[: len(hashes)]
        return cls(np.ascontiguousarray(hashes[last]), np.ascontiguousarray(values[last]))

    def to_bytes(self) -> bytes:
        """The table as bytes for `from_bytes`: a header, the hashes (int64) and the IDFs (float64)."""
        import zlib

        payload = self._hashes.astype("<i8").tobytes() + self._values.astype("<f8").tobytes()
        return _IDF_HEADER.pack(_IDF_MAGIC, self.size, zlib.crc32(payload)) + payload

    @classmethod
    def from_bytes(cls, data: bytes) -> IdfTable:
        """The table `to_bytes` wrote; ValueError for anything else."""
        import zlib

        import numpy as np

        size = _IDF_HEADER.size
        if len(data) < size:
            raise ValueError("not a kept IDF table (too short)")
        magic, count, checksum = _IDF_HEADER.unpack_from(data)
        payload = memoryview(data)[size:]
        if magic != _IDF_MAGIC or len(payload) != 16 * count or zlib.crc32(payload) != checksum:
            raise ValueError("not a kept IDF table (header, length or checksum)")
        hashes = np.frombuffer(payload, dtype="<i8", count=count)
        values = np.frombuffer(payload, dtype="<f8", count=count, offset=8 * count)
        if count and not bool(np.all(hashes[1:] > hashes[:-1])):
            raise ValueError("not a kept IDF table (hashes not sorted)")
        return cls(hashes, values)

    def get(self, word: str, default: float) -> float:
        """The IDF of `word`, `default` for a word not in the table."""
        key = word_hash(word)
        at = int(self._hashes.searchsorted(key))
        return float(self._values[at]) if at < self.size and self._hashes[at] == key else default


_IDF_MAGIC = b"PLidf001"
_IDF_HEADER = struct.Struct("<8sqI")


def _parse_jiebas_idf() -> IdfTable:
    # jieba's own data file, read as jieba reads its dictionary (package data); not through `jieba.analyse`
    data = pkgutil.get_data(_jieba().__name__, "analyse/idf.txt")
    return IdfTable.parse((data or b"").decode("utf-8"))


@lru_cache(maxsize=1)
def _idf() -> tuple[IdfTable, float]:
    keeper = _keeper
    table = keeper.idf_table(_parse_jiebas_idf) if keeper is not None else _parse_jiebas_idf()
    return table, table.median


def _keyword_candidates(text: str) -> list[str]:
    """Precise-mode words that can be keywords: Han words of 2+ characters, other words of 3+ characters
    or numbers of 2+ digits, lower-case, unstemmed (they are shown to users)."""
    words: list[str] = []
    position = 0

    def latin(run: str) -> None:
        for match in _WORD.finditer(run):
            word = match.group().lower().replace("’", "'")
            if word.endswith("'s"):
                word = word[:-2]
            if word in ENGLISH_STOPWORDS:
                continue
            if (word.isdigit() and len(word) >= 2) or (not word.isdigit() and len(word) >= 3):
                words.append(word)

    for match in _HAN_RUN.finditer(text):
        latin(text[position : match.start()])
        words.extend(w for w in _jieba().cut(match.group()) if len(w) >= 2 and w not in CHINESE_STOPWORDS)
        position = match.end()
    latin(text[position:])
    return words


def extract_keywords(text: str, top_k: int = 8) -> list[str]:
    """The `top_k` keywords of `text` by TF-IDF (jieba's IDF table for Chinese, its median IDF for other
    words), most important first, ties in order of first appearance (seed 001 数据流设计: 提取关键词)."""
    words = _keyword_candidates(text)
    if not words or top_k <= 0:
        return []
    idf, median = _idf()
    counts = Counter(words)
    first = {word: index for index, word in reversed(list(enumerate(words)))}
    ranked = sorted(counts, key=lambda w: (-counts[w] * idf.get(w, median), first[w]))
    return ranked[:top_k]


@dataclass(frozen=True)
class MatchText:
    """A context prepared once for many keyword matches: lower-cased text and its search-mode tokens."""

    lower: str
    tokens: frozenset[str]

    @classmethod
    def of(cls, text: str) -> MatchText:
        return cls(text.lower(), frozenset(tokenize(text)))


def keyword_in(keyword: str, context: MatchText) -> bool:
    """Whether `keyword` occurs in `context`: Chinese keywords as substrings (the seed's `Contains`),
    other keywords as whole stemmed words (all of a multi-word keyword's words)."""
    keyword = keyword.strip().lower()
    if not keyword:
        return False
    if has_han(keyword):
        return keyword in context.lower
    words = _word_tokens(keyword)
    return bool(words) and all(word in context.tokens for word in words)


@lru_cache(maxsize=65536)
def _word_tokens(keyword: str) -> tuple[str, ...]:
    # Keywords repeat across memories and retrievals: stem each one once per process.
    return tuple(tokenize(keyword))


def keyword_match_score(keywords: Sequence[str], context: MatchText) -> float:
    """Seed 001 `CalculateKeywordMatchScore`: the share of `keywords` found in the context, 0 without keywords."""
    if not keywords:
        return 0.0
    return sum(1 for keyword in keywords if keyword_in(keyword, context)) / len(keywords)


def count_hits(words: Iterable[str], context: MatchText) -> int:
    """How many of `words` occur in the context (scene keywords, tags)."""
    return sum(1 for word in words if keyword_in(word, context))
