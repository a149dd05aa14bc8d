"""`personalab memory ...`: the character's long-term memory of one instance (seed 001 用户可编辑性), through
`personalab.graph.api` (`api.memories`, `api.statistics`).

    memory list    --instance ID [--layer L] [--type T] [--kind K] [--character C] [--all-branches]
                   [--offset N] [--limit N] [--json]
    memory show    --instance ID MEMORY_ID [--json]       (scores, source, how it fed replies, earlier versions)
    memory add     --instance ID [--type T] [--importance F] [--tags a,b] [--layer L] [--turn N] TEXT
    memory edit    --instance ID MEMORY_ID [TEXT] [--type T] [--importance F] [--tags a,b] [--layer L] [--notes N]
    memory pin     --instance ID MEMORY_ID        memory unpin  --instance ID MEMORY_ID
    memory delete  --instance ID MEMORY_ID
    memory search  --instance ID [--json] [-k N] [--turn N] [--context TEXT] [--no-mark] [--all-branches]
                   (QUERY | --queries FILE)
    memory maintain --instance ID [--turn N]
    memory stats   --instance ID [--all-branches] [--json]
    memory export  --instance ID [FILE]           memory import --instance ID FILE
    memory recall  --instance ID [--npc NPC] [-k N] [--json] QUERY   (what an NPC or the character witnessed)
    memory steps   --instance ID [--json]         memory undo --instance ID STEP   (consolidation, issue 26)

`list` shows the current branch's memories (`--all-branches`: every branch's), `--kind` is seed 004's kind
(episodic / semantic / trait / goal); `--type persona_change` the character's archived persona changes (seed 002
历史人格变化事件, made by core-memory maintenance; `[until turn N]`: a core-memory rollback undid it). `add` prints the new id. `edit` marks the memory as edited by the user (the
layer flow never touches it again) and keeps its old text as a version (`show` lists them); a pinned memory is
not edited (unpin it first). `search` prints the ranked memories with their score breakdowns (`--json`: a list of
objects with id, content, score, breakdown, ...) and, like every retrieval, marks them as mentioned (`--no-mark`:
not). `--context` is recent dialogue for the scene analysis and tags; `--queries FILE` searches every line of the
file in one process and prints one JSON object per line (`{"query", "items"}`). `export` / `import` write and read a
memory file (JSON Lines, every field; import is all or nothing). Bad input prints one line and exits 2; nothing
stored changes.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from personalab.graph.api.facade import PersonaLab
from personalab.graph.api.schemas.memory import MemoryCreate, MemoryPublic, MemoryUpdate, SearchResult
from personalab.graph.cli.args import INTEGER, whole
from personalab.graph.cli.output import echo, json_text
from personalab.nodes.rules.errors import InvalidInput
from pydantic import ValidationError

PREVIEW_CHARS = 60
MAX_FILE_BYTES = 20 * 1024 * 1024
LAYER_CHOICES = ("active", "situational", "event_log", "archive")
TYPE_CHOICES = (
    "conversation",
    "action",
    "observation",
    "event",
    "emotion",
    "relationship",
    "internal",
    "episodic",
    "semantic",
    "trait",
    "goal",
)
KIND_CHOICES = ("episodic", "semantic", "trait", "goal")


def _api() -> PersonaLab:
    return PersonaLab()


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def _flags(entry: MemoryPublic) -> str:
    flags = [name for name, on in (("pinned", entry.pinned), ("edited", entry.user_edited)) if on]
    if entry.valid_to_turn is not None:  # replaced, or a persona change a core-memory rollback undid
        flags.append(f"until turn {entry.valid_to_turn}")
    return f" [{', '.join(flags)}]" if flags else ""


def _line(entry: MemoryPublic) -> str:
    tags = f" #{' #'.join(entry.tags)}" if entry.tags else ""
    return (
        f"{entry.id:>6}  {entry.layer:<11} {entry.type:<12} imp {entry.importance:.2f} act {entry.activity:.2f} "
        f"turn {entry.turn} mentions {entry.mention_count}{_flags(entry)}{tags}  {_preview(entry.content)}"
    )


def _model(kind: Any, **fields: Any) -> Any:
    """A request model from the command's options; pydantic's refusal as one `InvalidInput` naming the option."""
    try:
        return kind(**fields)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error.get("loc", ())) or "input"
        raise InvalidInput(f"{where}: {error.get('msg')}") from None


def _tags(raw: str | None) -> list[str] | None:
    if raw is None:
        return None
    return [tag.strip() for tag in raw.replace("，", ",").split(",") if tag.strip()]


def _read_text(path: str, what: str) -> str:
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            raise InvalidInput(f"{path}: {what} over {MAX_FILE_BYTES} bytes")
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: not UTF-8 text (byte {exc.start})") from None


def memory_list(args: argparse.Namespace) -> int:
    page = _api().memories.list(
        args.instance,
        layer=args.layer,
        type=args.type,
        kind=args.kind,
        character_id=args.character,
        all_branches=args.all_branches,
        include_record=args.layer == "record",
        offset=args.offset,
        limit=args.limit,
    )
    if args.json:
        sys.stdout.write(json_text([item.model_dump(mode="json") for item in page.items]) + "\n")
        return 0
    for entry in page.items:
        echo(_line(entry))
    if not page.items:
        filtered = args.layer or args.type or args.kind
        echo(f"instance {args.instance} has no memories" + (" matching the filters" if filtered else ""))
        if not filtered and page.offset == 0:
            # the dialogue record is memory too (retrieval searches it) but is listed only when asked for
            record = _api().memories.list(
                args.instance, layer="record", all_branches=args.all_branches, character_id=args.character, limit=0
            )
            if record.total:
                echo(f"({record.total} exchange(s) in the dialogue record: --layer record lists them)")
    elif page.total > page.offset + len(page.items):
        echo(f"… {page.total - page.offset - len(page.items)} more (--offset {page.offset + len(page.items)})")
    return 0


def memory_show(args: argparse.Namespace) -> int:
    detail = _api().memories.show(args.instance, args.memory_id)
    if args.json:
        sys.stdout.write(json_text(detail.model_dump(mode="json")) + "\n")
        return 0
    m, source, use = detail.memory, detail.source, detail.use
    echo(_line(m))
    echo(f"content: {m.content}")
    echo(f"kind {m.kind} · keywords {', '.join(m.keywords) or '-'} · last mentioned turn {m.last_mentioned_turn}")
    where = f"line {source.line_id}" if source.line_id is not None else "no line (added, imported or curated)"
    branch = "current branch" if source.on_current_branch else "a branch left behind"
    echo(f"made at turn {source.turn} from {where} ({branch})" + (f": {source.line_text}" if source.line_text else ""))
    echo(f"fed replies: retrieved {use.retrieved} times, in the prompt {use.used} times")
    if use.last_reply_line_id is not None and use.last_score is not None:
        echo(f"last retrieved for reply line {use.last_reply_line_id} with score {use.last_score:.3f}")
    for version in detail.versions:
        echo(f"version {version.version} (replaced {version.edited_at:%Y-%m-%d %H:%M}): {version.content}")
    return 0


def memory_add(args: argparse.Namespace) -> int:
    memory = _model(
        MemoryCreate,
        content=args.text,
        type=args.type,
        layer=args.layer,
        importance=args.importance,
        tags=_tags(args.tags) or [],
        turn=args.turn,
        notes=args.notes or "",
        character_id=args.character,
    )
    print(_api().memories.add(args.instance, memory).id)
    return 0


def memory_edit(args: argparse.Namespace) -> int:
    changes = _model(
        MemoryUpdate,
        content=args.text,
        type=args.type,
        layer=args.layer,
        importance=args.importance,
        tags=_tags(args.tags),
        notes=args.notes,
    )
    echo(_line(_api().memories.edit(args.instance, args.memory_id, changes)))
    return 0


def memory_pin(args: argparse.Namespace) -> int:
    echo(_line(_api().memories.pin(args.instance, args.memory_id, args.pinned)))
    return 0


def memory_delete(args: argparse.Namespace) -> int:
    _api().memories.delete(args.instance, args.memory_id)
    print(f"deleted memory {args.memory_id}")
    return 0


def _print_result(result: SearchResult) -> None:
    weights = result.weights
    echo(
        f"scene {result.scene} (weights: relevance {weights['context_relevance']:.2f}, "
        f"recency {weights['recency']:.2f}, importance {weights['importance']:.2f}, "
        f"diversity {weights['diversity']:.2f}, layer {weights['layer_priority']:.2f}) · turn {result.turn} · "
        f"{result.candidates} candidates"
    )
    if not result.items:
        echo("no memory found")
    for rank, item in enumerate(result.items, start=1):
        b = item.breakdown
        paths = " ".join(f"{name}#{place}" for name, place in (b.get("paths") or {}).items()) or "-"
        kind = (item.model_extra or {}).get("type", item.kind)
        echo(f"{rank:>3}. #{item.id} {item.score:.3f} [{item.layer}/{kind}] {item.content}")
        echo(
            f"       relevance {b['context_relevance']:.2f} (keyword {b['keyword']:.2f}, vector {b['vector']:.2f}) · "
            f"recency {b['recency']:.2f} · importance {b['importance']:.2f} · diversity {b['diversity']:.2f} · "
            f"layer {b['layer_priority']:.2f} · mention ×{b['mention_penalty']:.2f} · paths {paths}"
        )
    for dropped in result.dropped:
        echo(f"     dropped #{dropped['id']}: {dropped['reason']}")


def _queries(path: str) -> list[str]:
    queries = [line.strip() for line in _read_text(path, "queries file").splitlines() if line.strip()]
    if not queries:
        raise InvalidInput(f"{path}: no query in the file")
    return queries


def memory_search(args: argparse.Namespace) -> int:
    if (args.query is None) == (args.queries is None):
        raise InvalidInput("give either a QUERY or --queries FILE")
    memories = _api().memories

    def search(query: str) -> SearchResult:
        return memories.search(
            args.instance,
            query,
            k=args.k,
            context=args.context or "",
            turn=args.turn,
            character_id=args.character,
            mark_mentioned=not args.no_mark,
            all_branches=args.all_branches,
        )

    if args.queries is not None:
        for query in _queries(args.queries):  # one process: the model, the index and the store load once
            found = search(query)
            items = [item.model_dump(mode="json") for item in found.items]
            sys.stdout.write(json_text({"query": query, "items": items}, indent=None) + "\n")
        return 0
    result = search(args.query)
    if args.json:
        sys.stdout.write(json_text([item.model_dump(mode="json") for item in result.items]) + "\n")
        return 0
    _print_result(result)
    return 0


def memory_recall(args: argparse.Namespace) -> int:
    """`memory recall --npc ID QUERY` (issue 26): what an NPC of the scene (or the character) witnessed."""
    found = _api().memories.recall(args.instance, args.query, npc=args.npc, k=args.k)
    if args.json:
        sys.stdout.write(json_text(found) + "\n")
        return 0
    echo(f"{found['witness']} recalls {len(found['items'])} (left out, not witnessed: {len(found['unwitnessed'])})")
    for rank, item in enumerate(found["items"], start=1):
        echo(f"{rank:>3}. #{item['id']} {item['score']:.3f} {item['content']}")
    return 0


def memory_steps(args: argparse.Namespace) -> int:
    """`memory steps` (issue 26): the consolidation's steps, oldest first."""
    steps = _api().memories.steps(args.instance)
    if args.json:
        sys.stdout.write(json_text(steps, default=str) + "\n")
        return 0
    if not steps:
        echo("no consolidation step")
    for step in steps:
        undone = " (undone)" if step.get("undone_at") else ""
        echo(
            f"step {step['id']} turn {step['turn']}: {step['action']} ({step['decided_by']}) "
            f"memory {step.get('memory_id')} (target {step.get('target_id')}){undone}"
        )
    return 0


