"""The `personalab` CLI as a user runs it: demo output, benchmark commands, bad arguments."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from personalab.evals.__main__ import main as evals_main
from personalab.graph.cli import main


def test_demo_prints_each_characters_memory(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--part", "builder"]) == 0
    out = capsys.readouterr().out
    assert str(data_dir) in out  # the embedded SQLite file lives in the data directory
    qinling, baixiaomiao = out.split("=== memory of 白小喵")
    assert "[system] 你叫钦灵,进行角色扮演" in qinling and "你叫白小喵" not in qinling
    assert "[assistant] 【难为情】好啦..<はい、はい..>" in qinling
    assert "[system] 你叫白小喵,进行角色扮演" in baixiaomiao
    assert "[assistant] 【开心】你好呀莱姆,我在帮钦灵挑衣服呢~" in baixiaomiao
    assert (data_dir / "personalab.db").exists()


def test_demo_runs_again_on_the_same_database(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--part", "builder"]) == 0
    assert main(["demo", "--part", "builder"]) == 0
    assert "stored seed 000 example 2 as instance 2" in capsys.readouterr().out


def test_demo_session_shows_director_fallback_and_maintenance(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "## Part 1" in out and "## Part 2" in out
    assert "model: scripted (offline, no OPENAI_API_KEY)" in out
    turns = out.split("--- turn ")[1:]
    assert len(turns) == 12
    assert sum("director fallback:" in turn for turn in turns) >= 1
    assert "core memory maintenance: core memory rewritten" in turns[9]
    assert all("plot   |" in turn and "PROGRESS" not in turn for turn in turns)


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        (main, ["bogus"]),
        # the evaluations' commands reach `personalab` through the `personalab.commands` entry points
        (main, ["bench", "builder", "--lines", "abc"]),
        (evals_main, ["bench"]),
        (evals_main, ["bench", "builder", "--lines", "abc"]),
        (evals_main, ["bench", "builder", "--lines", "0"]),
    ],
)
def test_bad_arguments_print_one_line_and_exit_2(
    command: Callable[[list[str]], int], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert command(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("personalab")


def test_bench_builder_prints_the_ratio_to_the_floor(capsys: pytest.CaptureFixture[str]) -> None:
    assert evals_main(["bench", "builder", "--lines", "2000", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "floor (concatenate contents)" in out and "ratio build/floor" in out


def test_bench_history_compares_both_approaches(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "history", "--lines", "3000", "--depth", "200", "--repeats", "1", "--postgres-url", ""]
    assert evals_main(argv) == 0
    out = capsys.readouterr().out
    assert "path of 200 lines" in out and "speed-up" in out


def test_console_script_exit_code(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("personalab")
    env = {**os.environ, "PERSONALAB_DATA_DIR": str(tmp_path)}
    result = subprocess.run([str(exe), "nope"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
