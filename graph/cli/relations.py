"""`personalab relation list`: the character's relations on an instance's current branch (seed 003; issue 26), with
the user and with the scene's other participants (characters, script NPCs, named NPCs), through
`personalab.graph.api` only.

    personalab relation list --instance ID [--npc ID] [--json]

`--npc` takes a participant's id (``npc:laochen``, ``role:3``, ``name:守卫``), a script NPC's script_role_id or a
name. An unknown instance, or an NPC with no relation on the branch (never in the scene): one line, exit 2.
"""

from __future__ import annotations

import argparse
from typing import Any

from personalab.graph.api.facade import PersonaLab
from personalab.graph.cli.args import ID
from personalab.graph.cli.output import echo, json_text


def _values(item: dict[str, Any]) -> str:
    return f"trust {item['trust']:>4}  affection {item['affection']:>4}  familiarity {item['familiarity']:>3}"


def _cmd_relation(args: argparse.Namespace) -> int:
    shown = PersonaLab().relations.list(args.instance, npc=args.npc)
    if args.json:
        print(json_text(shown, indent=1))
        return 0
    if args.npc is None:
        echo(f"{'user':<28}  {_values(shown['user'])}")
    for item in shown["participants"]:
        label = f"{item['name']} ({item['id']})"
        echo(f"{label:<28}  {_values(item)}  turns {item['first_turn']}-{item['last_turn']}")
    if args.npc is None and not shown["participants"]:
        echo(f"instance {args.instance}: no other participant has spoken on this branch")
    return 0


def register(sub: Any) -> None:
    relation = sub.add_parser("relation", help="the character's relations: with the user and the scene's NPCs")
    relation.add_argument("action", choices=["list"])
    relation.add_argument("--instance", type=ID, required=True)
    relation.add_argument("--npc", help="only this participant (npc:<id>, role:<id>, name:<name>, or an id or name)")
    relation.add_argument("--json", action="store_true", help="print JSON")
    relation.set_defaults(handler=_cmd_relation)
