"""A card that plays by itself (issue 28), as pure rules: SillyTavern's scenario and depth prompt in the prompt, and
the open background a card's scenario makes.

- `scenario`: SillyTavern puts it in the character definition (its story string: description, personality,
  scenario), so here it closes the head's character block. It is cut to what the head's budget leaves once the
  rest of the head is in (`fit_scenario`), and the cut is named in the head's debug (`debug.prompt.head.cut`).
- `depth_prompt` (V2 `extensions.depth_prompt` = {prompt, depth, role}, SillyTavern's character's note): inserted
  `depth` chat messages from the end of the dialogue, as SillyTavern does — depth 0 after the user's latest
  input, 1 right before it, 4 before the fourth message from the end; deeper than the dialogue goes, before its
  first message. Counted in the region it lands in (middle or tail), never cut (like the tail's post-history).
- `open_outline`: the outline of a background made from a card's scenario. Its single point is the scenario's
  opening; the instance's prompt leaves the plot state out and asks for no progress markers, and the director
  never pulls back to it (routing and the between-turns search skip an open story).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from personalab.nodes.rules.errors import InvalidInput

if TYPE_CHECKING:  # the token counter loads langchain_core: not on a listing command's path (issue 29)
    from personalab.nodes.rules.tokens import TokenCounter

DEPTH_ROLES = ("system", "user", "assistant")
DEFAULT_DEPTH = 4  # SillyTavern's default depth of a character's note
MAX_DEPTH = 10_000
MIN_SCENARIO_TOKENS = 16  # less room than this: the scenario is left out, not cut to a stub
OPEN_POINT_CHARS = 200  # the open outline's one point: the scenario's opening, this long at most


@dataclass(frozen=True)
class DepthPrompt:
    """SillyTavern's depth prompt: `text` inserted `depth` messages from the end of the chat, as `role`."""

    text: str
    depth: int = DEFAULT_DEPTH
    role: str = "system"


def depth_prompt_of(extensions: Any) -> DepthPrompt | None:
    """The depth prompt of a card's `extensions` (V2/V3 `depth_prompt`), None when it has none or an empty one.
    A depth or role a card writes oddly (a string, a negative or unknown value) falls back to SillyTavern's
    defaults (depth 4, system) rather than losing the note."""
    value = extensions.get("depth_prompt") if isinstance(extensions, Mapping) else None
    if not isinstance(value, Mapping):
        return None
    text = value.get("prompt")
    if not isinstance(text, str) or not text.strip():
        return None
    depth: Any = value.get("depth", DEFAULT_DEPTH)
    if isinstance(depth, str) and depth.strip().isdigit():
        depth = int(depth.strip())
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_DEPTH:
        depth = DEFAULT_DEPTH
    role = value.get("role", "system")
    role = role.strip().lower() if isinstance(role, str) else "system"
    return DepthPrompt(text=text.strip(), depth=depth, role=role if role in DEPTH_ROLES else "system")


@dataclass(frozen=True)
class FittedScenario:
    text: str  # the labelled scenario for the head, "" when none fits
    debug: dict[str, Any] | None  # the cut, for the head's debug; None when whole


def fit_scenario(
    head_parts: Sequence[str],
    scenario: str,
    label: str,
    budget: int,
    count: Callable[[list[dict[str, str]]], int],
    counter: TokenCounter,
) -> FittedScenario:
    """The scenario, labelled, cut so that the head (`head_parts` joined, with it) stays within `budget`."""
    scenario = (scenario or "").strip()
    if not scenario:
        return FittedScenario("", None)
    rest = count([{"role": "system", "content": "\n\n".join(head_parts)}])
    room = budget - rest
    whole = label + "\n" + scenario
    if count([{"role": "system", "content": "\n\n".join([*head_parts, whole])}]) <= budget:
        return FittedScenario(whole, None)
    reason = f"head over its budget of {budget} tokens with the whole scenario: cut to the {max(room, 0)} left"
    if room < MIN_SCENARIO_TOKENS:
        return FittedScenario("", {"item": "scenario", "chars": len(scenario), "kept": 0, "reason": reason})
    kept = counter.cut(scenario, room, prefix=label + "\n")
    return FittedScenario(
        label + "\n" + kept, {"item": "scenario", "chars": len(scenario), "kept": len(kept), "reason": reason}
    )


def insert_depth_prompt(parts: MutableMapping[str, list[dict[str, str]]], prompt: DepthPrompt) -> dict[str, Any]:
    """Insert `prompt` into the assembled regions (`parts`: head, middle, retrieved, tail) `prompt.depth` chat
    messages from the end; the chat is the middle's user/assistant messages and the user's input (the tail's last
    message). Returns where it went: {depth, role, region, index (in the region), chars}."""
    if prompt.role not in DEPTH_ROLES:
        raise InvalidInput(f"depth_prompt.role: {prompt.role!r} is not one of {', '.join(DEPTH_ROLES)}")
    chat: list[tuple[str, int]] = [
        ("middle", index) for index, message in enumerate(parts["middle"]) if message["role"] in ("user", "assistant")
    ]
    if parts["tail"]:
        chat.append(("tail", len(parts["tail"]) - 1))
    message = {"role": prompt.role, "content": prompt.text}
    if prompt.depth == 0 or not chat:
        region, index = "tail", len(parts["tail"])
    else:
        region, index = chat[max(len(chat) - prompt.depth, 0)]
        if region == "tail":
            # right before the user's input is before the tail's lead-in (post-history instructions, a world-book
            # assistant line), which belongs with the input
            index = 0
    parts[region].insert(index, message)
    return {"depth": prompt.depth, "role": prompt.role, "region": region, "index": index, "chars": len(prompt.text)}


def open_outline(scenario: str, fallback: str) -> list[str]:
    """The one-point outline of a background made from a card's scenario: its opening (the first line, at most
    OPEN_POINT_CHARS), or `fallback` for a card without one."""
    first = next((line.strip() for line in (scenario or "").splitlines() if line.strip()), "")
    if not first:
        return [fallback]
    return [first if len(first) <= OPEN_POINT_CHARS else first[: OPEN_POINT_CHARS - 1] + "…"]
