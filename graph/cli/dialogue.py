"""`personalab session|history|regen|swipe|edit|rewind` and `personalab chat`: read an instance's dialogue back,
move along its tree and play it (seed 002 对话功能 / 会话实例, seed 000's tree). Thin layers over
the API's dialogue (`PersonaLab().dialogue`); `--json` prints what the API returns."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from personalab.graph.api.dialogue import DEFAULT_PAGE, Dialogue
from personalab.graph.cli.args import COUNT, ID, INTEGER, lab
from personalab.graph.cli.output import echo, json_text
from personalab.graph.cli.turn import TurnPlayer, in_process_argument
from personalab.nodes.rules.errors import InvalidInput, PersonaLabError


def _dialogue() -> Dialogue:
    """The dialogue area of the command's API (the local operator, the configured database)."""
    return lab().dialogue


def _show_json(data: Any) -> int:
    print(json_text(data, indent=1, default=str))
    return 0


def line_text(line: dict[str, Any]) -> str:
    """A line as the seed writes it: 【emotion】content<tts>(action)."""
    fields = line.get("fields") or {}
    emotion = fields.get("original_emotion")
    text = (f"【{emotion}】" if emotion else "") + line["content"]
    if fields.get("tts_content"):
        text += f"<{fields['tts_content']}>"
    if fields.get("action_content"):
        text += f"({fields['action_content']})"
    return text


def show_lines(lines: list[dict[str, Any]]) -> None:
    for line in lines:
        choice = f"  ({line['sibling_index']}/{line['sibling_count']})" if line["sibling_count"] > 1 else ""
        echo(f"[{line['id']}] {line['speaker']}: {line_text(line)}{choice}")


def _show_branch(branch: dict[str, Any], what: str) -> None:
    echo(f"instance {branch['instance_id']}: {what}; leaf {branch['leaf']}, next turn {branch['turn'] + 1}")


# --- sessions ------------------------------------------------------------------------------------------------------


def _cmd_session(args: argparse.Namespace) -> int:
    if args.action == "new":
        started = _dialogue().new_session(args.instance)
        if args.json:
            return _show_json(started)
        echo(f"session {started['id']} of instance {args.instance} starts with the next turn")
        return 0
    listed = _dialogue().sessions(args.instance)
    if args.json:
        return _show_json(listed)
    for item in listed:
        ended = item["ended_at"].isoformat(timespec="seconds") if item["ended_at"] else "current"
        echo(f"{item['id']:>5}  {item['started_at']:%Y-%m-%d %H:%M}  {item['turns']:>4} turns  {ended}")
    return 0


# --- history and moves ---------------------------------------------------------------------------------------------


def _cmd_history(args: argparse.Namespace) -> int:
    if args.siblings is not None:
        found = _dialogue().siblings(args.instance, args.siblings)
        if args.json:
            return _show_json(found)
        for number, line in enumerate(found["siblings"], start=1):
            mark = "*" if line["on_branch"] else " "
            echo(f"{mark}{number}. [{line['id']}] {line['speaker']}: {line_text(line)}")
        return 0
    page = _dialogue().history(args.instance, offset=args.offset, limit=args.limit)
    if args.json:
        return _show_json(page)
    show_lines(page["lines"])
    shown = len(page["lines"])
    echo(f"— lines {page['offset'] + 1 if shown else 0}–{page['offset'] + shown} of {page['total']}")
    return 0


def _cmd_rewind(args: argparse.Namespace) -> int:
    branch = _dialogue().rewind(args.instance, args.line)
    if args.json:
        return _show_json(branch)
    _show_branch(branch, f"rewound to line {args.line}")
    return 0


def last_reply_siblings(instance_id: int) -> dict[str, Any]:
    """The alternatives of the last reply of the current branch (its first line and the lines beside it)."""
    target = _dialogue().regenerate_target(instance_id)
    page = _dialogue().history(instance_id, offset=-64, limit=64)
    first = next((line for line in page["lines"] if line["parent_id"] == target), None)
    if first is None:
        raise InvalidInput(f"the last user line {target} of instance {instance_id} has no reply to swipe")
    return _dialogue().siblings(instance_id, first["id"])


