"""Archival memory of seed 002: one event per turn in Chroma, with instance / character / background / turn and
the reply's last line (`line_id`).

One collection per story — character + background — (`events_<character>_<background>`): every search of the
director's is within one story (this play-through, or other play-throughs of the same character and
background), so it never filters through other stories' events.

An event belongs to the branch of the dialogue tree its reply is on (seed 000): its id is
`i<instance>-l<reply line>`, so a regenerated or rewound turn adds an event beside the earlier branch's instead
of overwriting it, and the instance's own layer holds the events whose line is on the current branch (`branch`:
the line ids from the root to the leaf, as the memory retrieval uses). Events written before line ids (id
`i<instance>-t<turn>`, no `line_id`) are read as on every branch.

Writes go through a single background worker so the reply never waits for the embedding (seed 002:
事件写入异步执行，不阻塞响应); `flush_event_writes()` waits for them (CLI exit, tests, batch runs).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from personalab.stores.background import run_in_background
from personalab.stores.db import session_scope
from personalab.stores.history import lines_on_current_branches
from personalab.stores.lru import LRU
from personalab.stores.vectors import chroma_path, get_collection, where

log = logging.getLogger(__name__)
NO_ID = -1  # stands for a missing character or background id in names and metadata


def story_collection(character_id: int | None, background_id: int | None) -> str:
    """The events collection of one character + background."""
    return (
        f"events_{NO_ID if character_id is None else character_id}_{NO_ID if background_id is None else background_id}"
    )


def write_event(collection: str, text: str, metadata: dict[str, Any], event_id: str, path: str | None = None) -> None:
    """Store one event now. An upsert by the event's id: writing it twice leaves one event (the outbox applies
    it at least once)."""
    get_collection(collection, path).add_texts([text], metadatas=[metadata], ids=[event_id])


def event_id(instance_id: int, turn: int, line_id: int | None = None) -> str:
    """An event's id: by its reply's line (`i3-l42`); events without a line keep the turn's (`i3-t7`)."""
    return f"i{instance_id}-t{turn}" if line_id is None else f"i{instance_id}-l{line_id}"


def on_branch(event: dict[str, Any], branch: Collection[int] | None) -> bool:
    """Whether `event` belongs to the branch whose line ids are `branch` (None: any branch). An event without a
    line id (written before events had one) cannot be placed and counts as on the branch."""
    line = event.get("line_id")
    return branch is None or not isinstance(line, int) or line in branch


def event_write(
    text: str,
    *,
    instance_id: int,
    character_id: int | None,
    background_id: int | None,
    turn: int,
    line_id: int | None = None,
) -> dict[str, Any]:
    """What `write_event` is given for one turn's event (`line_id`: the reply's last line, which places it on its
    branch), as JSON-ready data: collection, text, metadata, id."""
    metadata: dict[str, Any] = {
        "instance_id": instance_id,
        "character_id": NO_ID if character_id is None else character_id,
        "background_id": NO_ID if background_id is None else background_id,
        "turn": turn,
        "written_at": time.time(),  # when it was queued: a search made between turns finds what came after it
    }
    if line_id is not None:
        metadata["line_id"] = line_id
    collection = story_collection(character_id, background_id)
    return {"collection": collection, "text": text, "metadata": metadata, "id": event_id(instance_id, turn, line_id)}


def write_event_async(
    text: str,
    *,
    instance_id: int,
    character_id: int | None,
    background_id: int | None,
    turn: int,
    line_id: int | None = None,
) -> Future[None]:
    """Queue one event on the instance's background writer, in memory only (imports, tests; a turn's event goes
    through the outbox); failures are logged, never raised into the caller."""
    event = event_write(
        text,
        instance_id=instance_id,
        character_id=character_id,
        background_id=background_id,
        turn=turn,
        line_id=line_id,
    )
    # the store is resolved now, not when the worker runs, so a queued write lands where the caller ran
    return run_in_background(
        write_event,
        event["collection"],
        event["text"],
        event["metadata"],
        event["id"],
        chroma_path(),
        after_turn_of=instance_id,
    )


def search_events(
    query: str, k: int, *, character_id: int | None, background_id: int | None, instance_id: Any
) -> list[dict[str, Any]]:
    """The `k` events of one story (character + background) most similar to `query`, of the instance
    `instance_id`, or of every other one with `instance_id={"$ne": x}` (a Chroma operator)."""
    if k <= 0:
        return []
    store = get_collection(story_collection(character_id, background_id))
    return _search_vector(store, store.embeddings.embed_query(query), k, instance_id)  # type: ignore[union-attr]


