"""`personalab suggestions list|approve|reject`: the world-book updates the post-turn review proposed (seed 003
世界书更新). Nothing reaches the world book until `approve`; `approve` prints the new entry's id. A suggestion
belongs to the branch of the turn that proposed it (its reply line, shown as `line N`): `list --instance ID`
shows the instance's current branch's, `--all-branches` every branch's. An approved entry is in the world book
of its scope (the whole instance by default) on every branch: approving is the user's decision.

    personalab suggestions list [--instance ID [--all-branches]] [--status pending|approved|rejected] [--json]
    personalab suggestions approve ID [--content TEXT] [--keyword WORD ...]
    personalab suggestions reject ID

An unknown id, an already decided suggestion or a bad option prints one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
from typing import Any

from personalab.graph.api.facade import PersonaLab
from personalab.graph.api.suggestions import STATUSES
from personalab.graph.cli.args import ID
from personalab.graph.cli.output import echo, json_text

PREVIEW_CHARS = 60


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


def _line(s: dict[str, Any]) -> str:
    level = f", {s['choice_level']}" if s["choice_level"] else ""
    keys = f", keys: {', '.join(s['keywords'])}" if s["keywords"] else f", {s['trigger_type']}"
    entry = f" → world-book entry {s['worldbook_entry_id']}" if s["worldbook_entry_id"] is not None else ""
    line = f" line {s['line_id']}" if s["line_id"] is not None else ""
    return (
        f"#{s['id']} [{s['status']}] instance {s['instance_id']} turn {s['turn']}{line}{level} ({s['scope']}{keys}): "
        f"{_preview(s['content'])}{entry}"
    )


def suggestions_list(args: argparse.Namespace) -> int:
    items = PersonaLab().suggestions.list(instance_id=args.instance, status=args.status, all_branches=args.all_branches)
    if args.json:
        print(json_text(items))
        return 0
    if not items:
        where = [f"instance {args.instance}"] if args.instance is not None else []
        where += [args.status] if args.status else []
        echo("no world-book suggestions" + (f" ({', '.join(where)})" if where else ""))
    for s in items:
        echo(_line(s))
    return 0


def suggestions_approve(args: argparse.Namespace) -> int:
    s = PersonaLab().suggestions.approve(args.id, content=args.content, keywords=args.keyword)
    echo(
        f"approved suggestion {s['id']}: added world-book entry {s['worldbook_entry_id']} ({s['scope']}): "
        f"{_preview(s['content'])}"
    )
    return 0


def suggestions_reject(args: argparse.Namespace) -> int:
    s = PersonaLab().suggestions.reject(args.id)
    echo(f"rejected suggestion {s['id']}")
    return 0


def register(sub: Any) -> None:
    group = sub.add_parser("suggestions", help="world-book updates proposed by the post-turn review")
    gsub = group.add_subparsers(dest="suggestions_command", required=True, parser_class=type(group))
    p = gsub.add_parser("list", help="list suggestions, one line each")
    p.add_argument("--instance", type=ID, metavar="ID", help="only this conversation instance's (save id)")
    p.add_argument(
        "--all-branches",
        action="store_true",
        help="with --instance: every branch's suggestions, not only the current branch's",
    )
    p.add_argument("--status", choices=STATUSES, help="only suggestions with this status")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(handler=suggestions_list)
    p = gsub.add_parser("approve", help="add the suggested entry to the world book (of its scope, on every branch)")
    p.add_argument("id", type=ID, help="suggestion id")
    p.add_argument("--content", help="use this text instead of the suggested content")
    p.add_argument("--keyword", action="append", metavar="WORD", help="use these keywords instead (repeatable)")
    p.set_defaults(handler=suggestions_approve)
    p = gsub.add_parser("reject", help="reject a suggestion; the world book is not touched")
    p.add_argument("id", type=ID, help="suggestion id")
    p.set_defaults(handler=suggestions_reject)
