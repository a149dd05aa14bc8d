"""Injection order and one token budget (seed 001 智能注入系统 / SmartInjectionManager).

The seed's order: 1. Current Guidelines (指令/规则), 2. World Knowledge (常识/背景), 3. Character Memories
(角色记忆). `plan_injection` fills one token budget in that order, item by item, and records every item it
leaves out and why (empty, duplicate, over budget) so the retrieval debug can show it.

Decided here:
- Items are given ranked (best first) within their section; an item that does not fit is skipped and
  the next ones are still tried, so a short memory can use what a long one could not.
- Tokens are counted with langchain-core's `count_tokens_approximately` on the assembled text, at
  `CHARS_PER_TOKEN` = 1.5 characters per token (the team's default in `nodes.rules.prompt_assembly.RegionBudgets`:
  langchain's default of 4 is for English and would let Chinese text overrun the budget ~2.5x; pass
  `token_counter` to count otherwise). An item costs what it adds to the count of its position's text (its line, plus the section header
  and `【group】` line it opens), so the included items' costs add up exactly to `tokens_used`.
- A world-book entry may ask for the `user` or `assistant` position (seed 004 injectPosition): it is
  rendered into that position's text under the same section header; the budget is shared by all positions.
- The world-knowledge section holds the knowledge library's top entries (seed 001, `[tag] content`, right
  under the header as the seed's block has them), then the fired world-book entries under their
  `【世界书】` heading(s), constant ones first. The world book's own budget (`WorldbookConfig.budget_tokens`:
  SillyTavern's share of the context, default 25 %, and / or seed 004 maxTotalLength as a cap) caps its share;
  over it, keyed entries go before constant ones (issue 15).
- Items with a `group` are shown under a `【group】` line; put ungrouped items of a section first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from langchain_core.messages.utils import count_tokens_approximately
from personalab.nodes.rules.character import substitute
from personalab.nodes.rules.curation import IMPORTANT_HEADER, PRIVATE_HEADER, turn_memory_lines
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.keywords import extract_keywords
from personalab.nodes.rules.knowledge import ScoredKnowledge, format_knowledge_line
from personalab.nodes.rules.prompts import KNOWN_INFO_HEADER, PERSONA_HISTORY_HEADER
from personalab.nodes.rules.request_catalog import requests_for
from personalab.nodes.rules.worldbook import (
    POSITIONS,
    TriggeredEntry,
    WorldbookConfig,
    count_script_tokens,
    entry_position,
    group_label,
    render_entry,
)

# the seed's three sections, with its 已知信息(请勿重复) block (BuildOptimizedSystemPrompt) before the memories
# + the character's private memories (issue 26, type internal) in a block of their own, after what may be said
# + the character's archived persona changes (seed 002 历史人格变化事件) as its own history, not as what was said
SECTIONS = (
    "guidelines",
    "world_knowledge",
    "known",
    "character_memories",
    "persona_history",
    "private_memories",
    "important",
)
SECTION_HEADERS: Mapping[str, str] = {
    "guidelines": "=== 指令/规则 ===",
    "world_knowledge": "=== 世界知识 ===",
    "known": KNOWN_INFO_HEADER,
    "character_memories": "=== 相关记忆 ===",
    "persona_history": PERSONA_HISTORY_HEADER,
    "private_memories": PRIVATE_HEADER,
    "important": IMPORTANT_HEADER,  # seed 001's 重要指令, last (issue 26)
}

TokenCounter = Callable[[str], int]


CHARS_PER_TOKEN = 1.5


def count_tokens(text: str, chars_per_token: float = CHARS_PER_TOKEN) -> int:
    """Approximate tokens of a string: langchain-core's `count_tokens_approximately`, no per-message extra."""
    if not text:
        return 0
    return count_tokens_approximately([text], chars_per_token=chars_per_token, extra_tokens_per_message=0)


@dataclass(frozen=True)
class InjectionItem:
    """One line (or paragraph) to inject. `key` names it in the debug list (e.g. `knowledge:3`),
    `group` is an optional sub-heading shown as `【group】`, `position` is system / user / assistant."""

    key: str
    text: str
    score: float | None = None
    group: str | None = None
    position: str = "system"


@dataclass(frozen=True)
class IncludedItem:
    section: str
    key: str
    position: str
    tokens: int