def search_story(
    query: str,
    *,
    character_id: int | None,
    background_id: int | None,
    instance_id: int,
    current_k: int,
    others_k: int,
    pool: int = 60,
    path: str | None = None,
    branch: Collection[int] | None = None,
    database_url: str | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The director's two layers in one story: the `current_k` events of `instance_id` on its current `branch`
    (line ids root to leaf; None: every branch) and the `others_k` of other play-throughs most similar to
    `query`, each of those on its own play-through's current branch (`on_their_branches`, read from the
    database at `database_url`). One unfiltered look at the story's nearest `pool` events usually fills both (a
    filtered Chroma query costs several times more); a layer it leaves short is searched again with the
    instance filter, so the result is the same as two filtered searches. `path`: the Chroma store (default: the
    configured one)."""
    store = get_collection(story_collection(character_id, background_id), path)
    vector = store.embeddings.embed_query(query)  # type: ignore[union-attr]
    hits = _as_events(store.similarity_search_by_vector_with_relevance_scores(vector, k=pool))
    current = [hit for hit in hits if hit["instance_id"] == instance_id and on_branch(hit, branch)][:current_k]
    theirs = [hit for hit in hits if hit["instance_id"] != instance_id] if others_k > 0 else []
    others = on_their_branches(theirs, database_url)[:others_k]
    exhausted = len(hits) < pool  # the whole story was looked at: a short layer is all there is
    if len(current) < current_k and not exhausted:
        current = _search_branch(store, vector, current_k, instance_id, branch)
    if len(others) < others_k and not exhausted:
        others = _search_others(store, vector, others_k, instance_id, database_url)
    return current, others


def on_their_branches(events: list[dict[str, Any]], database_url: str | None = None) -> list[dict[str, Any]]:
    """The events of other play-throughs that are on their own play-through's current branch (seed 000: what an
    instance wrote on a branch it left is not its story now, for itself or as a reference for others), in
    order. Their branches are looked up together in one query (`lines_on_current_branches`); events without a
    line id (written before events had one) count as on every branch and need no look-up."""
    wanted: dict[int, set[int]] = {}
    for event in events:
        line = event.get("line_id")
        if isinstance(line, int) and not isinstance(line, bool):
            wanted.setdefault(int(event["instance_id"]), set()).add(line)
    if not wanted:
        return list(events)
    with session_scope(database_url) as session:
        current = lines_on_current_branches(session, wanted)
    return [event for event in events if on_branch(event, current.get(int(event["instance_id"]), ()))]


@dataclass(frozen=True)
class StorySearch:
    """One director search (`search_story`): the query, the story (character + background), the instance
    whose events are this play-through's, and how many events each layer takes."""

    query: str
    character_id: int | None
    background_id: int | None
    instance_id: int
    current_k: int
    others_k: int
    # the line ids of the branch the search is for (None: every branch). Not part of what a search *is*: the
    # search kept between turns (for the branch ending at the last reply) is taken by the next turn, whose
    # branch has the user's line too, when its branch holds the kept one's (`take_prefetched_story`)
    branch: frozenset[int] | None = field(default=None, compare=False)
    # where the other play-throughs' current branches are read (their events are reference only on them)
    database_url: str | None = field(default=None, compare=False)

    def run(self, path: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return search_story(
            self.query,
            character_id=self.character_id,
            background_id=self.background_id,
            instance_id=self.instance_id,
            current_k=self.current_k,
            others_k=self.others_k,
            path=path,
            branch=self.branch,
            database_url=self.database_url,
        )


# The director's search for an instance's next turn, done between turns (see `prefetch_story`):
# (store, instance, turn) → (the search, its result, when it started, the story's event count then); a turn
# takes its own entry out and adds what was written to the story since (`take_prefetched_story`).
PREFETCH_KEEP = 1024  # entries of instances that never came back are dropped oldest first
CLOCK_SKEW_S = 5.0  # events queued up to this long before the search started are looked at again (other hosts)
_prefetched: LRU[tuple[str, int, int], tuple[StorySearch, Any, float, int]] = LRU(PREFETCH_KEEP)


def prefetch_story(search: StorySearch, for_turn: int) -> Future[Any]:
    """Run `search` for the instance's turn `for_turn` on the background writer, queued behind this turn's
    event write (so it sees that event), and keep the result for `take_prefetched_story`. The director's query
    is the outline point, known before the user types: its search need not wait for the next turn."""
    path = chroma_path()

    def run() -> None:
        started = time.time()
        count = _story_count(search, path)
        _prefetched.put((path, search.instance_id, for_turn), (search, search.run(path), started, count))

    # the director's: its wait is for the whole write (`wait_for_writes(whole=True)`), the memory retrieval's is not
    return run_in_background(run, after_turn_of=search.instance_id, unread_by_retrieval=True)


def take_prefetched_story(
    search: StorySearch, for_turn: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
    """The prefetched result of exactly this search for this turn, once, with the events written to the story
    since the search ran (other play-throughs go on meanwhile, in this process or others): when the story's
    event count moved, the events queued after the search started (`written_at`) are searched and merged into
    the two layers by relevance — the same layers a search now would give; the other play-throughs' events are
    checked against their current branches again (a kept one now off its branch: searched again, as the
    search would have found something else). None when there is nothing kept
    (another process ran the previous turn, the search asked differs, or it is still queued) or when it was
    kept for a branch the user has left since (a rewind, a swipe, an edit)."""
    path = chroma_path()
    entry = _prefetched.pop((path, search.instance_id, for_turn))
    if entry is None or entry[0] != search or not _branch_within(entry[0].branch, search.branch):
        return None
    _, (current, others), started, count = entry
    mine: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    if _story_count(search, path) != count:
        store = get_collection(story_collection(search.character_id, search.background_id), path)
        vector = store.embeddings.embed_query(search.query)  # type: ignore[union-attr]
        pool = 60
        since: dict[str, Any] = {"written_at": {"$gte": started - CLOCK_SKEW_S}}
        newer = _as_events(store.similarity_search_by_vector_with_relevance_scores(vector, k=pool, filter=since))
        if len(newer) >= pool:  # more came than one look holds: search the whole story again
            return search.run(path)
        mine = [e for e in newer if e["instance_id"] == search.instance_id and on_branch(e, search.branch)]
        theirs = [e for e in newer if e["instance_id"] != search.instance_id]
    # the other play-throughs may have moved along their trees since: their events are checked again (one
    # look-up); when a kept one is off its branch now, the layer is searched again
    candidates = _merged(others, theirs, len(others) + len(theirs))
    on_branches = on_their_branches(candidates, search.database_url)
    if len(on_branches) < len(candidates) and any(event not in on_branches for event in others):
        return search.run(path)
    return (_merged(current, mine, search.current_k) if mine else current), on_branches[: search.others_k]


def _branch_within(kept: frozenset[int] | None, now: frozenset[int] | None) -> bool:
    """Whether a search kept for branch `kept` holds for branch `now`: every event on `kept` is on `now`."""
    if now is None:
        return True
    return kept is not None and kept <= now


def _story_count(search: StorySearch, path: str) -> int:
    store = get_collection(story_collection(search.character_id, search.background_id), path)
    return int(store._collection.count())


def _merged(kept: list[dict[str, Any]], newer: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The `k` most relevant of two event lists, each event once (by instance, line and turn)."""
    seen: set[tuple[Any, Any, Any]] = set()
    merged: list[dict[str, Any]] = []
    for event in sorted([*kept, *newer], key=lambda event: -float(event["score"])):
        key = (event.get("instance_id"), event.get("line_id"), event.get("turn"))
        if key not in seen:
            seen.add(key)
            merged.append(event)
    return merged[:k]


def _search_vector(store: Any, vector: list[float], k: int, instance_id: Any) -> list[dict[str, Any]]:
    return _as_events(
        store.similarity_search_by_vector_with_relevance_scores(vector, k=k, filter=where(instance_id=instance_id))
    )


def _search_others(
    store: Any, vector: list[float], k: int, instance_id: int, database_url: str | None
) -> list[dict[str, Any]]:
    """The `k` events of other play-throughs nearest `vector` that are on their own current branches: looked at
    in growing numbers until `k` are or the story has no more (one branch look-up per look)."""
    look = k
    while True:
        found = _search_vector(store, vector, look, {"$ne": instance_id})
        kept = on_their_branches(found, database_url)
        if len(kept) >= k or len(found) < look:
            return kept[:k]
        look *= 2


def _search_branch(
    store: Any, vector: list[float], k: int, instance_id: int, branch: Collection[int] | None
) -> list[dict[str, Any]]:
    """The `k` events of `instance_id` on `branch` nearest `vector`: the instance's nearest, looked at in
    growing numbers until `k` are on the branch or the instance has no more (a branch left behind usually
    holds a few events, so one or two looks; events written before line ids count as on it)."""
    look = k
    while True:
        found = _search_vector(store, vector, look, instance_id)
        kept = [event for event in found if on_branch(event, branch)]
        if len(kept) >= k or len(found) < look:
            return kept[:k]
        look *= 2


def _as_events(results: list[tuple[Any, float]]) -> list[dict[str, Any]]:
    """Chroma's (document, cosine distance) pairs as events scored by relevance (1 − distance), like
    `search_events`."""
    return [
        {"text": doc.page_content, "score": round(1.0 - float(distance), 4), **doc.metadata}
        for doc, distance in results
    ]
