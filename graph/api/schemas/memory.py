"""Request and response models of the memory console (issue 23): memories, what fed each reply, statistics.

`MemoryCreate` / `MemoryUpdate` are what a caller sends (bad values are refused naming the field: the store's checks
say it for the content, type, layer and importance); `MemoryPublic` and the others are what it gets back.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from personalab.nodes.rules.validation import bad_character
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

MAX_MEMORY_CHARS = 20_000
MAX_TAGS = 64
MAX_TAG_CHARS = 100
MAX_QUERY_CHARS = 4_000


def _storable(value: str) -> str:
    bad = bad_character(value)
    if bad:
        raise ValueError(f"contains {bad}")
    return value


Text = Annotated[str, AfterValidator(_storable)]
Tag = Annotated[str, Field(max_length=MAX_TAG_CHARS), AfterValidator(_storable)]


class MemoryCreate(BaseModel):
    """A new memory (seed 001 `MemoryEntry`): the text, and optionally its type, layer, importance, tags, turn."""

    model_config = ConfigDict(extra="forbid")

    content: Text = Field(max_length=MAX_MEMORY_CHARS)
    type: str = Field(default="event", max_length=40)
    layer: str = Field(default="active", max_length=40)
    importance: float | None = None  # 0–1: the store says which value is out of range
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    turn: int | None = Field(default=None, ge=0, le=2_147_483_647)
    notes: Text = Field(default="", max_length=MAX_MEMORY_CHARS)
    pinned: bool = False
    character_id: int | None = Field(default=None, ge=0, le=2_147_483_647)


class MemoryUpdate(BaseModel):
    """Changes to a memory: only the fields given change; the old text is kept as a version."""

    model_config = ConfigDict(extra="forbid")

    content: Text | None = Field(default=None, max_length=MAX_MEMORY_CHARS)
    type: str | None = Field(default=None, max_length=40)
    layer: str | None = Field(default=None, max_length=40)
    importance: float | None = None  # 0–1: the store says which value is out of range
    tags: list[Tag] | None = Field(default=None, max_length=MAX_TAGS)
    notes: Text | None = Field(default=None, max_length=MAX_MEMORY_CHARS)


class MemoryPublic(BaseModel):
    """A memory as the API shows it; `kind` is seed 004's (episodic / semantic / trait / goal), derived from `type`."""

    id: int
    instance_id: int
    character_id: int
    content: str
    type: str
    kind: str
    layer: str
    turn: int
    importance: float
    activity: float
    mention_count: int
    last_mentioned_turn: int | None
    pinned: bool
    user_edited: bool
    tags: list[str]
    keywords: list[str]
    notes: str
    related_character: str
    location: str
    line_id: int | None
    created_at: datetime
    updated_at: datetime
    last_used_turn: int | None = None  # issue 25: the last reply whose prompt held it
    last_used_at: datetime | None = None
    # issue 26: the turn it stopped being true (a fact a later one replaced; a persona change a core-memory
    # rollback undid); None: true as of now
    valid_to_turn: int | None = None


class MemoryPage(BaseModel):
    """One page of an instance's memories."""

    instance_id: int
    total: int
    offset: int
    limit: int
    all_branches: bool
    items: list[MemoryPublic]
    total_capped: bool = False  # `total` is a floor: the count stopped at the caller's `count_limit` (+1)


class MemoryVersion(BaseModel):
    """A memory's fields before one edit (`version` 1 is the text before the first edit)."""

    version: int
    content: str
    type: str
    layer: str
    importance: float
    tags: list[str]
    notes: str
    edited_at: datetime


class MemorySource(BaseModel):
    """Where a memory came from: the turn it was made, and the dialogue line it was made from (if any)."""

    turn: int
    line_id: int | None
    line_text: str | None = None
    on_current_branch: bool


class MemoryUse(BaseModel):
    """How the memory fed replies: how often retrieved and put into a prompt, and its last retrieval's scores."""

    retrieved: int = 0
    used: int = 0
    last_reply_line_id: int | None = None
    last_score: float | None = None
    last_breakdown: dict[str, Any] | None = None


class MemoryDetail(BaseModel):
    """One memory with its scores (importance, activity, mentions, retrievals), source and earlier versions."""

    memory: MemoryPublic
    source: MemorySource
    use: MemoryUse
    versions: list[MemoryVersion]


class SearchHit(BaseModel):
    """One retrieved memory with its score and the score's breakdown (seed 001 记忆检索和匹配算法)."""

    model_config = ConfigDict(extra="allow")

    kind: str
    id: int | str
    content: str
    score: float
    layer: str | None = None
    breakdown: dict[str, Any]


