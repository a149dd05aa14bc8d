"""`personalab db upgrade|current`: the database's schema revision and its migrations (issue 14; Alembic revisions
in stores/migrations/versions, the rules in stores/migrate.py)."""

from __future__ import annotations

import argparse

from personalab.graph.cli.output import echo, json_text
from personalab.nodes.context import Context
from personalab.stores import migrate


def _cmd_db(args: argparse.Namespace) -> int:
    url = Context().database_url
    if args.action == "upgrade":
        result = migrate.upgrade(url)
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
    state = migrate.current(url)
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
