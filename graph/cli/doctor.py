"""`personalab doctor [--json] [--repair]` (issue 14): queued writes not applied, orphan vectors and memories without
one, expired turn locks, checkpoint counts and sizes (`api.admin.doctor`). One line per finding: `ok`, `problem`,
`info` or `repaired`, the check, what was found. Exit code 0 when no problem remains, 1 when one does (after the
repairs, with `--repair`), 2 when the stores cannot be read."""

from __future__ import annotations

import argparse

from personalab.graph.api.facade import PersonaLab
from personalab.graph.cli.output import echo, json_text


def _cmd_doctor(args: argparse.Namespace) -> int:
    report = PersonaLab().admin.doctor(repair=args.repair)
    if args.json:
        print(json_text(report, indent=1))
    else:
        for finding in report["findings"]:
            echo(f"{finding['status']:<8} {finding['check']}: {finding['message']}")
    return 0 if report["healthy"] else 1


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
