"""`personalab reply why LINE_ID`: what fed a reply (issue 23), through `personalab.graph.api` (`api.replies`).

Prints the rewritten query, the core-memory version, the recall window, every memory (id, score, layer, type, the
retrieval paths that found it, in the prompt or why it was cut), world-book entry (trigger, reason) and knowledge
entry, and what the region budgets cut; `--json` prints the stored record. Any line of a stored reply works; a user
line, an unknown line or a reply stored before provenance was recorded is one line and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from personalab.graph.api.facade import PersonaLab
from personalab.graph.cli.args import whole
from personalab.graph.cli.output import echo, json_text


def _placed(item: dict[str, Any]) -> str:
    return "in prompt" if item.get("in_prompt") else f"cut: {item.get('cut') or 'not used'}"


def reply_why(args: argparse.Namespace) -> int:
    found = PersonaLab().replies.provenance(args.line_id)
    if args.json:
        sys.stdout.write(json_text(found.model_dump(mode="json")) + "\n")
        return 0
    record = found.record
    branch = "current branch" if found.on_current_branch else "a branch left behind"
    echo(f"reply lines {found.line_ids} of instance {found.instance_id}, turn {found.turn} ({branch})")
    echo(f"message: {record.get('message')}")
    echo(f"query: {record.get('query')} (rewrite: {record.get('query_rewrite') or '-'}) · scene {record.get('scene')}")
    core = record.get("core_memory")
    echo(f"core memory: version {core['version']} (turn {core['turn']})" if core else "core memory: none yet")
    window = record.get("recall_window") or {}
    echo(
        f"recall window: {window.get('lines')} lines ({window.get('first_line_id')}…{window.get('last_line_id')}), "
        f"{window.get('turns_kept')} of {window.get('turns_total')} turns kept"
    )
    for item in record.get("memories") or []:
        echo(
            f"  memory #{item['id']} {item.get('score', 0):.3f} [{item.get('layer')}/{item.get('type')}] "
            f"via {', '.join(item.get('trigger') or []) or '-'} · {_placed(item)} · {item.get('content')}"
        )
    for item in record.get("worldbook") or []:
        echo(
            f"  world book {item['id']} [{item.get('trigger')}] {item.get('reason')} · {_placed(item)} · "
            f"{item.get('content')}"
        )
    for item in record.get("knowledge") or []:
        echo(f"  knowledge {item['id']} {item.get('score', 0):.3f} · {_placed(item)} · {item.get('content')}")
    for cut in record.get("cut") or []:
        echo(f"  cut from {cut.get('region')}: {cut.get('key') or cut.get('what') or ''} {cut.get('reason') or ''}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    reply = sub.add_parser("reply", help="what fed a reply")
    actions = reply.add_subparsers(dest="reply_command", required=True, parser_class=type(reply))
    why = actions.add_parser("why", help="what went into a reply's prompt (memories, world book, knowledge, cuts)")
    why.add_argument("line_id", type=whole, help="any line of the reply")
    why.add_argument("--json", action="store_true")
    why.set_defaults(handler=reply_why)
