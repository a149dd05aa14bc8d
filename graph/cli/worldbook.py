"""`personalab knowledge ...` and `personalab worldbook ...`: add, list, edit, import and export entries, through
`personalab.graph.api` only (`api.knowledge`, `api.worldbook`).

Scope options (both command groups): none = global, `--character ID` = one character's entries,
`--instance ID` = one conversation instance's entries. `list --visible` shows everything a character or an
instance sees (global + character + own). Export writes a PersonaLab JSON file (or stdout); import reads
that, and for the world book also SillyTavern world-info / lorebook files and character-card lorebooks.
An import is all or nothing: a bad file changes nothing and prints one line naming the entry and field.
An import reads a regular file only, at most its size limit; an export writes a new regular file atomically (a
plain file is replaced; a device, directory, FIFO or symlink is refused).

Single world-book entries (issue 23): `worldbook edit ID --keyword … --content … --priority N --probability P
…`, `worldbook enable|disable|delete ID`, `worldbook reorder ID=ORDER …` (order values: higher first).
The knowledge library's order (issue 25): `knowledge move ID up|down`, `knowledge reorder ID=ORDER …` (lower first:
the order entries are injected in).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from personalab.graph.api.facade import PersonaLab
from personalab.graph.api.worldbook import KINDS, POSITIONS, SELECTIVE_LOGICS, SETTING_FIELDS, TRIGGER_TYPES
from personalab.graph.cli.args import COUNT, ID, INTEGER
from personalab.graph.cli.output import echo, json_text
from personalab.nodes.rules.errors import InvalidInput

PREVIEW_CHARS = 60


def _scope(args: argparse.Namespace) -> dict[str, int | None]:
    return {"character_id": args.character, "instance_id": args.instance}


def _label(args: argparse.Namespace) -> str:
    if args.instance is not None:
        return f"instance {args.instance}"
    return f"character {args.character}" if args.character is not None else "global"


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def _emit_export(data: dict[str, Any], target: str | None, what: str) -> int:
    count = len(data["entries"])  # a list (ours) or an object keyed by uid (SillyTavern's)
    if target is None or target == "-":
        sys.stdout.write(json_text(data) + "\n")
        return 0
    # a plain file is replaced as before; a device, a directory, a FIFO or a symlink is refused (one line)
    PersonaLab().worldbook.export_file(target, data)
    echo(f"exported {count} {what} to {target}")
    return 0


# --- knowledge ------------------------------------------------------------------------------------


def knowledge_add(args: argparse.Namespace) -> int:
    entry = PersonaLab().knowledge.add(
        args.tag,
        args.content,
        importance=args.importance,
        keywords=args.keyword or (),
        enabled=not args.disabled,
        **_scope(args),
    )
    echo(f"added knowledge entry {entry['id']} ({entry['scope']}): [{entry['tag']}] {_preview(entry['content'])}")
    return 0


def knowledge_list(args: argparse.Namespace) -> int:
    entries = PersonaLab().knowledge.list(visible=args.visible, character_id=args.character, instance_id=args.instance)
    if args.json:
        keys = ("id", "order", "scope", "tag", "content", "importance", "keywords", "enabled", "user_edited")
        print(json_text([{key: e[key] for key in keys} for e in entries]))
        return 0
    if not entries:
        echo(f"no knowledge entries ({_label(args)})")
    for e in entries:
        flags = "" if e["enabled"] else ", disabled"
        keywords = f", keywords: {', '.join(e['keywords'])}" if e["keywords"] else ""
        echo(
            f"#{e['id']} [{e['tag']}] {_preview(e['content'])} ({e['scope']}, order {e['order']}, importance "
            f"{e['importance']:.2f}{keywords}{flags})"
        )
    return 0


def knowledge_import(args: argparse.Namespace) -> int:
    report = PersonaLab().knowledge.import_file(args.file, **_scope(args))
    echo(f"{args.file} → {report['scope']}: {report['summary']}")
    return 0


def knowledge_export(args: argparse.Namespace) -> int:
    data = PersonaLab().knowledge.export(with_keywords=args.with_keywords, **_scope(args))
    return _emit_export(data, args.file, "knowledge entries")


def _show_knowledge(view: dict[str, Any], done: str, as_json: bool) -> int:
    if as_json:
        print(json_text(view))
        return 0
    state = "" if view["enabled"] else ", disabled"
    echo(f"{done} knowledge entry {view['id']} ({view['scope']}{state}): [{view['tag']}] {_preview(view['content'])}")
    return 0


def knowledge_edit(args: argparse.Namespace) -> int:
    changes: dict[str, Any] = {}
    if args.content is not None:
        changes["content"] = args.content
    if args.tag is not None:
        changes["tag"] = args.tag
    if args.importance is not None:
        changes["importance"] = args.importance
    if args.keyword is not None or args.no_keywords:
        changes["keywords"] = [] if args.no_keywords else args.keyword
    return _show_knowledge(PersonaLab().knowledge.edit(args.id, **changes), "edited", args.json)


def knowledge_delete(args: argparse.Namespace) -> int:
    PersonaLab().knowledge.delete(args.id)
    echo(f"deleted knowledge entry {args.id}")
    return 0


def knowledge_enable(args: argparse.Namespace) -> int:
    enabled = args.knowledge_command == "enable"
    knowledge = PersonaLab().knowledge
    view = knowledge.enable(args.id) if enabled else knowledge.disable(args.id)
    return _show_knowledge(view, "enabled" if enabled else "disabled", args.json)


def knowledge_tag(args: argparse.Namespace) -> int:
    if not (args.add or args.remove):
        raise InvalidInput("knowledge tag: give --add TAG and/or --remove TAG")
    view = PersonaLab().knowledge.tag(args.id, add=args.add or (), remove=args.remove or ())
    return _show_knowledge(view, "tagged", args.json)


# --- world book -----------------------------------------------------------------------------------


def _temporal(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "min_turn": args.min_turn,
        "max_turn": args.max_turn,
        "min_gap_seconds": args.min_gap,
        "max_gap_seconds": args.max_gap,
        "min_turns_since_fired": args.every,
    }


def worldbook_add(args: argparse.Namespace) -> int:
    entry = PersonaLab().worldbook.add(
        args.content,
        keywords=args.keyword or (),
        secondary_keywords=args.secondary or (),
        selective_logic=args.logic,
        trigger_type=args.trigger,
        kind=args.kind,
        priority=args.priority,
        constant=args.constant,
        enabled=not args.disabled,
        position=args.position,
        title=args.title,
        relevance_weight=args.weight,
        emotional_weight=args.emotional_weight,
        time_decay_factor=args.decay,
        emotions=args.emotion or (),
        temporal=_temporal(args),
        **_scope(args),
    )
    how = "constant" if entry["constant"] else entry["trigger_type"]
    echo(f"added world-book entry {entry['id']} ({entry['scope']}, {how}): {_preview(entry['content'])}")
    return 0


def _entry_line(e: dict[str, Any]) -> str:
    how = "constant" if e["constant"] else e["trigger_type"]
    what = ""
    if e["keywords"]:
        what = f", keys: {', '.join(e['keywords'])}"
    if e["emotions"]:
        what += f", emotions: {', '.join(e['emotions'])}"
    window = e["temporal"]
    if window and e["trigger_type"] == "temporal":
        what += ", " + ", ".join(f"{k}={v:g}" for k, v in window.items())
    flags = (f", position {e['position']}" if e["position"] else "") + ("" if e["enabled"] else ", disabled")
    flags += f", probability {e['probability']:g}%" if e["probability"] != 100 else ""
    title = f"{e['title']}: " if e["title"] else ""
    return (
        f"#{e['id']} {title}{_preview(e['content'])} ({e['scope']}, {how}, {e['kind']}, priority {e['priority']}"
        f"{what}{flags})"
    )


def worldbook_list(args: argparse.Namespace) -> int:
    entries = PersonaLab().worldbook.list(visible=args.visible, **_scope(args))
    if args.json:
        print(json_text([{k: v for k, v in e.items() if k not in ("probability", "source_format")} for e in entries]))
        return 0
    if not entries:
        echo(f"no world-book entries ({_label(args)})")
    for e in entries:
        echo(_entry_line(e))
    return 0


def worldbook_import(args: argparse.Namespace) -> int:
    report = PersonaLab().worldbook.import_file(args.file, **_scope(args))
    echo(f"{args.file} → {report['scope']}: {report['summary']}")
    return 0


def worldbook_export(args: argparse.Namespace) -> int:
    data = PersonaLab().worldbook.export(args.format, **_scope(args))
    return _emit_export(data, args.file, "world-book entries")


def worldbook_settings(args: argparse.Namespace) -> int:
    """Show or set the world book's settings of one scope (issue 15): global, a character's book, an instance."""
    changes = {name: getattr(args, name) for name in SETTING_FIELDS if getattr(args, name) is not None}
    for name in args.unset or ():
        changes[name] = None
    book = PersonaLab().worldbook
    if changes or args.clear:
        shown = book.set_settings(changes, clear=args.clear, **_scope(args))
    else:
        shown = book.settings(**_scope(args))
    if args.json:
        print(json_text(shown))
        return 0
    echo(f"world-book settings of {shown['scope']} (set here → in effect):")
    for name in SETTING_FIELDS:
        value, used = shown["set"][name], shown["effective"][name]
        echo(f"  {name}: {'-' if value is None else value} → {'none' if used is None else used}")
    return 0


def _edit_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The options given to `worldbook edit`, as the entry's fields."""
    changes: dict[str, Any] = {}
    simple = {
        "content": "content",
        "title": "title",
        "logic": "selective_logic",
        "trigger": "trigger_type",
        "kind": "kind",
        "priority": "priority",
        "position": "position",
        "weight": "relevance_weight",
        "emotional_weight": "emotional_weight",
        "decay": "time_decay_factor",
        "probability": "probability",
        "constant": "constant",
        "enabled": "enabled",
    }
    for option, field in simple.items():
        if getattr(args, option) is not None:
            changes[field] = getattr(args, option)
    if args.default_position:
        changes["position"] = None
    for option, field in (("keyword", "keywords"), ("secondary", "secondary_keywords"), ("emotion", "emotions")):
        if getattr(args, f"no_{option}"):
            changes[field] = []
        elif getattr(args, option) is not None:
            changes[field] = getattr(args, option)
    window = {name: value for name, value in _temporal(args).items() if value is not None}
    if window:
        changes["temporal"] = window
    return changes