class SearchResult(BaseModel):
    """A search of an instance's memories with the turn's retrieval."""

    instance_id: int
    character_id: int
    query: str
    turn: int
    scene: str
    weights: dict[str, float]
    candidates: int
    items: list[SearchHit]
    dropped: list[dict[str, Any]]
    all_branches: bool


class SearchRequest(BaseModel):
    """What to search for."""

    model_config = ConfigDict(extra="forbid")

    query: Text = Field(max_length=MAX_QUERY_CHARS)
    k: int = Field(default=10, ge=1, le=100)
    context: Text = Field(default="", max_length=MAX_QUERY_CHARS)
    turn: int | None = Field(default=None, ge=0, le=2_147_483_647)
    mark_mentioned: bool = False
    all_branches: bool = False


class Transition(BaseModel):
    id: int
    from_layer: str
    to_layer: str | None
    reason: str


class MaintenanceResult(BaseModel):
    """What one step of the layer flow did (seed 001 记忆流转)."""

    instance_id: int
    turn: int
    transitions: list[Transition]
    deleted: list[int]
    counts: dict[int, dict[str, int]]
    off_branch: int


class ImportResult(BaseModel):
    instance_id: int
    imported: int


class Provenance(BaseModel):
    """What fed one reply (issue 23): see `nodes.rules.provenance` for the record's fields."""

    instance_id: int
    turn: int
    reply_line_id: int
    line_ids: list[int]
    on_current_branch: bool
    created_at: datetime
    record: dict[str, Any]


class MemoryStatistics(BaseModel):
    """Seed 004 提供记忆统计信息: counts by layer, type, kind, character and branch; how often each kind was retrieved
    and used in a reply; growth over turns."""

    instance_id: int
    total: int
    by_layer: dict[str, int]
    by_type: dict[str, int]
    by_kind: dict[str, int]
    by_character: dict[str, int]
    by_branch: dict[str, int]
    pinned: int
    edited: int
    replies_with_provenance: int
    retrieval: dict[str, dict[str, dict[str, int]]]
    growth: list[dict[str, int]]


class TurnFigures(BaseModel):
    """One stored turn of the current branch, as the statistics charts draw it (issue 25): the memories it made (by
    layer and type) and the running total after it, what its reply's retrieval found and put into the prompt (by
    trigger), its prompt's tokens per region, the graph's and each node's time, and the relationship and plot it
    left. None where the turn was stored before the figure was recorded."""

    turn: int
    created_at: datetime | None = None
    memories_made: dict[str, int] = Field(default_factory=dict, description="by layer")
    memories_made_by_type: dict[str, int] = Field(default_factory=dict)
    memories_total: dict[str, int] = Field(default_factory=dict, description="by layer, after this turn")
    retrieved: int = 0
    used: int = 0
    retrieved_by_trigger: dict[str, int] = Field(default_factory=dict)
    prompt_tokens: int | None = None
    reply_tokens: int | None = None
    region_tokens: dict[str, int] = Field(default_factory=dict)
    graph_ms: float | None = None
    reply_model_ms: float | None = None
    node_ms: dict[str, float] = Field(default_factory=dict, description="each node's own time")
    node_path_ms: dict[str, float] = Field(
        default_factory=dict,
        description="the nodes on the turn's critical path (of nodes run side by side, the longest): with other_ms, "
        "graph_ms",
    )
    node_parallel_ms: dict[str, float] = Field(
        default_factory=dict, description="nodes that ran beside a longer one (their time overlaps it)"
    )
    other_ms: float | None = Field(None, description="the graph's time outside the recorded nodes")
    relationship: dict[str, int] | None = None
    plot_index: int | None = None
    plot_completed: int | None = None
    plot_points: int | None = None


class TimelineMemory(BaseModel):
    """A memory on the timeline: the turn it was made, its layer and type, and where its line is (the current
    branch, another branch, or no line)."""

    id: int
    turn: int
    layer: str
    type: str
    branch: str


class ChartSeries(BaseModel):
    """The data series of an instance's statistics charts (issue 25; seed 004 记忆可视化界面): one `TurnFigures` per
    stored turn of the current branch, oldest first, and the newest memories for the timeline (at most
    `timeline_limit`, across turns and branches)."""

    instance_id: int
    turns: list[TurnFigures]
    timeline: list[TimelineMemory]
    timeline_limit: int
