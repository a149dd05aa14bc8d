"""RAG retrieval (seed 002 需求3; seeds 001 + 004): the character's long-term memory of this instance, the
world book and the knowledge library, fused into one injection under the retrieved region's token budget.

- memories: `nodes.rules.retrieval.retrieve` — BM25, vector, tag and world-book paths over this instance only,
  fused, then scene-weighted scoring, mention penalty, dedupe against what the character said recently, every item with its breakdown;
  each path keeps to the memories of the branch the turn continues (`BranchMemories`, seed 000's tree);
- world book (seed 004): keyword / semantic / temporal / emotional triggers on the recent lines;
- knowledge library (seed 001 常识知识库): global and per-character entries by relevance;
- injection (seed 001 智能注入): guidelines → world knowledge → character memories, one budget, what was
  skipped and why in the debug output.
All of it runs under a time cap (seed 002: RAG检索设置超时保护 1.5 秒); on timeout or error the turn goes on
without it and the debug output says why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from langgraph.runtime import Runtime
from personalab.nodes.context import Context, context_of, long_term_memory, window_turns_at
from personalab.nodes.rules.consolidation import asks_about_past, past_note
from personalab.nodes.rules.curation import (
    IMPORTANT_INSTRUCTIONS,
    PRIVATE_NOTE,
    character_identity,
    drop_repeated_exchanges,
    is_guideline,
    is_private,
    npc_identity,
    recollects_memory,
    witnessed_by,
)
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.injection import (
    SECTION_HEADERS,
    InjectionItem,
    InjectionPlan,
    build_injection,
    known_items,
    memory_line,
    time_ago,
)
from personalab.nodes.rules.keywords import MatchText, tokenize
from personalab.nodes.rules.knowledge import applies_to, in_library_order, library_position, select_knowledge
from personalab.nodes.rules.persona_changes import PERSONA_CHANGE_TYPE
from personalab.nodes.rules.prompts import PERSONA_HISTORY_NOTE
from personalab.nodes.rules.retrieval import (
    CandidatePath,
    KeywordIndex,
    PathHit,
    PathQuery,
    RetrievalConfig,
    retrieve,
)
from personalab.nodes.rules.trigger_config import apply_to
from personalab.nodes.rules.types import MemoryBlock
from personalab.nodes.rules.worldbook import PreparedWorldbook, TriggeredEntry, context_from_lines, explain_worldbook
from personalab.nodes.state import TurnState, TurnUpdate
from personalab.stores.background import begin_memory_read, search_with_cap, wait_for_writes
from personalab.stores.consolidation import closed_record_lines
from personalab.stores.db import session_scope
from personalab.stores.history import get_path_ids
from personalab.stores.memory import MemoryRow, MemoryStore, instance_identities
from personalab.stores.saves import get_save
from personalab.stores.trigger_config import trigger_config_for_instance
from personalab.stores.vectors import chroma_path
from personalab.stores.warmup import warm_up_or_why
from personalab.stores.worldbook import (
    knowledge_for_instance,
    knowledge_similarities,
    prepared_worldbook_for_instance,
    with_semantic_vectors,
)
from personalab.stores.worldbook_settings import worldbook_settings_for_instance

RECENT_LINES = 6  # lines of dialogue that feed the scene analysis, the world book and the dedupe


def recent_context(history: Sequence[Mapping[str, Any]], role_id: int | None) -> tuple[str, list[str]]:
    """(recent dialogue text, what the character itself said lately) from the end of the path."""
    recent = list(history)[-RECENT_LINES:]
    text = "\n".join(f"{line.get('display_name') or line['attribute']}: {line['content']}" for line in recent)
    own = [line["content"] for line in recent if line["attribute"] == "assistant" and line.get("role_id") == role_id]
    return text, own


def own_lines_in(history: Sequence[Mapping[str, Any]], role_id: int | None) -> list[str]:
    """What the character itself said in the dialogue read this turn (its recent window), oldest first."""
    return [line["content"] for line in history if line["attribute"] == "assistant" and line.get("role_id") == role_id]


def memory_age(
    item: Mapping[str, Any], turn: int, stored_at: Mapping[int, datetime], now: datetime, language: str | None = None
) -> str:
    """How long ago a retrieved memory happened, in turns and real time ("3 轮前，2 天前")."""
    turns = turn - item["turn"] if isinstance(item.get("turn"), int) else None
    created = stored_at.get(int(item["id"])) if item.get("kind") == "memory" else None
    if created is not None and created.tzinfo is None:
        created = created.replace(tzinfo=UTC)  # stored naive = UTC
    return time_ago(turns, (now - created).total_seconds() if created is not None else None, language)


def memory_item(
    item: Mapping[str, Any],
    turn: int,
    stored_at: Mapping[int, datetime],
    now: datetime,
    language: str | None = None,
) -> InjectionItem:
    """A retrieved memory as a line of the retrieved region (`- content（3 轮前，2 天前）`), its age in the
    instance's `language` (issue 28)."""
    return InjectionItem(
        key=f"memory:{item['id']}",
        text=memory_line(item["content"], memory_age(item, turn, stored_at, now, language), language),
        score=item["score"],
    )


