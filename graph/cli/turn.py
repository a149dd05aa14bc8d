"""`personalab turn`, `personalab chat`: play an instance (`personalab instance …` is graph/cli/library.py,
`personalab core` graph/cli/story.py)."""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
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


class _ReplyPrinter:
    """The reply as it streams, on stdout: markers hidden, controls escaped; a reader that went away is noted
    (the turn goes on and its reply is stored; the command then ends quietly)."""

    def __init__(self) -> None:
        from personalab.graph.streaming import MarkerFilter

        self.stream = MarkerFilter()
        self.reader_gone = False

    def show(self, token: str) -> None:
        text = self.stream.feed(token)
        if text and not self.reader_gone:
            try:
                sys.stdout.write(safe(text))
                sys.stdout.flush()
            except BrokenPipeError:
                # raised from here, the callback's error would be logged per token and the turn go on anyway:
                # finish the turn (its reply is stored), then end quietly
                self.reader_gone = True


def _finish(printer: _ReplyPrinter, state: dict[str, Any], *, as_json: bool, ran_on: str | None) -> int:
    """What the command prints once the turn is done, and its exit code (the same for a turn run in this process
    and one handed to the server: `ran_on` is the server's URL then, None here)."""
    if printer.reader_gone:
        raise BrokenPipeError("stdout was closed while the reply streamed")
    if as_json:
        summary = _turn_summary(state)
        # which engine played the turn (issue 29): this process, or the running server it was handed to
        summary["ran_in"] = "server" if ran_on else "process"
        summary["server"] = ran_on
        print(json_text(summary, indent=1, default=str))
        return 1 if state.get("error") else 0
    rest = printer.stream.flush()
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


def play_turn(graph: Any, ctx: Any, instance_id: int, message: str, *, as_json: bool, **extra: Any) -> int:
    """One turn on the CLI (`graph`, `ctx`: the runner's `turn_graph()`): the reply streams to stdout (markers
    hidden, controls escaped), or one JSON object with `--json`."""
    from personalab.graph.runner import run_turn

    printer = _ReplyPrinter()
    state = run_turn(graph, ctx, instance_id, message, on_token=None if as_json else printer.show, **extra)
    return _finish(printer, state, as_json=as_json, ran_on=None)


def hand_off_turn(instance_id: int, message: str, *, as_json: bool, **extra: Any) -> int | None:
    """The turn played by the running `personalab serve` of this data folder (issue 29), printed as `play_turn`
    prints it; None when no such server runs or it did not take the turn (nothing was sent: play it here)."""
    from personalab.graph.api.handoff import ServerUnreachable, raise_handed_error, running_server, turn_on_server

    server = running_server()
    if server is None:
        return None
    printer = _ReplyPrinter()
    given = {key: value for key, value in extra.items() if value is not None}
    try:
        for event in turn_on_server(server, instance_id, message, **given):
            if "token" in event:
                if not as_json:
                    printer.show(event["token"])
            elif "error" in event:
                raise_handed_error(event["error"])
            elif "state" in event:
                return _finish(printer, event["state"], as_json=as_json, ran_on=server.url)
    except ServerUnreachable:
        return None
    return None  # pragma: no cover - turn_on_server raises when the answer ends without a state or an error


class TurnPlayer:
    """Plays the command's turns (`turn`, `regen`, `edit`, each line of `chat`): handed to the running `personalab
    serve` of the data folder when there is one (issue 29), else in this process, whose engine (`turn_graph()`) is
    opened by its first such turn and closed, its writes applied, by `close`."""

    def __init__(self, *, in_process: bool = False) -> None:
        self.in_process = in_process
        self._stack = ExitStack()
        self._engine: tuple[Any, Any] | None = None
        self.handing = False  # a turn is being handed to the server right now

    def play(self, instance_id: int, message: str, *, as_json: bool, **extra: Any) -> int:
        if not self.in_process:
            # left set when Ctrl-C stops the command while the server plays the turn (`chat` says so then)
            self.handing = True
            handed = hand_off_turn(instance_id, message, as_json=as_json, **extra)
            self.handing = False
            if handed is not None:
                return handed
        self.handing = False
        if self._engine is None:
            from personalab.graph.runner import turn_graph

            self._engine = self._stack.enter_context(turn_graph())
        graph, ctx = self._engine
        return play_turn(graph, ctx, instance_id, message, as_json=as_json, **extra)

    def close(self, *, flush: bool = True) -> None:
        opened = self._engine is not None
        self._stack.close()
        self._engine = None
        if opened and flush:
            flush_writes()  # this process's memory writes applied before it exits

    def __enter__(self) -> TurnPlayer:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        # after an error the command reports that error (as before the player: no flush that could hide it)
        self.close(flush=kind is None)


def _cmd_turn(args: argparse.Namespace) -> int:
    message = sys.stdin.read() if args.message == "-" else args.message  # `-`: the message from standard input
    with TurnPlayer(in_process=args.in_process) as player:
        return player.play(
            args.instance,
            message,
            as_json=args.json,
            lines_before=_parse_lines_before(args.lines_before),
            user_name=args.user_name,
            selected_choice={"level": args.choice} if args.choice else None,
            time_gap=args.gap,
        )


def in_process_argument(parser: argparse.ArgumentParser) -> None:
    """`--in-process`: play in this process even while `personalab serve` runs for the data folder."""
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="play the turn in this process even when `personalab serve` runs for this data folder",
    )


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
    in_process_argument(turn)
    turn.set_defaults(handler=_cmd_turn)
