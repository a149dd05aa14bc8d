"""A read-only data folder (issue 27, found as an operator would): reads went on failing with "cannot be opened"
without saying why. Now the folder's stores are read where they can be (SQLite opened read-only) and anything that
must write says, in one line, that the folder is read-only: CLI exit 2, HTTP 503 naming it. The data folder is a
tmpfs remounted read-only (root, as CI runs; the mount binds root too, a chmod would not); elsewhere skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import cli, one_line
from fastapi.testclient import TestClient
from personalab.stores.db import dispose_engines
from test_disk_full import small_disk  # noqa: F401 - the fixture


@pytest.fixture
def read_only(small_disk: Path) -> Iterator[Path]:  # noqa: F811
    """A data folder with one played instance, then made read-only; yields the data folder."""
    data = small_disk / "data"
    # played by a process of its own: this one holds no file of the folder open for writing (Chroma's), which
    # would keep the remount from happening ("mount point is busy")
    personalab = str(Path(sys.executable).with_name("personalab"))
    for argv in (["instance", "create", "--sample"], ["turn", "--instance", "1", "你好，雷娜。"]):
        done = subprocess.run([personalab, *argv], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        yield data
    finally:
        dispose_engines()
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=False)


def test_reads_work_and_writes_say_the_folder_is_read_only(read_only: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "instance", "list", "--json")
    assert code == 0, err
    assert [item["id"] for item in json.loads(out)] == [1]
    code, out, err = cli(capsys, "history", "--instance", "1")
    assert code == 0, err
    assert "你好，雷娜。" in out
    code, out, err = cli(capsys, "core", "show", "--instance", "1")
    assert code == 0, err
    # a turn must write: one line naming the folder and why, exit 2
    code, _, err = cli(capsys, "turn", "--instance", "1", "我们走吧。")
    assert code == 2
    line = one_line(err)
    assert f"its folder {read_only} is read-only" in line, line
    code, _, err = cli(capsys, "instance", "create", "--sample")
    assert code == 2
    assert "read-only" in one_line(err)


def test_http_reads_answer_and_a_write_is_a_503_naming_the_folder(read_only: Path) -> None:
    from personalab.graph.http.app import app

    with TestClient(app) as client:
        listed = client.get("/instances")
        assert listed.status_code == 200, listed.text
        assert [item["id"] for item in listed.json()] == [1]
        history = client.get("/instances/1/history")
        assert history.status_code == 200 and "你好，雷娜。" in history.text
        made = client.post("/characters", json={"name": "新角色", "greetings": ["嗨。"]})
        assert made.status_code == 503, made.text
        assert f"its folder {read_only} is read-only" in made.text
