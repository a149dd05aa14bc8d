"""State of a conversation instance's turn graph (seed 002), checkpointed per instance (thread = uuid5 of the
save id), in one place: what a host sends (`TurnInput`), what it gets back (`TurnOutput`), and the state
(`TurnState`) = both + the fields only the nodes use. Each field is declared once.

Kept across turns: `turn`, `plot_state`, `core_memory` (+ `core_memory_versions`), `relationship`, `relations`,
`worldbook_fired`, `state_events`, `recall_floor_turn`, `shown_memory` and the last turn's `debug`. Everything else is rebuilt each turn
(`history_fetch` resets it) or lives in the database; the dialogue path and the built messages are not
checkpointed at all.

`typing_extensions.TypedDict` (pydantic cannot build JSON schemas from `typing.TypedDict` on Python 3.11), and
each input and output field's docstring is its description in the served graph's JSON schemas, which
LangGraph Studio shows as the input form. Plain dicts at run time: a turn never validates its state.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeAlias

from langgraph.channels import UntrackedValue
from personalab.nodes.rules.prompt_catalog import catalog_for
from personalab.nodes.rules.review.turn import StoredTurn
from personalab.nodes.rules.review.types import GapName
from personalab.nodes.rules.types import (
    DESCRIBED,
    Character,
    Choice,
    DirectorEvents,
    HostLine,
    MemoryBlock,
    PlotState,
    PromptMessage,
    Relation,
    Relationship,
    ReplySegment,
    ShownMemory,
)
from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict


def merge_debug(old: dict[str, Any] | None, new: dict[str, Any] | None) -> dict[str, Any]:
    """Nodes add their part of the turn's debug output; `{"reset": True, ...}` starts a new turn's."""
    if not new:
        return old or {}
    if new.get("reset"):
        return {k: v for k, v in new.items() if k != "reset"}
    merged = dict(old or {})
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


# `instance_id` and `message` are required by the graph (history_fetch refuses a turn without them) but not
# `Required[...]` in the type: every node returns a partial state (`TurnUpdate`), so the state stays total=False;
# the schema says it instead, so Studio's form marks them
@with_config(ConfigDict(use_attribute_docstrings=True, json_schema_extra={"required": ["instance_id", "message"]}))
class TurnInput(TypedDict, total=False):
    """What a host app sends for one turn (seed 002 对话功能).

    Everything but `instance_id` lives for one turn only (`UntrackedValue`: never checkpointed), so a turn
    without them uses none of the previous turn's: no host line stored twice, no choice or name carried over,
    and an input without a message is refused instead of replaying the last one."""

    instance_id: int
    """The conversation instance (a play-through of one character and background) the turn belongs to."""
    message: Annotated[str, UntrackedValue(str)]
    """What the user says this turn; not empty, at most `max_message_chars` characters."""
    user_name: Annotated[str | None, UntrackedValue(str)]
    """The user's name as the character knows it (default 用户)."""
    lines_before: Annotated[list[HostLine], UntrackedValue(list)]
    """Lines the host puts into the dialogue tree before the user's (narration, other characters), in order."""
    selected_choice: Annotated[Choice | None, UntrackedValue(dict)]
    """The choice the user picked, when the host offered choices; its level weighs the review (seed 003)."""
    time_gap: Annotated[GapName | None, UntrackedValue(str)]
    """The real-time gap since the previous turn, when the host knows it; otherwise it is computed from the
    previous turn's time (seed 003)."""
    reply_to: Annotated[int | None, UntrackedValue(int)]
    """Regenerate: answer this existing user line of the instance again, as a new reply beside the ones it has
    (seed 000: siblings); the leaf moves to it and `message` is not needed (the line's text is the message)."""
    branch_from: Annotated[int | None, UntrackedValue(int)]
    """Edit / branch: put this turn's lines under this line of the instance instead of the current leaf (0: as
    a new first line), so an edited user line becomes a sibling of the one it replaces."""


