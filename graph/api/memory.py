"""The memories of an instance (issue 23; seed 001 用户可编辑性 / 四层记忆系统, seed 004 记忆类型 / 记忆导出和备份).

    api = PersonaLab(owner="ana")
    api.memories.list(7, layer="archive", kind="semantic", offset=0, limit=50)   # current branch; all_branches=True
    api.memories.search(7, "怀表在哪？")          # the turn's own retrieval, every result with its score breakdown
    api.memories.show(7, 12)                     # scores, source (turn, line), how it fed replies, earlier versions
    api.memories.add(7, MemoryCreate(content="…"));  api.memories.edit(7, 12, MemoryUpdate(content="…"))
    api.memories.pin(7, 12); api.memories.unpin(7, 12); api.memories.delete(7, 12)
    api.memories.export(7) / api.memories.import_(7, text)      # JSON Lines, one memory a line, every field
    api.memories.maintain(7)                     # one step of the layer flow
    api.memories.recall(7, "暗号？", npc="laochen")  # what a script NPC witnessed (issue 26); npc=None: the character
    api.memories.steps(7); api.memories.undo(7, 3)  # the consolidation's steps, and one taken back (issue 26)

Every operation checks the instance is the caller's (`InstanceNotFound` naming it, as for an unknown id) and that a
memory id is the instance's (`NotFound`: "memory N does not exist in instance I", for another instance's memory too).
An edit keeps the fields as they were as a version (`memory_edit`) in the edit's transaction, and re-indexes the text
(keywords, BM25 tokens, vector); a pinned memory is not edited (unpin it first: a pin protects it as it is), nor is
one that is gone. Bad values are `InvalidInput` naming the field, and nothing changes.

The current branch (seed 000's tree): a memory made from a dialogue line that is not on the path from the root to the
instance's leaf belongs to a branch the user left; listing and search leave it out unless `all_branches` is asked,
as the turn's retrieval does. Memories without a line (added by hand, imported, core) are on every branch.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from personalab.graph.api.caller import Caller
from personalab.graph.api.library import check_instance
from personalab.graph.api.schemas.memory import (
    ImportResult,
    MaintenanceResult,
    MemoryCreate,
    MemoryDetail,
    MemoryPage,
    MemoryPublic,
    MemorySource,
    MemoryUpdate,
    MemoryUse,
    MemoryVersion,
    SearchHit,
    SearchResult,
    Transition,
)
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.memory_layers import RECORD_LAYER, parse_layer, parse_type
from personalab.nodes.rules.provenance import KINDS, memory_kind, types_of_kind, usage_counts
from personalab.nodes.rules.validation import bad_character
from personalab.stores.db import session_scope
from personalab.stores.files import parse_json
from personalab.stores.history import get_path_ids
from personalab.stores.memory_edits import (
    MemoryNotFoundError,
    drop_versions,
    foreign_ids,
    keep_version,
    memory_in,
    page_memories,
    pinned_among,
    scenes_of,
    versions_of,
)
from personalab.stores.memory_tables import MemoryEntry
from personalab.stores.provenance import provenance_rows
from personalab.stores.tables import Line
from sqlmodel import Session

if TYPE_CHECKING:  # numpy with them: loaded by the operations that search or index, not by listing (issue 29)
    from personalab.stores.memory import MemoryStore

DEFAULT_PAGE = 50
MAX_PAGE = 1000
MAX_IMPORT_CHARS = 20 * 1024 * 1024


def public(entry: MemoryEntry) -> MemoryPublic:
    """A stored memory as the API shows it."""
    return MemoryPublic(
        id=int(entry.id or 0),
        instance_id=entry.instance_id,
        character_id=entry.character_id,
        content=entry.content,
        type=entry.type,
        kind=memory_kind(entry.type),
        layer=entry.layer,
        turn=entry.turn,
        importance=entry.importance,
        activity=entry.activity,
        mention_count=entry.mention_count,
        last_mentioned_turn=entry.last_mentioned_turn,
        pinned=entry.pinned,
        user_edited=entry.user_edited,
        tags=list(entry.tags or []),
        keywords=list(entry.keywords or []),
        notes=entry.notes or "",
        related_character=entry.related_character or "",
        location=entry.location or "",
        line_id=entry.line_id,
        created_at=entry.created_at,
        updated_at=entry.updated_at,
        last_used_turn=entry.last_used_turn,
        last_used_at=entry.last_used_at,
        valid_to_turn=entry.valid_to_turn,
    )


def _id(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**31 - 1:
        raise InvalidInput(f"{what} must be an id (a whole number), got {value!r}")
    return value


class Memories:
    """`api.memories`: an instance's long-term memories, for one caller."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller

    # ---- plumbing ---------------------------------------------------------------------------------------------

    def _store(self) -> MemoryStore:
        # the vector store's module (chromadb) is loaded by the operations that use the store, not by importing the
        # API (issue 29: `memory list` and the listing commands start fast)
        from personalab.stores.memory import MemoryStore
        from personalab.stores.vectors import chroma_path

        return MemoryStore(db_url=self.caller.database_url, chroma_path=chroma_path())

    def _instance(self, instance_id: Any) -> int:
        """The instance id, checked: a whole number and the caller's instance (`InstanceNotFound` otherwise)."""
        instance_id = _id(instance_id, "instance")
        check_instance(instance_id, owner=self.caller.owner, database_url=self.caller.database_url)
        return int(instance_id)

    def _session(self) -> Any:
        return session_scope(self.caller.database_url)

    # ---- reading ----------------------------------------------------------------------------------------------

    def list(
        self,
        instance_id: int,
        *,
        layer: str | None = None,
        type: str | None = None,
        kind: str | None = None,
        character_id: int | None = None,
        all_branches: bool = False,
        include_record: bool = False,
        offset: int = 0,
        limit: int = DEFAULT_PAGE,
        turn_from: int | None = None,
        turn_to: int | None = None,
        scene: str | None = None,
        text: str | None = None,
        pinned: bool | None = None,
        newest_first: bool = False,
        count_limit: int | None = None,
    ) -> MemoryPage:
        """The instance's memories in id order (or newest first), one page: by seed 001's layer (or ``record``, the
        dialogue record), type, seed 004's kind (episodic / semantic / trait / goal), character, the turns made
        (`turn_from`..`turn_to`), the scene (the memory's location), a part of its text, pinned or not; the
        current branch unless `all_branches`. The dialogue record is left out unless asked for (`include_record`,
        layer or type record). `count_limit`: count the matches only up to this many (`total_capped` says the
        count stopped there)."""
        for name, bound in (("turn_from", turn_from), ("turn_to", turn_to)):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 0):
                raise InvalidInput(f"{name} must be a whole number ≥ 0, got {bound!r}")
        if turn_from is not None and turn_to is not None and turn_from > turn_to:
            raise InvalidInput(f"turn_from {turn_from} is after turn_to {turn_to}")
        if text is not None and len(text) > 500:
            raise InvalidInput("text: at most 500 characters")
        instance_id = self._instance(instance_id)
        layer_value = (
            None
            if layer is None
            else RECORD_LAYER
            if str(layer).strip().lower() == RECORD_LAYER
            else parse_layer(layer).value
        )
        types = None if type is None else [parse_type(type).value]
        if kind is not None:
            if kind not in KINDS:
                raise InvalidInput(f"memory kind {kind!r} is not one of {', '.join(KINDS)}")
            of_kind = types_of_kind(kind)
            types = of_kind if types is None else [t for t in types if t in of_kind]
        if character_id is not None:
            _id(character_id, "character")
        for name, value in (("offset", offset), ("limit", limit)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput(f"{name} must be a whole number ≥ 0, got {value!r}")
        if limit > MAX_PAGE:
            raise InvalidInput(f"limit {limit} is over the largest page, {MAX_PAGE}")
        with self._session() as session:
            path = None if all_branches else get_path_ids(session, instance_id)
            total, rows = page_memories(
                session,
                instance_id,
                path=path,
                layer=layer_value,
                types=types,
                character_id=character_id,
                include_record=include_record,
                offset=offset,
                limit=limit,
                turn_from=turn_from,
                turn_to=turn_to,
                location=scene or None,
                text=(text or "").strip() or None,
                pinned=pinned,
                newest_first=newest_first,
                count_limit=count_limit,
            )
        return MemoryPage(
            instance_id=instance_id,
            total=total,
            offset=offset,
            limit=limit,
            all_branches=all_branches,
            items=[public(row) for row in rows],
            total_capped=count_limit is not None and total > count_limit,
        )

    def _entry(self, session: Session, instance_id: int, memory_id: Any) -> MemoryEntry:
        memory_id = _id(memory_id, "memory")
        entry = memory_in(session, instance_id, memory_id)
        if entry is None:
            raise MemoryNotFoundError(f"memory {memory_id} does not exist in instance {instance_id}")
        return entry

    def get(self, instance_id: int, memory_id: int) -> MemoryPublic:
        """One memory of the instance."""
        instance_id = self._instance(instance_id)
        with self._session() as session:
            return public(self._entry(session, instance_id, memory_id))

    def show(self, instance_id: int, memory_id: int) -> MemoryDetail:
        """One memory with its scores (importance, activity, mentions; how often it was retrieved for a reply and put
        into its prompt, with its last retrieval's score breakdown), where it came from (turn, line) and its earlier
        versions."""
        instance_id = self._instance(instance_id)
        with self._session() as session:
            entry = self._entry(session, instance_id, memory_id)
            path = get_path_ids(session, instance_id)
            line = session.get(Line, entry.line_id) if entry.line_id is not None else None
            versions = versions_of(session, instance_id, int(entry.id or 0))
            records = provenance_rows(session, instance_id)
        use = MemoryUse()
        counts = usage_counts(row.data for row in records)["per_memory"].get(str(entry.id))
        if counts:
            use.retrieved, use.used = counts["retrieved"], counts["used"]
        for row in reversed(records):  # the last reply it fed
            item = next((m for m in row.data.get("memories") or [] if m.get("id") == entry.id), None)
            if item is not None:
                use.last_reply_line_id, use.last_score = row.reply_line_id, item.get("score")
                use.last_breakdown = item.get("breakdown")
                break
        return MemoryDetail(
            memory=public(entry),
            source=MemorySource(
                turn=entry.turn,
                line_id=entry.line_id,
                line_text=line.content if line is not None and line.save_id == instance_id else None,
                on_current_branch=entry.line_id is None or entry.line_id in set(path),
            ),
            use=use,
            versions=[
                MemoryVersion(
                    version=v.version,
                    content=v.content,
                    type=v.type,
                    layer=v.layer,
                    importance=v.importance,
                    tags=list(v.tags or []),
                    notes=v.notes,
                    edited_at=v.edited_at,
                )
                for v in versions
            ],
        )

    def search(
        self,
        instance_id: int,
        query: str,
        *,
        k: int = 10,
        context: str = "",
        turn: int | None = None,
        character_id: int | None = None,
        mark_mentioned: bool = False,
        all_branches: bool = False,
    ) -> SearchResult:
        """The memories a turn's retrieval (seed 001 记忆检索和匹配算法) finds for `query`, best first, each with its
        score and breakdown (relevance = keyword + vector, recency, importance, diversity, layer, mention penalty, the
        paths that found it); the current branch's unless `all_branches`. `mark_mentioned`: count them as mentioned,
        as a turn whose reply used them would."""
        instance_id = self._instance(instance_id)
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100:
            raise InvalidInput(f"k must be a whole number from 1 to 100, got {k!r}")
        from personalab.nodes.rules.retrieval import RetrievalConfig, retrieve  # numpy: searching only

        store: Any = self._store()
        if not all_branches:
            from personalab.nodes.rag_retrieve import BranchMemories  # the turn's node: LangGraph, loaded here only

            with self._session() as session:
                store = BranchMemories(store, instance_id, set(get_path_ids(session, instance_id)))
        found = retrieve(
            store,
            instance_id,
            query,
            context=context or "",
            turn=turn,
            character_id=character_id,
            config=RetrievalConfig(k=k, mark_mentioned=mark_mentioned),
        )
        data = found.to_dict()
        return SearchResult(
            instance_id=instance_id,
            character_id=data["character_id"],
            query=data["query"],
            turn=data["turn"],
            scene=data["scene"],
            weights=data["weights"],
            candidates=data["candidates"],
            items=[SearchHit(**item) for item in data["items"]],
            dropped=data["dropped"],
            all_branches=all_branches,
        )

    def scenes(self, instance_id: int) -> builtins.list[str]:
        """The scenes (locations) the instance's memories name."""
        instance_id = self._instance(instance_id)
        with self._session() as session:
            return scenes_of(session, instance_id)

    def preview(self, instance_id: int, message: str) -> dict[str, Any]:
        """What the turn's retrieval would find and inject for `message` now, without playing a turn (issue 25 "try
        it"): the same gathering as the turn's `rag_retrieve` over the current branch, its recall window and story
        state, as a record shaped like a reply's provenance (`api.replies`). Nothing is written (no line, no
        mention, no lock)."""
        from personalab.graph.api.preview import preview_retrieval

        instance_id = self._instance(instance_id)
        if not isinstance(message, str) or not message.strip():
            raise InvalidInput("message: type a message to try")
        bad = bad_character(message)
        if bad:
            raise InvalidInput(f"message contains {bad}")
        if len(message) > 4000:
            raise InvalidInput("message: at most 4000 characters")
        return preview_retrieval(instance_id, message.strip(), self.caller.database_url)

    def bulk(
        self, instance_id: int, memory_ids: Sequence[Any], action: str, *, layer: str | None = None
    ) -> builtins.list[int]:
        """One action over several memories of the instance (issue 25 bulk edit): ``pin``, ``unpin``, ``delete`` or
        ``layer`` (move to `layer`). All or nothing: every id is checked first — an id that is not a memory of
        this instance (another instance's, or none) is `InvalidInput` naming it, a pinned memory cannot change
        layer — and nothing changes. Returns the ids acted on."""
        instance_id = self._instance(instance_id)
        if action not in ("pin", "unpin", "delete", "layer"):
            raise InvalidInput(f"action {action!r} is not one of pin, unpin, delete, layer")
        ids = [_id(value, "memory") for value in memory_ids]
        if not ids:
            raise InvalidInput("memories: select at least one memory")
        if len(ids) > MAX_PAGE:
            raise InvalidInput(f"memories: at most {MAX_PAGE} at once")
        target = None
        if action == "layer":
            if not layer:
                raise InvalidInput("layer: choose the layer to move the memories to")
            target = parse_layer(layer).value
        with self._session() as session:
            foreign = foreign_ids(session, instance_id, ids)
            if foreign:
                shown = ", ".join(str(i) for i in foreign[:20])
                raise InvalidInput(f"memories {shown}: not memories of instance {instance_id}; nothing was changed")
            pinned = pinned_among(session, instance_id, ids) if action == "layer" else []
        if pinned:
            shown = ", ".join(str(i) for i in pinned[:20])
            raise InvalidInput(f"memories {shown} are pinned: unpin them before moving them; nothing was changed")
        unique = sorted(set(ids))
        for memory_id in unique:
            if action in ("pin", "unpin"):
                self.pin(instance_id, memory_id, action == "pin")
            elif action == "delete":
                self.delete(instance_id, memory_id)
            else:
                self.edit(instance_id, memory_id, MemoryUpdate(layer=target))
        return unique

    # ---- writing ----------------------------------------------------------------------------------------------

    def add(self, instance_id: int, memory: MemoryCreate) -> MemoryPublic:
        """Store a new memory (seed 001: it enters Active unless a layer is given); its type's importance unless
        given."""
        instance_id = self._instance(instance_id)
        entry = self._store().add_memory(
            instance_id,
            memory.content,
            type=memory.type,
            layer=memory.layer,
            importance=memory.importance,
            tags=memory.tags,
            turn=memory.turn,
            notes=memory.notes,
            pinned=memory.pinned,
            character_id=memory.character_id,
        )
        return public(entry)

    def edit(self, instance_id: int, memory_id: int, changes: MemoryUpdate) -> MemoryPublic:
        """Change the given fields; the memory is marked edited by the user (the layer flow leaves it alone for good)
        and its fields as they were are kept as a version. A pinned memory is refused (unpin it first)."""
        instance_id = self._instance(instance_id)
        memory_id = _id(memory_id, "memory")
        if changes.content is not None and not changes.content.strip():
            raise InvalidInput(f"memory {memory_id}: content is empty")

        def keep_old(session: Session, entry: MemoryEntry) -> None:
            if entry.pinned:
                raise InvalidInput(f"memory {memory_id} is pinned: unpin it before editing it")
            keep_version(session, entry)

        entry = self._store().edit_memory(
            instance_id,
            memory_id,
            content=changes.content,
            type=changes.type,
            layer=changes.layer,
            importance=changes.importance,
            tags=changes.tags,
            notes=changes.notes,
            before_change=keep_old,
        )
        return public(entry)

    def versions(self, instance_id: int, memory_id: int) -> builtins.list[MemoryVersion]:
        """The memory's earlier versions, oldest first."""
        return self.show(instance_id, memory_id).versions

    def pin(self, instance_id: int, memory_id: int, pinned: bool = True) -> MemoryPublic:
        """Pin (seed 001 isPinned: never deleted or moved by the system) or unpin a memory."""
        instance_id = self._instance(instance_id)
        return public(self._store().set_pinned(instance_id, _id(memory_id, "memory"), pinned))

    def unpin(self, instance_id: int, memory_id: int) -> MemoryPublic:
        return self.pin(instance_id, memory_id, False)

    def delete(self, instance_id: int, memory_id: int) -> None:
        """Delete a memory, its vector and its earlier versions."""
        instance_id = self._instance(instance_id)
        memory_id = _id(memory_id, "memory")
        self._store().delete_memory(
            instance_id, memory_id, before_commit=lambda session: drop_versions(session, instance_id, [memory_id])
        )

    def maintain(self, instance_id: int, turn: int | None = None) -> MaintenanceResult:
        """One step of the layer flow (seed 001 记忆流转) for every character of the instance."""
        instance_id = self._instance(instance_id)
        from personalab.nodes.maintenance import maintain_layers  # the turn's node: LangGraph, loaded here only

        report = maintain_layers(self._store(), instance_id, turn)
        return MaintenanceResult(
            instance_id=instance_id,
            turn=report.turn,
            transitions=[
                Transition(
                    id=t.id,
                    from_layer=t.from_layer.value,
                    to_layer=t.to_layer.value if t.to_layer else None,
                    reason=t.reason,
                )
                for t in report.transitions
            ],
            deleted=list(report.deleted),
            counts={int(c): dict(v) for c, v in report.counts.items()},
            off_branch=report.off_branch,
        )

    # ---- witnesses and consolidation (issue 26) -------------------------------------------------------------------

    def recall(self, instance_id: int, query: str, *, npc: str | None = None, k: int = 10) -> dict[str, Any]:
        """What a script NPC of the scene (`npc`, its script_role_id; None: the instance's character) remembers for
        `query`: only the memories it witnessed or was told (seed 000's lines). `InvalidInput` naming an NPC with no
        line in the instance; nothing is written. A dict: items (as `search`), witness, unwitnessed (ids left out)."""
        from personalab.nodes.rag_retrieve import recall_witnessed

        instance_id = self._instance(instance_id)
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput("query: give what to recall")
        if npc is not None and (not isinstance(npc, str) or not npc.strip()):
            raise InvalidInput(f"npc must be a script_role_id of the scene, got {npc!r}")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100:
            raise InvalidInput(f"k must be a whole number from 1 to 100, got {k!r}")
        found = recall_witnessed(self.caller.database_url, instance_id, query.strip(), npc=npc, k=k)
        return {
            "instance_id": instance_id,
            "query": found["query"],
            "witness": found["witness"],
            "items": found["items"],
            "unwitnessed": found["unwitnessed"],
        }

    def steps(self, instance_id: int, *, include_undone: bool = True) -> builtins.list[dict[str, Any]]:
        """The consolidation's steps (add / update / merge / none, with the facts they touched), oldest first."""
        from personalab.stores.consolidation import consolidation_steps

        instance_id = self._instance(instance_id)
        return consolidation_steps(self.caller.database_url, instance_id, include_undone=include_undone)

    def undo(self, instance_id: int, step_id: int) -> dict[str, Any]:
        """Take a consolidation step back: the fact it added is deleted, the one it closed is current again, the step
        is marked undone. `NotFound` naming a step that is not the instance's (nothing changes); `InvalidInput` for
        one undone already, or whose fact a later step replaced (undo that one first)."""
        from personalab.stores.consolidation import undo_step
        from personalab.stores.vectors import chroma_path

        instance_id = self._instance(instance_id)
        return undo_step(self.caller.database_url, instance_id, _id(step_id, "step"), chroma_path())

    # ---- export / import (seed 004 记忆导出和备份) ----------------------------------------------------------------

    def export(self, instance_id: int) -> str:
        """The instance's memories (all branches, the dialogue record included) as JSON Lines, every field."""
        from personalab.stores.memory_files import export_lines  # the memory store and numpy: not for listing

        return export_lines(self._store(), self._instance(instance_id))

    def export_json(self, instance_id: int) -> builtins.list[dict[str, Any]]:
        """`export` as a list of objects."""
        return [json.loads(line) for line in self.export(instance_id).splitlines() if line.strip()]

    def import_(self, instance_id: int, memories: str | Sequence[Any], *, source: str = "memories") -> ImportResult:
        """Add memories, all or nothing: JSON Lines text (as `export` writes) or a list of objects. Each is checked
        first; the first bad one is `InvalidInput` naming it ("memories line 3: …") and nothing is stored."""
        from personalab.stores.memory_files import MAX_IMPORT_LINES, check_line  # the memory store and numpy

        instance_id = self._instance(instance_id)
        if isinstance(memories, str):
            if len(memories) > MAX_IMPORT_CHARS:
                raise InvalidInput(f"{source}: more than {MAX_IMPORT_CHARS} characters")
            parsed = [
                (parse_json(line, f"{source} line {n}"), f"{source} line {n}")
                for n, line in enumerate(memories.splitlines(), start=1)
                if line.strip()
            ]
        elif isinstance(memories, Sequence):
            parsed = [(item, f"{source} item {n}") for n, item in enumerate(memories, start=1)]
        else:
            raise InvalidInput(f"{source}: expected JSON Lines text or a list of memories")
        if len(parsed) > MAX_IMPORT_LINES:
            raise InvalidInput(f"{source}: more than {MAX_IMPORT_LINES} memories")
        for data, where in parsed:  # no NUL or lone surrogate reaches the store (PostgreSQL refuses a NUL in text)
            for name, value in data.items() if isinstance(data, dict) else ():
                texts = value if isinstance(value, list) else [value]
                bad = next((bad_character(t) for t in texts if isinstance(t, str) and bad_character(t)), None)
                if bad:
                    raise InvalidInput(f"{where}: field {name!r} contains {bad}")
        checked = [check_line(data, where) for data, where in parsed]
        if not checked:
            return ImportResult(instance_id=instance_id, imported=0)
        store = self._store()
        entries = store.add_memories(instance_id, [item for item, _ in checked], restore=[r for _, r in checked])
        return ImportResult(instance_id=instance_id, imported=len(entries))
