"""The domain types of a turn: the fixed-shape parts of the turn graph's state (seeds 000, 002, 003), defined
once for the rules that build them, the nodes that pass them on and the served graph's JSON schemas (the input
form of LangGraph Studio).

They are `typing_extensions.TypedDict`s — pydantic cannot build a JSON schema from a `typing.TypedDict` on
Python 3.11 — and each field's docstring is its description in the schema (`use_attribute_docstrings`).
At run time they are plain dicts: nothing here validates, so a turn does not pay for a check per part.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, Required

from personalab.nodes.rules.review.types import ChoiceLevelName
from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

# each field's docstring becomes its `description` in the JSON schema
DESCRIBED = ConfigDict(use_attribute_docstrings=True)

# the values the rules check against (tests/test_turn_graph.py keeps these in step with them); the choice
# levels and time gaps of seed 003 are the review's `ChoiceLevelName` and `GapName`
Attribute = Literal["user", "assistant", "system"]
"""Who speaks a line (seed 000 `Line.attribute`); `stores.saves.ATTRIBUTES`."""
PlotStatus = Literal["completed", "in_progress", "pending"]
"""The status of an outline point (seed 002 需求1); `nodes.rules.plot.STATUSES`."""


@with_config(DESCRIBED)
class HostLine(TypedDict, total=False):
    """A line the host app puts into the dialogue tree before the user's (narration, other characters):
    the fields of seed 000's `Line` a host may set."""

    attribute: Required[Attribute]
    """Who speaks: "assistant" (a character or the narration), "user" or "system"."""
    content: Required[str]
    """What is said; not empty."""
    display_name: str | None
    """The name shown for the speaker (e.g. "旁白", "守卫")."""
    role_id: int | None
    """The speaking role's id, when it is a stored role."""
    script_role_id: str | None
    """The host's own id of the speaker, when it is not a stored role."""
    original_emotion: str | None
    """The emotion written in the line (seed 000 `【emotion】`)."""
    predicted_emotion: str | None
    """An emotion the host predicted for the line."""
    tts_content: str | None
    """The text to speak, when it differs from the content (seed 000 `<tts>`)."""
    action_content: str | None
    """The action that goes with the line (seed 000 `(action)`)."""
    audio_file: str | None
    """An audio file of the line."""


@with_config(DESCRIBED)
class Choice(TypedDict, total=False):
    """The choice the user picked this turn, if the host offered choices (seed 003 selected_choice), as the
    host sends it; the review validates it as `review.types.SelectedChoice`. Other keys are kept."""

    level: Required[ChoiceLevelName]
    """How much the choice weighs: normal, important, turning_point or ending."""
    text: str
    """What the user chose (`label`, `title`, `content` or `option` are read too when there is no `text`)."""


class DepthPromptData(TypedDict):
    """A card's depth prompt as the turn carries it (nodes/rules/card_play.DepthPrompt)."""

    text: str
    depth: int
    role: str


@with_config(DESCRIBED)
class Character(TypedDict):
    """The instance's character and world, read from the database at the start of every turn (seed 002 会话实例)."""

    role_id: int | None
    """The role's id."""
    name: str
    """The character's name."""
    persona: str
    """The role's initial persona: free text, traits, backstory and core motives, labelled ("" when none)."""
    background_id: int | None
    """The background's id."""
    world_setting: str
    """The background's world setting."""
    description: str
    """The character's description (prompt head; "" when none)."""
    system_prompt: str
    """The character's own system prompt (prompt head; "" when none)."""
    example_dialogue: str
    """Example dialogue showing how the character speaks (prompt middle; "" when none)."""
    post_history_instructions: str
    """Instructions placed after the dialogue, right before the user's input (prompt tail; "" when none)."""
    user_persona: NotRequired[str]
    """The description of the user's persona the instance plays with (issue 28; "" when none; absent in a state
    checkpointed before personas)."""
    scenario: NotRequired[str]
    """The card's scenario (issue 28): closes the head's character block, cut to the head's budget."""
    depth_prompt: NotRequired[DepthPromptData | None]
    """The card's depth prompt (issue 28, SillyTavern's extensions.depth_prompt), or None."""
    language: NotRequired[str | None]
    """The instance's language (issue 28: zh, en; None reads as zh): the prompt's scaffolding."""
    open_story: NotRequired[bool]
    """The instance's background is open (made from a card's scenario): no progress markers, no pull-back."""