def noted_block(key: str, note: str, items: list[InjectionItem]) -> list[InjectionItem]:
    """A block of the retrieved region that opens with a note on how to read it (issue 26: the private block's
    "never said aloud", the persona history's "the character's own changes"), then its items; nothing when empty."""
    return [InjectionItem(key=key, text=note), *items] if items else []


def is_persona_change(item: Mapping[str, Any]) -> bool:
    """An archived persona change (seed 002 历史人格变化事件, `rules.persona_changes`)."""
    return item.get("type") == PERSONA_CHANGE_TYPE


def injection_blocks(plan: InjectionPlan) -> list[MemoryBlock]:
    """The plan's system-position sections as titled blocks of the prompt's retrieved region, in the seed's order."""
    blocks: list[MemoryBlock] = []
    for section, header in SECTION_HEADERS.items():
        # one item per entry as written: a multi-line world-book entry stays one item, never split into lines
        items = [item for item in plan.items.get(section, ()) if item.strip()]
        if items:
            blocks.append({"title": header, "items": items})
    return blocks


# How deep a candidate path is read for memories of the current branch: at most this many times its limit.
REFILL_DEPTH = 32

Hits = Sequence[tuple[int, float]]


class BranchMemories:
    """The instance's memory store as the branch a turn continues sees it (seed 000's tree: what was remembered or
    said on a branch the user left — a regenerated reply, an edited line, a rewind — is not this branch's past and
    comes back with its branch). Every candidate path (BM25, vector, tags, world book) skips the memories whose
    line is not on `branch` before it is cut to its limit, and reads further down its own ranking (twice as deep
    each time, at most `REFILL_DEPTH` × the limit) until it has its limit of hits on the branch or runs out: a
    large abandoned branch cannot crowd the current one out. Memories without a line are on every branch.
    What was skipped is in `off_branch` (ids, first seen first). The rows read to tell the line are kept and
    serve `load`, so the scoring reads no memory twice."""

    def __init__(
        self,
        store: MemoryStore,
        instance_id: int,
        branch: set[int],
        witness: str | None = None,
        index: KeywordIndex | None = None,
    ) -> None:
        self.store = store
        self.instance_id = instance_id
        self.branch = branch
        self.witness = witness  # issue 26: only what this identity witnessed (None: the instance's character)
        self.unwitnessed: list[int] = []
        self.rows: dict[int, MemoryRow] = {}
        self.off_branch: list[int] = []
        self._skipped: set[int] = set()
        # one keyword index per character for the whole search (issue 28: the index's revision was read again by
        # each path; one search sees one state of the store); `index`: the one brought up to date before the cap
        self._indexes: dict[tuple[int, int | None], KeywordIndex] = {}
        if index is not None:
            self._indexes[(instance_id, None)] = self._indexes[(instance_id, index.character_id)] = index

    def on_branch(self, search: Callable[[int], Hits], n: int) -> list[tuple[int, float]]:
        """The first `n` hits of `search` (a path asked for its best m) on the branch, best first."""
        if n <= 0:
            return []
        asked = n
        while True:
            hits = list(search(asked))
            self.load(self.instance_id, [memory_id for memory_id, _score in hits])
            kept = [(memory_id, score) for memory_id, score in hits if self._here(memory_id)]
            if len(kept) >= n or len(hits) < asked or asked >= REFILL_DEPTH * n:
                return kept[:n]
            asked = min(2 * asked, REFILL_DEPTH * n)

    def _here(self, memory_id: int) -> bool:
        row = self.rows.get(memory_id)
        if row is not None and not witnessed_by(row.witnesses, self.witness):
            if memory_id not in self._skipped:
                self._skipped.add(memory_id)
                self.unwitnessed.append(memory_id)
            return False
        if row is None or row.line_id is None or row.line_id in self.branch:
            return True  # a memory not found is dropped by the retrieval itself
        if memory_id not in self._skipped:
            self._skipped.add(memory_id)
            self.off_branch.append(memory_id)
        return False

    # what `rules.retrieval.retrieve` needs of a store (`MemorySource`)

    def index(self, instance_id: int, character_id: int | None = None) -> BranchIndex:
        kept = self._indexes.get((instance_id, character_id))
        if kept is None:
            kept = self._indexes[(instance_id, character_id)] = self.store.index(instance_id, character_id)
            self._indexes.setdefault((instance_id, kept.character_id), kept)
        return BranchIndex(kept, self)

    def embed_query(self, text: str) -> Any:
        return self.store.embed_query(text)

    def embed_queries(self, texts: Sequence[str]) -> Any:
        return self.store.embed_queries(texts)

    def vector_search(self, instance_id: int, character_id: int, embedding: Any, n: int) -> list[tuple[int, float]]:
        return self.on_branch(lambda m: self.store.vector_search(instance_id, character_id, embedding, m), n)

    def embeddings(
        self,
        instance_id: int,
        character_id: int,
        memory_ids: Sequence[int],
        documents: Mapping[int, str] | None = None,
    ) -> Mapping[int, Any]:
        return self.store.embeddings(instance_id, character_id, memory_ids, documents)

    def load(self, instance_id: int, memory_ids: Sequence[int]) -> dict[int, MemoryRow]:
        missing = [memory_id for memory_id in memory_ids if memory_id not in self.rows]
        if missing:
            self.rows.update(self.store.load(instance_id, missing))
        return {memory_id: self.rows[memory_id] for memory_id in memory_ids if memory_id in self.rows}

    def mark_mentioned(self, instance_id: int, memory_ids: Sequence[int], turn: int) -> None:
        self.store.mark_mentioned(instance_id, memory_ids, turn)