def swipe_to(instance_id: int, line: int | None, index: int | None) -> dict[str, Any]:
    """`--line LINE`, or `--index N`: the N-th (1-based) alternative of the last reply."""
    if (line is None) == (index is None):
        raise InvalidInput("swipe: give --line LINE or --index N")
    if index is not None:
        found = last_reply_siblings(instance_id)["siblings"]
        if not 1 <= index <= len(found):
            raise InvalidInput(f"swipe: the last reply has {len(found)} alternative(s), not {index}")
        line = found[index - 1]["id"]
    assert line is not None
    return _dialogue().swipe(instance_id, line)


def _show_last_reply(instance_id: int) -> None:
    page = _dialogue().history(instance_id, offset=-64, limit=64)
    tail: list[dict[str, Any]] = []
    for line in reversed(page["lines"]):
        if line["attribute"] == "user":
            break
        tail.insert(0, line)
    show_lines(tail)


def _cmd_swipe(args: argparse.Namespace) -> int:
    branch = swipe_to(args.instance, args.line, args.index)
    if args.json:
        return _show_json(branch)
    _show_last_reply(args.instance)
    _show_branch(branch, "swiped")
    return 0


def _cmd_regen(args: argparse.Namespace) -> int:
    target = _dialogue().regenerate_target(args.instance, args.line)
    with TurnPlayer(in_process=args.in_process) as player:
        return player.play(args.instance, "", as_json=args.json, reply_to=target)


def _cmd_edit(args: argparse.Namespace) -> int:
    parent = _dialogue().edit_target(args.instance, args.line)
    with TurnPlayer(in_process=args.in_process) as player:
        return player.play(args.instance, args.text, as_json=args.json, branch_from=parent)


# --- chat ----------------------------------------------------------------------------------------------------------

CHAT_HELP = """commands (anything else is said to the character; start with // to say something beginning with /):
  /help              this list
  /regen             a new reply to your last line (the old one stays: /swipe shows it)
  /swipe [N]         list the last reply's alternatives, or make the N-th current
  /edit TEXT         replace your last line with TEXT (the old one stays as a branch) and get a reply
  /rewind LINE       move back to line LINE of the branch (ids: /history)
  /history [N]       the last N lines of the branch (default 20), with their ids
  /session           start a new session (the next turn gets a recap of this one)
  /quit              end the chat (an empty line too)"""


def _chat_command(player: TurnPlayer, instance_id: int, text: str, user_name: str | None) -> None:
    """Run one chat command (`/…`)."""
    name, _, rest = text.partition(" ")
    rest = rest.strip()
    if name == "/help":
        echo(CHAT_HELP)
    elif name == "/regen":
        target = _dialogue().regenerate_target(instance_id)
        player.play(instance_id, "", as_json=False, reply_to=target)
    elif name == "/swipe" and not rest:
        for number, line in enumerate(last_reply_siblings(instance_id)["siblings"], start=1):
            echo(f"{'*' if line['on_branch'] else ' '}{number}. {line_text(line)}")
    elif name == "/swipe":
        swipe_to(instance_id, None, _number(rest, "/swipe N"))
        _show_last_reply(instance_id)
    elif name == "/edit":
        if not rest:
            raise InvalidInput("/edit TEXT: the new text of your last line")
        target = _dialogue().regenerate_target(instance_id)
        parent = _dialogue().edit_target(instance_id, target)
        player.play(instance_id, rest, as_json=False, branch_from=parent, user_name=user_name)
    elif name == "/rewind":
        branch = _dialogue().rewind(instance_id, _number(rest, "/rewind LINE"))
        _show_branch(branch, "rewound")
    elif name == "/history":
        count = _number(rest, "/history N") if rest else 20
        show_lines(_dialogue().history(instance_id, offset=-count, limit=count)["lines"])
    elif name == "/session":
        started = _dialogue().new_session(instance_id)
        echo(f"session {started['id']} starts with your next line")
    else:
        raise InvalidInput(f"unknown command {name} (/help lists them)")


