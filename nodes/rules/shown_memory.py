"""Retrieved memory that stays where it was shown (issue 30: a local model's prompt cache; off by default).

Seed 002 places the retrieved region after the dialogue, new every turn. A local server (llama.cpp) keeps the last
prompt's tokens and reads a new prompt from its first change, so that region — the dialogue's new exchange comes
before it — is read again whole every turn: with the 1.5B model on 2 cores ~900 tokens, ~18 s of a 30 s turn, and
59–67 % of the reply's prompt reused instead of 86–88 % without long-term memory.

With `PERSONALAB_MEMORY_STAYS` = N (≥ 2), the region a turn showed stays in the next turns' prompts, right before
that turn's user line — where it stood when the server read it — and a later turn's own region shows only what no
staying region shows (each memory once, issue 26: the same memory by `item_key`, and the prompt's assembly leaves out
a line of the dialogue a staying region holds, `injection.once_per_line`), so the server reads the new exchange and
the few new memories.
The region keeps the words it was shown with (a memory's "3 轮前" is not renumbered: it is at most N − 1 turns
stale). What stays is dropped together (the prompt shows a fresh region again) when:
- the stretch holds N turns: the turn N after its first starts a new one (the prompt does not grow without end);
- the recent dialogue's first turn moved (`PERSONALAB_RECALL_STEP`, a slow model's fit, the middle's budget): the
  server reads the dialogue again anyway, so a fresh region costs nothing more there.
A stretch is kept with the story state (`shown_memory`), so a one-shot process, a rewind and a branch find the
stretch their turn continues.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from personalab.nodes.rules.injection import without_time
from personalab.nodes.rules.prompt_assembly import RetrievedBlock
from personalab.nodes.rules.types import ShownMemory


def staying_memory(shown: Sequence[ShownMemory] | None, *, turn: int, stays: int) -> list[ShownMemory]:
    """The regions of earlier turns that stay in `turn`'s prompt, oldest first: all of the stretch while it spans
    fewer than `stays` turns and every region is of a turn before this one; none otherwise (or with `stays` < 2)."""
    if stays < 2 or not shown:
        return []
    turns = [int(region["turn"]) for region in shown]
    if min(turns) <= turn - stays or max(turns) >= turn:
        return []
    return sorted(shown, key=lambda region: int(region["turn"]))


def same_dialogue_start(staying: Iterable[ShownMemory], first_turn: int) -> bool:
    """Whether every staying region was shown with the recent dialogue starting at `first_turn`, as this turn's
    does: otherwise the server reads the dialogue again and the regions give way to a fresh one."""
    return all(int(region["first_turn"]) == first_turn for region in staying)


def item_key(item: str) -> str:
    """What makes two retrieved items the same memory: the text without its how-long-ago part."""
    return without_time(item)


def not_shown(blocks: Sequence[RetrievedBlock], staying: Sequence[ShownMemory]) -> list[RetrievedBlock]:
    """`blocks` without the items a staying region shows (a block left empty keeps its title for the debug's note)."""
    shown = {key for region in staying for key in region["keys"]}
    if not shown:
        return list(blocks)
    return [RetrievedBlock(title=b.title, items=[i for i in b.items if item_key(i) not in shown]) for b in blocks]


def stretch_after(
    staying: Sequence[ShownMemory], *, turn: int, first_turn: int, region: str | None, items: Sequence[str]
) -> list[ShownMemory]:
    """The stretch a turn leaves for the next: the regions that stayed in its prompt and its own region (its text
    as sent, the keys of its items), when it showed one."""
    kept = [dict(region) for region in staying]
    if region:
        kept.append({"turn": turn, "first_turn": first_turn, "text": region, "keys": [item_key(i) for i in items]})
    return kept  # type: ignore[return-value]


def describe(staying: Sequence[ShownMemory], first_turn: int, dropped: str | None = None) -> dict[str, Any]:
    """The prompt debug's `retrieved.staying`: the turns whose regions stay, the dialogue's first turn, and why a
    stretch was dropped when it was."""
    debug: dict[str, Any] = {"turns": [int(region["turn"]) for region in staying], "first_turn": first_turn}
    if dropped:
        debug["dropped"] = dropped
    return debug