@with_config(DESCRIBED)
class TurnOutput(TypedDict, total=False):
    """What a host app gets back from a turn."""

    reply: str
    """The character's reply as shown to the user: `【emotion】content<tts>(action)` segments (seed 000 台词格式),
    without the director's `[PROGRESS:i:status]` markers."""
    reply_lines: list[ReplySegment]
    """The reply's segments, each stored as a line under the user's line."""
    plot_state: PlotState
    """The plot state after this turn's progress markers (seed 002 需求1); kept across turns."""
    core_memory: dict[str, Any]
    """The character's core memory (seed 002 需求2): name, identity, traits, binary_oppositions,
    ternary_tensions, values, goals, speech_style, recent_changes; rewritten every `maintenance_every` turns,
    kept across turns."""
    relationship: Relationship
    """The character's relationship with the user after this turn's review (seed 003); kept across turns."""
    relations: dict[str, Relation]
    """The character's relation with each other participant of the scene (issue 26: another character
    `role:<id>`, a script NPC `npc:<script_role_id>`, a named NPC `name:<display_name>`), by identity: created
    when it first speaks, moved by the review by what it said or did (seed 003); kept across turns."""
    retrieved: list[dict[str, Any]]
    """The long-term memories retrieved this turn, best first: kind, id, content, score, layer, the memory's
    own fields, and the score's breakdown (seeds 001, 002 需求3)."""
    memory_blocks: list[MemoryBlock]
    """The retrieved region's blocks as put into the prompt: world knowledge, then memories (seed 001 智能注入)."""
    injected: dict[str, str]
    """World-book text put into the prompt at other positions than the retrieved region, by position (seed 004)."""
    director_events: DirectorEvents | None
    """The director's story events, when the story had stalled and the fallback ran this turn (seed 002
    兜底机制); None otherwise."""
    turn: int
    """How many turns this instance has played; a failed turn does not count."""
    model: str
    """The model that wrote the reply (the offline scripted model says so)."""
    error: str | None
    """Why the turn failed (the model failed or replied nothing): the user's line is kept and no reply is
    stored. None when the turn succeeded."""
    gap: GapName
    """The real-time gap since the previous turn: the host's `time_gap`, or computed (seed 003)."""
    session_id: int | None
    """The instance's session (sitting) this turn belongs to (seed 002 可暂停/继续): a new one starts after a pause
    of `session_pause_min` minutes or when the user starts one."""
    session_recap: list[str]
    """A new session's first turn: what happened in the last session (its last turns), put into the prompt's
    retrieved region; empty otherwise."""
    prompt: list[PromptMessage]
    """The full prompt sent to the model this turn, message by message with its region, so anyone can check
    what a turn saw; empty when the turn failed before generation."""
    review: dict[str, Any] | None
    """The post-turn review (seed 003 ReviewOutput): skipped, should_write_memory, memory_value,
    relationship_delta, suggest_plot_node, suggest_worldbook_update, quality, reasons, …; None when it did
    not run or failed."""
    debug: Annotated[dict[str, Any], merge_debug]
    """What each node did this turn, for inspection (history read, retrieval scores and skips, prompt regions,
    review reasons, …); `run_turn` adds per-node timings. Each turn starts a new one."""


