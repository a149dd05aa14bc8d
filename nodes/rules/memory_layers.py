"""The four memory layers and their flow (seed 001 四层记忆系统详解, 记忆流转机制), as pure functions.

Layers, shallow to deep (seed 001 `MemoryLayer`): ``active`` (超短期, working memory), ``situational``
(短期), ``event_log`` (中期, episodic) and ``archive`` (长期, semantic / autobiographical).

Time is counted in turns (the seed counts game ticks): a memory carries the turn it was made, the turn its
`activity` was last brought up to date (`activity_turn`) and the turn it entered its layer (`layer_since_turn`).

One maintenance step (`plan_maintenance`) at turn `t`, for the memories of one character of one instance:

1. Protected memories — pinned (seed: 固定, 不会被删除) or edited by the user (seed: isUserEdited 保护用户修改
   的内容) — are left exactly as they are: no decay, no move, no deletion, and they do not count against a
   layer's capacity. Only the user changes them.
2. Recall (the seed's loop from the deep layers back to Active): marking a memory as mentioned sets its
   activity to 1 at that turn. A memory recalled after it entered its layer comes back up one layer (as of
   the turn it was recalled), if its importance is enough to stay in that layer — so that it can flow back
   down later without fading.
3. Decay and flow by activity (seed: 活跃度随时间衰减; 根据重要性和活跃度, 记忆会向更深层级迁移): activity
   decays exponentially at the rate of the layer the memory is in, ``a · exp(−decay_rate · turns)``. When it
   falls below the layer's `min_activity` the memory leaves the layer and goes on decaying at the next
   layer's rate — the span since `activity_turn` is followed layer by layer, so the outcome does not
   depend on how often maintenance runs. A leaving memory enters the next layer when its importance
   reaches that layer's `min_importance`; otherwise it fades and is deleted (seed: 低重要性记忆会逐渐衰减
   并被删除). ``archive`` does not decay (seed: 永久).
4. Capacities, shallow layers first (what a layer pushes out counts for the next one): while a layer holds
   more than `capacity` memories, its least active (then least important, then oldest) memory moves down
   by the same importance rule; the archive's least important (then oldest) memories fade (seed: 高重要性
   记忆会保留在Archive层).

Defaults (seed 001 各层级特性; a turn is taken as roughly a minute of conversation):

=============  ========  ==========  ============  ==============  ==============================
layer          capacity  decay/turn  min_activity  min_importance  time in layer (activity 1 →)
=============  ========  ==========  ============  ==============  ==============================
active         10        0.1         0.5           —               ~7 turns (seed: 数秒到数分钟, 5–10 条)
situational    50        0.01        0.2           0.2             ~90 more turns (数小时到数天, 20–50 条)
event_log      200       0.001       0.05          0.4             ~1,400 more turns (数天到数周, 100–200 条)
archive        1000      0           —             0.6             permanent (永久, 1000+ 条)
=============  ========  ==========  ============  ==============  ==============================

So with the default importances by type (`DEFAULT_IMPORTANCE`, after seed 001 各类型说明): an internal
note (0.3) lives in situational memory and fades; a conversation (0.5) reaches the event log and fades
there; an event or a relationship (0.7) ends in the archive.

The dialogue record (issue 11, "nothing said is ever unreachable"): every line of an instance's dialogue is
also kept as a memory of type ``record`` in the pseudo-layer ``record`` (`RECORD_LAYER`), outside the four
layers. Seed 001's layers, decay and fading apply to the curated memories (what the character keeps in mind),
not to the record (what happened): the layer flow never loads, moves or deletes a record entry, and the
retrieval searches both together.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.request_catalog import requests_for


class Layer(StrEnum):
    """Seed 001 `MemoryLayer`, shallow to deep."""

    ACTIVE = "active"
    SITUATIONAL = "situational"
    EVENT_LOG = "event_log"
    ARCHIVE = "archive"


LAYERS: tuple[Layer, ...] = tuple(Layer)


class MemoryType(StrEnum):
    """Seed 001 `MemoryType` plus seed 004's four kinds (情景 / 语义 / 特质 / 目标记忆)."""

    CONVERSATION = "conversation"
    ACTION = "action"
    OBSERVATION = "observation"
    EVENT = "event"
    EMOTION = "emotion"
    RELATIONSHIP = "relationship"
    INTERNAL = "internal"
    EPISODIC = "episodic"
    SEMANTIC = "semantic"
    TRAIT = "trait"
    GOAL = "goal"
    RECORD = "record"  # one line of the dialogue record (module docstring): never in the layer flow
    # seed 002 Archival Memory (历史人格变化事件): one change of the character's persona (`rules.persona_changes`)
    PERSONA_CHANGE = "persona_change"