def memory_undo(args: argparse.Namespace) -> int:
    """`memory undo STEP` (issue 26): take a consolidation step back."""
    step = _api().memories.undo(args.instance, args.step)
    echo(f"step {step['id']} undone: {step['action']} of memory {step.get('memory_id')} taken back")
    return 0


def memory_maintain(args: argparse.Namespace) -> int:
    report = _api().memories.maintain(args.instance, args.turn)
    for t in report.transitions:
        echo(f"#{t.id}: {t.from_layer} → {t.to_layer or 'deleted'} ({t.reason})")
    for character, counts in report.counts.items():
        layers = ", ".join(f"{layer} {count}" for layer, count in counts.items())
        echo(f"turn {report.turn}, character {character}: {layers}")
    if report.off_branch:
        echo(f"{report.off_branch} memories of branches left behind: kept as they are until their branch is current")
    return 0


def memory_stats(args: argparse.Namespace) -> int:
    stats = _api().statistics.memory(args.instance, all_branches=args.all_branches)
    if args.json:
        sys.stdout.write(json_text(stats.model_dump(mode="json")) + "\n")
        return 0

    def counts(data: dict[str, int]) -> str:
        return ", ".join(f"{key} {n}" for key, n in sorted(data.items())) or "-"

    echo(f"instance {stats.instance_id}: {stats.total} memories ({stats.pinned} pinned, {stats.edited} edited)")
    echo(f"by layer: {counts(stats.by_layer)}")
    echo(f"by type: {counts(stats.by_type)}")
    echo(f"by kind: {counts(stats.by_kind)}")
    echo(f"by branch: {counts(stats.by_branch)}")
    echo(f"replies with provenance: {stats.replies_with_provenance}")
    for name in ("kind", "layer", "trigger", "worldbook_trigger"):
        used = stats.retrieval.get(name) or {}
        shown = ", ".join(f"{key} {c['retrieved']}/{c['used']}" for key, c in sorted(used.items())) or "-"
        echo(f"retrieved/used by {name}: {shown}")
    if stats.growth:
        last = stats.growth[-1]
        echo(f"growth: {len(stats.growth)} turns with new memories, {last['total']} in all by turn {last['turn']}")
    return 0


