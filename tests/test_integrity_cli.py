"""Every error a user can cause through `personalab …` is one line, never a traceback (issue 16).

Each case reproduces a traceback the issue found (ids above int64, deeply nested JSON, an unknown host
`role_id`, NUL characters and big integers on PostgreSQL, a read-only database, `turn --json | head`) or an
escape sequence sent raw to the terminal, on SQLite and PostgreSQL where the database takes part.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli, one_line
from personalab.graph.cli.output import json_text, safe
from personalab.graph.runner import create_sample_instance
from personalab.nodes.rules.errors import InvalidInput
from personalab.stores.db import dispose_engines, session_scope
from personalab.stores.saves import append_lines, create_role, create_save, get_save
from personalab.stores.tables import Line
from sqlmodel import col, func, select

BIG = "99999999999999999999"  # above int64: OverflowError on SQLite, "integer out of range" on PostgreSQL
PAST_INT32 = "3000000000"  # above PostgreSQL's INTEGER: "integer out of range" even in a comparison
PERSONALAB = str(Path(sys.executable).with_name("personalab"))


@pytest.fixture
def instance(db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """The sample instance on `db_url`, which the CLI uses."""
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    return create_sample_instance(db_url)


def line_count(db_url: str, instance: int) -> int:
    with session_scope(db_url) as session:
        return int(session.exec(select(func.count()).select_from(Line).where(col(Line.save_id) == instance)).one())


# --- numbers past the database's range -------------------------------------------------------------


@pytest.mark.parametrize("number", [BIG, PAST_INT32])
def test_ids_and_numbers_past_the_databases_range_are_one_usage_line(
    capsys: pytest.CaptureFixture[str], instance: int, number: str
) -> None:
    i = str(instance)
    commands = [
        ["turn", "--instance", number, "你好"],
        ["chat", "--instance", number],
        ["core", "show", "--instance", number],
        ["core", "rollback", "--instance", i, "--to", number],
        ["worldbook", "list", "--instance", number],
        ["worldbook", "add", "x", "--keyword", "k", "--character", number],
        ["worldbook", "add", "x", "--keyword", "k", "--priority", number],
        ["worldbook", "add", "x", "--trigger", "temporal", "--min-turn", number],
        ["knowledge", "add", "x", "--tag", "t", "--character", number],
        ["knowledge", "export", "--instance", number],
        ["memory", "list", "--instance", number],
        ["memory", "delete", "--instance", i, number],
        ["memory", "add", "--instance", i, "--turn", number, "text"],
        ["memory", "search", "--instance", i, "-k", number, "q"],
        ["suggestions", "approve", number],
        ["suggestions", "reject", number],
        ["suggestions", "list", "--instance", number],
    ]
    for argv in commands:
        code, out, err = cli(capsys, *argv)
        assert code == 2 and out == "", argv
        assert number in one_line(err) and "argument" in err, argv
    assert cli(capsys, "worldbook", "list", "--json")[1] == "[]\n"


def test_a_word_where_an_id_goes_keeps_argparses_message(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    code, _, err = cli(capsys, "turn", "--instance", "x", "你好")
    assert code == 2 and one_line(err) == "personalab turn: argument --instance: invalid int value: 'x'"


# --- host lines and JSON arguments -----------------------------------------------------------------


def lines_before(*lines: dict[str, Any]) -> str:
    return json.dumps(list(lines), ensure_ascii=False)


NARRATION = {"attribute": "system", "content": "旁白：夜色渐深。"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[" * 100_000 + "]" * 100_000, "--lines-before is nested deeper than 64 levels"),  # RecursionError before
        (lines_before({**NARRATION, "role_id": 999}), "line 1 of 2: role_id 999 is not a stored character"),
        (lines_before({**NARRATION, "role_id": int(BIG)}), f"line 1 of 2: role_id {BIG} is not a stored character"),
        (lines_before(NARRATION, {**NARRATION, "role_id": int(PAST_INT32)}), "line 2 of 3: role_id 3000000000 is"),
        (lines_before({**NARRATION, "role_id": "1"}), "field 'role_id' must be a whole number"),
        (lines_before({**NARRATION, "role_id": True}), "field 'role_id' must be a whole number"),
        (lines_before({**NARRATION, "display_name": 5}), "field 'display_name' must be a string, got number"),
        (lines_before({**NARRATION, "content": "夜\u0000色"}), "the text at [0].content contains a NUL character"),
        (lines_before({**NARRATION, "display_name": "旁\u0000白"}), "[0].display_name contains a NUL character"),
        ('[{"attribute": "system", "content": "\\ud800"}]', "[0].content contains a lone surrogate"),
    ],
)
def test_bad_host_lines_are_one_line_and_store_nothing(
    capsys: pytest.CaptureFixture[str], db_url: str, instance: int, raw: str, message: str
) -> None:
    before = line_count(db_url, instance)
    code, out, err = cli(capsys, "turn", "--instance", str(instance), "--lines-before", raw, "你好")
    assert code == 2 and out == ""
    assert message in one_line(err)
    assert line_count(db_url, instance) == before


def test_a_host_character_by_its_role_id_is_stored(
    capsys: pytest.CaptureFixture[str], db_url: str, instance: int
) -> None:
    with session_scope(db_url) as session:
        host = create_role(session, "白小喵").id
    raw = lines_before({"attribute": "assistant", "content": "喵～", "role_id": host, "display_name": "白小喵"})
    code, _, err = cli(capsys, "turn", "--instance", str(instance), "--lines-before", raw, "你好")
    assert code == 0, err
    with session_scope(db_url) as session:
        stored = session.exec(select(Line).where(col(Line.role_id) == host)).all()
    assert [(line.content, line.save_id) for line in stored] == [("喵～", instance)]


def test_the_store_refuses_what_the_database_cannot_hold_naming_the_line(db_url: str) -> None:
    """The same checks for a host app calling the store directly (no CLI JSON check in front)."""
    with session_scope(db_url) as session:
        role = create_role(session, "雷娜")
        save_id = create_save(session, role.id, None).id
    assert save_id is not None
    cases: list[tuple[list[dict[str, Any]], str]] = [
        ([{"attribute": "user", "content": "a\u0000b"}], "line 1 of 1: field 'content' contains a NUL character"),
        ([{"attribute": "user", "content": "a", "tts_content": "\u0000"}], "field 'tts_content' contains a NUL"),
        ([{"attribute": "user", "content": "\udcff"}], "line 1 of 1: field 'content' contains a lone surrogate"),
        (
            [{"attribute": "user", "content": "a"}, {"attribute": "user", "content": "b", "role_id": 2**70}],
            "line 2 of 2: role_id",
        ),
        (
            [{"attribute": "user", "content": "a", "role_id": 12345}],
            "line 1 of 1: role_id 12345 is not a stored character",
        ),
    ]
    for lines, message in cases:
        with pytest.raises(InvalidInput, match=re.escape(message)), session_scope(db_url) as session:
            append_lines(session, save_id, lines)
    with pytest.raises(InvalidInput, match="role name contains a NUL character"), session_scope(db_url) as session:
        create_role(session, "雷\u0000娜")
    with pytest.raises(InvalidInput, match="instance title contains a NUL"), session_scope(db_url) as session:
        create_save(session, None, None, title="\u0000")
    with session_scope(db_url) as session:
        assert get_save(session, save_id).last_message_id is None
        written = append_lines(session, save_id, [{"attribute": "assistant", "content": "好", "role_id": role.id}])
        assert written[0].role_id == role.id


def test_text_that_was_not_utf8_on_the_command_line_is_one_line(
    capsys: pytest.CaptureFixture[str], data_dir: Path
) -> None:
    not_utf8 = b"\xff\xfe".decode("utf-8", "surrogateescape")  # what Python makes of such argv bytes
    code, _, err = cli(capsys, "worldbook", "add", f"据点{not_utf8}", "--keyword", "k")
    assert code == 2 and one_line(err) == "personalab: error: personalab: argument content: not UTF-8 text"
    code, _, err = cli(capsys, "worldbook", "import", f"/nonexistent/{not_utf8}.json")
    assert (
        code == 2
        and one_line(err) == "personalab: error: cannot read /nonexistent/\\xff\\xfe.json: No such file or directory"
    )


# --- the database cannot be written ---------------------------------------------------------------


@pytest.fixture
def shared_data_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A data directory another user can reach (pytest's tmp folders are private to their owner)."""
    folder = Path(tempfile.mkdtemp(prefix="personalab-ro-", dir="/tmp"))
    folder.chmod(0o755)
    monkeypatch.setenv("PERSONALAB_DATA_DIR", str(folder))
    yield folder
    dispose_engines()
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    shutil.rmtree(folder)


