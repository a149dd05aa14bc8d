"""`personalab instance locks` lists the turn locks held; `personalab instance unlock ID`: an operator frees an instance whose turn lock is stuck (issue 14).

A running turn renews its lock (a heartbeat every third of PERSONALAB_TURN_LEASE), so a stuck lock is one whose
holder died; it lapses by itself within one lease, and this frees it at once. A turn that is still running there
loses its lock and stores no reply (`TurnLockLost`, one line)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from personalab.graph.api.facade import PersonaLab
from personalab.graph.cli.args import ID
from personalab.graph.cli.output import echo, json_text


def _when(epoch: float | None) -> str:
    return "an unknown time" if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")


def _cmd_unlock(args: argparse.Namespace) -> int:
    done = PersonaLab().admin.release_lock(args.id)  # InstanceNotFound: one line, exit 2
    info = done["lock"]
    if args.json:
        print(json_text(done, indent=1))
        return 0
    if info is None:
        echo(f"instance {args.id} was not locked")
        return 0
    state = "expired" if info["expired"] else "live"
    echo(
        f"instance {args.id} unlocked: held by {info['holder'] or 'an unknown process'} since"
        f" {_when(info['acquired_at'])} (lease {state}, until {_when(info['expires_at'])})"
    )
    return 0


def add_unlock_parser(actions: argparse._SubParsersAction) -> None:
    """`instance unlock ID [--json]` and `instance locks [--json]`, under the `instance` command of
    graph/cli/library.py."""
    unlock = actions.add_parser("unlock", help="free an instance whose turn lock is stuck; prints who held it")
    unlock.add_argument("id", type=ID)
    unlock.add_argument("--json", action="store_true", help="print JSON")
    unlock.set_defaults(handler=_cmd_unlock)
    add_locks_parser(actions)  # `instance locks` beside it (graph/cli/library.py calls this one function)


def _cmd_locks(args: argparse.Namespace) -> int:
    locks = PersonaLab().admin.locks()
    if args.json:
        print(json_text(locks, indent=1))
        return 0
    if not locks:
        echo("no turn locks held")
    for info in locks:
        state = "expired" if info["expired"] else "live"
        echo(
            f"instance {info['instance_id']}: held by {info['holder'] or 'an unknown process'} since"
            f" {_when(info['acquired_at'])} (lease {state}, until {_when(info['expires_at'])})"
        )
    return 0


def add_locks_parser(actions: argparse._SubParsersAction) -> None:
    """`instance locks [--json]`: every held turn lock."""
    locks = actions.add_parser("locks", help="list the turn locks held (who holds each, until when)")
    locks.add_argument("--json", action="store_true", help="print JSON")
    locks.set_defaults(handler=_cmd_locks)
