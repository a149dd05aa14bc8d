"""Running the `personalab` CLI in-process from tests: its exit code, stdout and stderr, and the one-line error."""

from __future__ import annotations

import pytest
from personalab.graph.cli import main


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]