def worldbook_edit(args: argparse.Namespace) -> int:
    entry = PersonaLab().worldbook.edit(args.id, **_edit_changes(args))
    if args.json:
        print(json_text(entry))
        return 0
    echo("edited " + _entry_line(entry))
    return 0


def worldbook_switch(args: argparse.Namespace) -> int:
    book = PersonaLab().worldbook
    entry = book.enable(args.id) if args.worldbook_command == "enable" else book.disable(args.id)
    echo(f"{args.worldbook_command}d world-book entry {entry['id']} ({entry['scope']}): {_preview(entry['content'])}")
    return 0


def worldbook_delete(args: argparse.Namespace) -> int:
    PersonaLab().worldbook.delete(args.id)
    echo(f"deleted world-book entry {args.id}")
    return 0


def _orders(items: list[str], command: str) -> dict[int, int]:
    """`ID=ORDER` arguments as {id: order}; one line naming the bad one."""
    orders: dict[int, int] = {}
    for item in items:
        entry, sep, order = item.partition("=")
        try:
            orders[ID(entry.strip())] = INTEGER(order.strip())
        except (ValueError, argparse.ArgumentTypeError):
            raise InvalidInput(f"{command}: {item!r} is not ID=ORDER (whole numbers)") from None
        if not sep:
            raise InvalidInput(f"{command}: {item!r} is not ID=ORDER")
    return orders