@with_config(DESCRIBED)
class TurnState(TurnInput, TurnOutput, total=False):
    """The turn graph's state: the input, the output, and what only the nodes use."""

    core_memory_versions: list[dict[str, Any]]
    """Core-memory versions, newest last: `{"version", "turn", "reason", "core"}` (`CoreMemoryHistory`)."""
    worldbook_fired: dict[str, int]
    """World-book entry id → the turn it last fired (temporal triggers, seed 004)."""
    state_events: list[str]
    """State changes since the last core-memory maintenance (seed 002: 状态变化事件)."""
    recall_floor_turn: int
    """The first turn the prompt's recent dialogue may keep (issue 30): set by a turn that kept fewer turns of
    dialogue so a slow model could answer in time; the next turns start their dialogue there too (the server's
    prompt cache keeps that start) until the regular window's start passes it. 0: none."""
    shown_memory: list[ShownMemory]
    """The retrieved regions of this stretch's earlier turns that stay in the prompt (issue 30,
    `PERSONALAB_MEMORY_STAYS`, nodes/rules/shown_memory.py); empty when off."""
    lock_token: str | None
    """This turn's hold on the instance's turn lock; None once it is released."""
    run_key: str | None
    """The identity of the run playing the turn (issue 27: a served run's id): a run replayed after its server was
    killed answers with what it stored instead of storing it twice."""
    story_state_id: int | None
    """The stored story state (`story_state` row) the kept fields are a copy of; None while a turn runs, until
    its reply is stored. A turn whose copy is not the instance's latest stored state takes the stored one."""
    character: Character
    """The instance's character and world."""
    history: Annotated[list[dict[str, Any]], UntrackedValue(list)]
    """The lines of the dialogue path this turn reads (the preamble and the recall window). Rebuilt from the
    database every turn, so never checkpointed: a long play-through's path would otherwise be copied into
    every checkpoint of every turn."""
    messages: Annotated[list[dict[str, str]], UntrackedValue(list)]
    """The chat messages the character sees (seed 000 memory builder); rebuilt every turn, never checkpointed."""
    window_lines: Annotated[list[str], UntrackedValue(list)]
    """The recall window's lines as the dialogue record writes them (`rules.curation.window_texts`), made by
    memory_build: a memory or event repeating one of them is not presented again (issue 26); never checkpointed."""
    user_line_id: int | None
    """The id of this turn's user line."""
    query: str
    """The retrieval query: the input rewritten with the recent dialogue (seed 002 需求3)."""
    gap_seconds: Annotated[float | None, UntrackedValue(float)]
    """Wall-clock seconds since the instance's previous turn (None before its first), or the lower bound of the
    host's `time_gap`: the world book's time windows read it (seed 004 时间邻近性); never checkpointed."""
    path_lines: Annotated[int, UntrackedValue(int)]
    """Lines on the dialogue path up to this turn's user line (the chat's length: a world-book entry's delay);
    never checkpointed."""
    deadline_at: Annotated[float, UntrackedValue(float)]
    """When the turn must be over (`time.time()`; seed 002: 30 s), set when its first model call starts
    (nodes/rules/deadline.py); never checkpointed."""
    reply_raw: str
    """The model's reply as written, markers included."""


TurnUpdate: TypeAlias = TurnState
"""What a node returns: some of the state's fields. TurnState is total=False, so any subset type-checks and a
misspelt key does not. `debug` is merged into the turn's (`merge_debug`); every other field is replaced."""


STORY_FIELDS = (
    "turn",
    "plot_state",
    "core_memory",
    "core_memory_versions",
    "relationship",
    "relations",
    "worldbook_fired",
    "state_events",
    "recall_floor_turn",
    "shown_memory",
)
"""The state kept across turns: stored with every reply (`story_state`) and copied in the checkpoint."""


def story_fields(state: TurnState) -> dict[str, Any]:
    """The kept fields of `state`, as stored with a turn."""
    return {name: state[name] for name in STORY_FIELDS if name in state}  # type: ignore[literal-required]


def stored_turn(state: TurnState, line_id: int | None) -> StoredTurn:
    """The review's input of the turn in `state` whose reply ends at `line_id` (seed 003): what the review node
    reviews and what the reply's transaction queues as its durable review (issue 14)."""
    character = state["character"]
    return StoredTurn(
        instance_id=state["instance_id"],
        character_id=character.get("role_id") or 0,
        character_name=character["name"],
        user_name=state.get("user_name") or catalog_for(character.get("language")).default_user_name,
        message=state["message"],
        reply=state["reply"],
        selected_choice=dict(choice) if (choice := state.get("selected_choice")) else None,
        gap=state.get("gap") or "none",
        turn=state["turn"],
        current_plot_index=state["plot_state"]["current_plot_index"],
        relationship=dict(state["relationship"]) if state.get("relationship") is not None else None,
        line_id=line_id,
        language=character.get("language"),
    )
