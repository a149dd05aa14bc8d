"""`personalab db upgrade|current`: the database's schema revision and its migrations (issue 14; Alembic revisions
in stores/migrations/versions), through `api.admin`."""

from __future__ import annotations

import argparse

from personalab.graph.api.facade import PersonaLab
from personalab.graph.cli.output import echo, json_text


def _cmd_db(args: argparse.Namespace) -> int:
    admin = PersonaLab().admin
    if args.action == "upgrade":
        result = admin.upgrade()
        if args.json:
            print(json_text(result, indent=1))
        elif result["before"] == result["after"]:
            echo(f"up to date at {result['after']}")
        else:
            start = result["before"] or (
                "unstamped (stamped at the baseline)" if result["stamped_baseline"] else "empty"
            )
            echo(f"upgraded: {start} -> {result['after']}")
        return 0
    state = admin.migration_state()
    if args.json:
        print(json_text(state, indent=1))
    elif state["revision"] is None:
        made = "made before migrations or by create_all" if state["has_tables"] else "empty"
        echo(f"not stamped ({made}); head {state['head']}: run personalab db upgrade")
    else:
        echo(
            f"{state['revision']}"
            + ("" if state["up_to_date"] else f" (head {state['head']}: run personalab db upgrade)")
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    db = sub.add_parser("db", help="the database's schema: upgrade (run the migrations), current (its revision)")
    actions = db.add_subparsers(dest="action", required=True, parser_class=type(db))
    for name, help_ in (
        ("upgrade", "run the migrations the database lacks (an unstamped one is stamped at the baseline first)"),
        ("current", "the database's revision and the newest one"),
    ):
        action = actions.add_parser(name, help=help_)
        action.add_argument("--json", action="store_true", help="print JSON")
    db.set_defaults(handler=_cmd_db)
