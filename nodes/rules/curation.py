"""Curated presentation of retrieved memories (issue 26), as pure rules.

- **Each exchange once** (seed 001 避免重复对话的机制: 记忆重复注入 / 历史消息重复): an exchange of the dialogue
  (one turn: the user's line, the host's lines, the reply) can reach the prompt as a line of the recent-dialogue
  window, as dialogue-record entries (one per line, `nodes.rules.record`), as the turn's curated memory
  (``第N轮：…``, `rules.director.turn_event_text`) or as a fact a consolidation made from it. `exchange_source`
  names what of which turn an item holds; `drop_repeated_exchanges` keeps the best-ranked item of each and drops
  every later one that holds a line already presented (or the whole turn), naming what it repeated.
- **Witnesses** (seed 000: who sees which line): each line has an identity — ``role:<role_id>`` for a character,
  ``npc:<script_role_id>`` for a script NPC, ``user``, ``narration`` — and a memory records who was present
  (`scene_witnesses`). A character or NPC recalls only what it witnessed (`witnessed_by`); a memory stored before
  witnesses were recorded has none and is everyone's.
- **Private memories** (seed 004 记忆类型, type ``internal``): the character's own unspoken thoughts, presented in a
  block of their own (`PRIVATE_HEADER`) that tells the model they are never said aloud unless the story makes the
  character reveal them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from personalab.nodes.rules.record import record_text, speaker_of

USER = "user"
NARRATION = "narration"
WHOLE_TURN = -1  # an item that holds every line of its turn (the turn's memory)
SCENE_LINES = 6  # the lines before a turn whose speakers count as present at it (witnesses; the prompt's relations)

# the private block's header and its instruction (seed 004 internal memories; kept apart from prompts.py's text)
PRIVATE_HEADER = "=== 内心（只有你自己知道） ==="
PRIVATE_NOTE = "以下是你内心的想法和秘密，只有你自己知道：不要说出口，除非剧情发展让你主动吐露。"
PRIVATE_TYPES = frozenset({"internal"})


def line_identity(line: Mapping[str, Any]) -> str | None:
    """Seed 000's identity of a line's speaker: ``user``, ``role:<role_id>``, ``npc:<script_role_id>`` or
    ``narration``; None for a system line (a setting, nobody's presence)."""
    attribute = line.get("attribute")
    if attribute == "user":
        return USER
    if attribute == "system":
        return None
    if line.get("role_id") is not None:
        return f"role:{int(line['role_id'])}"
    if line.get("script_role_id"):
        return f"npc:{str(line['script_role_id']).strip()}"
    return NARRATION


def character_identity(role_id: int | None) -> str:
    """The identity of an instance's character (``role:0`` for an instance without a role)."""
    return f"role:{int(role_id or 0)}"


def npc_identity(script_role_id: str) -> str:
    return f"npc:{script_role_id.strip()}"


def scene_witnesses(lines: Iterable[Mapping[str, Any]], character_role_id: int | None) -> list[str]:
    """Who was present at an exchange: the instance's character (it is in every turn of its instance), the user
    and every speaker of `lines` (the turn's lines and the scene's recent ones before them), sorted."""
    present = {character_identity(character_role_id), USER}
    for line in lines:
        who = line_identity(line)
        if who is not None:
            present.add(who)
    return sorted(present)


def witnessed_by(witnesses: Sequence[str] | None, who: str | None) -> bool:
    """Whether `who` witnessed (or was told) a memory with `witnesses`; no witnesses recorded: everyone's."""
    return who is None or not witnesses or who in witnesses


# --------------------------------------------------------------------------------------------------
# Each exchange once


@dataclass(frozen=True)
class ExchangeSource:
    """What of which exchange an item holds: the `turn` and a line id (`WHOLE_TURN`: all of the turn)."""

    turn: int
    line: int

    def overlaps(self, other: ExchangeSource) -> bool:
        return self.turn == other.turn and (WHOLE_TURN in (self.line, other.line) or self.line == other.line)


def is_turn_memory(content: str, turn: int) -> bool:
    """The turn's own memory (`rules.director.turn_event_text`: ``第N轮：…``, ``Turn N: … said`` in English)."""
    text = content.lstrip()
    return text.startswith(f"第{turn}轮：") or text.startswith(f"Turn {turn}: ")


_TURN_TEXT = re.compile(r"^(?:- )?第(\d+)轮：(.+?)说「(.*?)」；(.+?)回应「(.*)」")
_TURN_TEXT_EN = re.compile(r'^(?:- )?Turn (\d+): (.+?) said "(.*?)"; (.+?) answered "(.*)"')  # issue 28


_RECOLLECTION = re.compile(r"第\d+轮：[^「\n]{1,24}说「|Turn \d+: [^\"\n]{1,24} said \"")


def recollects_memory(line: str) -> bool:
    """A line of the character's that recites a turn's memory (``第N轮：A说「…」``, ``Turn N: A said "…"``): the
    known-lines block (已知信息, seed 001) leaves it out — it is a memory quoted, not the character's phrasing to
    avoid, and the exchange it quotes would reach the prompt a second time (issue 26: each exchange once)."""
    return _RECOLLECTION.search(line) is not None


def turn_memory_lines(content: str) -> list[str]:
    """The lines a turn's memory (``第N轮：A说「…」；B回应「…」``) holds, as the record writes them (``A：…``);
    an English one's (``Turn N: A said "…"; B answered "…"``) as ``A: …``."""
    match = _TURN_TEXT.match(content.strip())
    if match:
        return [f"{match.group(2)}：{match.group(3)}", f"{match.group(4)}：{match.group(5)}"]
    match = _TURN_TEXT_EN.match(content.strip())
    if match:
        return [f"{match.group(2)}: {match.group(3)}", f"{match.group(4)}: {match.group(5)}"]
    return []


def once_per_turn(blocks: Sequence[tuple[str, list[str]]]) -> list[tuple[str, list[str]]]:
    """The retrieved region's blocks (title, items) with each turn's memory (``第N轮：…``, a memory or a director
    event) once: a later item of a turn an earlier item presented is left out."""
    seen: set[str] = set()
    out: list[tuple[str, list[str]]] = []
    for title, items in blocks:
        kept = []
        for text in items:
            match = re.match(r"^(?:- )?(?:第(\d+)轮：|Turn (\d+): )", text)
            if match:
                number = match.group(1) or match.group(2)
                if number in seen:
                    continue
                seen.add(number)
            kept.append(text)
        out.append((title, kept))
    return out


def exchange_source(item: Mapping[str, Any]) -> ExchangeSource | None:
    """The exchange a retrieved memory (`RetrievedItem.to_dict()`) holds: a dialogue-record entry its line, the turn's
    memory the whole turn, a fact made from a line (``source_line_id`` in its data) that line; None for anything
    else (a relationship change, a summary, an entry the user wrote)."""
    turn = item.get("turn")
    if item.get("kind") != "memory" or not isinstance(turn, int):
        return None
    if item.get("type") == "record" and item.get("line_id") is not None:
        return ExchangeSource(turn, int(item["line_id"]))
    if is_turn_memory(str(item.get("content") or ""), turn):
        return ExchangeSource(turn, WHOLE_TURN)
    if "fact" in (item.get("tags") or ()) and item.get("line_id") is not None:
        return ExchangeSource(turn, int(item["line_id"]))  # a consolidated fact: the user's line it came from
    return None


def in_recall_window(source: ExchangeSource, *, turn: int, window_turns: int) -> bool:
    """An exchange the prompt's recent dialogue still has (`turn_in_recall_window`)."""
    return turn_in_recall_window(source.turn, turn=turn, window_turns=window_turns)


def recall_window_turns(turn: int, window_turns: int, step: int = 1, floor: int | None = None) -> int:
    """The turns before `turn` that the prompt's recent dialogue keeps (seed 002 Prompt区域分配: the last
    `window_turns`). With `step` > 1 the window's first turn moves `step` turns at a time, so it holds
    `window_turns` to `window_turns + step - 1` turns: between two moves the dialogue's start in the prompt stays
    the same and a model server's prompt cache (which reuses a prompt only up to its first change) keeps it, where
    a window moving every turn changes the prompt near its top every turn (issue 30: 45 % reused instead of 80 %).

    `floor`: the first turn the window may keep (`recall_floor_turn`), set by a turn whose prompt kept fewer turns so
    that a slow model could answer it in time; the turns after it start their dialogue there too (the same start, so
    the server's cache keeps it) until the regular window's start passes it."""
    previous = turn - 1
    if step <= 1 or previous <= window_turns:
        turns = window_turns
    else:
        turns = window_turns + (previous - window_turns) % step
    if floor is not None and 0 < floor < turn:
        turns = min(turns, turn - floor)
    return turns


def turn_in_recall_window(said_at: int, *, turn: int, window_turns: int) -> bool:
    """Whether turn `said_at` is in the prompt's recent dialogue at `turn`: the middle region keeps the last
    `window_turns` turns before the current one (`prompt_assembly`'s `max_turns`; `recall_window_turns` of the
    turn), turns `turn - window_turns` to `turn - 1` (seed 002 Prompt区域分配)."""
    return said_at >= turn - window_turns


def window_texts(
    history: Sequence[Mapping[str, Any]], character: Mapping[str, Any], user_name: str | None, turns: int
) -> list[str]:
    """The lines of the prompt's recall window (the last `turns` turns before the current one, and the current line)
    as the dialogue record writes them (``speaker：text``, in the instance's language), so a memory that repeats one
    of them is not presented again."""
    language = character.get("language")
    window: list[Mapping[str, Any]] = []
    users = 0
    replied = True  # going back: a reply seen since the last turn's start
    for line in reversed(history):
        if line.get("attribute") == "user":
            # user lines in a row are one turn, as the prompt counts them (a cut turn's line has no reply)
            users += 1 if replied else 0
            replied = False
            if users > turns + 1:  # the middle region's `turns` turns, then the current one (`turn_in_recall_window`)
                break
        elif line.get("attribute") != "system":
            replied = True
        window.append(line)
    return [
        record_text(
            speaker_of(
                line,
                character_role_id=character.get("role_id"),
                character_name=character.get("name") or "",
                user_name=user_name,
                language=language,
            ),
            str(line.get("content") or ""),
            language,
        )
        for line in window
        if line.get("attribute") != "system" and str(line.get("content") or "").strip()
    ]


_SPEAKER = re.compile(r"^[^：\n]{1,24}：")
_SPEAKER_EN = re.compile(r"^[^:\n]{1,24}: ")  # an English instance's entries (issue 28)


def record_parts(content: str) -> tuple[list[str], str]:
    """A dialogue-record entry's (context lines, own line): its stored text is the lines said just before it,
    each ``speaker：text``, then its own ``speaker：text`` (`nodes.rules.record`; ``speaker: text`` in an English
    instance, read when no line has the full-width colon); the own line runs from the last line that names a
    speaker to the end (a line may span several)."""
    lines = content.split("\n")
    starts = [index for index, line in enumerate(lines) if _SPEAKER.match(line)]
    if not starts:
        starts = [index for index, line in enumerate(lines) if _SPEAKER_EN.match(line)]
    if not starts:
        return [], content.strip()
    own = starts[-1]
    return [line.strip() for line in lines[:own] if line.strip()], "\n".join(lines[own:]).strip()


def same_words(text: str) -> str:
    """`text` with its whitespace normalised: how lines are compared for "said already"."""
    return " ".join(text.split())


QUOTE_MIN_CHARS = 6  # a shorter line ("好的") is in too many others to count as quoted


def quoted_in(own: str, said: Mapping[str, Any], *, others_only: bool = False) -> Any:
    """What an item's own line (``speaker：text``) repeats by quoting a presented line's text whole, or a presented
    line quoting it whole (a reply in the recent dialogue that echoed it), at least `QUOTE_MIN_CHARS` characters;
    or None. `others_only`: a presented line of the same speaker does not count (a piece of the very reply)."""
    speaker, _, text = own.partition("：") if "：" in own else ("", "", own)
    for line, key in said.items():
        quoted = line.split("：", 1)[-1]
        if quoted == text:
            continue
        if others_only and line.split("：", 1)[0] == speaker:
            continue
        if (len(quoted) >= QUOTE_MIN_CHARS and quoted in text) or (len(text) >= QUOTE_MIN_CHARS and text in quoted):
            return key
    return None


def drop_repeated_exchanges(
    items: Sequence[Mapping[str, Any]],
    *,
    turn: int,
    window_turns: int,
    window_lines: Iterable[str] = (),
    closed_lines: Iterable[str] = (),
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Any]]:
    """Each exchange at most once (best first): returns (kept, duplicates, ids in the recall window).

    An item whose exchange is still in the recent-dialogue window is left out (the model reads it there). An item
    that holds a line already presented — by a better-ranked item (its own line or its context), by the turn's
    memory presented whole, or by the recall window (`window_lines`, each ``speaker：text``) — is a duplicate, named
    with what it repeats; so is one that quotes such a line whole. `closed_lines` (a fact a later one replaced) are
    treated as presented: no entry shows them again as its context. A record entry whose own line is new keeps it, its context without the lines already
    presented (the item says which it left out: `trimmed_context`)."""
    kept: list[dict[str, Any]] = []
    duplicates: list[dict[str, Any]] = []
    in_window: list[Any] = []
    presented: list[tuple[ExchangeSource, Any]] = []
    said: dict[str, Any] = {same_words(text): "recall_window" for text in window_lines if text.strip()}
    # lines a later fact made untrue (issue 26): never presented again as another entry's context
    for text in closed_lines:
        if text.strip():
            said.setdefault(same_words(text), "no_longer_true")
    # a consolidated fact is the curated form of its line: it is presented before the record or turn memory holding
    # the same line (which then count as its duplicates); otherwise best first
    for item in sorted(items, key=lambda one: 0 if "fact" in (one.get("tags") or ()) else 1):
        source = exchange_source(item)
        if source is None:
            kept.append(dict(item))
            continue
        if in_recall_window(source, turn=turn, window_turns=window_turns):
            in_window.append(item["id"])
            continue
        repeated = next((key for seen, key in presented if seen.overlaps(source)), None)
        content = str(item.get("content") or "")
        whole = source.line == WHOLE_TURN
        context, own = record_parts(content) if item.get("type") == "record" else ([], "")
        if "fact" in (item.get("tags") or ()):  # a consolidated fact holds its line: ``【slot】speaker：text``
            own = re.sub(r"^【[^】]{1,12}】", "", content.strip())
        if repeated is None and own:
            repeated = said.get(" ".join(own.split()))
        if repeated is None and own:  # a line quoting one already presented (a reply that echoes a memory)
            repeated = quoted_in(same_words(own), said)
        if repeated is None and whole:  # the turn's memory repeats (or quotes) a line presented already
            lines = list(map(same_words, turn_memory_lines(content)))
            repeated = next((said[key] for key in lines if key in said), None)
            # the reply's own speaker's lines do not count as quoted: the reply of the turn just before this one is
            # in the recall window in pieces (one line a segment) that the whole reply holds, while its user's line,
            # the exchange's news, is not there — that turn's memory is no duplicate (a reply quoting someone
            # else's presented line, a memory it echoes, still is)
            quotes = (quoted_in(key, said, others_only=index > 0) for index, key in enumerate(lines))
            repeated = repeated or next((q for q in quotes if q is not None), None)
        if repeated is not None:
            duplicates.append(
                {
                    "kind": item.get("kind"),
                    "id": item["id"],
                    "reason": "same_exchange",
                    "of": repeated,
                    "turn": source.turn,
                }
            )
            continue
        shown = dict(item)
        fresh = [line for line in context if same_words(line) not in said and quoted_in(same_words(line), said) is None]
        if len(fresh) < len(context):
            shown["content"] = "\n".join([*fresh, own])
            shown["trimmed_context"] = len(context) - len(fresh)
        for line in [*context, own, *(turn_memory_lines(content) if whole else [])]:
            if line:
                said.setdefault(same_words(line), item["id"])
        presented.append((source, item["id"]))
        kept.append(shown)
    return kept, duplicates, in_window


def is_private(item: Mapping[str, Any]) -> bool:
    """A memory the character keeps to itself (type ``internal``)."""
    return item.get("type") in PRIVATE_TYPES


# --------------------------------------------------------------------------------------------------
# Guidelines (seed 001 三层注入 1. Current Guidelines 指令/规则) and the 重要指令 block (BuildOptimizedSystemPrompt)

GUIDELINE_TAGS = frozenset({"指令", "规则", "指南", "guideline", "guidelines", "instruction", "instructions", "rule"})
IMPORTANT_HEADER = "=== 重要指令 ==="
# seed 001 避免重复的策略 3 (系统提示优化): the block after the memories, when the 已知信息 block is there
IMPORTANT_INSTRUCTIONS = (
    "请勿重复提及'已知信息'部分的内容",
    "重点关注'相关记忆'部分的内容",
    "如果用户询问你已知的事情，可以简短确认，但不要详细重复",
    "保持对话的自然流畅，避免机械重复",
)


def is_guideline(tag: str) -> bool:
    """A knowledge-library entry that is a rule for the character (its tag 指令 / 规则 / guideline …), injected in
    the 指令/规则 section, every turn, instead of as world knowledge."""
    return tag.strip().casefold() in GUIDELINE_TAGS
