"""Prompt regions under token budgets (seed 002 技术约束: LLM注意力机制的U型特点 / Prompt区域分配策略).

Order of the messages, one region after the other:
- head (0–4K): one system message — system instruction, the character's own system prompt, persona and
  description, core memory JSON, plot state JSON with every outline point and its status
  (全部主线大纲, JSON 提升权重);
- middle (4K–32K): the world setting (a system message), the character's example dialogue (a system message),
  then the recent dialogue (recall memory);
- retrieved (32K+): one system message of clearly titled blocks (RAG events, the director's two layers);
- tail: the turn's state (a system message: current turn, relationship JSON when given, then the relations with
  the other participants of the recent scene when any, issue 26), the character's
  post-history instructions (a system message), then the latest user input, a user message.

Stable first (issue 30): a local server (llama.cpp) keeps the last prompt's tokens and re-evaluates a prompt only
from its first change, at tens of tokens a second on a CPU. So everything that stays the same from turn to turn
comes first and in the same order — instruction, character, scenario, core memory and plot state (they change on
maintenance and plot turns only), world setting, example dialogue, then the dialogue, which only grows at its
end — and what changes every turn comes after it: the retrieved region, then the turn number and relationship
(which the seed does not place in the head: they opened the tail's state) and the input.

With `staying_memory` (issue 30, `PERSONALAB_MEMORY_STAYS`, nodes/rules/shown_memory.py) the retrieved regions of the
last turns stand in the middle, each right before its turn's user line where the server's cache read it, labelled
`retrieved`; the turn's own region after the dialogue then holds only what they do not (off by default: the seed's
order above).

A turn (for "the last 20 turns", seed 002 定期维护: 保留最近20轮对话) starts at a `user` message and runs up to
the next one after a reply: the character's reply and any system line in between belong to it, and user lines in
a row (a turn cut at the deadline keeps its line without a reply) are one turn; trailing user lines no reply answered
are kept and not counted. Messages before the first user message (the instance's opening system lines, a greeting)
are the preamble, not a turn.

Budgets (`RegionBudgets`) are counted with the model's tokenizer when one is configured (`text_tokens`, issue 17),
else with langchain-core's `count_tokens_approximately` (nodes/rules/tokens.py). Its default of 4
characters per token is for English; Chinese runs about 1–1.5 characters per token on common tokenizers, so the
default here is 1.5 (conservative for English text). When a region is over its budget:
- middle: the example dialogue goes first, then whole units, oldest first — the preamble (oldest), then the
  oldest turns; the world setting stays;
- retrieved: single items go, lowest-ranked first — items are assumed sorted best first inside each block, the
  item with the highest rank position among all blocks goes first, on a tie the later block's (blocks are
  given in importance order); a block left empty loses its title too;
- head and tail are never cut (but for the character's description, which leaves an over-budget head first):
  the outline must not vanish silently, nor the user's words. Over budget, they are sent whole and the region's
  debug says `over_budget` with a note.
Every drop is listed in the region's debug with the reason.

`recent_messages` must not contain the latest input: `split_latest_user` takes it off the memory builder's
output (whose last user message is the input, with the scene block of other speakers in front of it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from personalab.nodes.rules.card_play import DepthPrompt, fit_scenario, insert_depth_prompt
from personalab.nodes.rules.curation import once_per_turn
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.injection import dialogue_lines, once_per_line
from personalab.nodes.rules.plot import check_plot_state
from personalab.nodes.rules.prompt_catalog import ZH, Catalog
from personalab.nodes.rules.tokens import TextTokens, TokenCounter

REGIONS = ("head", "middle", "retrieved", "tail")


@dataclass(frozen=True)
class RegionBudgets:
    """Token budget of each region, the recall-memory turn cap and the characters-per-token ratio."""

    head: int = 4000
    middle: int = 28000
    retrieved: int = 8000
    tail: int = 4000
    max_turns: int = 20
    chars_per_token: float = 1.5
    # the model's tokenizer (issue 17), when configured: counts instead of `chars_per_token`
    text_tokens: TextTokens | None = field(default=None, compare=False, repr=False)
    tokenizer: str = ""

    def __post_init__(self) -> None:
        for item in fields(self):
            if item.name in ("text_tokens", "tokenizer"):
                continue
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise InvalidInput(f"RegionBudgets.{item.name} must be a positive number, got {value!r}")
            if item.name != "chars_per_token" and not isinstance(value, int):
                raise InvalidInput(f"RegionBudgets.{item.name} must be an integer, got {value!r}")

    @property
    def counter(self) -> TokenCounter:
        """The counter the regions and the window are measured with (nodes/rules/tokens.py)."""
        return TokenCounter(self.chars_per_token, self.text_tokens, self.tokenizer or "approximate")


@dataclass(frozen=True)
class RetrievedBlock:
    """A titled block of the retrieved region; `items` sorted best first."""

    title: str
    items: list[str] = field(default_factory=list)


@dataclass
class AssembledPrompt:
    """The messages to send, the region of each message, and per-region debug (plain data, checkpointable)."""

    messages: list[dict[str, str]]
    regions: list[str]
    debug: dict[str, Any]
    # the retrieved region's items as sent, after its budget (a staying region's keys, nodes/rules/shown_memory.py)
    retrieved_items: list[str] = field(default_factory=list)


def split_latest_user(messages: Sequence[Mapping[str, str]]) -> tuple[list[dict[str, str]], str | None]:
    """(earlier messages, content of the trailing user message) — (messages, None) when the last is not a user's."""
    items = [dict(m) for m in messages]
    if items and items[-1].get("role") == "user":
        return items[:-1], items[-1]["content"]
    return items, None


