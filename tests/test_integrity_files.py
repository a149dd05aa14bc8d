"""Imports and exports through `stores.files` (issue 16): what a file argument may be, and what happens when not.

Before: `worldbook export /dev/full` as root replaced the device with a JSON file, an export followed a symlink
and `worldbook import /dev/zero` read without bound. Now an export writes a new regular file atomically and
refuses a device, a directory, a FIFO or a symlink; an import reads a regular file and at most its limit.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli, one_line
from personalab.nodes.rules.errors import InvalidInput
from personalab.stores import files, worldbook_files
from personalab.stores.files import MAX_JSON_DEPTH, parse_json, read_file, read_json, write_file

ENTRY = {"format": "personalab.worldbook", "version": 1, "entries": [{"content": "雷娜的旧据点", "keywords": ["据点"]}]}


def full_device(folder: Path) -> Path:
    """A character device that refuses writes like /dev/full: our own node when root (so a failing test cannot
    replace the machine's /dev/full), the real one otherwise (a non-root process cannot replace it)."""
    if os.geteuid() != 0:
        return Path("/dev/full")
    node = folder / "full"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except PermissionError:
        pytest.skip("root without CAP_MKNOD: no device node to test on")
    return node


def finishes(call: Callable[[], Any], seconds: float = 20) -> Any:
    """`call()`'s result, failing the test if it blocks (a FIFO opened for reading waits for a writer)."""
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "blocked"
    return result[0]


# --- exports --------------------------------------------------------------------------------------


def test_export_to_a_device_is_refused_and_the_device_stays(
    capsys: pytest.CaptureFixture[str], data_dir: Path, tmp_path: Path
) -> None:
    device = full_device(tmp_path)
    cli(capsys, "worldbook", "add", "雷娜的旧据点", "--keyword", "据点")
    code, out, err = cli(capsys, "worldbook", "export", str(device))
    assert code == 2 and out == ""
    assert one_line(err) == f"personalab: error: cannot write {device}: it is a character device, not a regular file"
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    assert [p.name for p in device.parent.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_export_to_a_symlink_directory_or_fifo_is_refused(
    capsys: pytest.CaptureFixture[str], data_dir: Path, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_text("untouched", encoding="utf-8")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    cli(capsys, "worldbook", "add", "x", "--keyword", "k")
    for path, kind in ((link, "a symbolic link"), (fifo, "a FIFO (named pipe)"), (folder, "a directory")):
        code, _, err = finishes(lambda path=path: cli(capsys, "worldbook", "export", str(path)))
        assert code == 2 and f"cannot write {path}: it is {kind}" in one_line(err)
    assert target.read_text(encoding="utf-8") == "untouched" and link.is_symlink()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and folder.is_dir() and list(folder.iterdir()) == []


def test_export_replaces_a_plain_file_whole_and_keeps_its_mode(
    capsys: pytest.CaptureFixture[str], data_dir: Path, tmp_path: Path
) -> None:
    target = tmp_path / "book.json"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o640)
    cli(capsys, "worldbook", "add", "雷娜的旧据点", "--keyword", "据点")
    code, out, _ = cli(capsys, "worldbook", "export", str(target))
    assert (code, out) == (0, f"exported 1 world-book entries to {target}\n")
    assert json.loads(target.read_text(encoding="utf-8"))["entries"][0]["content"] == "雷娜的旧据点"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["book.json", "data"]


def test_write_file_refuses_what_it_is_not_asked_to_replace(tmp_path: Path) -> None:
    existing = tmp_path / "a.json"
    existing.write_text("old", encoding="utf-8")
    with pytest.raises(InvalidInput, match=f"cannot write {existing}: it exists"):
        write_file(existing, b"new")
    assert existing.read_text(encoding="utf-8") == "old"
    link = tmp_path / "link"
    link.symlink_to(existing)
    assert write_file(link, b"through", overwrite=True, follow_symlinks=True) == existing.resolve()
    assert link.is_symlink() and existing.read_text(encoding="utf-8") == "through"
    with pytest.raises(InvalidInput, match="No such file or directory"):
        write_file(tmp_path / "missing" / "x.json", b"{}")
    new = write_file(tmp_path / "new.json", b"{}")
    assert new.read_bytes() == b"{}" and stat.S_ISREG(new.stat().st_mode)


def test_a_private_file_is_written_for_its_user_only_new_or_replacing(tmp_path: Path) -> None:
    """`mode` (a server's local token, a pickle the process will load) wins over the umask and the old file's mode."""
    new = write_file(tmp_path / "token.json", b"{}", mode=0o600)
    assert stat.S_IMODE(new.stat().st_mode) == 0o600
    shared = tmp_path / "shared.json"
    shared.write_text("old", encoding="utf-8")
    shared.chmod(0o644)
    assert stat.S_IMODE(write_file(shared, b"{}", overwrite=True, mode=0o600).stat().st_mode) == 0o600


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "book.json"
    target.write_text("old", encoding="utf-8")

    def no_space(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", no_space)
    with pytest.raises(InvalidInput, match=f"cannot write {target}: No space left on device"):
        worldbook_files.write_json_file(target, ENTRY, overwrite=True)
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["book.json"]


# --- imports --------------------------------------------------------------------------------------


def test_import_from_a_device_fifo_or_directory_is_refused_without_reading(
    capsys: pytest.CaptureFixture[str], data_dir: Path, tmp_path: Path
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # no writer: opening it to read would wait for ever
    for path, kind in (
        ("/dev/zero", "a character device"),
        (str(fifo), "a FIFO (named pipe)"),
        (str(tmp_path), "a directory"),
    ):
        code, _, err = finishes(lambda path=path: cli(capsys, "worldbook", "import", path))
        assert code == 2 and one_line(err) == f"personalab: error: cannot read {path}: it is {kind}, not a regular file"
    assert cli(capsys, "worldbook", "list", "--json")[1] == "[]\n"


def test_import_reads_at_most_its_limit(
    capsys: pytest.CaptureFixture[str], data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps(ENTRY), encoding="utf-8")
    monkeypatch.setattr(worldbook_files, "MAX_IMPORT_BYTES", 50)
    code, _, err = cli(capsys, "worldbook", "import", str(big))
    assert code == 2 and f"{big} is {big.stat().st_size} bytes, over the import limit of 50" in one_line(err)
    # a file whose size the system does not know (here /proc's, size 0) is read up to the limit + 1 byte only
    with pytest.raises(InvalidInput, match="/proc/self/status is over the file limit of 10 bytes"):
        read_file("/proc/self/status", 10)
    assert read_file(big, 1000) == big.read_bytes()


def test_deep_json_and_nul_characters_in_a_file_are_one_line_and_store_nothing(
    capsys: pytest.CaptureFixture[str], db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")  # RecursionError in json.loads before
    nul = tmp_path / "nul.json"
    nul.write_text(json.dumps({"entries": [{"key": ["a"], "content": "雷娜\u0000的据点"}]}), encoding="utf-8")
    knowledge = tmp_path / "knowledge.json"
    knowledge.write_text(json.dumps([{"tag": "地\u0000点", "content": "x"}]), encoding="utf-8")
    cases = [
        ("worldbook", deep, f"{deep} is nested deeper than {MAX_JSON_DEPTH} levels"),
        ("worldbook", nul, f"{nul}: the text at entries[0].content contains a NUL character"),
        ("knowledge", knowledge, f"{knowledge}: the text at [0].tag contains a NUL character"),
    ]
    for group, path, message in cases:
        code, _, err = cli(capsys, group, "import", str(path))
        assert code == 2 and one_line(err) == f"personalab: error: {message}"
    for group in ("worldbook", "knowledge"):
        assert cli(capsys, group, "list", "--json")[1] == "[]\n"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"key": ["a"], "content": "x", "order": 10**30}, "entry 1: field 'priority' is 10000000000000000"),
        ({"content": "x", "keywords": ["a"], "priority": 3_000_000_000}, "entry 1: field 'priority' is 3000000000"),
        (
            {"content": "x", "trigger_type": "temporal", "temporal": {"min_turn": 2**63}},
            "entry 1: field 'temporal.min_turn' is 9223372036854775808, out of range",
        ),
    ],
)
def test_numbers_the_database_cannot_hold_are_the_files_error(
    capsys: pytest.CaptureFixture[str],
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    entry: dict[str, Any],
    message: str,
) -> None:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    path = tmp_path / "book.json"
    path.write_text(json.dumps({"entries": [entry]}), encoding="utf-8")
    code, _, err = cli(capsys, "worldbook", "import", str(path))
    assert code == 2 and message in one_line(err)
    assert cli(capsys, "worldbook", "list", "--json")[1] == "[]\n"


def test_parse_json_names_its_source_and_takes_its_depth() -> None:
    assert parse_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "x") is not None
    with pytest.raises(InvalidInput, match=f"^--lines-before is nested deeper than {MAX_JSON_DEPTH} levels$"):
        parse_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "--lines-before")
    with pytest.raises(InvalidInput, match=r"^arg: a key at \[0\] contains a NUL character$"):
        parse_json('[{"a\\u0000": 1}]', "arg")
    with pytest.raises(InvalidInput, match="^arg is not valid JSON: Expecting value at line 1 column 1$"):
        parse_json("", "arg")


def test_read_json_takes_a_bom_and_refuses_other_encodings(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(ENTRY, ensure_ascii=False).encode("utf-8"))
    assert read_json(path, 10_000) == ENTRY
    path.write_bytes('["雷娜"]'.encode("gbk"))
    with pytest.raises(InvalidInput, match=f"^{path} is not UTF-8 text$"):
        read_json(path, 10_000)
