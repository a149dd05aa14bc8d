"""`personalab turn`, `personalab chat`, `personalab core`: play an instance (`personalab instance …` is
graph/cli/library.py)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from personalab.graph.api import dialogue as dialogue_api
from personalab.graph.cli.args import COUNT, ID, json_argument
from personalab.graph.cli.output import echo, json_text, safe
from personalab.graph.runner import rollback_core_memory, run_turn, turn_config, turn_graph
from personalab.graph.streaming import MarkerFilter
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InvalidInput
from personalab.stores.background import flush_event_writes
from personalab.stores.db import session_scope
from personalab.stores.saves import get_save


def _parse_lines_before(raw: str | None) -> list[dict[str, Any]] | None:
    value = json_argument(raw, "--lines-before")
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidInput("--lines-before must be a JSON list of line objects")
    return value


def _turn_summary(state: dict[str, Any]) -> dict[str, Any]:
    debug = state.get("debug") or {}
    prompt = debug.get("prompt") or {}
    return {
        "instance_id": state.get("instance_id"),
        "turn": state.get("turn"),
        "reply": state.get("reply"),
        "reply_lines": state.get("reply_lines"),
        "reply_raw": state.get("reply_raw"),  # the model's own text, [PROGRESS] markers included
        "error": state.get("error"),
        "model": state.get("model"),
        "plot_state": state.get("plot_state"),
        "core_memory": state.get("core_memory"),
        "relationship": state.get("relationship"),
        "review": state.get("review"),
        "retrieved_events": state.get("retrieved"),
        "director_events": state.get("director_events"),
        "prompt": state.get("prompt") or [],
        "dropped": {region: info.get("dropped", []) for region, info in prompt.items() if isinstance(info, dict)},
        "timings_ms": debug.get("timings_ms"),
        "total_ms": debug.get("total_ms"),
        "debug": debug,
    }


def play_turn(graph: Any, ctx: Context, instance_id: int, message: str, *, as_json: bool, **extra: Any) -> int:
    """One turn on the CLI: the reply streams to stdout (markers hidden, controls escaped), or one JSON object
    with `--json`."""

    def show(token: str) -> None:
        text = stream.feed(token)
        if text and not reader_gone:
            try:
                sys.stdout.write(safe(text))
                sys.stdout.flush()
            except BrokenPipeError:
                # the reader went away (`| head`); raised from here, the callback's error would be logged per
                # token and the turn go on anyway: finish the turn (its reply is stored), then end quietly
                reader_gone.append(True)

    stream = MarkerFilter()
    reader_gone: list[bool] = []
    state = run_turn(graph, ctx, instance_id, message, on_token=None if as_json else show, **extra)
    if reader_gone:
        raise BrokenPipeError("stdout was closed while the reply streamed")
    if as_json:
        print(json_text(_turn_summary(state), indent=1, default=str))
        return 1 if state.get("error") else 0
    rest = stream.flush()
    if rest:
        sys.stdout.write(safe(rest))
    print()
    echo(f"  — {state.get('model')}")
    retrieval = (state.get("debug") or {}).get("retrieval") or {}
    if str(retrieval.get("status") or "").startswith("unavailable"):  # a stopped Chroma server (issue 27)
        echo(f"personalab: retrieval {retrieval['status']}", file=sys.stderr)
    if state.get("error"):
        echo(f"personalab: turn failed: {state['error']} (your message is kept; try again)", file=sys.stderr)
        return 1
    return 0


def _cmd_turn(args: argparse.Namespace) -> int:
    with turn_graph() as (graph, ctx):
        code = play_turn(
            graph,
            ctx,
            args.instance,
            args.message,
            as_json=args.json,
            lines_before=_parse_lines_before(args.lines_before),
            user_name=args.user_name,
            selected_choice={"level": args.choice} if args.choice else None,
            time_gap=args.gap,
        )
    flush_event_writes()
    return code


def _cmd_core(args: argparse.Namespace) -> int:
    with turn_graph() as (graph, _ctx):
        with session_scope() as session:
            get_save(session, args.instance)
        if args.action == "rollback":
            version = rollback_core_memory(graph, args.instance, args.to)
            echo(f"core memory of instance {args.instance} is now version {version['version']} ({version['reason']})")
            return 0
        values = graph.get_state(turn_config(args.instance)).values
    # the branch's stored story state is the truth (issue 27: an imported instance has no checkpoint yet)
    stored = dialogue_api.story_state(args.instance)["story_state"]
    values = {**values, **{key: stored[key] for key in ("core_memory", "core_memory_versions") if key in stored}}
    if args.action == "versions":
        for item in values.get("core_memory_versions") or []:
            echo(f"{item['version']:>3}  turn {item['turn']:>4}  {item['reason']}")
        return 0
    print(json_text(values.get("core_memory") or {}, indent=1))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    turn = sub.add_parser("turn", help="run one turn and stream the reply")
    turn.add_argument("--instance", type=ID, required=True)
    turn.add_argument("message")
    turn.add_argument("--json", action="store_true", help="print reply, plot state, retrieval, drops, timings")
    turn.add_argument("--lines-before", help="JSON list of lines (narration, other characters) before the message")
    turn.add_argument("--user-name", help="the user's display name in the dialogue tree")
    turn.add_argument(
        "--choice", help="level of the story choice this message makes: normal, important, turning_point, ending"
    )
    turn.add_argument(
        "--gap", help="real time since the last turn: none, minutes, hours, days, long_absence (default: computed)"
    )
    turn.set_defaults(handler=_cmd_turn)

    core = sub.add_parser("core", help="an instance's core memory: show it, list its versions, roll back")
    core.add_argument("action", choices=["show", "versions", "rollback"])
    core.add_argument("--instance", type=ID, required=True)
    core.add_argument("--to", type=COUNT, help="with rollback: the version to restore (default: the one before)")
    core.set_defaults(handler=_cmd_core)