def knowledge_reorder(args: argparse.Namespace) -> int:
    for entry in PersonaLab().knowledge.reorder(_orders(args.orders, "knowledge reorder")):
        echo(f"#{entry['id']} order {entry['order']}: [{entry['tag']}] {_preview(entry['content'])}")
    return 0


def knowledge_move(args: argparse.Namespace) -> int:
    entries = PersonaLab().knowledge.move(args.id, args.direction)
    if args.json:
        print(json_text(entries))
        return 0
    for entry in entries:
        mark = " ←" if entry["id"] == args.id else ""
        echo(f"#{entry['id']} order {entry['order']}: [{entry['tag']}] {_preview(entry['content'])}{mark}")
    return 0


def worldbook_reorder(args: argparse.Namespace) -> int:
    orders = _orders(args.orders, "worldbook reorder")
    for entry in PersonaLab().worldbook.reorder(orders):
        echo(f"#{entry['id']} priority {entry['priority']}: {_preview(entry['content'])}")
    return 0


# --- parsers --------------------------------------------------------------------------------------


def _add_scope(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--character", type=ID, metavar="ID", help="a character's entries (role id)")
    group.add_argument("--instance", type=ID, metavar="ID", help="a conversation instance's entries (save id)")


def _add_list(sub: Any, handler: Any, what: str) -> None:
    p = sub.add_parser("list", help=f"list {what}")
    _add_scope(p)
    p.add_argument("--visible", action="store_true", help="everything the character / instance sees, with global")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=handler)