@dataclass(frozen=True)
class SkippedItem:
    section: str
    key: str
    reason: str
    tokens: int = 0


@dataclass(frozen=True)
class InjectionPlan:
    """`texts[position]` is what to inject at that position ("" when nothing); `sections[name]` is the
    system-position text of one section; `tokens_used` <= `budget`."""

    budget: int
    tokens_used: int
    texts: Mapping[str, str]
    sections: Mapping[str, str]
    included: Sequence[IncludedItem]
    skipped: Sequence[SkippedItem]
    items: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Per section, its system-position items in order, each whole (a `【group】` heading is an item of its
    own): what the retrieved region lists, one item per entry even when an entry has several lines."""

    @property
    def system_text(self) -> str:
        return self.texts.get("system", "")

    def debug(self) -> list[dict[str, Any]]:
        """Plain dicts for the retrieval debug (state / CLI): included then skipped items."""
        rows: list[dict[str, Any]] = [
            {"section": i.section, "key": i.key, "position": i.position, "tokens": i.tokens, "status": "included"}
            for i in self.included
        ]
        rows += [
            {"section": s.section, "key": s.key, "tokens": s.tokens, "status": "skipped", "reason": s.reason}
            for s in self.skipped
        ]
        return rows


def _as_items(section: str, items: Iterable[InjectionItem | str]) -> list[InjectionItem]:
    out: list[InjectionItem] = []
    for index, item in enumerate(items, start=1):
        if isinstance(item, str):
            out.append(InjectionItem(key=f"{section}:{index}", text=item))
        else:
            out.append(item)
    return out


def plan_injection(
    guidelines: Iterable[InjectionItem | str] = (),
    world_knowledge: Iterable[InjectionItem | str] = (),
    character_memories: Iterable[InjectionItem | str] = (),
    *,
    budget: int,
    token_counter: TokenCounter = count_tokens,
    headers: Mapping[str, str] = SECTION_HEADERS,
    skipped: Iterable[SkippedItem] = (),
    known: Iterable[InjectionItem | str] = (),
    private_memories: Iterable[InjectionItem | str] = (),
    important: Iterable[InjectionItem | str] = (),
    persona_history: Iterable[InjectionItem | str] = (),
) -> InjectionPlan:
    """Seed 001 InjectSmartContext: guidelines → world knowledge → character memories in one budget.

    Plain strings are accepted as items (keys `guidelines:1`, ...). `skipped` carries items already left
    out upstream (e.g. by `world_knowledge_items`) so the debug list is complete."""
    if budget < 0:
        raise InvalidInput(f"budget is negative ({budget})")
    sections = {
        "guidelines": _as_items("guidelines", guidelines),
        "world_knowledge": _as_items("world_knowledge", world_knowledge),
        "known": _as_items("known", known),
        "character_memories": _as_items("character_memories", character_memories),
        "persona_history": _as_items("persona_history", persona_history),
        "private_memories": _as_items("private_memories", private_memories),
        "important": _as_items("important", important),
    }
    lines: dict[str, list[str]] = {p: [] for p in POSITIONS}
    section_lines: dict[str, list[str]] = {s: [] for s in SECTIONS}
    section_items: dict[str, list[str]] = {s: [] for s in SECTIONS}
    opened: dict[tuple[str, str], str | None] = {}  # (position, section) -> last group
    included: list[IncludedItem] = []
    dropped: list[SkippedItem] = list(skipped)
    seen: dict[str, str] = {}
    counts = dict.fromkeys(POSITIONS, 0)
    used = 0

    for section in SECTIONS:
        for item in sections[section]:
            text = item.text.strip()
            if item.position not in POSITIONS:
                raise InvalidInput(f"item {item.key}: position {item.position!r} is not one of {', '.join(POSITIONS)}")
            if not text:
                dropped.append(SkippedItem(section, item.key, "empty text"))
                continue
            if text in seen:
                dropped.append(SkippedItem(section, item.key, f"duplicate of {seen[text]}"))
                continue
            new_lines: list[str] = []
            slot = (item.position, section)
            if slot not in opened:
                if lines[item.position]:
                    new_lines.append("")
                new_lines.append(headers[section])
            if item.group and opened.get(slot) != item.group:
                new_lines.append(f"【{item.group}】")
            new_lines.append(text)
            cost = token_counter("\n".join([*lines[item.position], *new_lines])) - counts[item.position]
            if used + cost > budget:
                dropped.append(
                    SkippedItem(section, item.key, f"over budget: needs {cost} tokens, {budget - used} left", cost)
                )
                continue
            used += cost
            counts[item.position] += cost
            lines[item.position].extend(new_lines)
            if item.position == "system":
                section_lines[section].extend(line for line in new_lines if line != "")
                section_items[section].extend(line for line in new_lines[:-1] if line and line != headers[section])
                section_items[section].append(text)
            opened[slot] = item.group
            seen[text] = item.key
            included.append(IncludedItem(section, item.key, item.position, cost))

    texts = {p: "\n".join(lines[p]) for p in POSITIONS}
    return InjectionPlan(
        budget=budget,
        tokens_used=used,
        texts=texts,
        sections={s: "\n".join(section_lines[s]) for s in SECTIONS},
        included=included,
        skipped=dropped,
        items={s: list(section_items[s]) for s in SECTIONS},
    )


def knowledge_items(
    knowledge: Iterable[ScoredKnowledge], turn: int | None = None, language: str | None = None
) -> list[InjectionItem]:
    """Knowledge-library entries as world-knowledge items (`[tag] content`, key `knowledge:<id>`); an entry made
    from an event (`created_turn`) gets seed 001's time prefix relative to `turn` (`[tag] 3 轮前，content`)."""
    items = []
    for k in knowledge:
        entry = k.entry
        if turn is not None and entry.created_turn is not None and turn >= entry.created_turn:
            ago = time_ago(turns=turn - entry.created_turn, language=language)
            entry = entry.model_copy(update={"content": time_prefixed(entry.content.strip(), ago, language)})
        items.append(InjectionItem(f"knowledge:{k.entry.id}", format_knowledge_line(entry), k.score))
    return items


