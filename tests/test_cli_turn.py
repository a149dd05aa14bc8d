"""`personalab instance create --sample`, `turn`, `chat` as a user runs them; the stream's marker filter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from personalab.graph.cli import main
from personalab.graph.streaming import MarkerFilter


def test_marker_filter_hides_markers_split_across_chunks() -> None:
    text = "【开心】我们走吧。[PROGRESS:2:completed]继续前进［PROGRESS：3：in_progress］【平静】好。"
    for size in (1, 2, 3, 5, 8, len(text)):
        stream = MarkerFilter()
        shown = "".join(stream.feed(text[i : i + size]) for i in range(0, len(text), size)) + stream.flush()
        assert shown == "【开心】我们走吧。继续前进【平静】好。", size


def test_marker_filter_does_not_hold_ordinary_brackets_forever() -> None:
    stream = MarkerFilter()
    assert stream.feed("[笑]") == "[笑]"
    assert stream.feed("她说[") == "她说"
    assert stream.flush() == "["


def test_sample_instance_and_a_streamed_turn(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["instance", "create", "--sample"]) == 0
    instance = capsys.readouterr().out.strip()
    assert instance.isdigit()
    assert main(["turn", "--instance", instance, "雷娜，出发吧。"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("【") and "PROGRESS" not in out
    assert "— scripted (offline, no OPENAI_API_KEY)" in out


def test_turn_json_has_everything_a_host_needs(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["instance", "create", "--sample"])
    instance = capsys.readouterr().out.strip()
    assert main(["turn", "--instance", instance, "你好", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("reply", "plot_state", "retrieved_events", "dropped", "timings_ms", "model", "core_memory"):
        assert key in result, key
    assert len(result["plot_state"]["story_outline"]) == 10
    assert {"history_fetch", "generate", "write_back"} <= set(result["timings_ms"])
    assert result["model"].startswith("scripted")
    # the full prompt sent to the model, each message with its region (issue 12: anyone can check what a turn saw)
    prompt = result["prompt"]
    assert {m["region"] for m in prompt} <= {"head", "middle", "retrieved", "tail"}
    assert prompt[0]["region"] == "head" and prompt[0]["role"] == "system"
    assert prompt[-1] == {"role": "user", "region": "tail", "content": prompt[-1]["content"]}
    assert "你好" in prompt[-1]["content"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["turn", "--instance", "999", "你好"], "instance 999 does not exist"),
        (["turn", "--instance", "1", ""], "message is empty"),
        (["turn", "--instance", "x", "你好"], "invalid int value"),
        (["turn", "--instance", "1", "你好", "--lines-before", "[oops"], "--lines-before is not valid JSON"),
        (["instance", "create"], "give --character ID (and --background ID, or none: the card's scenario), or --sample"),
    ],
)
def test_bad_turn_input_is_one_line_and_exit_2(
    data_dir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    main(["instance", "create", "--sample"])
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and expected in err


def test_chat_loop(data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    main(["instance", "create", "--sample"])
    instance = capsys.readouterr().out.strip()
    answers = iter(["你好", "我们去据点", "/quit"])
    monkeypatch.setattr("builtins.input", lambda _prompt="": next(answers))
    assert main(["chat", "--instance", instance]) == 0
    out = capsys.readouterr().out
    assert out.count("— scripted") == 2


def test_choice_and_gap_from_the_cli_reach_the_review(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["instance", "create", "--sample"])
    instance = capsys.readouterr().out.strip()
    argv = ["turn", "--instance", instance, "我决定放过他。", "--choice", "turning_point", "--gap", "days", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["review"]["choice_level"] == "turning_point" and result["review"]["gap"] == "days"
    assert result["relationship"] == {"trust": 1, "affection": 2, "familiarity": 2}
    assert main(["suggestions", "list", "--instance", instance, "--json"]) == 0
    (suggestion,) = json.loads(capsys.readouterr().out)
    assert suggestion["status"] == "pending"
    assert main(["suggestions", "approve", str(suggestion["id"])]) == 0


@pytest.mark.parametrize(("option", "value"), [("--choice", "epic"), ("--gap", "weeks")])
def test_unknown_choice_or_gap_on_the_cli(
    data_dir: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    main(["instance", "create", "--sample"])
    instance = capsys.readouterr().out.strip()
    assert main(["turn", "--instance", instance, "你好", option, value]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and value in err


def test_core_memory_versions_and_rollback(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_MAINTENANCE_EVERY", "1")
    main(["instance", "create", "--sample"])
    instance = capsys.readouterr().out.strip()
    for message in ("出发。", "继续。"):
        main(["turn", "--instance", instance, message, "--json"])
    capsys.readouterr()
    assert main(["core", "versions", "--instance", instance]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["1", "2", "3"]
    assert main(["core", "rollback", "--instance", instance, "--to", "1"]) == 0
    assert "now version 4 (rollback to version 1)" in capsys.readouterr().out
    assert main(["core", "show", "--instance", instance]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["recent_changes"] == [] and shown["name"] == "雷娜"
    assert main(["core", "rollback", "--instance", instance, "--to", "99"]) == 2
    assert "version 99 is not kept" in capsys.readouterr().err