def memory_export(args: argparse.Namespace) -> int:
    text = _api().memories.export(args.instance)
    if args.file in (None, "-"):
        sys.stdout.write(text)
        return 0
    if os.path.isdir(args.file):
        raise InvalidInput(f"{args.file}: is a folder")
    try:
        with open(args.file, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise InvalidInput(f"{args.file}: cannot write the memory file ({exc.strerror or exc})") from None
    print(f"exported {text.count(chr(10))} memories to {args.file}", file=sys.stderr)
    return 0


def memory_import(args: argparse.Namespace) -> int:
    text = _read_text(args.file, "memory file")
    result = _api().memories.import_(args.instance, text, source=args.file)
    print(f"imported {result.imported} memories into instance {args.instance}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    memory = sub.add_parser("memory", help="the character's long-term memory of an instance")
    actions = memory.add_subparsers(dest="memory_command", required=True, parser_class=type(memory))

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, help=help_text)
        parser.add_argument("--instance", type=whole, required=True, help="the conversation instance id")
        parser.add_argument("--character", type=whole, default=None, help="character id (default: the instance's)")
        return parser

    def fields(parser: argparse.ArgumentParser, *, editing: bool) -> None:
        parser.add_argument("--type", choices=TYPE_CHOICES, default=None if editing else "event")
        parser.add_argument("--layer", choices=LAYER_CHOICES, default=None if editing else "active")
        parser.add_argument("--importance", type=float, default=None, help="0–1 (default: by type)")
        parser.add_argument("--tags", default=None, help="comma-separated tags")
        parser.add_argument("--notes", default=None)

    listing = command("list", "list the memories (current branch)")
    listing.add_argument("--layer", choices=[*LAYER_CHOICES, "record"])
    listing.add_argument("--type", choices=[*TYPE_CHOICES, "record", "persona_change"])
    listing.add_argument("--kind", choices=KIND_CHOICES, help="seed 004's kind")
    listing.add_argument("--all-branches", action="store_true", help="every branch's memories")
    listing.add_argument("--offset", type=whole, default=0)
    listing.add_argument("--limit", type=whole, default=1000, help="page size (default and most: 1000)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=memory_list)

    show = command("show", "one memory: scores, source, how it fed replies, earlier versions")
    show.add_argument("memory_id", type=whole)
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=memory_show)

    add = command("add", "add a memory; prints its id")
    fields(add, editing=False)
    add.add_argument("--turn", type=whole, default=None, help="default: the latest memory's turn")
    add.add_argument("text")
    add.set_defaults(handler=memory_add)

    edit = command("edit", "edit a memory (marks it as edited by the user; the old text is kept as a version)")
    fields(edit, editing=True)
    edit.add_argument("memory_id", type=whole)
    edit.add_argument("text", nargs="?", default=None)
    edit.set_defaults(handler=memory_edit)

    for name, pinned in (("pin", True), ("unpin", False)):
        pin = command(name, f"{name} a memory (a pinned memory is never deleted by the system)")
        pin.add_argument("memory_id", type=whole)
        pin.set_defaults(handler=memory_pin, pinned=pinned)

    remove = command("delete", "delete a memory")
    remove.add_argument("memory_id", type=whole)
    remove.set_defaults(handler=memory_delete)

    search = command("search", "ranked memories for a query, with score breakdowns")
    search.add_argument("--json", action="store_true")
    search.add_argument("-k", type=INTEGER, default=10, help="how many (default 10)")
    search.add_argument("--turn", type=whole, default=None, help="now, in turns (default: the latest memory's)")
    search.add_argument("--context", default=None, help="recent dialogue, for scene analysis and tags")
    search.add_argument("--no-mark", action="store_true", help="do not mark the results as mentioned")
    search.add_argument("--all-branches", action="store_true", help="search every branch's memories")
    search.add_argument("--queries", default=None, help="a file of queries, one a line: one JSON result a line")
    search.add_argument("query", nargs="?", default=None)
    search.set_defaults(handler=memory_search)

    stats = command("stats", "statistics of the instance's memory (seed 004 记忆统计信息)")
    stats.add_argument("--all-branches", action="store_true", help="count every branch's replies")
    stats.add_argument("--json", action="store_true")
    stats.set_defaults(handler=memory_stats)

    export = command("export", "write the instance's memories as JSON Lines (every field)")
    export.add_argument("file", nargs="?", default=None, help="default: standard output")
    export.set_defaults(handler=memory_export)

    load = command("import", "add the memories of a JSON Lines memory file (all or nothing)")
    load.add_argument("file")
    load.set_defaults(handler=memory_import)

    recall = command("recall", "what a script NPC (or the character) witnessed, for a query (issue 26)")
    recall.add_argument("--npc", default=None, help="the NPC's script_role_id (default: the instance's character)")
    recall.add_argument("-k", type=INTEGER, default=10, help="how many (default 10)")
    recall.add_argument("--json", action="store_true")
    recall.add_argument("query")
    recall.set_defaults(handler=memory_recall)

    steps = command("steps", "the consolidation's steps (add / update / merge / none), oldest first (issue 26)")
    steps.add_argument("--json", action="store_true")
    steps.set_defaults(handler=memory_steps)

    undo = command("undo", "take a consolidation step back (docs/memory.md)")
    undo.add_argument("step", type=whole, help="the step's id (memory steps)")
    undo.set_defaults(handler=memory_undo)

    maintain = command("maintain", "run one maintenance step of the layer flow")
    maintain.add_argument("--turn", type=whole, default=None, help="now, in turns (default: the latest memory's)")
    maintain.set_defaults(handler=memory_maintain)