def run_as_reader(*argv: str) -> subprocess.CompletedProcess[str]:
    """`personalab …` in a subprocess that cannot write root-owned read-only files: as `nobody` when we are root
    (root writes through any mode), as ourselves otherwise."""
    drop: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv: no user that a file mode stops")
        drop = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    env = {**os.environ, "HOME": "/tmp"}
    return subprocess.run([*drop, PERSONALAB, *argv], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("folder_mode", [0o777, 0o555])
def test_a_read_only_database_is_one_line_and_exit_2(shared_data_dir: Path, folder_mode: int) -> None:
    """The database file read-only (chmod 444), in a folder the reader may write (SQLite makes its -shm file
    there, so reading works) or may not (a WAL database cannot even be read then)."""
    instance = create_sample_instance()
    dispose_engines()
    for path in shared_data_dir.rglob("*"):
        path.chmod(0o555 if path.is_dir() else 0o444)
    shared_data_dir.chmod(folder_mode)
    database = shared_data_dir / "personalab.db"
    # reads work in both (issue 27: a read-only folder's database is opened read-only), writes are one line
    listed = run_as_reader("worldbook", "list")
    assert (listed.returncode, listed.stderr) == (0, "")
    added = run_as_reader("worldbook", "add", "雷娜的旧据点", "--keyword", "据点")
    assert added.returncode == 2 and added.stdout == ""
    assert one_line(added.stderr).startswith(f"personalab: error: the database {database} cannot be written")
    turn = run_as_reader("turn", "--instance", str(instance), "你好")
    assert turn.returncode == 2 and "Traceback" not in turn.stderr
    assert one_line(turn.stderr).startswith("personalab: error: the database ")


def test_a_data_directory_that_cannot_be_made_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    monkeypatch.setenv("PERSONALAB_DATA_DIR", str(blocker / "data"))
    code, _, err = cli(capsys, "worldbook", "list")
    assert code == 2 and one_line(err).startswith(f"personalab: error: the data directory {blocker / 'data'} cannot be")


# --- a reader that goes away -----------------------------------------------------------------------


def test_turn_json_into_head_and_a_closed_pipe_end_quietly(data_dir: Path) -> None:
    instance = create_sample_instance()
    dispose_engines()
    piped = subprocess.run(
        f"'{PERSONALAB}' turn --instance {instance} --json 你好 | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
        executable="/bin/bash",
    )
    assert piped.stdout == "{\n" and piped.stderr == ""
    for argv in (["turn", "--instance", str(instance), "走吧"], ["turn", "--instance", str(instance), "--json", "走"]):
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before the first byte: every write fails
        try:
            closed = subprocess.run(
                [PERSONALAB, *argv], stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300
            )
        finally:
            os.close(write_end)
        assert (closed.returncode, closed.stderr) == (1, ""), argv
    listed = subprocess.run(
        [PERSONALAB, "core", "versions", "--instance", str(instance)], capture_output=True, text=True
    )
    assert listed.returncode == 0  # the turns whose output nobody read were still stored, the instance is free


# --- terminal output ---------------------------------------------------------------------------------

ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x9b31m\r\x08\x7f"
CONTROLS = {chr(c) for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]} - {"\n", "\t"}