def _json(value: Mapping[str, Any]) -> str:
    """JSON with one top-level key per line (readable, few tokens: no indentation inside the values)."""
    lines = [
        f" {json.dumps(key, ensure_ascii=False)}: {json.dumps(item, ensure_ascii=False)}" for key, item in value.items()
    ]
    return "{\n" + ",\n".join(lines) + "\n}"


def _plot_json(outline: list[Mapping[str, Any]], current: int) -> str:
    """The plot state JSON of the head (seed 002 静态约束), one outline point per line."""
    points = ",\n".join("  " + json.dumps(dict(point), ensure_ascii=False) for point in outline)
    return '{\n "story_outline": [\n' + points + '\n ],\n "current_plot_index": ' + str(current) + "\n}"


def _region(tokens: int, budget: int) -> dict[str, Any]:
    return {"tokens": tokens, "budget": budget, "over_budget": tokens > budget, "dropped": [], "notes": []}


def _preview(text: str, size: int = 40) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= size else text[:size] + "…"


def _item_text(item: Any, where: str) -> str:
    if isinstance(item, str):
        text = item
    elif isinstance(item, Mapping) and isinstance(item.get("text", item.get("content")), str):
        text = item.get("text", item.get("content"))
    else:
        raise InvalidInput(f"{where}: expected a string or a dict with 'text', got {type(item).__name__}")
    # an item keeps its lines (a world-book entry reaches the model as its author wrote it, issue 15); spaces
    # within a line and blank lines are tidied
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def _blocks(retrieved_blocks: Sequence[Any]) -> list[tuple[str, list[str]]]:
    blocks = []
    for number, block in enumerate(retrieved_blocks):
        if isinstance(block, RetrievedBlock):
            title, items = block.title, block.items
        elif isinstance(block, Mapping) and "title" in block and "items" in block:
            title, items = block["title"], block["items"]
        else:
            raise InvalidInput(f"retrieved block {number}: expected a RetrievedBlock or a dict with title and items")
        if not isinstance(title, str) or not title.strip():
            raise InvalidInput(f"retrieved block {number}: empty title")
        if isinstance(items, str) or not isinstance(items, Sequence):
            raise InvalidInput(f"retrieved block {number} ({title}): items must be a list")
        texts = [_item_text(item, f"retrieved block {number} ({title}) item {i}") for i, item in enumerate(items)]
        blocks.append((title.strip(), [t for t in texts if t]))
    return blocks


def _retrieved_text(blocks: list[tuple[str, list[str]]], keep: list[int], catalog: Catalog = ZH) -> str | None:
    parts = []
    for (title, items), count in zip(blocks, keep, strict=True):
        if count:
            parts.append(title + "\n" + "\n".join(f"{n}. {text}" for n, text in enumerate(items[:count], start=1)))
    return catalog.retrieved_region + "\n\n" + "\n\n".join(parts) if parts else None


def _units(recent: list[dict[str, str]]) -> list[tuple[str, int, int]]:
    """(kind, start, end) slices: an optional preamble, then one per turn, then the user lines no reply answered yet
    (`pending`: lines of turns cut at the deadline, which the product keeps without a reply). A user message starts
    a turn only after a reply: user lines in a row are one turn (a cut turn's line joins the next), so the window's
    count of turns follows the story's turn numbers, which a cut does not advance (issue 30: counted per user line,
    each cut moved the window's start, the next prompt was read again from the dialogue's top and was cut too)."""
    starts: list[int] = []
    replied = True
    for index, message in enumerate(recent):
        if message.get("role") == "user" and replied:
            starts.append(index)
            replied = False
        elif message.get("role") == "assistant":
            replied = True
    units: list[tuple[str, int, int]] = []
    first = starts[0] if starts else len(recent)
    if first:
        units.append(("preamble", 0, first))
    for number, start in enumerate(starts):
        end = starts[number + 1] if number + 1 < len(starts) else len(recent)
        last = number + 1 == len(starts)
        units.append(("pending" if last and not replied else "turn", start, end))
    return units