RECORD_LAYER = "record"  # the layer column of record entries; not a `Layer`: the flow does not know it

MEMORY_TYPES: tuple[MemoryType, ...] = tuple(MemoryType)

# Seed 001 各类型说明 (重要性: 中等 / 高 / 根据…评估) and seed 004's kinds: a starting importance when the
# caller gives none.
DEFAULT_IMPORTANCE: Mapping[MemoryType, float] = {
    MemoryType.CONVERSATION: 0.5,
    MemoryType.ACTION: 0.5,
    MemoryType.OBSERVATION: 0.4,
    MemoryType.EVENT: 0.7,
    MemoryType.EMOTION: 0.5,
    MemoryType.RELATIONSHIP: 0.7,
    MemoryType.INTERNAL: 0.3,
    MemoryType.EPISODIC: 0.5,
    MemoryType.SEMANTIC: 0.6,
    MemoryType.TRAIT: 0.8,
    MemoryType.GOAL: 0.7,
    MemoryType.RECORD: 0.5,
    MemoryType.PERSONA_CHANGE: 0.8,
}


def parse_layer(value: str) -> Layer:
    """`value` as a `Layer`; `ValueError` naming the bad value and the valid ones."""
    try:
        return Layer(str(value).strip().lower())
    except ValueError:
        raise InvalidInput(f"memory layer {value!r} is not one of {', '.join(LAYERS)}") from None


def parse_type(value: str) -> MemoryType:
    """`value` as a `MemoryType`; `ValueError` naming the bad value and the valid ones."""
    try:
        return MemoryType(str(value).strip().lower())
    except ValueError:
        raise InvalidInput(f"memory type {value!r} is not one of {', '.join(MEMORY_TYPES)}") from None


def is_record(memory_type: str | None) -> bool:
    """Whether a memory of this type is a dialogue-record entry (kept out of the layer flow)."""
    return memory_type == MemoryType.RECORD.value


