"""`personalab doctor [--json] [--repair]` (issue 14): queued writes not applied, orphan vectors and memories without
one, expired turn locks, checkpoint counts and sizes (`stores.doctor`). One line per finding: `ok`, `problem`,
`info` or `repaired`, the check, what was found. Exit code 0 when no problem remains, 1 when one does (after the
repairs, with `--repair`), 2 when the stores cannot be read."""

from __future__ import annotations

import argparse

from personalab.graph.cli.output import echo, json_text
from personalab.nodes.context import Context
from personalab.stores.background import flush_event_writes
from personalab.stores.doctor import diagnose


def _cmd_doctor(args: argparse.Namespace) -> int:
    report = diagnose(Context().database_url, repair=args.repair)
    flush_event_writes()
    if args.json:
        print(json_text(report.to_dict(), indent=1))
    else:
        for finding in report.findings:
            echo(f"{finding.status:<8} {finding.check}: {finding.message}")
    return 0 if report.healthy else 1


def register(sub: argparse._SubParsersAction) -> None:
    doctor = sub.add_parser(
        "doctor",
        help="queued writes, orphan vectors, expired turn locks, checkpoint sizes; exit 1 while a problem remains",
    )
    doctor.add_argument(
        "--repair",
        action="store_true",
        help="apply queued writes, remove orphan vectors, embed missing ones, free expired locks, prune checkpoints",
    )
    doctor.add_argument("--json", action="store_true", help="print JSON")
    doctor.set_defaults(handler=_cmd_doctor)
