"""`personalab session|history|regen|swipe|edit|rewind` and the chat's commands as a user runs them (issue 13);
Ctrl-C during a reply frees the instance at once (a real `personalab chat` process and a slow model)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest
from cli_helpers import cli, one_line
from openai_stub import OpenAIStub, StubReply, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.cli import main


def new_instance(capsys: pytest.CaptureFixture[str]) -> str:
    code, out, _err = cli(capsys, "instance", "create", "--sample")
    assert code == 0
    return out.strip().splitlines()[-1].split()[0]


def as_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_personalab_alone_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys)
    assert code == 0 and err == ""
    for command in ("turn", "chat", "session", "history", "regen", "swipe", "edit", "rewind"):
        assert command in out


def test_history_regen_swipe_edit_rewind_and_sessions_from_the_cli(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instance = new_instance(capsys)
    for message in ("你好", "去北边"):
        assert cli(capsys, "turn", "--instance", instance, message)[0] == 0
    page = as_json(capsys, "history", "--instance", instance)
    users = [line for line in page["lines"] if line["attribute"] == "user"]
    assert [line["content"] for line in users] == ["你好", "去北边"]
    code, out, _ = cli(capsys, "history", "--instance", instance, "--offset", "-2", "--limit", "2")
    assert code == 0 and out.splitlines()[-1] == f"— lines {page['total'] - 1}–{page['total']} of {page['total']}"
    assert out.startswith(f"[{page['lines'][-2]['id']}] 雷娜: ")

    regen = as_json(capsys, "regen", "--instance", instance)
    assert regen["turn"] == 2 and regen["error"] is None and "PROGRESS" not in regen["reply"]
    code, out, _ = cli(capsys, "regen", "--instance", instance)  # streamed, like a turn
    assert code == 0 and out.startswith("【") and "PROGRESS" not in out
    first_reply = next(line for line in page["lines"] if line["parent_id"] == users[1]["id"])
    found = as_json(capsys, "history", "--instance", instance, "--siblings", str(first_reply["id"]))
    assert len(found["siblings"]) == 3 and [s["on_branch"] for s in found["siblings"]] == [False, False, True]

    swiped = as_json(capsys, "swipe", "--instance", instance, "--index", "1")
    assert swiped["leaf"] == page["leaf"] and swiped["turn"] == 2
    code, out, _ = cli(capsys, "swipe", "--instance", instance, "--line", str(found["siblings"][2]["id"]))
    assert code == 0 and "swiped" in out and "next turn 3" in out

    edited = as_json(capsys, "edit", "--instance", instance, "--line", str(users[1]["id"]), "去南边")
    assert edited["turn"] == 2
    after = as_json(capsys, "history", "--instance", instance)
    assert [line["content"] for line in after["lines"] if line["attribute"] == "user"] == ["你好", "去南边"]

    rewound = as_json(capsys, "rewind", "--instance", instance, "--line", str(users[0]["id"]))
    assert rewound["leaf"] == users[0]["id"] and rewound["turn"] == 0

    sessions = as_json(capsys, "session", "list", "--instance", instance)
    assert len(sessions) == 1 and sessions[0]["turns"] == 5
    started = as_json(capsys, "session", "new", "--instance", instance)
    assert started["id"] != sessions[0]["id"]
    code, out, _ = cli(capsys, "session", "list", "--instance", instance)
    assert code == 0 and len(out.strip().splitlines()) == 2


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["history", "--instance", "999"], "instance 999 does not exist"),
        (["history", "--instance", "{i}", "--limit", "0"], "limit must be a whole number from 1 to 1000"),
        (["history", "--instance", "{i}", "--siblings", "777777"], "line 777777 does not exist"),
        (["swipe", "--instance", "{i}", "--line", "777777"], "line 777777 does not exist"),
        (["swipe", "--instance", "{i}", "--index", "5"], "the last reply has 1 alternative(s), not 5"),
        (["swipe", "--instance", "{i}"], "give --line LINE or --index N"),
        (["rewind", "--instance", "{i}", "--line", "{other}"], "is not a line of instance"),
        (["edit", "--instance", "{i}", "--line", "{reply}", "新"], "is not a user line"),
        (["regen", "--instance", "{fresh}"], "has no user line on its current branch"),
        (["session", "list", "--instance", "999"], "instance 999 does not exist"),
    ],
)
def test_bad_dialogue_input_is_one_line_and_exit_2(
    data_dir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    instance, other, fresh = new_instance(capsys), new_instance(capsys), new_instance(capsys)
    turn = as_json(capsys, "turn", "--instance", instance, "你好")
    other_turn = as_json(capsys, "turn", "--instance", other, "别处")
    before = as_json(capsys, "history", "--instance", instance)
    names = {
        "i": instance,
        "other": str(other_turn["debug"]["reply_line_ids"][0]),
        "reply": str(turn["debug"]["reply_line_ids"][0]),
        "fresh": fresh,
    }
    code, _out, err = cli(capsys, *[part.format(**names) for part in argv])
    assert code == 2 and expected in one_line(err)
    assert as_json(capsys, "history", "--instance", instance) == before  # nothing changed


def test_chat_commands_are_not_said_to_the_character(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = new_instance(capsys)
    answers = iter(["你好", "/help", "/regen", "/swipe", "/swipe 1", "/history 3", "/bogus", "//斜杠开头的话", "/quit"])
    monkeypatch.setattr("builtins.input", lambda _prompt="": next(answers))
    assert main(["chat", "--instance", instance]) == 0
    out, err = capsys.readouterr()
    assert "/regen" in out and "/swipe [N]" in out  # the help
    assert out.count("— scripted") == 3  # 你好, /regen, //…: three replies
    assert "*2." in out and " 1." in out  # /swipe lists the two replies, the second current
    assert "unknown command /bogus (/help lists them)" in err
    page = as_json(capsys, "history", "--instance", instance)
    users = [line["content"] for line in page["lines"] if line["attribute"] == "user"]
    assert users == ["你好", "/斜杠开头的话"]


def read_until(stream: IO[str], wanted: str, seconds: float) -> str:
    """What `stream` printed until `wanted` appeared, the stream ended or `seconds` passed (a reader thread: a
    blocking read must not hang the test when the text never comes)."""
    seen: list[str] = []
    found = threading.Event()

    def read() -> None:
        while (char := stream.read(1)) != "":
            seen.append(char)
            if wanted in "".join(seen[-len(wanted) :]):
                found.set()
                return
        found.set()

    threading.Thread(target=read, daemon=True).start()
    found.wait(seconds)
    return "".join(seen)


def test_ctrl_c_during_a_reply_frees_the_instance_at_once(
    data_dir: Path, capsys: pytest.CaptureFixture[str], openai_stub: OpenAIStub
) -> None:
    instance = new_instance(capsys)
    slow = StubReply("【平静】" + "慢慢地说" * 40, chunk=2, chunk_delay=0.2)
    openai_stub.queue_for("query_rewrite", "查询", "查询")
    openai_stub.queue(slow, "【开心】好的，我们继续。")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    chat = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from personalab.graph.cli import main; sys.exit(main())",
            "chat",
            "--instance",
            instance,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        # as from a terminal: a suite started in the background (`cmd &` in a script) ignores SIGINT, and a child
        # inherits that (tests/test_eval_run.py)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert chat.stdin is not None and chat.stdout is not None
    chat.stdin.write("你好\n")
    chat.stdin.flush()
    seen = read_until(chat.stdout, "慢慢", seconds=120)  # the reply is streaming
    if "慢慢" not in seen:
        chat.kill()
        _out, err = chat.communicate(timeout=30)
        pytest.fail(f"the reply never streamed; the chat printed {seen!r}; stderr: {err!r}")
    chat.send_signal(signal.SIGINT)
    time.sleep(0.5)
    # the same chat goes on, and the instance is not busy
    out, err = chat.communicate(input="再说一次\n", timeout=120)
    assert chat.returncode == 0, err
    assert "interrupted" in err and "busy" not in err
    assert "我们继续" in out
    code, _out, err = cli(capsys, "turn", "--instance", instance, "还在吗")
    assert code == 0, err