class BranchIndex:
    """A character's keyword and tag index whose searches keep to the branch (`BranchMemories.on_branch`)."""

    def __init__(self, index: KeywordIndex, memories: BranchMemories) -> None:
        self.index = index
        self.memories = memories
        self.character_id = index.character_id
        self.latest_turn = index.latest_turn

    def bm25_search(self, tokens: Sequence[str], n: int) -> list[tuple[int, float]]:
        return self.memories.on_branch(lambda m: self.index.bm25_search(tokens, m), n)

    def idf(self, tokens: Iterable[str]) -> Mapping[str, float]:
        return self.index.idf(tokens)  # the whole index's: how telling a word is does not depend on the branch

    def tag_search(self, context: MatchText, tags: Sequence[str], n: int) -> list[tuple[int, float]]:
        return self.memories.on_branch(lambda m: self.index.tag_search(context, tags, m), n)


def worldbook_path(store: BranchMemories, fired: Sequence[TriggeredEntry]) -> CandidatePath:
    """The world-book candidate path (seed 004: 基于世界书触发机制的记忆): the keywords of the entries that
    fired this turn pull in the memories that share them, as one more path fused with BM25, vector and tags."""
    tokens = [token for item in fired for keyword in item.entry.keywords for token in tokenize(keyword)]

    def path(query: PathQuery) -> list[PathHit]:
        if not tokens:
            return []
        index = store.index(query.instance_id, query.character_id)
        return [PathHit(id=memory_id, score=score) for memory_id, score in index.bm25_search(tokens, query.limit)]

    return path