def worldbook_items(
    triggered: Iterable[TriggeredEntry],
    config: WorldbookConfig | None = None,
    *,
    token_counter: TokenCounter = count_script_tokens,
    char_name: str | None = None,
    user_name: str | None = None,
) -> tuple[list[InjectionItem], list[SkippedItem]]:
    """Fired world-book entries as items (template, group heading, position), in the given order, within the
    world book's budget (`WorldbookConfig.budget_tokens`: a share of the context and / or a cap, counted per
    script by `count_script_tokens`). Over budget, entries the recent text keyed go before constant ones, and
    the author's order (priority) decides among each; every entry left out is named with its reason.
    An entry is one item as written (never split into lines), with `{{char}}` / `{{user}}` replaced when
    `char_name` is given (issue 15)."""
    config = config or WorldbookConfig()
    budget = config.budget_tokens()
    fired = list(triggered)
    rendered: list[tuple[TriggeredEntry, str, str, str]] = []
    for t in fired:
        text = render_entry(t, config).strip()
        if char_name is not None:
            text = substitute(text, char_name, user_name)
        rendered.append((t, text, group_label(t, config), entry_position(t, config)))
    # who gets the budget first: keyed (any non-constant trigger) before constants, then priority, then score
    claim = sorted(
        range(len(rendered)),
        key=lambda i: (rendered[i][0].trigger == "constant", -rendered[i][0].entry.priority, -rendered[i][0].score),
    )
    kept: set[int] = set()
    skipped: list[SkippedItem] = []
    spent = 0
    groups: set[tuple[str, str]] = set()
    for index in claim:
        t, text, group, position = rendered[index]
        cost = token_counter(text + "\n")
        if (position, group) not in groups:
            cost += token_counter(f"【{group}】\n")
        if spent + cost > budget:
            kind = "constant" if t.trigger == "constant" else "keyed"
            skipped.append(
                SkippedItem(
                    "world_knowledge",
                    f"worldbook:{t.entry.id}",
                    f"over the world book's budget ({kind}, priority {t.entry.priority}): needs {cost} tokens, "
                    f"{budget - spent} of {budget} left",
                    cost,
                )
            )
            continue
        spent += cost
        groups.add((position, group))
        kept.add(index)
    items = [
        InjectionItem(f"worldbook:{t.entry.id}", text, t.score, group, position)
        for index, (t, text, group, position) in enumerate(rendered)
        if index in kept
    ]
    return items, skipped