def assemble_prompt(
    *,
    system_instruction: str,
    core_memory: Mapping[str, Any],
    plot_state: Mapping[str, Any],
    relationship: Mapping[str, Any] | None,
    world_setting: str,
    recent_messages: Sequence[Mapping[str, str]],
    retrieved_blocks: Sequence[RetrievedBlock | Mapping[str, Any]],
    user_input: str,
    budgets: RegionBudgets | None = None,
    turn: int | None = None,
    position_texts: Mapping[str, str] | None = None,
    character_parts: Sequence[tuple[str, str]] = (),
    example_dialogue: str = "",
    post_history: str = "",
    catalog: Catalog = ZH,
    open_story: bool = False,
    scenario: str = "",
    depth_prompt: DepthPrompt | None = None,
    relations: Mapping[str, Mapping[str, Any]] | None = None,
    staying_memory: Mapping[int, str] | None = None,
    format_note: str = "",
) -> AssembledPrompt:
    """The prompt of one turn, region by region (seed 002 Prompt区域分配策略); rules in the module doc.

    `turn` (the turn being answered) is shown at the tail's start, with `relationship`, so the model can relate it
    to `last_progress_turn` (not in the head: it changes every turn, issue 30's prompt cache).
    `position_texts`: world-book text for the `user` / `assistant` positions (seed 004), put in the tail.
    The character's own fields (issue 13): `character_parts` — (name, text) of its system prompt, persona and
    description — follow the system instruction in the head; over the head's budget the `description` part goes
    (named in the debug), the others stay whole. `example_dialogue` follows the world setting in the middle and
    is the first thing the middle drops when over budget (named). `post_history` opens the tail, right after the
    dialogue and before the user's input, never cut.
    A card's play (issue 28, nodes/rules/card_play.py): `catalog` gives every heading in the instance's language
    (Chinese by default, exactly as before); `open_story` leaves the plot state out of the head (an outline the
    director does not force); `scenario` closes the character block, cut to what the head's budget leaves (the
    cut named in the debug); `depth_prompt` stands `depth` messages from the end of the dialogue.
    `relations` (issue 26): the character's relations with the recent scene's other participants, label → the three
    values (`rules.review.relations.scene_relations`, already cut to its few), shown after the user's relationship.
    `staying_memory` (issue 30, nodes/rules/shown_memory.py): turns back (1: the last answered turn) → the retrieved
    region that turn showed, put right before that turn's user line as a `retrieved` system message, counted in the
    middle's budget with its turn (dropped with it).
    `format_note` (issue 30): said at the end of the tail's turn message, before the input, when the character's
    last line did not follow the reply format (`rules.reply.format_lost`).
    """
    budgets = budgets or RegionBudgets()
    position_texts = position_texts or {}
    if not system_instruction or not system_instruction.strip():
        raise InvalidInput("assemble_prompt: system_instruction is empty")
    if not isinstance(user_input, str) or not user_input.strip():
        raise InvalidInput("assemble_prompt: user_input is empty")
    if not isinstance(core_memory, Mapping):
        raise InvalidInput("assemble_prompt: core_memory must be a dict")
    check_plot_state(plot_state)

    count = budgets.counter.messages

    # head — pinned, but for the character's description (issue 13), which goes first when over budget
    head_parts = [system_instruction.strip()]
    head_parts.extend(text.strip() for _, text in character_parts if text.strip())
    head_parts.append(catalog.head_core_memory + "\n" + _json(dict(core_memory)))
    if not open_story:
        plot = _plot_json(plot_state["story_outline"], plot_state["current_plot_index"])
        head_parts.append(catalog.head_plot_state + "\n" + plot)
    # what changes every turn (the turn number, the relationship the review moves) is not in the head: any change
    # there makes a local server's prompt cache re-evaluate everything after it (issue 30); it opens the tail
    turn_parts = [catalog.head_turn.format(turn=turn)] if turn is not None else []
    if relationship:
        turn_parts.append(catalog.head_relationship + "\n" + _json(dict(relationship)))
    if relations:
        turn_parts.append(catalog.head_relations + "\n" + _json({k: dict(v) for k, v in relations.items()}))
    if format_note.strip():
        turn_parts.append(format_note.strip())
    scenario_cut = fit_scenario(head_parts, scenario, catalog.scenario_label, budgets.head, count, budgets.counter)
    if scenario_cut.text:
        head_parts.insert(1 + sum(1 for _, text in character_parts if text.strip()), scenario_cut.text)
    head = [{"role": "system", "content": "\n\n".join(head_parts)}]
    head_debug = _region(count(head), budgets.head)
    if scenario_cut.debug:
        head_debug["cut"] = [scenario_cut.debug]
    description = next((text.strip() for name, text in character_parts if name == "description" and text.strip()), "")
    if head_debug["over_budget"] and description:
        head_parts.remove(description)
        head = [{"role": "system", "content": "\n\n".join(head_parts)}]
        head_debug = _region(count(head), budgets.head)
        head_debug["dropped"].append(
            {
                "item": "character description",
                "preview": _preview(description),
                "reason": f"head over its budget of {budgets.head} tokens: the description goes first",
            }
        )
    if head_debug["over_budget"]:
        head_debug["notes"].append(
            f"head is {head_debug['tokens']} tokens, over its budget of {budgets.head}; nothing is dropped from the "
            "head (the outline and core memory must stay): shorten the core memory or raise the head budget"
        )

    # middle — world setting pinned, then whole dialogue units, oldest dropped first
    setting = [{"role": "system", "content": catalog.world_setting + "\n" + world_setting.strip()}]
    if not world_setting.strip():
        setting = []
    examples = [{"role": "system", "content": example_dialogue.strip()}] if example_dialogue.strip() else []
    recent = [dict(m) for m in recent_messages]
    for number, message in enumerate(recent):
        if message.get("role") not in ("system", "user", "assistant") or not isinstance(message.get("content"), str):
            raise InvalidInput(
                f"recent_messages[{number}]: expected a dict with role system/user/assistant and content"
            )
    units = _units(recent)
    middle_debug = _region(0, budgets.middle)
    turns_total = sum(1 for kind, _, _ in units if kind == "turn")
    excess_turns = max(0, turns_total - budgets.max_turns)

    def describe(kind: str, start: int, end: int, reason: str) -> dict[str, Any]:
        return {
            "item": f"{kind} (recent_messages[{start}:{end}])",
            "preview": _preview(recent[start]["content"]),
            "reason": reason,
        }

    kept: list[tuple[str, int, int]] = []
    too_old: list[tuple[str, int, int]] = []
    for unit in units:
        if unit[0] == "turn" and excess_turns:
            excess_turns -= 1
            too_old.append(unit)
        else:
            kept.append(unit)
    if too_old:
        # one entry for the whole run: a long play-through drops hundreds of turns every turn
        first, last = too_old[0], too_old[-1]
        middle_debug["dropped"].append(
            {
                "item": f"{len(too_old)} turn(s) (recent_messages[{first[1]}:{last[2]}])",
                "preview": _preview(recent[first[1]]["content"]),
                "reason": f"older than the last {budgets.max_turns} turns",
                "count": len(too_old),
            }
        )
    # a staying region stands before its turn's first message (turns back: 1 for the last answered turn)
    staying = dict(staying_memory or {})
    turn_units = [unit for unit in units if unit[0] == "turn"]
    back = {unit: len(turn_units) - number for number, unit in enumerate(turn_units)}
    stays = {unit: [{"role": "system", "content": staying[back[unit]]}] for unit in kept if back.get(unit) in staying}

    def unit_messages(unit: tuple[str, int, int]) -> list[dict[str, str]]:
        return stays.get(unit, []) + recent[unit[1] : unit[2]]

    unit_tokens = [count(unit_messages(unit)) for unit in kept]
    setting_tokens = count(setting)
    total = setting_tokens + count(examples) + sum(unit_tokens)
    if examples and total > budgets.middle:
        total -= count(examples)
        middle_debug["dropped"].append(
            {
                "item": "example dialogue",
                "preview": _preview(examples[0]["content"]),
                "reason": f"middle region over its budget of {budgets.middle} tokens: the example dialogue goes first",
            }
        )
        examples = []
    while kept and total > budgets.middle:
        unit = kept.pop(0)
        total -= unit_tokens.pop(0)
        middle_debug["dropped"].append(
            describe(*unit, f"middle region over its budget of {budgets.middle} tokens: oldest dialogue goes first")
        )
    middle = setting + examples + [m for unit in kept for m in unit_messages(unit)]
    staying_ids = {id(m) for unit in kept for m in stays.get(unit, [])}
    middle_debug.update(tokens=count(middle), turns_total=turns_total)
    middle_debug["turns_kept"] = sum(1 for kind, _, _ in kept if kind == "turn")
    middle_debug["over_budget"] = middle_debug["tokens"] > budgets.middle
    if middle_debug["over_budget"]:
        middle_debug["notes"].append(
            f"the world setting alone is {setting_tokens} tokens, over the middle budget of {budgets.middle}; "
            "it is sent whole"
        )

    # retrieved — single items, lowest-ranked first
    # issue 26: each exchange once across the blocks, and each line of the dialogue once across them and the regions
    # that stay from earlier turns (those the middle's budget kept)
    staying_lines = {line for unit in kept for m in stays.get(unit, []) for line in dialogue_lines(m["content"])}
    blocks = once_per_line(once_per_turn(_blocks(retrieved_blocks)), staying_lines)
    keep = [len(items) for _, items in blocks]
    retrieved_debug = _region(0, budgets.retrieved)
    for (title, _items), count_kept in zip(blocks, keep, strict=True):
        if not count_kept:
            retrieved_debug["notes"].append(f"block {title} has no items; left out")

    def retrieved_messages() -> list[dict[str, str]]:
        text = _retrieved_text(blocks, keep, catalog)
        return [{"role": "system", "content": text}] if text else []

    retrieved = retrieved_messages()
    while retrieved and count(retrieved) > budgets.retrieved:
        # the highest rank position overall; on a tie the later block (blocks come in importance order)
        victim = max((k, number) for number, k in enumerate(keep) if k)[1]
        keep[victim] -= 1
        title, items = blocks[victim]
        retrieved_debug["dropped"].append(
            {
                "item": f"{title} #{keep[victim] + 1}",
                "preview": _preview(items[keep[victim]]),
                "reason": f"retrieved region over its budget of {budgets.retrieved} tokens: lowest-ranked goes first",
            }
        )
        retrieved = retrieved_messages()
    retrieved_debug.update(
        tokens=count(retrieved), items_total=sum(len(items) for _, items in blocks), items_kept=sum(keep)
    )
    if staying:
        retrieved_debug["staying_tokens"] = count([m for m in middle if id(m) in staying_ids])
    retrieved_debug["over_budget"] = retrieved_debug["tokens"] > budgets.retrieved

    # tail — pinned; world-book entries that asked for the user / assistant position (seed 004 injectPosition)
    # stand right before the input, in those roles
    tail = [{"role": "user", "content": user_input.strip()}]
    if position_texts.get("assistant", "").strip():
        tail.insert(0, {"role": "assistant", "content": position_texts["assistant"].strip()})
    if position_texts.get("user", "").strip():
        tail[-1] = {"role": "user", "content": position_texts["user"].strip() + "\n\n" + user_input.strip()}
    if post_history.strip():
        tail.insert(0, {"role": "system", "content": post_history.strip()})
    if turn_parts:
        tail.insert(0, {"role": "system", "content": "\n\n".join(turn_parts)})
    tail_debug = _region(count(tail), budgets.tail)
    if format_note.strip():
        tail_debug["format_note"] = True
    if tail_debug["over_budget"]:
        tail_debug["notes"].append(f"the user input is {tail_debug['tokens']} tokens, over the tail budget; sent whole")

    parts = {"head": head, "middle": middle, "retrieved": retrieved, "tail": tail}
    if depth_prompt is not None:  # issue 28: SillyTavern's depth prompt, counted in the region it lands in
        where = insert_depth_prompt(parts, depth_prompt)
        region_debug = {"middle": middle_debug, "tail": tail_debug}[where["region"]]
        region_debug["tokens"] = count(parts[where["region"]])
        region_debug["over_budget"] = region_debug["tokens"] > region_debug["budget"]
    debug: dict[str, Any] = {
        "head": head_debug,
        "middle": middle_debug,
        "retrieved": retrieved_debug,
        "tail": tail_debug,
    }
    debug["total_tokens"] = sum(debug[name]["tokens"] for name in REGIONS)
    debug["chars_per_token"] = budgets.chars_per_token
    debug["token_counter"] = budgets.counter.name
    if depth_prompt is not None:
        debug["depth_prompt"] = where
    return AssembledPrompt(
        messages=[m for name in REGIONS for m in parts[name]],
        # a staying region is retrieved memory, where it stood when it was retrieved
        regions=["retrieved" if id(m) in staying_ids else name for name in REGIONS for m in parts[name]],
        debug=debug,
        retrieved_items=[
            item for (_, items), count_kept in zip(blocks, keep, strict=True) for item in items[:count_kept]
        ],
    )
