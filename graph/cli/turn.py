"""`personalab turn`, `personalab chat`: play an instance (`personalab instance …` is graph/cli/library.py,
`personalab core` graph/cli/story.py)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from personalab.graph.api.support import flush_writes
from personalab.graph.cli.args import ID, json_argument
from personalab.graph.cli.output import echo, json_text, safe
from personalab.nodes.rules.errors import InvalidInput


def _parse_lines_before(raw: str | None) -> list[dict[str, Any]] | None:
    value = json_argument(raw, "--lines-before")
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidInput("--lines-before must be a JSON list of line objects")
    return value


def retrieval_notice(state: dict[str, Any]) -> str | None:
    """One line when retrieval was cut by its time cap or failed (issue 28: never a silent cut), else None."""
    retrieval = (state.get("debug") or {}).get("retrieval") or {}
    status = retrieval.get("status")
    if not status or status == "ok":
        return None
    return f"retrieval {status}"


def _turn_summary(state: dict[str, Any]) -> dict[str, Any]:
    debug = state.get("debug") or {}
    prompt = debug.get("prompt") or {}
    return {
        "retrieval_status": ((debug.get("retrieval") or {}).get("status")),
        # issue 28: true when any part of retrieval was cut by the time cap or failed (the notice says how)
        "retrieval_cut": retrieval_notice(state) is not None,
        "notice": retrieval_notice(state),
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
        "relations": state.get("relations"),  # issue 26: with the scene's other characters and NPCs
        "review": state.get("review"),
        "retrieved_events": state.get("retrieved"),
        "director_events": state.get("director_events"),
        "prompt": state.get("prompt") or [],
        "dropped": {region: info.get("dropped", []) for region, info in prompt.items() if isinstance(info, dict)},
        "timings_ms": debug.get("timings_ms"),
        "total_ms": debug.get("total_ms"),
        "debug": debug,
    }


def play_turn(graph: Any, ctx: Any, instance_id: int, message: str, *, as_json: bool, **extra: Any) -> int:
    """One turn on the CLI (`graph`, `ctx`: the runner's `turn_graph()`): the reply streams to stdout (markers
    hidden, controls escaped), or one JSON object with `--json`."""
    from personalab.graph.runner import run_turn
    from personalab.graph.streaming import MarkerFilter

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
    notice = retrieval_notice(state)
    if notice and notice.startswith("retrieval unavailable"):  # a stopped Chroma server (issue 27): to stderr
        echo(f"personalab: {notice}", file=sys.stderr)
    elif notice:
        echo(f"  — {notice}")
    if state.get("error"):
        echo(f"personalab: turn failed: {state['error']} (your message is kept; try again)", file=sys.stderr)
        return 1
    return 0


def _cmd_turn(args: argparse.Namespace) -> int:
    from personalab.graph.runner import turn_graph

    with turn_graph() as (graph, ctx):
        code = play_turn(
            graph,
            ctx,
            args.instance,
            sys.stdin.read() if args.message == "-" else args.message,  # `-`: the message from standard input
            as_json=args.json,
            lines_before=_parse_lines_before(args.lines_before),
            user_name=args.user_name,
            selected_choice={"level": args.choice} if args.choice else None,
            time_gap=args.gap,
        )
    flush_writes()
    return code


def register(sub: argparse._SubParsersAction) -> None:
    turn = sub.add_parser("turn", help="run one turn and stream the reply")
    turn.add_argument("--instance", type=ID, required=True)
    turn.add_argument("message", help="the user's message; - reads it from standard input")
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
