"""`personalab card import FILE` and `personalab card export CHARACTER_ID FILE --format v2|v3|png` (issue 15).

An import creates a character from a SillyTavern card (V1 / V2 / V3 JSON or PNG) with its embedded lorebook as
the character's world book, and prints what took effect and what has no effect here (kept for export); `--json`
prints the same as JSON. A bad file is one line and exit code 2, and nothing is stored.
"""

from __future__ import annotations

import argparse

from personalab.graph.api.schemas.cards import FORMATS
from personalab.graph.cli.args import ID, lab
from personalab.graph.cli.output import echo, json_text


def card_import(args: argparse.Namespace) -> int:
    done = lab(args).cards.import_file(args.file, copy=args.copy)
    if args.json:
        print(json_text(done.model_dump()))
        return 0
    if done.reused:
        echo(f"{args.file} → {done.summary()}")
        return 0
    echo(f"{args.file} → character {done.character_id} {done.name!r} ({done.spec}, from {done.source})")
    echo("  used: " + ", ".join(done.used))
    if done.book is not None:
        echo(f"  world book (character {done.character_id}): {done.book['summary']}")
    for name, why in done.no_effect.items():
        echo(f"  no effect here, kept for export: {name} ({why})")
    return 0


def card_export(args: argparse.Namespace) -> int:
    fmt = args.format or ("png" if args.file.lower().endswith(".png") else "v3")
    name = lab(args).cards.export_file(args.character_id, args.file, fmt)
    echo(f"exported character {args.character_id} {name!r} as a {fmt} card to {args.file}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    card = sub.add_parser("card", help="SillyTavern character cards (V1/V2/V3 JSON, PNG) in and out")
    csub = card.add_subparsers(dest="card_command", required=True, parser_class=type(card))
    p = csub.add_parser("import", help="create a character (and its world book) from a card file; all or nothing")
    p.add_argument("file", help="card file: JSON (V1, V2, V3) or PNG with a chara / ccv3 chunk")
    p.add_argument("--json", action="store_true", help="print the import report as JSON")
    p.add_argument("--copy", action="store_true", help="a new character even when the same card was imported before")
    p.set_defaults(handler=card_import)
    p = csub.add_parser("export", help="write a character as a card file")
    p.add_argument("character_id", type=ID, help="the character's id")
    p.add_argument("file", help="output file; a plain file is replaced")
    p.add_argument("--format", choices=FORMATS, help="v2 / v3 JSON or png (default: png for *.png, else v3)")
    p.set_defaults(handler=card_export)