def check_importance(value: object) -> float:
    """`value` as an importance in [0, 1]; `ValueError` naming the bad value otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"importance {value!r} is not a number between 0 and 1")
    if not 0.0 <= float(value) <= 1.0:
        raise InvalidInput(f"importance {value!r} is not between 0 and 1")
    return float(value)


def initial_importance(memory_type: MemoryType | str) -> float:
    """Seed 001 `CalculateInitialImportance`, by type only (the content is judged later, by the review)."""
    return DEFAULT_IMPORTANCE[parse_type(memory_type)]


@dataclass(frozen=True)
class LayerPolicy:
    """How one layer keeps its memories (see the module docstring for the meaning of each field)."""

    capacity: int
    decay_rate: float
    min_activity: float
    min_importance: float

    def __post_init__(self) -> None:
        if self.capacity < 0:
            raise InvalidInput(f"layer capacity {self.capacity} is negative")
        if self.decay_rate < 0:
            raise InvalidInput(f"decay rate {self.decay_rate} is negative")
        for name in ("min_activity", "min_importance"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise InvalidInput(f"{name} {getattr(self, name)} is not between 0 and 1")


@dataclass(frozen=True)
class LayerConfig:
    """Capacities, decay rates and thresholds of the four layers; defaults from seed 001 (module docstring)."""

    active: LayerPolicy = LayerPolicy(capacity=10, decay_rate=0.1, min_activity=0.5, min_importance=0.0)
    situational: LayerPolicy = LayerPolicy(capacity=50, decay_rate=0.01, min_activity=0.2, min_importance=0.2)
    event_log: LayerPolicy = LayerPolicy(capacity=200, decay_rate=0.001, min_activity=0.05, min_importance=0.4)
    archive: LayerPolicy = LayerPolicy(capacity=1000, decay_rate=0.0, min_activity=0.0, min_importance=0.6)
    reactivate_on_recall: bool = True

    def policy(self, layer: Layer | str) -> LayerPolicy:
        return getattr(self, Layer(layer).value)


@dataclass(frozen=True)
class LayerMemory:
    """What the layer flow needs to know about one memory."""

    id: int
    layer: Layer
    importance: float
    activity: float
    activity_turn: int
    layer_since_turn: int
    turn: int
    pinned: bool = False
    user_edited: bool = False
    last_mentioned_turn: int | None = None

    @property
    def protected(self) -> bool:
        return self.pinned or self.user_edited


@dataclass(frozen=True)
class Transition:
    """One memory changing layer (`to` None: it faded and is deleted) and why."""

    id: int
    from_layer: Layer
    to_layer: Layer | None
    reason: str  # "decayed", "over_capacity", "recalled", "faded"


@dataclass(frozen=True)
class MaintenancePlan:
    """The outcome of one maintenance step: the new state of every surviving changed memory, the ids to
    delete and the layer transitions (for reporting)."""

    updated: tuple[LayerMemory, ...] = ()
    deleted: tuple[int, ...] = ()
    transitions: tuple[Transition, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)


def decay_activity(activity: float, decay_rate: float, turns: float) -> float:
    """Seed 001 活跃度衰减: exponential decay over `turns` (negative spans count as 0)."""
    return activity * math.exp(-decay_rate * max(0, turns))


def _leave_order(memory: LayerMemory) -> tuple[float, float, int, int]:
    return (memory.activity, memory.importance, memory.turn, memory.id)


def _archive_fade_order(memory: LayerMemory) -> tuple[float, int, float, int]:
    return (memory.importance, memory.turn, memory.activity, memory.id)


def flow_by_activity(
    memory: LayerMemory, turn: int, config: LayerConfig
) -> tuple[LayerMemory | None, list[Transition]]:
    """Step 3 for one memory: follow its activity from `activity_turn` to `turn` through the layers.
    Returns its new state (None: it faded) and the transitions on the way."""
    layer, activity = memory.layer, memory.activity
    since, clock = memory.layer_since_turn, float(memory.activity_turn)
    remaining = float(max(0, turn - memory.activity_turn))
    transitions: list[Transition] = []
    while True:
        policy = config.policy(layer)
        if layer is Layer.ARCHIVE or policy.decay_rate == 0 or policy.min_activity == 0:
            activity = decay_activity(activity, policy.decay_rate, remaining)
            break
        leave_after = 0.0
        if activity >= policy.min_activity:
            leave_after = math.log(activity / policy.min_activity) / policy.decay_rate
            if leave_after >= remaining:
                activity = decay_activity(activity, policy.decay_rate, remaining)
                break
        activity = min(activity, policy.min_activity)
        remaining -= leave_after
        clock += leave_after
        following = LAYERS[LAYERS.index(layer) + 1]
        if memory.importance < config.policy(following).min_importance:
            transitions.append(Transition(memory.id, layer, None, "faded"))
            return None, transitions
        transitions.append(Transition(memory.id, layer, following, "decayed"))
        layer, since = following, max(since, math.floor(clock))
    new = replace(memory, layer=layer, activity=activity, activity_turn=max(turn, memory.activity_turn))
    return replace(new, layer_since_turn=since), transitions


def plan_maintenance(memories: Iterable[LayerMemory], turn: int, config: LayerConfig | None = None) -> MaintenancePlan:
    """One maintenance step at `turn` for the memories of one character of one instance (module docstring)."""
    config = config or LayerConfig()
    originals = {m.id: m for m in memories}
    state: dict[int, LayerMemory] = {}
    transitions: list[Transition] = []
    deleted: list[int] = []

    for memory in originals.values():
        if memory.protected:
            continue  # 1.
        index = LAYERS.index(memory.layer)
        recalled_at = memory.last_mentioned_turn
        if (
            config.reactivate_on_recall
            and recalled_at is not None
            and recalled_at > memory.layer_since_turn
            and index > 0
            and memory.importance >= config.policy(memory.layer).min_importance
        ):  # 2.
            up = LAYERS[index - 1]
            memory = replace(memory, layer=up, layer_since_turn=recalled_at)
            transitions.append(Transition(memory.id, LAYERS[index], up, "recalled"))
        new, moves = flow_by_activity(memory, turn, config)  # 3.
        transitions.extend(moves)
        if new is None:
            deleted.append(memory.id)
        else:
            state[memory.id] = new

    for index, layer in enumerate(LAYERS):  # 4.
        policy = config.policy(layer)
        members = [m for m in state.values() if m.layer == layer]
        overflow = len(members) - policy.capacity
        if overflow <= 0:
            continue
        if layer is Layer.ARCHIVE:
            for memory in sorted(members, key=_archive_fade_order)[:overflow]:
                del state[memory.id]
                deleted.append(memory.id)
                transitions.append(Transition(memory.id, layer, None, "faded"))
            continue
        following = LAYERS[index + 1]
        for memory in sorted(members, key=_leave_order)[:overflow]:
            if memory.importance >= config.policy(following).min_importance:
                state[memory.id] = replace(memory, layer=following, layer_since_turn=turn)
                transitions.append(Transition(memory.id, layer, following, "over_capacity"))
            else:
                del state[memory.id]
                deleted.append(memory.id)
                transitions.append(Transition(memory.id, layer, None, "faded"))

    updated = tuple(m for m in state.values() if m != originals[m.id])
    counts = layer_counts([*state.values(), *(m for m in originals.values() if m.protected)])
    return MaintenancePlan(updated=updated, deleted=tuple(deleted), transitions=tuple(transitions), counts=counts)


def layer_counts(memories: Iterable[LayerMemory]) -> dict[str, int]:
    counts = {layer.value: 0 for layer in LAYERS}
    for memory in memories:
        counts[memory.layer.value] += 1
    return counts


# --------------------------------------------------------------------------------------------------
# Event-log summary (seed 001 中期记忆 "Event Log Summary"; issue 11)
#
# Before a maintenance step lets memories fade out of the event log (deleted: their importance is below the
# archive's floor), it writes one summary of them, itself a memory: type ``episodic`` (seed 004 情景记忆) in
# the archive, tagged ``summary``, at the latest turn of what it summarises, importance = the archive's floor
# (it stays). The model writes it (`prompts.event_summary_messages`); the offline scripted model gives the
# labelled extractive summary below. The dialogue record keeps every line anyway; the summary keeps the gist
# among the curated memories the character has in mind.

SUMMARY_TAG = "summary"
SUMMARY_MAX_CHARS = 300
SUMMARY_TITLE = "【事件摘要】"
EXTRACTIVE_LABEL = "（摘录，离线脚本模型）"
# an English instance's (issue 28)
SUMMARY_TITLE_EN = "[Event summary]"
EXTRACTIVE_LABEL_EN = "(extract, offline scripted model) "
EXTRACT_CHARS = 40  # of each memory, in the extractive summary


def fading_from_event_log(plan: MaintenancePlan) -> list[int]:
    """The ids of the memories that `plan` deletes as they leave the event log (seed 001: 低重要性记忆会逐渐
    衰减并被删除), in order: what a summary must cover."""
    return [t.id for t in plan.transitions if t.from_layer is Layer.EVENT_LOG and t.to_layer is None]


def extractive_summary(memories: Iterable[str], max_chars: int = SUMMARY_MAX_CHARS, language: str | None = None) -> str:
    """A labelled extractive summary: the first `EXTRACT_CHARS` characters of each memory's first line, joined,
    within `max_chars` (what the scripted model answers; a real model's summary is abstractive); labelled and
    joined in English for an English instance (`language`, issue 28)."""
    english = requests_for(language).language == "en"
    label = EXTRACTIVE_LABEL_EN if english else EXTRACTIVE_LABEL
    pieces: list[str] = []
    for text in memories:
        first = " ".join(text.split("\n")[-1].split())  # the memory's own line, not its context
        if first:
            pieces.append(first if len(first) <= EXTRACT_CHARS else first[: EXTRACT_CHARS - 1] + "…")
    body = ("; " if english else "；").join(pieces)
    room = max_chars - len(label)
    if len(body) > room:
        body = body[: room - 1] + "…"
    return f"{label}{body}"


def summary_groups(
    memory_lines: Mapping[int, int | None], parents: Mapping[int, int | None], forks: Collection[int] = ()
) -> dict[int | None, list[int]]:
    """The memories fading in one step, grouped for their event-log summaries by the dialogue tree (seed 000:
    a memory is retrieved only on the branches through its line; seed 001 Event Log Summary), as
    {the summary's line: memory ids}. `memory_lines`: memory id → its line (None: every branch);
    `parents`: line → parent line, for the lines on the paths from those lines to the root.

    A summary tagged with line K is retrieved on the branches through K, so K must lie at or below the line of
    every memory it summarises (never shown where one of them was not) and should cover the branches they were
    on. Each memory goes with the fading memories at or below its line (the deepest ones, "tips"), and its tag is
    the deepest line those tips share: on one branch, the deepest line of its memories; where fading memories
    of several branches lie below a memory (a branch point), that line itself, apart from each branch's own
    group. So memories of two branches never share a summary, and a summary is on every branch that holds all
    the fading memories below its memories. Memories without a line (every branch) get an untagged summary.

    `forks`: lines where the tree branches (a line with more than one child) although no fading memory lies on
    the other branch — maintenance sees the current branch only, the others' memories wait (`stores.memory`).
    A fork counts as a tip: a memory at or above it is summarised at or above it, so the other branches through
    it keep seeing the summary of what they shared."""
    groups: dict[int | None, list[int]] = {}
    lines = {line for line in memory_lines.values() if line is not None}
    paths = {line: _root_path(line, parents) for line in lines}  # root first, the line last
    above = {ancestor for path in paths.values() for ancestor in path[:-1]}
    tips = [line for line in sorted(lines) if line not in above]
    for fork in sorted(set(forks) & (above | lines)):  # only a fork on the way to a fading memory matters
        paths.setdefault(fork, _root_path(fork, parents))
        if fork not in tips:
            tips.append(fork)
    on_tip_path = {tip: set(paths[tip]) for tip in tips}
    tags: dict[int, int] = {}
    for line in lines:
        below = [paths[tip] for tip in tips if line in on_tip_path[tip]] or [paths[line]]  # (parents that loop)
        shared = below[0]
        for path in below[1:]:
            depth = 0
            while depth < min(len(shared), len(path)) and shared[depth] == path[depth]:
                depth += 1
            shared = shared[:depth]
        # the line is on every path below it, so on the shared part; checked, since a loop could break that
        tags[line] = shared[-1] if line in shared else line
    for memory_id, memory_line in sorted(memory_lines.items()):
        groups.setdefault(None if memory_line is None else tags[memory_line], []).append(memory_id)
    return groups


def _root_path(line: int, parents: Mapping[int, int | None]) -> list[int]:
    """The lines from the root to `line` by `parents` (a line without a known parent is a root; a loop ends the
    walk where it closes)."""
    path = [line]
    seen = {line}
    parent = parents.get(line)
    while parent is not None and parent not in seen:
        path.append(parent)
        seen.add(parent)
        parent = parents.get(parent)
    path.reverse()
    return path


def summary_memory(
    summary: str,
    turns: Iterable[int],
    ids: Iterable[int],
    config: LayerConfig | None = None,
    language: str | None = None,
) -> dict[str, object]:
    """The summary as a new memory item (for `stores.memory.MemoryStore.add_memories`), see above; its title in
    the instance's `language` (issue 28)."""
    config = config or LayerConfig()
    turn_list = sorted(turns)
    if requests_for(language).language == "en":
        span = "" if not turn_list else f" turns {turn_list[0]}–{turn_list[-1]}"
        if turn_list and turn_list[0] == turn_list[-1]:
            span = f" turn {turn_list[0]}"
        content = f"{SUMMARY_TITLE_EN}{span}: {summary.strip()}"
    else:
        content = ""
    span = f"第{turn_list[0]}–{turn_list[-1]}轮" if turn_list and turn_list[0] != turn_list[-1] else ""
    if turn_list and not span:
        span = f"第{turn_list[0]}轮"
    return {
        "content": content or f"{SUMMARY_TITLE}{span}：{summary.strip()}",
        "type": MemoryType.EPISODIC.value,
        "layer": Layer.ARCHIVE.value,
        "importance": config.archive.min_importance,
        "tags": [SUMMARY_TAG],
        "turn": turn_list[-1] if turn_list else None,
        "notes": "summary of memories " + ", ".join(f"#{i}" for i in ids),
    }