def raw_controls(text: str) -> set[str]:
    return set(text) & CONTROLS


def test_safe_and_json_text_escape_every_control_but_newline_and_tab() -> None:
    assert safe("a\x1b[31mb\tc\nd\x9b\x00\x7f") == "a\\x1b[31mb\tc\nd\\x9b\\x00\\x7f"
    assert safe("\udcff") == "\\xff"
    text = json_text({"reply": ESCAPES + "\t好"})
    assert raw_controls(text) == set() and json.loads(text) == {"reply": ESCAPES + "\t好"}


def test_stored_and_model_text_reach_the_terminal_escaped(capsys: pytest.CaptureFixture[str], instance: int) -> None:
    i = str(instance)
    # the offline model quotes the user's message in its reply: model text carrying escapes
    code, out, _ = cli(capsys, "turn", "--instance", i, f"雷娜{ESCAPES}出发")
    assert code == 0 and raw_controls(out) == set() and "\\x07\\x9b31m" in out
    code, out, _ = cli(capsys, "turn", "--instance", i, "--json", f"再说{ESCAPES}一次")
    assert code == 0 and raw_controls(out) == set()
    assert "\x07\x9b31m" in json.loads(out)["reply"]  # --json is JSON: the value is intact
    commands = [
        ["worldbook", "add", f"据点{ESCAPES}", "--keyword", f"钥{ESCAPES}", "--title", ESCAPES],
        ["worldbook", "list"],
        ["worldbook", "list", "--json"],
        ["worldbook", "export"],
        ["knowledge", "add", f"知识{ESCAPES}", "--tag", ESCAPES, "--keyword", ESCAPES],
        ["knowledge", "list"],
        ["memory", "add", "--instance", i, "--tags", ESCAPES, f"记忆{ESCAPES}"],
        ["memory", "list", "--instance", i],
        ["memory", "search", "--instance", i, "记忆"],
        ["memory", "search", "--instance", i, "--json", "记忆"],
        ["core", "show", "--instance", i],
    ]
    for argv in commands:
        code, out, err = cli(capsys, *argv)
        assert code == 0, (argv, err)
        assert raw_controls(out) == set(), argv
    assert "\\x1b[2J" in cli(capsys, "worldbook", "list")[1]


def test_an_error_line_escapes_what_the_file_said(
    capsys: pytest.CaptureFixture[str], data_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "book.json"
    path.write_text(json.dumps({"entries": {ESCAPES: {"key": ["a"], "content": "x", "constant": "yes"}}}), "utf-8")
    code, _, err = cli(capsys, "worldbook", "import", str(path))
    assert code == 2 and raw_controls(err.rstrip("\n")) == set()
    assert "(uid \\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\x0d\\x08\\x7f): field 'constant'" in one_line(err)