@with_config(DESCRIBED)
class ReplySegment(TypedDict):
    """One segment `【emotion】content<tts>(action)` of the character's reply (seed 000 台词格式), stored as one line."""

    original_emotion: str | None
    """The emotion of `【emotion】`, None without one."""
    content: str
    """What the character says; never empty."""
    tts_content: str | None
    """The text of `<tts>`, None without one."""
    action_content: str | None
    """The action of `(action)`, None without one."""


@with_config(DESCRIBED)
class PlotPoint(TypedDict):
    """One point of the story outline (seed 002 需求1)."""

    index: int
    """Its place in the outline, from 1."""
    content: str
    """What happens at this point."""
    status: PlotStatus
    """completed, in_progress or pending."""


@with_config(DESCRIBED)
class PlotState(TypedDict):
    """The plot state (seed 002 静态约束 JSON): the whole outline and where the story is."""

    story_outline: list[PlotPoint]
    """Every outline point, in order (全量存储)."""
    current_plot_index: int
    """The index of the outline point the story is at."""
    last_progress_turn: int
    """The last turn whose reply carried a usable `[PROGRESS:i:status]` marker (0: none yet); the director's
    fallback counts the turns since."""


@with_config(DESCRIBED)
class ProgressMarker(TypedDict):
    """A usable `[PROGRESS:index:status]` marker of a reply (seed 002 后端处理)."""

    index: int
    """The outline point it names."""
    status: PlotStatus
    """The status it gives that point."""


@with_config(DESCRIBED)
class IgnoredMarker(TypedDict):
    """A marker-shaped piece of a reply that changed nothing, and why."""

    raw: str
    """The piece as written."""
    reason: str
    """Why it was not used."""


@with_config(DESCRIBED)
class Relationship(TypedDict):
    """The character's relationship with the user (seed 003 关系变化判断); a new instance starts at 0, 0, 0."""

    trust: int
    """Trust, -100..100."""
    affection: int
    """Affection, -100..100."""
    familiarity: int
    """Familiarity, 0..100."""


@with_config(DESCRIBED)
class Relation(TypedDict):
    """The character's relation with another participant of the scene (issue 26; seed 003 关系变化判断, the rows
    that apply to it: nodes/rules/review/relations.py): the user's three values and scale, and who and since when."""

    name: str
    """The participant's display name (its script_role_id or identity when it has none)."""
    trust: int
    """Trust, -100..100."""
    affection: int
    """Affection, -100..100."""
    familiarity: int
    """Familiarity, 0..100."""
    first_turn: int
    """The turn the participant first spoke in (the relation was created)."""
    last_turn: int
    """The last turn it spoke in."""


@with_config(DESCRIBED)
class MemoryBlock(TypedDict):
    """A titled block of the prompt's retrieved region (seed 001 智能注入: world knowledge, memories)."""

    title: str
    """The block's header."""
    items: list[str]
    """Its lines, in order."""


class ShownMemory(TypedDict):
    """A turn's retrieved region that stays in the next turns' prompts (issue 30, nodes/rules/shown_memory.py)."""

    turn: int
    """The turn that showed it."""
    first_turn: int
    """The recent dialogue's first turn in that turn's prompt."""
    text: str
    """The region as sent."""
    keys: list[str]
    """Its items, each without its how-long-ago part: a later turn does not show them again."""


@with_config(DESCRIBED)
class PromptMessage(TypedDict):
    """One message of the prompt sent to the model, with the seed 002 region it belongs to."""

    role: str
    """system, user or assistant."""
    region: str
    """head, middle, retrieved or tail (seed 002 Prompt区域分配策略)."""
    content: str
    """The text as sent."""


@with_config(DESCRIBED)
class DirectorEvents(TypedDict):
    """The director's two layers of story events (seed 002 需求1 兜底机制), best first."""

    query: str
    """The search query: the current outline point."""
    current: list[dict[str, Any]]
    """Events of this instance (`text`, `score` and the event's metadata)."""
    others: list[dict[str, Any]]
    """Events of other instances of the same character and background, for reference."""
    left_out: NotRequired[dict[str, list[int]]]
    """Turns whose events of this instance the prompt does not tell again (issue 26, each exchange once):
    ``in_recent_dialogue`` (the recent dialogue shows them) and ``no_longer_true`` (a later fact replaced what they
    said). The layers keep the search's result; only the prompt leaves these out."""