def world_knowledge_items(
    knowledge: Iterable[ScoredKnowledge] = (),
    triggered: Iterable[TriggeredEntry] = (),
    config: WorldbookConfig | None = None,
    *,
    token_counter: TokenCounter = count_tokens,
    char_name: str | None = None,
    user_name: str | None = None,
    turn: int | None = None,
    language: str | None = None,
) -> tuple[list[InjectionItem], list[SkippedItem]]:
    """The world-knowledge section: the knowledge library's entries (time-prefixed relative to `turn`), then the
    fired world-book entries in the trigger's order (constants first). Returns (items, skipped) for
    `plan_injection(..., skipped=...)`."""
    wb_items, skipped = worldbook_items(triggered, config, char_name=char_name, user_name=user_name)
    return [*knowledge_items(knowledge, turn, language), *wb_items], skipped


@dataclass(frozen=True)
class Injection:
    """Convenience bundle for the prompt assembly: the plan plus the fired world-book entry ids that made it
    in (store them as `last_fired_turns` for temporal entries)."""

    plan: InjectionPlan
    fired_worldbook_ids: list[str] = field(default_factory=list)


def build_injection(
    *,
    guidelines: Iterable[InjectionItem | str] = (),
    knowledge: Iterable[ScoredKnowledge] = (),
    triggered: Iterable[TriggeredEntry] = (),
    character_memories: Iterable[InjectionItem | str] = (),
    known: Iterable[InjectionItem | str] = (),
    private_memories: Iterable[InjectionItem | str] = (),
    important: Iterable[InjectionItem | str] = (),
    persona_history: Iterable[InjectionItem | str] = (),
    budget: int,
    worldbook_config: WorldbookConfig | None = None,
    token_counter: TokenCounter = count_tokens,
    headers: Mapping[str, str] = SECTION_HEADERS,
    char_name: str | None = None,
    user_name: str | None = None,
    turn: int | None = None,
    language: str | None = None,
) -> Injection:
    """`world_knowledge_items` + `plan_injection` in one call (`char_name` / `user_name` fill the world book's
    `{{char}}` / `{{user}}`; `turn`, the current turn, dates knowledge made from events)."""
    world, skipped = world_knowledge_items(
        knowledge,
        triggered,
        worldbook_config,
        token_counter=token_counter,
        char_name=char_name,
        user_name=user_name,
        turn=turn,
        language=language,
    )
    plan = plan_injection(
        guidelines,
        world,
        character_memories,
        budget=budget,
        token_counter=token_counter,
        headers=headers,
        skipped=skipped,
        known=known,
        private_memories=private_memories,
        important=important,
        persona_history=persona_history,
    )
    fired = [i.key.split(":", 1)[1] for i in plan.included if i.key.startswith("worldbook:")]
    return Injection(plan, fired)


# --------------------------------------------------------------------------------------------------
# Mentioned means used (seed 001 MarkMemoryAsMentioned)

USED_KEYWORDS = 8  # a memory's key terms: its top TF-IDF keywords (`keywords.extract_keywords`)


def memory_used(content: str, reply: str, *, message: str = "", ignore: Iterable[str] = ()) -> list[str]:
    """The key terms of a memory that show it was used in `reply` (empty: not used). Seed 001 marks a memory
    as mentioned when the dialogue mentioned it, and a mentioned memory weighs less later (its mention
    penalty); a memory that was only retrieved, or only matched what the user said, was not mentioned.

    Rule: the memory's key terms are its top `USED_KEYWORDS` jieba TF-IDF keywords, without the names in
    `ignore` (the character's and the user's: every turn's memory has them); it was used when the reply
    contains one of them that the user's `message` does not (case-insensitive substring: Chinese has no
    spaces). So a reply that says where the sister lives, after a question about her name, used the memory
    that told it; a reply that only repeats the question's words did not."""
    said, asked = reply.lower(), message.lower()
    skip = {name.strip().lower() for name in ignore if name and name.strip()}
    return [term for term in key_terms(content) if term not in skip and term in said and term not in asked]


@lru_cache(maxsize=4096)
def key_terms(content: str) -> tuple[str, ...]:
    """A memory's key terms (lower case), kept per text: the same memories come back turn after turn."""
    return tuple(term.lower() for term in extract_keywords(content, USED_KEYWORDS))