def _number(text: str, usage: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise InvalidInput(f"usage: {usage} (a whole number from 1)")
    return int(text)


def _cmd_chat(args: argparse.Namespace) -> int:
    try:
        import readline  # noqa: F401 - line editing and history for input() where the platform has it
    except ImportError:  # pragma: no cover - Windows
        pass
    with TurnPlayer(in_process=args.in_process) as player:
        _dialogue().history(args.instance, limit=1)  # an unknown instance: exit 2
        # issue 28: the prompt in the instance's language (an older instance, no language: Chinese, as it was)
        prompt = "you> " if lab().instances.get(args.instance).language == "en" else "你> "
        print(f"instance {args.instance} — /help lists the commands; an empty line or /quit ends the chat")
        while True:
            try:
                message = input(prompt)
            except (EOFError, KeyboardInterrupt):
                print()
                break
            text = message.strip()
            if not text or text == "/quit":
                break
            try:
                if text.startswith("/") and not text.startswith("//"):
                    _chat_command(player, args.instance, text, args.user_name)
                else:
                    player.play(args.instance, message.removeprefix("/"), as_json=False, user_name=args.user_name)
            except KeyboardInterrupt:
                if player.handing:  # the server plays the turn to its end (its lock is its own to release)
                    echo("\n(interrupted: the server still finishes this turn; /history shows it)", file=sys.stderr)
                    continue
                # Ctrl-C during a reply: the turn stops, stores no reply, and the instance is free at once
                _dialogue().release_lock(args.instance)
                echo("\n(interrupted: no reply stored; your line is kept)", file=sys.stderr)
            except PersonaLabError as exc:
                echo(f"personalab: error: {exc}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    session = sub.add_parser("session", help="an instance's sessions (sittings): list them, start a new one")
    session.add_argument("action", choices=["list", "new"])
    session.add_argument("--instance", type=ID, required=True)
    session.add_argument("--json", action="store_true")
    session.set_defaults(handler=_cmd_session)

    history = sub.add_parser("history", help="the current branch of an instance's dialogue, with line ids")
    history.add_argument("--instance", type=ID, required=True)
    history.add_argument("--offset", type=INTEGER, default=0, help="first line (0: the root; -20: the last 20)")
    history.add_argument("--limit", type=COUNT, default=DEFAULT_PAGE, help="lines per page (1–1000)")
    history.add_argument("--siblings", type=ID, metavar="LINE", help="list the lines beside LINE instead")
    history.add_argument("--json", action="store_true")
    history.set_defaults(handler=_cmd_history)

    regen = sub.add_parser("regen", help="a new reply to the last user line (beside the old one)")
    regen.add_argument("--instance", type=ID, required=True)
    regen.add_argument("--line", type=ID, help="answer this user line again instead")
    regen.add_argument("--json", action="store_true")
    in_process_argument(regen)
    regen.set_defaults(handler=_cmd_regen)

    swipe = sub.add_parser("swipe", help="make another reply (or edit) current: --index N of the last reply, or --line")
    swipe.add_argument("--instance", type=ID, required=True)
    swipe.add_argument("--line", type=ID, help="a line beside a line of the current branch")
    swipe.add_argument("--index", type=COUNT, help="the N-th alternative of the last reply (1 = the oldest)")
    swipe.add_argument("--json", action="store_true")
    swipe.set_defaults(handler=_cmd_swipe)

    edit = sub.add_parser("edit", help="replace a user line of the branch with TEXT and get a new reply")
    edit.add_argument("--instance", type=ID, required=True)
    edit.add_argument("--line", type=ID, required=True)
    edit.add_argument("text")
    edit.add_argument("--json", action="store_true")
    in_process_argument(edit)
    edit.set_defaults(handler=_cmd_edit)

    rewind = sub.add_parser("rewind", help="move the instance back to a line of its current branch")
    rewind.add_argument("--instance", type=ID, required=True)
    rewind.add_argument("--line", type=ID, required=True)
    rewind.add_argument("--json", action="store_true")
    rewind.set_defaults(handler=_cmd_rewind)

    chat = sub.add_parser("chat", help="interactive chat with an instance (/help inside lists its commands)")
    chat.add_argument("--instance", type=ID, required=True)
    chat.add_argument("--user-name")
    in_process_argument(chat)
    chat.set_defaults(handler=_cmd_chat)