def _add_import_export(sub: Any, imp: Any, exp: Any, what: str, formats: str) -> argparse.ArgumentParser:
    p = sub.add_parser("import", help=f"import {what} from a JSON file ({formats}); all or nothing")
    p.add_argument("file", help="JSON file (a regular file)")
    _add_scope(p)
    p.set_defaults(handler=imp)
    p = sub.add_parser("export", help=f"export {what} of one scope as JSON")
    p.add_argument(
        "file", nargs="?", help="output file, written whole or not at all; a plain file is replaced (default: stdout)"
    )
    _add_scope(p)
    p.set_defaults(handler=exp)
    return p


def global_export(args: argparse.Namespace) -> int:
    """The global knowledge and world book (entries and settings) in one file (issue 27)."""
    data = PersonaLab().admin.export_global()
    if args.file is None or args.file == "-":
        sys.stdout.write(json_text(data) + "\n")
        return 0
    PersonaLab().worldbook.export_file(args.file, data)
    knowledge, book = len(data["knowledge"]["entries"]), len(data["worldbook"]["entries"])
    echo(f"exported {knowledge} global knowledge entries and {book} global world-book entries to {args.file}")
    return 0


def global_import(args: argparse.Namespace) -> int:
    report = PersonaLab().admin.import_global_file(args.file)
    echo(f"{args.file} → global: {report['summary']}")
    return 0