def gather(
    state: TurnState, ctx: Context, book: PreparedWorldbook | None = None, index: KeywordIndex | None = None
) -> dict[str, Any]:
    """Everything the retrieved region holds this turn (runs under the time cap); `book`: the instance's world book,
    `index`: its keyword index, both prepared before the cap (else read here)."""
    instance_id, turn = state["instance_id"], state["turn"]
    character = state["character"]
    history = state.get("history", [])
    query = state.get("query") or state["message"]
    dialogue, own_lines = recent_context(history, character.get("role_id"))
    # the current truth first (issue 26): a fact a later one replaced is shown only for a question about the past
    past = asks_about_past(query) or asks_about_past(state["message"])
    with session_scope(ctx.database_url) as session:
        loading = time.perf_counter()
        worldbook = book if book is not None else prepared_worldbook_for_instance(session, instance_id)
        load_ms = (time.perf_counter() - loading) * 1000
        knowledge = knowledge_for_instance(session, instance_id)
        settings = worldbook_settings_for_instance(session, instance_id)  # the instance's over its book's (issue 15)
        # seed 004 MemoryTriggerConfig as the user set it (issue 23): read every turn, so a change is live next turn
        trigger = trigger_config_for_instance(session, instance_id, character.get("role_id"))
        branch = set(get_path_ids(session, instance_id))  # the lines of the branch this turn continues
        # not about the past: the closed dialogue lines are not another entry's context (read with the rest)
        closed_lines = [] if past else closed_record_lines(session, instance_id)
    worldbook_context = context_from_lines(
        history[:-1],
        user_message=state["message"],
        depth=settings.lines_scanned(),
        current_turn=turn,
        gap_seconds=state.get("gap_seconds"),  # seed 004 时间邻近性: the time since the previous turn
        chat_lines=state.get("path_lines"),  # an entry's delay: the chat's length
        now=time.time(),
        last_fired_turns=state.get("worldbook_fired") or {},
    )
    config = settings.config(context_tokens=ctx.context_tokens)  # the world book's budget: a share of the window
    config = apply_to(config, trigger)  # the strategies, limits and injection set as data
    scanning = time.perf_counter()
    fired = explain_worldbook(worldbook, with_semantic_vectors(worldbook, worldbook_context), config)
    scan = {
        "entries": len(worldbook),
        "fired": len(fired.triggered),
        "load_ms": round(load_ms, 2),
        "scan_ms": round((time.perf_counter() - scanning) * 1000, 2),
    }
    # seed 000's tree: the paths keep to this branch's memories before they are cut (see `BranchMemories`)
    store = BranchMemories(
        MemoryStore(db_url=ctx.database_url, chroma_path=chroma_path()),
        instance_id,
        branch,
        witness=character_identity(character.get("role_id")),  # issue 26: what the character witnessed
        index=index,
    )
    window_turns = window_turns_at(ctx, turn, state.get("recall_floor_turn"))  # the prompt's recent dialogue
    memories = retrieve(
        store,
        instance_id,
        query,
        message=state["message"],  # the user's own words count beside the rewrite's
        context=dialogue,
        recent_own_lines=own_lines,
        turn=turn,
        recent_from_turn=turn - window_turns,  # the feedback reads no memory the recent dialogue shows (issue 26)
        # twice the results: the turns still in the recent dialogue are left out below, the rest fill the slots
        k=2 * ctx.rag_results,
        extra_paths={"worldbook": worldbook_path(store, fired.triggered)},
        config=RetrievalConfig(mark_mentioned=False),
    )
    # seed 001 MarkMemoryAsMentioned: not here — a memory is mentioned when the reply used it (write_back)
    found = memories.to_dict()
    # each exchange once (issue 26, seed 001 避免重复): a turn the prompt's recent dialogue has is not a memory
    # again, and a line already presented (by a better memory or the window) is not presented twice
    # the current truth first (issue 26): a fact a later one replaced is shown only for a question about the past,
    # after the current ones and marked as no longer true; otherwise its line is not another entry's context either
    # not about the past: the closed facts are left out first (named as superseded, not as duplicates)
    superseded = [] if past else [item["id"] for item in found["items"] if item.get("valid_to_turn") is not None]
    items, duplicates, in_dialogue = drop_repeated_exchanges(
        [item for item in found["items"] if past or item.get("valid_to_turn") is None],
        turn=turn,
        window_turns=window_turns,
        window_lines=state.get("window_lines", []),
        closed_lines=closed_lines,
    )
    current = [item for item in items if item.get("valid_to_turn") is None]
    closed = [
        {**item, "content": f"{item['content']}{past_note(int(item['valid_to_turn']))}"}
        for item in items
        if item.get("valid_to_turn") is not None and past
    ]
    found["superseded"] = superseded
    found["items"] = [*current, *closed][: ctx.rag_results]
    found["in_recent_dialogue"] = in_dialogue
    found["duplicates"] = duplicates
    found["off_branch"] = store.off_branch  # found by a path, left out: written on a branch the user left
    found["unwitnessed"] = store.unwitnessed  # found by a path, left out: the character was not there
    stored_at = store.store.created_times(instance_id, [int(i["id"]) for i in found["items"] if i["kind"] == "memory"])
    now = datetime.now(UTC)
    # seed 001 Current Guidelines: the library's rules for the character (tag 指令 / 规则 …), every turn
    guidelines = [
        InjectionItem(key=f"guideline:{entry.id}", text=f"- {entry.content.strip()}", score=entry.importance)
        for entry in sorted(knowledge, key=library_position)  # the library's order (issue 25), as its editor shows
        if is_guideline(entry.tag)
        and entry.enabled
        and entry.content.strip()
        and applies_to(entry, character.get("role_id"), instance_id)
    ]
    known = known_items(
        [line for line in own_lines_in(history, character.get("role_id")) if not recollects_memory(line)]
    )
    selected = in_library_order(  # chosen by score, injected in the library's order (issue 25)
        select_knowledge(
            [entry for entry in knowledge if not is_guideline(entry.tag)],
            f"{dialogue}\n{query}",
            role_id=character.get("role_id"),
            save_id=instance_id,
            similarity=knowledge_similarities(knowledge, query),  # the vector search (seed 001 向量检索)
        )
    )
    language = character.get("language")  # issue 28: the memories' ages in the instance's language
    injection = build_injection(
        guidelines=guidelines,
        important=list(IMPORTANT_INSTRUCTIONS) if known else [],  # they speak of the 已知信息 block
        knowledge=selected,
        triggered=fired.triggered,
        worldbook_config=config,
        char_name=character.get("name") or "",  # the world book's {{char}} / {{user}}, as in the character's fields
        user_name=state.get("user_name"),
        turn=turn,  # knowledge made from events: seed 001's time prefix
        language=language,
        known=known,
        character_memories=[
            memory_item(item, turn, stored_at, now, language)
            for item in found["items"]
            if not is_private(item) and not is_persona_change(item)
        ],
        persona_history=noted_block(
            "persona:note",
            PERSONA_HISTORY_NOTE,
            [memory_item(item, turn, stored_at, now, language) for item in found["items"] if is_persona_change(item)],
        ),
        private_memories=noted_block(
            "private:note",
            PRIVATE_NOTE,
            [memory_item(item, turn, stored_at, now, language) for item in found["items"] if is_private(item)],
        ),
        budget=ctx.retrieved_tokens,
    )
    return {
        "memories": found,
        "worldbook_skipped": [asdict(skipped) for skipped in fired.skipped],
        "worldbook_scan": scan,
        # in by stickiness, not by their own trigger: their firing turn stays (else they would stick for ever)
        "worldbook_sticky": {item.entry.id for item in fired.triggered if item.trigger == "sticky"},
        "injection": injection,
        # what fed the reply (issue 23): every fired entry and selected knowledge entry with its score and reason,
        # stored with the reply (`nodes.rules.provenance`)
        "worldbook_fired": [
            {
                "id": t.entry.id,
                "kind": t.entry.kind,
                "trigger": t.trigger,
                "reason": t.reason,
                "score": round(float(t.score), 4),
                "matched": list(t.matched),
                "content": t.entry.content,
            }
            for t in fired.triggered
        ],
        "knowledge": [
            {
                "id": k.entry.id,
                "tag": k.entry.tag,
                "score": round(float(k.score), 4),
                "matched": list(k.matched),
                "content": k.entry.content,
            }
            for k in selected
        ],
    }


