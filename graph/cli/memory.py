"""`personalab memory ...`: the character's long-term memory of one instance (seed 001 用户可编辑性).

    memory list    --instance ID [--layer L] [--type T] [--character C] [--json]
    memory add     --instance ID [--type T] [--importance F] [--tags a,b] [--layer L] [--turn N] TEXT
    memory edit    --instance ID MEMORY_ID [TEXT] [--type T] [--importance F] [--tags a,b] [--layer L] [--notes N]
    memory pin     --instance ID MEMORY_ID        memory unpin  --instance ID MEMORY_ID
    memory delete  --instance ID MEMORY_ID
    memory search  --instance ID [--json] [-k N] [--turn N] [--context TEXT] [--no-mark] (QUERY | --queries FILE)
    memory maintain --instance ID [--turn N]
    memory export  --instance ID [FILE]           memory import --instance ID FILE

`add` prints the new id. `edit` marks the memory as edited by the user: the layer flow never touches it
again. `search` prints the ranked memories with their score breakdowns (`--json`: a list of objects with
id, content, score, breakdown, ...) and, like every retrieval, marks them as mentioned (`--no-mark`: not).
`--context` is recent dialogue for the scene analysis and tags; `--queries FILE` searches every line of the file
in one process and prints one JSON object per line (`{"query", "items"}`). `export` / `import` write and read a
memory file (JSON Lines, every field: `stores.memory_files`; import is all or nothing).
Bad input prints one line and exits 2; nothing stored changes.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from personalab.graph.cli.args import INTEGER, whole
from personalab.graph.cli.output import echo, json_text
from personalab.nodes.maintenance import maintain_layers
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.memory_layers import LAYERS, MEMORY_TYPES, RECORD_LAYER
from personalab.nodes.rules.retrieval import RetrievalConfig, RetrievalResult, retrieve
from personalab.stores.files import read_file
from personalab.stores.memory import MemoryStore, memory_to_dict
from personalab.stores.memory_files import export_lines, export_memories, import_memories
from personalab.stores.memory_tables import MemoryEntry

PREVIEW_CHARS = 60


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def _flags(entry: MemoryEntry) -> str:
    flags = [name for name, on in (("pinned", entry.pinned), ("edited", entry.user_edited)) if on]
    return f" [{', '.join(flags)}]" if flags else ""


def _line(entry: MemoryEntry) -> str:
    tags = f" #{' #'.join(entry.tags)}" if entry.tags else ""
    return (
        f"{entry.id:>6}  {entry.layer:<11} {entry.type:<12} imp {entry.importance:.2f} act {entry.activity:.2f} "
        f"turn {entry.turn} mentions {entry.mention_count}{_flags(entry)}{tags}  {_preview(entry.content)}"
    )


def memory_list(args: argparse.Namespace) -> int:
    entries = MemoryStore().list_memories(args.instance, character_id=args.character, layer=args.layer, type=args.type)
    if args.json:
        sys.stdout.write(json_text([memory_to_dict(e) for e in entries]) + "\n")
        return 0
    for entry in entries:
        echo(_line(entry))
    if not entries:
        echo(f"instance {args.instance} has no memories" + (" matching the filters" if args.layer or args.type else ""))
    return 0


def memory_add(args: argparse.Namespace) -> int:
    entry = MemoryStore().add_memory(
        args.instance,
        args.text,
        type=args.type,
        layer=args.layer,
        importance=args.importance,
        tags=args.tags,
        turn=args.turn,
        character_id=args.character,
        notes=args.notes or "",
    )
    print(entry.id)
    return 0


def memory_edit(args: argparse.Namespace) -> int:
    entry = MemoryStore().edit_memory(
        args.instance,
        args.memory_id,
        content=args.text,
        type=args.type,
        layer=args.layer,
        importance=args.importance,
        tags=args.tags,
        notes=args.notes,
    )
    echo(_line(entry))
    return 0


def memory_pin(args: argparse.Namespace) -> int:
    entry = MemoryStore().set_pinned(args.instance, args.memory_id, args.pinned)
    echo(_line(entry))
    return 0


def memory_delete(args: argparse.Namespace) -> int:
    MemoryStore().delete_memory(args.instance, args.memory_id)
    print(f"deleted memory {args.memory_id}")
    return 0


def _print_result(result: RetrievalResult) -> None:
    weights = result.scene.weights
    echo(
        f"scene {result.scene.scene.value} (weights: relevance {weights.context_relevance:.2f}, "
        f"recency {weights.recency:.2f}, importance {weights.importance:.2f}, diversity {weights.diversity:.2f}, "
        f"layer {weights.layer_priority:.2f}) · turn {result.turn} · {result.candidates} candidates"
    )
    if not result.items:
        echo("no memory found")
    for rank, item in enumerate(result.items, start=1):
        b = item.breakdown
        paths = " ".join(f"{name}#{rank}" for name, rank in b.paths.items()) or "-"
        echo(f"{rank:>3}. #{item.id} {item.score:.3f} [{item.layer}/{item.data.get('type', item.kind)}] {item.content}")
        echo(
            f"       relevance {b.context_relevance:.2f} (keyword {b.keyword:.2f}, vector {b.vector:.2f}) · "
            f"recency {b.recency:.2f} · importance {b.importance:.2f} · diversity {b.diversity:.2f} · "
            f"layer {b.layer_priority:.2f} · mention ×{b.mention_penalty:.2f} · paths {paths}"
        )
    for dropped in result.dropped:
        echo(f"     dropped #{dropped['id']}: {dropped['reason']}")


MAX_QUERIES_BYTES = 1024 * 1024


def _queries(path: str) -> list[str]:
    raw = read_file(path, MAX_QUERIES_BYTES, what="queries file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{path}: not UTF-8 text") from None
    queries = [line.strip() for line in text.splitlines() if line.strip()]
    if not queries:
        raise InvalidInput(f"{path}: no query in the file")
    return queries


def memory_search(args: argparse.Namespace) -> int:
    if (args.query is None) == (args.queries is None):
        raise InvalidInput("give either a QUERY or --queries FILE")
    config = RetrievalConfig(k=args.k, mark_mentioned=not args.no_mark)
    store = MemoryStore()

    def search(query: str) -> RetrievalResult:
        return retrieve(
            store,
            args.instance,
            query,
            context=args.context or "",
            turn=args.turn,
            character_id=args.character,
            config=config,
        )

    if args.queries is not None:
        queries = _queries(args.queries)
        for query in queries:  # one process: the model, the index and the store load once
            found = search(query)
            sys.stdout.write(
                json_text({"query": query, "items": [item.to_dict() for item in found.items]}, indent=None) + "\n"
            )
        return 0
    result = search(args.query)
    if args.json:
        items: list[dict[str, Any]] = [item.to_dict() for item in result.items]
        sys.stdout.write(json_text(items) + "\n")
        return 0
    _print_result(result)
    return 0


def memory_maintain(args: argparse.Namespace) -> int:
    report = maintain_layers(MemoryStore(), args.instance, args.turn)
    for t in report.transitions:
        echo(f"#{t.id}: {t.from_layer.value} → {t.to_layer.value if t.to_layer else 'deleted'} ({t.reason})")
    for character, counts in report.counts.items():
        layers = ", ".join(f"{layer} {count}" for layer, count in counts.items())
        echo(f"turn {report.turn}, character {character}: {layers}")
    if report.off_branch:
        echo(f"{report.off_branch} memories of branches left behind: kept as they are until their branch is current")
    return 0


def memory_export(args: argparse.Namespace) -> int:
    if args.file in (None, "-"):
        sys.stdout.write(export_lines(MemoryStore(), args.instance))
        return 0
    count = export_memories(MemoryStore(), args.instance, args.file)
    print(f"exported {count} memories to {args.file}", file=sys.stderr)
    return 0


def memory_import(args: argparse.Namespace) -> int:
    count = import_memories(MemoryStore(), args.instance, args.file)
    print(f"imported {count} memories into instance {args.instance}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    memory = sub.add_parser("memory", help="the character's long-term memory of an instance")
    actions = memory.add_subparsers(dest="memory_command", required=True, parser_class=type(memory))

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = actions.add_parser(name, help=help_text)
        parser.add_argument("--instance", type=whole, required=True, help="the conversation instance (save id)")
        parser.add_argument("--character", type=whole, default=None, help="role id (default: the instance's)")
        return parser

    def fields(parser: argparse.ArgumentParser, *, editing: bool) -> None:
        parser.add_argument("--type", choices=[t.value for t in MEMORY_TYPES], default=None if editing else "event")
        parser.add_argument("--layer", choices=[layer.value for layer in LAYERS], default=None if editing else "active")
        parser.add_argument("--importance", type=float, default=None, help="0–1 (default: by type)")
        parser.add_argument("--tags", default=None, help="comma-separated tags")
        parser.add_argument("--notes", default=None)

    listing = command("list", "list the memories")
    listing.add_argument("--layer", choices=[*(layer.value for layer in LAYERS), RECORD_LAYER])
    listing.add_argument("--type", choices=[t.value for t in MEMORY_TYPES])
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=memory_list)

    add = command("add", "add a memory; prints its id")
    fields(add, editing=False)
    add.add_argument("--turn", type=whole, default=None, help="default: the latest memory's turn")
    add.add_argument("text")
    add.set_defaults(handler=memory_add)

    edit = command("edit", "edit a memory (marks it as edited by the user)")
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
    search.add_argument("--queries", default=None, help="a file of queries, one a line: one JSON result a line")
    search.add_argument("query", nargs="?", default=None)
    search.set_defaults(handler=memory_search)

    export = command("export", "write the instance's memories as JSON Lines (every field)")
    export.add_argument("file", nargs="?", default=None, help="default: standard output")
    export.set_defaults(handler=memory_export)

    load = command("import", "add the memories of a JSON Lines memory file (all or nothing)")
    load.add_argument("file")
    load.set_defaults(handler=memory_import)

    maintain = command("maintain", "run one maintenance step of the layer flow")
    maintain.add_argument("--turn", type=whole, default=None, help="now, in turns (default: the latest memory's)")
    maintain.set_defaults(handler=memory_maintain)