def _register_global(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser(
        "global", help="the global knowledge and world book (entries and settings) as one file: backup and restore"
    )
    gsub = group.add_subparsers(dest="global_command", required=True, parser_class=type(group))
    p = gsub.add_parser("export", help="write the global knowledge and world book to one JSON file (- for stdout)")
    p.add_argument("file", nargs="?", help="output file, written whole or not at all (default: stdout)")
    p.set_defaults(handler=global_export)
    p = gsub.add_parser("import", help="add a global export's entries and settings; all or nothing")
    p.add_argument("file", help="JSON file written by `personalab global export`")
    p.set_defaults(handler=global_import)


def register(sub: argparse._SubParsersAction) -> None:
    _register_global(sub)
    knowledge = sub.add_parser("knowledge", help="the knowledge library (global / character / instance facts)")
    ksub = knowledge.add_subparsers(dest="knowledge_command", required=True, parser_class=type(knowledge))
    p = ksub.add_parser("add", help="add a knowledge entry")
    p.add_argument("content", help="the text injected as world knowledge")
    p.add_argument("--tag", required=True, help="tag shown as [tag] (several: comma-separated)")
    p.add_argument("--importance", type=float, default=0.5, help="0..1 (default 0.5)")
    p.add_argument("--keyword", action="append", metavar="WORD", help="keyword raising relevance (repeatable)")
    p.add_argument("--disabled", action="store_true", help="store it disabled")
    _add_scope(p)
    p.set_defaults(handler=knowledge_add)
    _add_list(ksub, knowledge_list, "knowledge entries")
    exp = _add_import_export(ksub, knowledge_import, knowledge_export, "knowledge entries", "a PersonaLab export")
    exp.add_argument("--with-keywords", action="store_true", help="include the hand-set keywords")
    p = ksub.add_parser("edit", help="change a knowledge entry (marks it edited by the user)")
    p.add_argument("id", type=ID, help="the entry's id")
    p.add_argument("--content", help="new text")
    p.add_argument("--tag", help="new tags (comma-separated)")
    p.add_argument("--importance", type=float, help="0..1")
    p.add_argument("--keyword", action="append", metavar="WORD", help="replace the keywords (repeatable)")
    p.add_argument("--no-keywords", action="store_true", help="remove every keyword")
    p.add_argument("--json", action="store_true", help="print the entry as JSON")
    p.set_defaults(handler=knowledge_edit)
    p = ksub.add_parser("delete", help="delete a knowledge entry")
    p.add_argument("id", type=ID, help="the entry's id")
    p.set_defaults(handler=knowledge_delete)
    for name, what in (("enable", "inject it again when relevant"), ("disable", "keep it, never inject it")):
        p = ksub.add_parser(name, help=f"{name} a knowledge entry ({what})")
        p.add_argument("id", type=ID, help="the entry's id")
        p.add_argument("--json", action="store_true", help="print the entry as JSON")
        p.set_defaults(handler=knowledge_enable)
    p = ksub.add_parser("tag", help="add or remove tags of a knowledge entry")
    p.add_argument("id", type=ID, help="the entry's id")
    p.add_argument("--add", action="append", metavar="TAG", help="add a tag (repeatable)")
    p.add_argument("--remove", action="append", metavar="TAG", help="remove a tag (repeatable)")
    p.add_argument("--json", action="store_true", help="print the entry as JSON")
    p.set_defaults(handler=knowledge_tag)
    p = ksub.add_parser("move", help="move a knowledge entry one place up or down in its scope (injection order)")
    p.add_argument("id", type=ID, help="the entry's id")
    p.add_argument("direction", choices=("up", "down"), help="up: injected earlier; down: later")
    p.add_argument("--json", action="store_true", help="print the scope's entries as JSON")
    p.set_defaults(handler=knowledge_move)
    p = ksub.add_parser("reorder", help="set knowledge entries' order values (lower first), all or nothing")
    p.add_argument("orders", nargs="+", metavar="ID=ORDER", help="an entry id and its order value (whole numbers)")
    p.set_defaults(handler=knowledge_reorder)

    book = sub.add_parser("worldbook", help="the world book (triggered lore entries)")
    wsub = book.add_subparsers(dest="worldbook_command", required=True, parser_class=type(book))
    p = wsub.add_parser("add", help="add a world-book entry")
    p.add_argument("content", help="the text injected when the entry fires")
    p.add_argument("--keyword", action="append", metavar="WORD", help="primary keyword (repeatable)")
    p.add_argument("--secondary", action="append", metavar="WORD", help="secondary keyword (repeatable)")
    p.add_argument("--logic", choices=SELECTIVE_LOGICS, default="and_any", help="secondary keyword logic")
    p.add_argument("--trigger", choices=TRIGGER_TYPES, default="keyword", help="trigger type (default keyword)")
    p.add_argument("--kind", choices=KINDS, default="semantic", help="memory type (default semantic)")
    p.add_argument("--priority", type=INTEGER, default=100, help="higher goes first (default 100)")
    p.add_argument("--constant", action="store_true", help="always inject")
    p.add_argument("--disabled", action="store_true", help="store it disabled")
    p.add_argument("--position", choices=POSITIONS, help="injection position (default: the config's, system)")
    p.add_argument("--title", default="", help="a name for the entry")
    p.add_argument("--emotion", action="append", metavar="EMOTION", help="emotion it relates to (repeatable)")
    p.add_argument("--weight", type=float, default=1.0, help="relevance weight (default 1)")
    p.add_argument("--emotional-weight", type=float, default=0.5, help="emotional boost weight (default 0.5)")
    p.add_argument("--decay", type=float, default=0.0, help="time decay per day of age (default 0: none)")
    p.add_argument("--min-turn", type=INTEGER, help="temporal: from this turn")
    p.add_argument("--max-turn", type=INTEGER, help="temporal: up to this turn")
    p.add_argument("--min-gap", type=float, metavar="SECONDS", help="temporal: at least this long since last message")
    p.add_argument("--max-gap", type=float, metavar="SECONDS", help="temporal: at most this long since last message")
    p.add_argument(
        "--every", type=INTEGER, metavar="TURNS", help="temporal: at least this many turns since it last fired"
    )
    _add_scope(p)
    p.set_defaults(handler=worldbook_add)
    _add_list(wsub, worldbook_list, "world-book entries")
    exp = _add_import_export(
        wsub,
        worldbook_import,
        worldbook_export,
        "world-book entries",
        "PersonaLab export, SillyTavern world info / lorebook, character-card lorebook",
    )
    exp.add_argument(
        "--format",
        choices=("personalab", "sillytavern"),
        default="personalab",
        help="personalab (default) or a SillyTavern world-info file (imports back the same entries)",
    )
    p = wsub.add_parser(
        "settings",
        help="show or set the world book's settings (global, --character ID: its book, --instance ID: overrides)",
    )
    group = p.add_mutually_exclusive_group()
    # a book is a character's world book (a card's book is scoped to its character): --book is --character
    group.add_argument("--character", "--book", dest="character", type=ID, metavar="ID", help="a character's book")
    group.add_argument("--instance", type=ID, metavar="ID", help="an instance (over its character's book)")
    p.add_argument("--budget-share", dest="budget_share", type=float, metavar="F", help="share of the context, (0, 1]")
    p.add_argument("--max-tokens", dest="max_tokens", type=COUNT, metavar="N", help="token cap of the world book")
    p.add_argument("--scan-depth", dest="scan_depth", type=COUNT, metavar="N", help="recent lines scanned for keys")
    p.add_argument("--recursive", action=argparse.BooleanOptionalAction, help="fired entries' content activates others")
    p.add_argument("--recursion-steps", dest="max_recursion_steps", type=COUNT, metavar="N", help="recursion limit")
    p.add_argument(
        "--case-sensitive", dest="case_sensitive", action=argparse.BooleanOptionalAction, help="keys' case matters"
    )
    p.add_argument(
        "--whole-words", dest="match_whole_words", action=argparse.BooleanOptionalAction, help="ASCII keys as words"
    )
    p.add_argument("--unset", action="append", choices=SETTING_FIELDS, metavar="NAME", help="unset one (repeatable)")
    p.add_argument("--clear", action="store_true", help="unset all of this scope's settings first")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=worldbook_settings)
    _register_entry_commands(wsub)


