"""`personalab core …` and `personalab plot …`: where an instance's story stands, shown and corrected (issue 23;
seed 002 需求1 / 需求2, seed 003 剧情节点), through `personalab.graph.api` only.

    personalab core show     --instance ID [--json]     the current core memory (before the first turn: the initial one)
    personalab core versions --instance ID [--json]     the kept versions, with the turn that made each
    personalab core diff     --instance ID --from V [--to V] [--json]   per field (--to: default the current one)
    personalab core rollback --instance ID [--to V]     a new version equal to V (default: the one before)
    personalab plot show     --instance ID [--json]     the outline, each point's status, the current point
    personalab plot set-point --instance ID INDEX       make outline point INDEX current (live next turn)
    personalab plot nodes    --instance ID [--all-branches] [--json]

An unknown instance or version, a point outside the outline, a turn running: one line, exit 2, nothing changed.
"""

from __future__ import annotations

import argparse
from typing import Any

from personalab.graph.api.facade import PersonaLab
from personalab.graph.cli.args import COUNT, ID
from personalab.graph.cli.output import echo, json_text
from personalab.nodes.rules.errors import InvalidInput

MARKS = {"completed": "✓", "in_progress": "▶", "pending": "·"}


def _cmd_core(args: argparse.Namespace) -> int:
    core = PersonaLab().core_memory
    if args.action == "rollback":
        version = core.rollback(args.instance, args.to)
        echo(f"core memory of instance {args.instance} is now version {version['version']} ({version['reason']})")
        return 0
    if args.action == "versions":
        versions = core.versions(args.instance)
        if args.json:
            print(json_text(versions, indent=1))
        elif not versions:
            echo(f"instance {args.instance}: no core memory versions yet (maintenance has not rewritten it)")
        for item in [] if args.json else versions:
            echo(f"{item['version']:>3}  turn {item['turn']:>4}  {item['reason']}")
        return 0
    if args.action == "diff":
        if args.since is None:
            raise InvalidInput("core diff: --from VERSION is required")
        diff = core.diff(args.instance, args.since, args.to)
        if args.json:
            print(json_text(diff, indent=1))
            return 0
        echo(f"core memory of instance {args.instance}: version {diff['from']} → {diff['to']}")
        if not diff["changes"]:
            echo("  no change")
        for name, change in diff["changes"].items():
            if "added" in change:
                echo(
                    f"  {name}: + {json_text(change['added'], indent=None)}  - {json_text(change['removed'], indent=None)}"
                )
            else:
                echo(f"  {name}: {json_text(change['from'], indent=None)} → {json_text(change['to'], indent=None)}")
        return 0
    shown = core.show(args.instance)
    print(json_text(shown if args.json else shown["core"], indent=1))
    return 0


def _print_plot(plot: dict[str, Any]) -> None:
    for point in plot["story_outline"]:
        current = "  ← current" if point["index"] == plot["current_plot_index"] else ""
        echo(f"{MARKS.get(point['status'], '?')} {point['index']:>2}. [{point['status']}] {point['content']}{current}")


def _cmd_plot(args: argparse.Namespace) -> int:
    plot = PersonaLab().plot
    if args.action == "nodes":
        nodes = plot.nodes(args.instance, all_branches=args.all_branches)
        if args.json:
            print(json_text(nodes, indent=1))
            return 0
        if not nodes:
            echo(f"instance {args.instance}: no plot nodes")
        for node in nodes:
            line = f" line {node['line_id']}" if node["line_id"] is not None else ""
            echo(f"turn {node['turn']:>4}{line} [{node['level'] or '-'}] {node['summary']}")
        return 0
    if args.action == "set-point":
        if args.index is None:
            raise InvalidInput("plot set-point: the outline point INDEX is required")
        shown = plot.set_current_point(args.instance, args.index)
    else:
        shown = plot.outline(args.instance)
    if args.json:
        print(json_text(shown, indent=1))
    else:
        _print_plot(shown)
    return 0


def register(sub: Any) -> None:
    core = sub.add_parser("core", help="an instance's core memory: show, versions, diff, roll back")
    core.add_argument("action", choices=["show", "versions", "diff", "rollback"])
    core.add_argument("--instance", type=ID, required=True)
    core.add_argument("--from", dest="since", type=COUNT, metavar="VERSION", help="with diff: the older version")
    core.add_argument(
        "--to",
        type=COUNT,
        metavar="VERSION",
        help="rollback: the version to restore (default: the one before); "
        "diff: the newer version (default: the current core memory)",
    )
    core.add_argument("--json", action="store_true", help="print JSON")
    core.set_defaults(handler=_cmd_core)
    plot = sub.add_parser("plot", help="an instance's outline and current point, plot nodes")
    plot.add_argument("action", choices=["show", "set-point", "nodes"])
    plot.add_argument("index", nargs="?", type=COUNT, help="with set-point: the outline point (1-based)")
    plot.add_argument("--instance", type=ID, required=True)
    plot.add_argument("--all-branches", action="store_true", help="with nodes: every branch's, not only the current")
    plot.add_argument("--json", action="store_true", help="print JSON")
    plot.set_defaults(handler=_cmd_plot)
