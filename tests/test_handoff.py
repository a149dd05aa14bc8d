"""`personalab turn` hands its turn to the running `personalab serve` of its data folder (issue 29): the same output,
errors and exit codes as the in-process path, `--json` says which ran it, and nothing is played twice or lost when
the server is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from personalab.stores import local_server

from tests.served_app import serve_process

PERSONALAB = str(Path(sys.executable).parent / "personalab")


def _command(root: Path, *argv: str, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PERSONALAB_", "OPENAI_"))}
    env.update(PERSONALAB_DATA_DIR=str(root / "data"), PERSONALAB_LLM="scripted", **settings)
    return subprocess.run([PERSONALAB, *argv], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def _turn_json(root: Path, *argv: str, **settings: str) -> dict:
    done = _command(root, "turn", "--json", *argv, **settings)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str, int]]:
    """A data folder with the sample instance (id 1) and its `personalab serve`: (the root, the app's URL, the pid)."""
    (tmp_path / "data").mkdir()
    created = _command(tmp_path, "instance", "create", "--sample")
    assert created.returncode == 0, created.stderr
    with serve_process(tmp_path) as (first, pid):
        yield tmp_path, first.split()[3], pid


def _history_users(root: Path) -> list[str]:
    done = _command(root, "history", "--instance", "1", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    lines = rows["lines"] if isinstance(rows, dict) else rows
    return [line["content"] for line in lines if line.get("attribute") == "user"]


@pytest.mark.served
def test_a_turn_is_handed_to_the_running_server_and_the_next_in_process_turn_reads_it(
    served: tuple[Path, str, int],
) -> None:
    root, url, pid = served
    handed = _turn_json(root, "--instance", "1", "我叫林澈，我住在北京")
    assert (handed["ran_in"], handed["turn"]) == ("server", 1)
    assert handed["server"].startswith("http://127.0.0.1:") and handed["server"] in url
    assert handed["reply"] and not handed["error"]
    # the record names this server; the turn was stored once, and an in-process turn continues the same story
    record = local_server._read(root / "data" / local_server.RECORD)
    assert record is not None and record.pid == pid
    here = _turn_json(root, "--in-process", "--instance", "1", "你还记得我住在哪里吗")
    assert (here["ran_in"], here["server"], here["turn"]) == ("process", None, 2)
    again = _turn_json(root, "--instance", "1", "我们去黑市吧")
    assert (again["ran_in"], again["turn"]) == ("server", 3)
    assert _history_users(root) == ["我叫林澈，我住在北京", "你还记得我住在哪里吗", "我们去黑市吧"]


@pytest.mark.served
def test_handed_and_in_process_turns_give_the_same_output_errors_and_exit_codes(
    served: tuple[Path, str, int],
) -> None:
    root, _url, _pid = served
    bad = [
        ["--instance", "99", "你好"],  # an unknown instance
        ["--instance", "1", "   "],  # an empty message
        ["--instance", "1", "--gap", "centuries", "你好"],  # a bad time gap
        ["--instance", "1", "--choice", "whenever", "你好"],  # a bad choice level
        ["--instance", "1", "--lines-before", '[{"speaker_type": "martian"}]', "你好"],  # a bad line before
    ]
    for argv in bad:
        handed = _command(root, "turn", *argv)
        here = _command(root, "turn", "--in-process", *argv)
        assert (handed.returncode, handed.stderr, handed.stdout) == (here.returncode, here.stderr, here.stdout), argv
        assert handed.returncode == 2 and handed.stderr.count("\n") == 1, argv
    assert _history_users(root) == []  # nothing stored by any of them
    # the text output: the reply, then the model's line, on both paths
    handed = _command(root, "turn", "--instance", "1", "你好")
    here = _command(root, "turn", "--in-process", "--instance", "1", "你好")
    assert handed.returncode == here.returncode == 0
    assert (
        handed.stdout.splitlines()[-1]
        == here.stdout.splitlines()[-1]
        == "  — scripted (offline, PERSONALAB_LLM=scripted)"
    )
    assert handed.stdout.strip() and handed.stderr == here.stderr == ""


@pytest.mark.served
def test_a_killed_servers_record_is_ignored_and_a_stopped_server_removes_it(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    assert _command(tmp_path, "instance", "create", "--sample").returncode == 0
    record_file = tmp_path / "data" / local_server.RECORD
    with serve_process(tmp_path) as (_first, pid):
        assert record_file.exists() and oct(record_file.stat().st_mode & 0o777) == "0o600"
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)  # reaped as a shell would: no process with that id any more
    assert record_file.exists()  # kill -9: the record stays, its process is gone
    turn = _turn_json(tmp_path, "--instance", "1", "你好")
    assert (turn["ran_in"], turn["turn"]) == ("process", 1)
    with serve_process(tmp_path):
        assert _turn_json(tmp_path, "--instance", "1", "再见")["ran_in"] == "server"
    for _ in range(100):  # SIGTERM: the server removes its record on the way out
        if not record_file.exists():
            break
        time.sleep(0.05)
    assert not record_file.exists()
    assert _turn_json(tmp_path, "--instance", "1", "还在吗")["ran_in"] == "process"


@pytest.mark.served
def test_only_a_caller_holding_the_data_folders_token_is_answered(served: tuple[Path, str, int]) -> None:
    root, url, _pid = served
    base = url.removesuffix("/app")
    body = json.dumps({"instance_id": 1, "message": "你好", "run_id": "x"}).encode()
    for token in ("", "0" * 64):
        request = urllib.request.Request(
            f"{base}/local/turn", data=body, headers={"X-PersonaLab-Local-Token": token}, method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 403
    record = local_server._read(root / "data" / local_server.RECORD)
    assert record is not None
    request = urllib.request.Request(
        f"{base}/local/turn",
        data=json.dumps({"instance_id": 1, "message": "你好", "run_id": "x", "volume": 11}).encode(),
        headers={"X-PersonaLab-Local-Token": record.token},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(request, timeout=30)
    assert bad.value.code == 422 and "volume" in bad.value.read().decode()
    assert _history_users(root) == []


@pytest.mark.served
def test_a_command_on_another_database_plays_in_its_own_process(served: tuple[Path, str, int]) -> None:
    root, _url, _pid = served
    other = root / "other.db"
    assert (
        _command(root, "instance", "create", "--sample", PERSONALAB_DATABASE_URL=f"sqlite:///{other}").returncode == 0
    )
    turn = _turn_json(root, "--instance", "1", "你好", PERSONALAB_DATABASE_URL=f"sqlite:///{other}")
    assert turn["ran_in"] == "process"
    assert _history_users(root) == []  # the server's database got nothing


@pytest.mark.parametrize(
    "environment",
    [
        {},
        {"PERSONALAB_DATA_DIR": "relative/folder"},
        {"PERSONALAB_DATA_DIR": "~/somewhere"},
        {"PERSONALAB_DATABASE_URL": "postgresql://someone@127.0.0.1:5432/test"},
        {"PERSONALAB_DATA_DIR": "", "PERSONALAB_DATABASE_URL": ""},
    ],
)
def test_the_commands_quick_look_finds_the_settings_data_folder_and_database(
    environment: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command reads the environment itself (no settings import) to find the record: it must agree with the
    settings on the data folder and the database, or a turn would be handed to the wrong server (or to none)."""
    from personalab.stores.config import data_dir, database_url

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("PERSONALAB_DATA_DIR", "PERSONALAB_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert local_server._data_folder_from_environment().resolve() == data_dir().resolve()
    assert local_server.database_url_from_environment() == database_url()


@pytest.mark.served
def test_chat_hands_each_line_to_the_server(served: tuple[Path, str, int]) -> None:
    """The chat's own environment names a model that is not there: its lines are answered all the same, by the
    server's offline model, so they were played by the server (an in-process turn would fail on the model)."""
    root, _url, _pid = served
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PERSONALAB_", "OPENAI_"))}
    env.update(
        PERSONALAB_DATA_DIR=str(root / "data"),
        PERSONALAB_LLM="openai",
        OPENAI_API_KEY="no-model-here",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
    )
    chat = subprocess.run(
        [PERSONALAB, "chat", "--instance", "1"],
        input="你好，雷娜\n/regen\n/quit\n",
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.count("— scripted (offline, PERSONALAB_LLM=scripted)") == 2
    assert "turn failed" not in chat.stderr
    assert _history_users(root) == ["你好，雷娜"]


def test_a_record_whose_server_does_not_answer_leaves_the_turn_to_the_command(tmp_path: Path) -> None:
    """A record naming a live process (its id reused, or a server still starting) at a port nobody listens on: the
    turn was never sent, so the command plays it itself, once."""
    import socket

    (tmp_path / "data").mkdir()
    assert _command(tmp_path, "instance", "create", "--sample").returncode == 0
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"sqlite:///{(tmp_path / 'data' / 'personalab.db').resolve()}"
    record = {"url": f"http://127.0.0.1:{port}", "pid": os.getpid(), "token": "0" * 64}
    record["database"] = local_server.database_key(url)
    (tmp_path / "data" / local_server.RECORD).write_text(json.dumps(record))
    turn = _turn_json(tmp_path, "--instance", "1", "你好")
    assert (turn["ran_in"], turn["turn"]) == ("process", 1)
    assert _history_users(tmp_path) == ["你好"]