def _register_entry_commands(wsub: Any) -> None:
    """`worldbook edit|enable|disable|delete|reorder` (issue 23): one entry changed in place."""
    p = wsub.add_parser("edit", help="change fields of one world-book entry (validated as the whole entry)")
    p.add_argument("id", type=ID, help="the entry's id")
    p.add_argument("--content", help="new text")
    p.add_argument("--title", help="new name")
    for option, what in (("keyword", "primary keywords"), ("secondary", "secondary keywords"), ("emotion", "emotions")):
        p.add_argument(f"--{option}", action="append", metavar="WORD", help=f"replace the {what} (repeatable)")
        p.add_argument(f"--no-{option}", action="store_true", help=f"remove every one of the {what}")
    p.add_argument("--logic", choices=SELECTIVE_LOGICS, help="secondary keyword logic")
    p.add_argument("--trigger", choices=TRIGGER_TYPES, help="trigger type")
    p.add_argument("--kind", choices=KINDS, help="memory type")
    p.add_argument("--priority", "--order", dest="priority", type=INTEGER, help="order value: higher goes first")
    p.add_argument("--position", choices=POSITIONS, help="injection position")
    p.add_argument("--default-position", action="store_true", help="use the configuration's position")
    p.add_argument("--probability", type=float, metavar="PERCENT", help="chance it fires once triggered, 0..100")
    p.add_argument("--constant", action=argparse.BooleanOptionalAction, help="always inject")
    p.add_argument("--enabled", action=argparse.BooleanOptionalAction, help="enabled or not")
    p.add_argument("--weight", type=float, help="relevance weight")
    p.add_argument("--emotional-weight", type=float, help="emotional boost weight")
    p.add_argument("--decay", type=float, help="time decay per day of age")
    p.add_argument("--min-turn", type=INTEGER, help="temporal: from this turn")
    p.add_argument("--max-turn", type=INTEGER, help="temporal: up to this turn")
    p.add_argument("--min-gap", type=float, metavar="SECONDS", help="temporal: at least this long since last message")
    p.add_argument("--max-gap", type=float, metavar="SECONDS", help="temporal: at most this long since last message")
    p.add_argument("--every", type=INTEGER, metavar="TURNS", help="temporal: turns since it last fired")
    p.add_argument("--json", action="store_true", help="print the entry as JSON")
    p.set_defaults(handler=worldbook_edit)
    for name, what in (("enable", "it fires again"), ("disable", "kept, never fires")):
        p = wsub.add_parser(name, help=f"{name} a world-book entry ({what})")
        p.add_argument("id", type=ID, help="the entry's id")
        p.set_defaults(handler=worldbook_switch)
    p = wsub.add_parser("delete", help="delete a world-book entry")
    p.add_argument("id", type=ID, help="the entry's id")
    p.set_defaults(handler=worldbook_delete)
    p = wsub.add_parser("reorder", help="set order values (priority, higher first): ID=ORDER ...")
    p.add_argument("orders", nargs="+", metavar="ID=ORDER")
    p.set_defaults(handler=worldbook_reorder)
