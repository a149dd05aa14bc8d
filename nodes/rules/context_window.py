"""The prompt inside the reply model's context window (seed 002 Prompt区域分配; issue 17: real models).

The region budgets (`RegionBudgets`, seed 002: head 4K, middle 28K, retrieved 8K, tail 4K) assume a long-context
model; local models often run with 2K–8K windows. `assemble_within_window` makes every prompt fit:

    prompt tokens + reply cap (max_tokens) + safety margin ≤ context window

counted with the same counter as the budgets (`RegionBudgets.counter`: the model's tokenizer when configured, else
the approximate `count_tokens_approximately` at `chars_per_token`; nodes/rules/tokens.py).
The margin (10 % of the window, at least 16 tokens) absorbs the counter's error and the server's chat template.

1. `fit_budgets`: when the four budgets add up to more than the room (window − reply cap − margin), each is
   scaled down by the same factor, so the regions keep their order and proportions; they are never scaled up.
2. The prompt is assembled under those budgets (`assemble_prompt`: oldest dialogue and lowest-ranked retrieved
   items go first, every drop named in the region's debug).
2b. The head's scaled budget never drops the character's description while head and tail together take at most
   half the room (issue 30): the head's budget is raised to what it needs, named in `debug.window.notes`.
3. Head and tail are never cut (the outline and the user's words), so when they are over their scaled budgets
   the middle and the retrieved region give up the difference, in their proportions, and the prompt is assembled
   again under those budgets.
3b. `retrieved_cap` (a slow model's share of the deadline, issue 30; nodes/rules/deadline.py `prompt_tokens_over`):
   the retrieved region's budget is lowered to it, lowest-ranked items going first, named in `debug.window.notes`;
   the other regions' budgets stay (the dialogue before it is what the server's prompt cache holds).
4. When the world setting alone is over what the middle may take, it is cut at the end to fit (named in
   `debug.window.cut`).
5. When the head and the tail alone do not fit, nothing is sent: `debug.window.fits` is False with a note, and
   the turn fails cleanly before calling the model (raise PERSONALAB_CONTEXT_TOKENS, lower
   PERSONALAB_MAX_REPLY_TOKENS or PERSONALAB_MAX_MESSAGE_CHARS).

`debug.window` of the assembled prompt: context_tokens, reply_tokens, margin, room, the budgets used,
prompt_tokens, fits, and `cut` (what was cut only to fit the window). Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.prompt_assembly import REGIONS, AssembledPrompt, RegionBudgets, assemble_prompt
from personalab.nodes.rules.prompt_catalog import ZH

MARGIN_RATIO = 0.10
MIN_MARGIN = 16
KEEP_CHARACTER_SHARE = 0.5  # head + tail may take up to this share of the room before the description goes


@dataclass(frozen=True)
class ContextWindow:
    """The reply model's window and the reply's cap, in tokens of the budgets' counter."""

    context_tokens: int
    reply_tokens: int

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidInput(f"ContextWindow.{item.name} must be a positive integer, got {value!r}")

    @property
    def margin(self) -> int:
        return max(MIN_MARGIN, math.ceil(self.context_tokens * MARGIN_RATIO))

    @property
    def room(self) -> int:
        """Tokens the prompt may take: the window less the reply's cap and the margin (can be ≤ 0)."""
        return self.context_tokens - self.reply_tokens - self.margin


def _total(budgets: RegionBudgets) -> int:
    return budgets.head + budgets.middle + budgets.retrieved + budgets.tail


def fit_budgets(budgets: RegionBudgets, window: ContextWindow) -> RegionBudgets:
    """`budgets` scaled down by one factor so that they add up to at most the window's room (never scaled up)."""
    total, room = _total(budgets), window.room
    if total <= room:
        return budgets
    factor = max(room, 0) / total
    return replace(
        budgets,
        **{name: max(1, math.floor(getattr(budgets, name) * factor)) for name in REGIONS},
    )


def _share(room: int, budgets: RegionBudgets) -> tuple[int, int]:
    """`room` split between middle and retrieved in their proportions, each capped at its budget (≥ 1)."""
    room = max(room, 0)
    both = budgets.middle + budgets.retrieved
    middle = min(budgets.middle, math.floor(room * budgets.middle / both))
    retrieved = min(budgets.retrieved, room - middle)
    return max(1, middle), max(1, retrieved)


