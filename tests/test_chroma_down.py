"""A stopped Chroma server (issue 27, found as an operator would): with `PERSONALAB_CHROMA_HOST` set and nothing
listening there, a turn goes on without retrieval and says so in one line (`debug.retrieval.status`), and the
commands that need the vectors (`memory add`, `memory search`, `doctor`) give one `StoreUnavailable` line naming the
Chroma server and exit 2, not a client's traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import cli, one_line
from personalab.evals.served import free_port


@pytest.fixture
def chroma_down(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A Chroma address where nothing listens: a free loopback port."""
    port = free_port()
    monkeypatch.setenv("PERSONALAB_CHROMA_HOST", "127.0.0.1")
    monkeypatch.setenv("PERSONALAB_CHROMA_PORT", str(port))
    return f"127.0.0.1:{port}"


def test_a_turn_goes_on_without_retrieval_and_says_so(chroma_down: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "instance", "create", "--sample", "--json")
    assert code == 0
    instance = str(json.loads(out)["id"])
    code, out, err = cli(capsys, "turn", "--instance", instance, "你好，还记得我吗？")
    assert code == 0, err
    assert out.strip()  # the reply
    line = one_line(err)
    assert line.startswith("personalab: retrieval unavailable") and f"Chroma server {chroma_down}" in line
    code, out, err = cli(capsys, "turn", "--instance", instance, "我们接着走吧", "--json")
    assert code == 0, err
    status = json.loads(out)["debug"]["retrieval"]["status"]
    assert status.startswith("unavailable") and chroma_down in status
    code, out, _ = cli(capsys, "history", "--instance", instance)
    assert "我们接着走吧" in out  # both turns stored


@pytest.mark.parametrize(
    "argv",
    [("memory", "add", "--instance", "{i}", "她怕黑"), ("memory", "search", "--instance", "{i}", "黑"), ("doctor",)],
)
def test_commands_that_need_the_vectors_say_one_line(
    chroma_down: str, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    code, out, _ = cli(capsys, "instance", "create", "--sample", "--json")
    instance = str(json.loads(out)["id"])
    code, _, err = cli(capsys, *(part.format(i=instance) for part in argv))
    assert code == 2
    line = one_line(err)
    assert f"the Chroma server {chroma_down} cannot be reached" in line