def used_memory_ids(
    items: Iterable[Mapping[str, Any]], reply: str, *, message: str = "", ignore: Iterable[str] = ()
) -> list[int]:
    """Ids of the retrieved memories (`kind` "memory", as in the turn's `retrieved`) the reply used
    (`memory_used`), in their order."""
    names = list(ignore)
    return [
        int(item["id"])
        for item in items
        if item.get("kind") == "memory"
        and memory_used(str(item.get("content") or ""), reply, message=message, ignore=names)
    ]


# --------------------------------------------------------------------------------------------------
# Don't repeat (seed 001 避免重复: 已知信息(请勿重复))

KNOWN_LINES = 3  # the character's last lines listed in the 已知信息 block
KNOWN_CHARS = 80  # each cut to this many characters


def known_items(own_lines: Sequence[str], limit: int = KNOWN_LINES, chars: int = KNOWN_CHARS) -> list[InjectionItem]:
    """The 已知信息(请勿重复) block's items: the character's last `limit` lines (oldest first), each cut to
    `chars` characters, so the model sees what it said lately and does not say it again (seed 001)."""
    lines = [" ".join(line.split()) for line in own_lines if line and line.strip()][-limit:]
    return [
        InjectionItem(key=f"known:{index}", text=f"- {line[:chars]}{'…' if len(line) > chars else ''}")
        for index, line in enumerate(lines, start=1)
    ]


# --------------------------------------------------------------------------------------------------
# Time (seed 001 FormatMemoriesForInjection: 添加时间信息; 常识 时间前缀)


def time_ago(turns: int | None = None, seconds: float | None = None, language: str | None = None) -> str:
    """How long ago, in turns and in real time: "3 轮前，2 天前"; "" when neither is known. Turns: "本轮" for
    0; real time from a minute up (minutes, hours, days, months of 30 days, years of 365), left out under one.
    An English instance's (`language`, issue 28): "3 turns ago, 2 days ago", "this turn"."""
    if requests_for(language).language == "en":
        return _time_ago_en(turns, seconds)
    parts: list[str] = []
    if turns is not None and turns >= 0:
        parts.append("本轮" if turns == 0 else f"{turns} 轮前")
    if seconds is not None and seconds >= 60:
        for unit, size in (("年", 365 * 86400), ("个月", 30 * 86400), ("天", 86400), ("小时", 3600), ("分钟", 60)):
            if seconds >= size:
                parts.append(f"{int(seconds // size)} {unit}前")
                break
    return "，".join(parts)


