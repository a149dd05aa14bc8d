"""A full disk during `memory add` (issue 27, found as an operator would): one `StoreUnavailable` line naming the
store and the full disk, exit 2, not Chroma's traceback; once there is room the memory is added. Mounting a tmpfs
needs root (as CI runs); elsewhere the test is skipped (tests/test_disk_full.py's `small_disk`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import cli, one_line
from test_disk_full import fill, small_disk  # noqa: F401 - the fixture


def test_memory_add_on_a_full_disk_is_one_line(small_disk: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    code, out, _ = cli(capsys, "instance", "create", "--sample", "--json")
    instance = str(json.loads(out)["id"])
    filler = fill(small_disk)
    code, _, err = cli(capsys, "memory", "add", "--instance", instance, "她很怕黑暗的地方和狭窄的通道")
    assert code == 2
    line = one_line(err)
    assert "disk is full" in line and str(small_disk / "data") in line
    filler.unlink()
    code, _, err = cli(capsys, "memory", "add", "--instance", instance, "她很怕黑暗的地方和狭窄的通道")
    assert code == 0, err
    code, out, _ = cli(capsys, "memory", "list", "--instance", instance)
    assert "狭窄的通道" in out