def cpu_timed(search: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`search()`'s result with the processor time its thread spent in it (`cpu_ms`)."""
    started = time.thread_time()
    found = search()
    found["cpu_ms"] = (time.thread_time() - started) * 1000
    return found


def prepare_worldbook(instance_id: int, ctx: Context) -> tuple[PreparedWorldbook | None, float]:
    """The instance's world book ready to scan, and the milliseconds it took: a version check when this process has
    it, else a load and a build (a new process's first turn, or an entry changed). Like the warm-up, before the cap,
    which is for the search: a one-shot process with a big book would otherwise lose its retrieval every turn.
    None when it cannot be read here (the search reads it under the cap and says why it failed)."""
    started = time.perf_counter()
    try:
        with session_scope(ctx.database_url) as session:
            book = prepared_worldbook_for_instance(session, instance_id)
    except Exception:  # noqa: BLE001 - the search under the cap tries again and reports the error
        book = None
    return book, round((time.perf_counter() - started) * 1000, 2)


def prepare_memory_index(instance_id: int, ctx: Context) -> tuple[KeywordIndex | None, float]:
    """The instance's keyword index brought up to date before the cap, and the milliseconds it took: a revision
    read when this process has it, else the read and indexing of every memory of the character (a process's first
    turn: ~10,000 memories took longer than the whole cap on a loaded machine, and the turn lost its retrieval).
    Like the world book's preparation, before the cap, which is for the search; an error is left to the search,
    which meets it again and reports it."""
    started = time.perf_counter()
    index: KeywordIndex | None
    try:
        index = MemoryStore(db_url=ctx.database_url, chroma_path=chroma_path()).index(instance_id)
    except Exception:  # noqa: BLE001 - the search under the cap tries again and reports the error
        index = None
    return index, round((time.perf_counter() - started) * 1000, 2)


def recall_witnessed(
    database_url: str | None,
    instance_id: int,
    query: str,
    *,
    npc: str | None = None,
    k: int = 10,
) -> dict[str, Any]:
    """Issue 26: what a script NPC of the scene (`npc`, its script_role_id; None: the instance's character)
    remembers of the instance for `query` — only the memories it witnessed or was told (seed 000's lines: it was
    in the scene). An NPC that never appeared in the instance is an `InvalidInput` naming it; nothing is written
    (mentions are not marked). Returns `RetrievalResult.to_dict()` plus `unwitnessed` (ids left out)."""
    with session_scope(database_url) as session:
        save = get_save(session, instance_id)
        branch = set(get_path_ids(session, instance_id))
    who = character_identity(save.role_id) if npc is None else npc_identity(str(npc))
    if npc is not None and who not in instance_identities(database_url, instance_id):
        raise InvalidInput(f"npc {npc!r} is not in the scene of instance {instance_id} (no line of it)")
    store = BranchMemories(
        MemoryStore(db_url=database_url, chroma_path=chroma_path()), instance_id, branch, witness=who
    )
    found = retrieve(store, instance_id, query, k=k, config=RetrievalConfig(mark_mentioned=False)).to_dict()
    found["unwitnessed"] = store.unwitnessed
    found["witness"] = who
    return found


def rag_retrieve(state: TurnState, runtime: Runtime[Context]) -> TurnUpdate:
    ctx = context_of(runtime)
    if not long_term_memory(ctx):  # issue 30's recent / history conditions: the prompt reads no long-term memory
        off = {"status": f"off (memory_mode {ctx.memory_mode})", "ms": 0.0}
        return {"retrieved": [], "memory_blocks": [], "injected": {}, "debug": {"retrieval": off}}
    # read your writes: the earlier turns' memories, mention marks and index updates of this instance, written
    # after their replies, are all in the store before this turn searches it (other instances' are not waited for)
    waited_ms = wait_for_writes(state["instance_id"])
    # and the vectors of those writes still being written (issue 29), scored by the search itself: before the cap
    waited_ms += MemoryStore(db_url=ctx.database_url, chroma_path=chroma_path()).embed_pending()
    # cold start: models, dictionaries and the store's client load before the cap, which is for the search
    warm_ms, unavailable = warm_up_or_why(chroma_path())
    found: Any
    debug: dict[str, Any]
    book_ms = index_ms = 0.0
    if unavailable is not None:  # a stopped Chroma server: no retrieval this turn, and the debug output says why
        found, debug = [], {"status": unavailable, "ms": 0.0}
    else:
        cpu = time.thread_time()
        # the memories as one state: before the last turn's layer maintenance or after it, never between its writes
        # (it is not waited for; `stores.background.memories_rewritten`). The capped search ends the read itself.
        end_read = begin_memory_read(state["instance_id"])
        try:
            index, index_ms = prepare_memory_index(state["instance_id"], ctx)
            book, book_ms = prepare_worldbook(state["instance_id"], ctx)
        except BaseException:
            end_read()
            raise
        prepare_cpu_ms = (time.thread_time() - cpu) * 1000

        def search() -> Any:
            try:
                return cpu_timed(lambda: gather(state, ctx, book, index))
            finally:
                end_read()

        found, debug = search_with_cap(search, ctx.rag_timeout_s)
        if found:
            # the processor time of the book's preparation and the search (issue 28): a figure a loaded machine
            # stretches far less than the wall-clock `ms`
            debug["cpu_ms"] = round(prepare_cpu_ms + found.pop("cpu_ms"), 2)
    debug["waited_for_writes_ms"] = waited_ms
    debug["warm_up_ms"] = warm_ms
    debug["worldbook_prepare_ms"] = book_ms
    debug["index_prepare_ms"] = index_ms
    if not found:
        return {"retrieved": [], "memory_blocks": [], "injected": {}, "debug": {"retrieval": debug}}
    injection = found["injection"]
    plan: InjectionPlan = injection.plan
    memories = found["memories"]
    fired = dict(state.get("worldbook_fired") or {})
    sticky = found["worldbook_sticky"]
    fired.update({entry_id: state["turn"] for entry_id in injection.fired_worldbook_ids if entry_id not in sticky})
    return {
        "retrieved": memories["items"],
        "memory_blocks": injection_blocks(plan),
        "injected": {position: text for position, text in plan.texts.items() if position != "system" and text},
        "worldbook_fired": fired,
        "debug": {
            "retrieval": {
                **debug,
                "query": memories["query"],
                "scene": memories["scene"],
                "weights": memories["weights"],
                "count": len(memories["items"]),
                "dropped": memories["dropped"],
                "in_recent_dialogue": memories["in_recent_dialogue"],
                "duplicates": memories["duplicates"],
                "superseded": memories["superseded"],
                "off_branch": memories["off_branch"],
                "unwitnessed": memories["unwitnessed"],
                "timings_ms": memories.get("timings_ms"),
                "injection": plan.debug(),
                "worldbook_skipped": found["worldbook_skipped"],
                "worldbook_fired": found["worldbook_fired"],
                "knowledge": found["knowledge"],
                "worldbook_scan": found["worldbook_scan"],
            }
        },
    }