def _time_ago_en(turns: int | None, seconds: float | None) -> str:
    parts: list[str] = []
    if turns is not None and turns >= 0:
        parts.append("this turn" if turns == 0 else f"{turns} turn{'s' if turns != 1 else ''} ago")
    if seconds is not None and seconds >= 60:
        for unit, size in (
            ("year", 365 * 86400),
            ("month", 30 * 86400),
            ("day", 86400),
            ("hour", 3600),
            ("minute", 60),
        ):
            if seconds >= size:
                count = int(seconds // size)
                parts.append(f"{count} {unit}{'s' if count != 1 else ''} ago")
                break
    return ", ".join(parts)


_ZH_UNITS = "年|个月|天|小时|分钟"
_EN_UNITS = "year|month|day|hour|minute"
TIME_AGO_RE = re.compile(
    rf"(?:本轮|\d+ 轮前|\d+ (?:{_ZH_UNITS})前)(?:，\d+ (?:{_ZH_UNITS})前)?"
    rf"|(?:this turn|\d+ turns? ago|\d+ (?:{_EN_UNITS})s? ago)(?:, \d+ (?:{_EN_UNITS})s? ago)?"
)
"""What `time_ago` writes, in either language: a memory line read without it is the same memory on every turn."""


def without_time(item: str) -> str:
    """A retrieved item without its how-long-ago part (`time_ago`, in `memory_line` or `time_prefixed`), spaces
    tidied: the same memory shown on two turns ("3 轮前" then "4 轮前") reads the same."""
    return " ".join(TIME_AGO_RE.sub("", item).split())


# Each line of the dialogue once (issue 26) across the retrieved region's blocks and the regions that stay from
# earlier turns (issue 30): a record entry carries two lines of context, so a line can reach the region in another
# entry's window, in the turn's memory (``第N轮：A说「…」``) or in a director's event after the entry about it.
_ITEM_MARK = re.compile(r"^\s*(?:\d+\.\s*)?(?:-\s*)?")  # a rendered region's ``1. - `` before an item
_EMPTY_BRACKETS = re.compile(r"\s*(?:（\s*）|\(\s*\))\s*$")  # what `without_time` leaves of ``（3 轮前）``
MIN_LINE_CHARS = 8  # shorter lines ("莱姆：嗯。", "Lin: Yes.") recur in unrelated exchanges: not taken as the same


def _lines_of(raw: str) -> set[str]:
    """The dialogue lines one line of text holds (`dialogue_lines`)."""
    line = _EMPTY_BRACKETS.sub("", without_time(_ITEM_MARK.sub("", raw, count=1)))
    return {part for part in turn_memory_lines(line) or [line] if len(part) >= MIN_LINE_CHARS}


def dialogue_lines(text: str) -> set[str]:
    """The lines `text` (a retrieved item, or a region as sent) holds, each as the record writes it (``莱姆：…``,
    ``Lin: …``) without its how-long-ago part; a turn's memory (``第N轮：A说「…」；B回应「…」``) as its two lines."""
    return {line for raw in text.splitlines() for line in _lines_of(raw)}


def _time_suffix(raw: str) -> str:
    """The how-long-ago part an item's last line ends with (``（3 轮前）``, `` (3 turns ago)``), or ""."""
    match = re.search(r"\s*[（(][^（）()]*[）)]\s*$", raw)
    return match.group() if match and TIME_AGO_RE.search(match.group()) else ""


def without_shown_lines(item: str, seen: set[str]) -> tuple[str, set[str]]:
    """`item` without the lines `seen` holds, and the dialogue lines of what is left: ("", ∅) when it tells nothing
    else (a one-line item — a turn's memory, a director's event — holding any of them is the same exchange); a record
    entry's window keeps its other lines, its list mark and how long ago (as `drop_repeated_exchanges` trims a context
    line the region shows)."""
    raws = [(raw, _lines_of(raw)) for raw in item.splitlines()]
    if len(raws) <= 1:
        lines = raws[0][1] if raws else set()
        return ("", set()) if lines & seen else (item, lines)
    kept = [(raw, lines) for raw, lines in raws if not lines & seen]
    left = set().union(*(lines for _, lines in kept))
    if len(kept) == len(raws):
        return item, left
    if not left:
        return "", set()
    texts = [raw for raw, _ in kept]
    first = raws[0][0]
    if texts[0] is not first:
        texts[0] = first[: len(first) - len(_ITEM_MARK.sub("", first, count=1))] + texts[0]
    suffix = _time_suffix(raws[-1][0])
    if suffix and not _time_suffix(texts[-1]):
        texts[-1] += suffix
    return "\n".join(texts), left


def once_per_line(blocks: Sequence[tuple[str, list[str]]], shown: Iterable[str] = ()) -> list[tuple[str, list[str]]]:
    """The retrieved region's blocks (title, items) with each line once: a line that an earlier item, or a region
    staying from an earlier turn (`shown`, `dialogue_lines` of its text), holds is left out of a later item
    (`without_shown_lines`), and an item left with nothing else goes."""
    seen = set(shown)
    out: list[tuple[str, list[str]]] = []
    for title, items in blocks:
        kept = []
        for item in items:
            rest, lines = without_shown_lines(item, seen)
            if rest:
                seen |= lines
                kept.append(rest)
        out.append((title, kept))
    return out


def memory_line(content: str, ago: str = "", language: str | None = None) -> str:
    """A memory as injected: `- content（3 轮前，2 天前）` (seed 001 FormatMemoriesForInjection); in an English
    instance `- content (3 turns ago)`."""
    if ago and requests_for(language).language == "en":
        return f"- {content} ({ago})"
    return f"- {content}（{ago}）" if ago else f"- {content}"


def time_prefixed(content: str, ago: str, language: str | None = None) -> str:
    """Seed 001's time prefix of a knowledge entry made from an event (creationTick ≥ 0): `2 天前，content`
    (`2 days ago, content` in an English instance)."""
    if ago and requests_for(language).language == "en":
        return f"{ago}, {content}"
    return f"{ago}，{content}" if ago else content