def assemble_within_window(
    window: ContextWindow, *, retrieved_cap: int | None = None, **kwargs: Any
) -> AssembledPrompt:
    """`assemble_prompt(**kwargs)` fitted inside `window` (rules in the module doc)."""
    budgets: RegionBudgets = kwargs.pop("budgets", None) or RegionBudgets()
    fitted = fit_budgets(budgets, window)
    room = window.room
    cut: list[dict[str, Any]] = []
    notes: list[str] = []
    prompt = assemble_prompt(budgets=fitted, **kwargs)
    debug = prompt.debug
    if any(drop["item"] == "character description" for drop in debug["head"]["dropped"]):
        # the head's scaled budget (16 % of the room) is no reason to drop the character while the window has
        # room (issue 30: at 8K the description went with 1,017 of 6,972 tokens used): the head takes what it
        # needs while head and tail stay within half the room; middle and retrieved give up the difference (step 3)
        whole = assemble_prompt(budgets=replace(fitted, head=max(room, 1)), **kwargs).debug["head"]["tokens"]
        if whole + debug["tail"]["tokens"] <= room * KEEP_CHARACTER_SHARE:
            notes.append(
                f"head budget {fitted.head}→{whole}: the character's description is kept (the window has room)"
            )
            fitted = replace(fitted, head=whole)
            prompt = assemble_prompt(budgets=fitted, **kwargs)
            debug = prompt.debug
    if debug["total_tokens"] > room:
        # head and tail are sent whole: what they take beyond their budgets comes out of middle and retrieved
        pinned = debug["head"]["tokens"] + debug["tail"]["tokens"]
        middle, retrieved = _share(room - pinned, fitted)
        fitted = replace(fitted, middle=middle, retrieved=retrieved)
        prompt = assemble_prompt(budgets=fitted, **kwargs)
        debug = prompt.debug
    if retrieved_cap is not None and debug["retrieved"]["tokens"] > retrieved_cap:
        notes.append(
            f"retrieved budget {fitted.retrieved}→{retrieved_cap}: the slow model's reply must fit what is left of "
            "the turn's deadline"
        )
        fitted = replace(fitted, retrieved=max(1, retrieved_cap))
        prompt = assemble_prompt(budgets=fitted, **kwargs)
        debug = prompt.debug
    setting = str(kwargs.get("world_setting") or "")
    if debug["total_tokens"] > room and debug["middle"]["over_budget"] and setting.strip():
        # the setting's message carries its label: the cut counts the whole message
        shorter = fitted.counter.cut(
            setting.strip(), fitted.middle, prefix=kwargs.get("catalog", ZH).world_setting + "\n"
        )
        cut.append(
            {
                "item": "world setting",
                "chars": len(setting.strip()),
                "kept": len(shorter),
                "reason": f"alone over the middle's {fitted.middle} tokens left in the model's window",
            }
        )
        prompt = assemble_prompt(budgets=fitted, **{**kwargs, "world_setting": shorter})
        debug = prompt.debug
    fits = debug["total_tokens"] <= room
    if not fits:
        notes.append(
            f"head ({debug['head']['tokens']}) and tail ({debug['tail']['tokens']}) alone take more than the "
            f"{room} tokens the window leaves for the prompt ({window.context_tokens} − reply {window.reply_tokens}"
            f" − margin {window.margin}): raise PERSONALAB_CONTEXT_TOKENS or lower PERSONALAB_MAX_REPLY_TOKENS / "
            "PERSONALAB_MAX_MESSAGE_CHARS"
        )
    if fitted != budgets:
        notes.append(
            f"budgets fitted to a {window.context_tokens}-token window: "
            + ", ".join(f"{name} {getattr(budgets, name)}→{getattr(fitted, name)}" for name in REGIONS)
        )
    debug["window"] = {
        "context_tokens": window.context_tokens,
        "reply_tokens": window.reply_tokens,
        "margin": window.margin,
        "room": room,
        "budgets": {name: getattr(fitted, name) for name in REGIONS},
        "prompt_tokens": debug["total_tokens"],
        "fits": fits,
        "cut": cut,
        "notes": notes,
    }
    return prompt
