"""`personalab suggestions list|approve|reject`, run through `graph.cli.main` in a tmp data dir."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from personalab.graph.cli import main
from personalab.nodes.rules.review.effects import worldbook_suggestion_from_turn
from personalab.stores.db import session_scope
from personalab.stores.review import create_suggestion
from personalab.stores.saves import create_role, create_save


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def setup(data_dir: Path) -> dict[str, int]:
    """Instance 1 with suggestions of turns 3 and 8, instance 2 with one of turn 1."""
    with session_scope() as s:
        role = create_role(s, "艾拉")
        one = create_save(s, role.id, None)
        two = create_save(s, role.id, None)
        assert one.id is not None and two.id is not None
        a = create_suggestion(
            s,
            one.id,
            **worldbook_suggestion_from_turn(
                "我们离开营地,去北方的废墟。", "好,天亮就出发。", {"level": "turning_point", "text": "离开营地"}, 3
            ),
        )
        b = create_suggestion(
            s, one.id, **worldbook_suggestion_from_turn("这就是结局吗?", "是的。", {"level": "ending"}, 8)
        )
        c = create_suggestion(s, two.id, **worldbook_suggestion_from_turn("留下来吧", "好。", None, 1))
        return {"one": one.id, "two": two.id, "a": a.id, "b": b.id, "c": c.id}


def worldbook_json(capsys: pytest.CaptureFixture[str], instance: int) -> list[dict[str, Any]]:
    code, out, _ = run(capsys, "worldbook", "list", "--json", "--instance", str(instance))
    assert code == 0
    return json.loads(out)


def test_list_prints_one_line_per_suggestion(capsys: pytest.CaptureFixture[str], setup: dict[str, int]) -> None:
    code, out, err = run(capsys, "suggestions", "list")
    lines = out.strip().splitlines()
    assert code == 0 and err == ""
    assert len(lines) == 3
    assert lines[0].startswith(
        f"#{setup['a']} [pending] instance {setup['one']} turn 3, turning_point (instance, keys: "
    )
    assert "营地" in lines[0] and "第3轮（转折点）" in lines[0]
    assert lines[2].startswith(f"#{setup['c']} [pending] instance {setup['two']} turn 1 (instance, keys: ")


def test_list_filters_by_instance_and_status(capsys: pytest.CaptureFixture[str], setup: dict[str, int]) -> None:
    run(capsys, "suggestions", "reject", str(setup["b"]))
    code, out, _ = run(capsys, "suggestions", "list", "--instance", str(setup["one"]), "--status", "pending")
    assert code == 0 and [line.split()[0] for line in out.strip().splitlines()] == [f"#{setup['a']}"]
    code, out, _ = run(capsys, "suggestions", "list", "--status", "approved")
    assert code == 0 and out.strip() == "no world-book suggestions (approved)"


def test_list_json(capsys: pytest.CaptureFixture[str], setup: dict[str, int]) -> None:
    code, out, _ = run(capsys, "suggestions", "list", "--json", "--instance", str(setup["two"]))
    assert code == 0
    (item,) = json.loads(out)
    assert item["id"] == setup["c"] and item["status"] == "pending" and item["scope"] == "instance"
    assert item["turn"] == 1 and item["choice_level"] is None and isinstance(item["keywords"], list)
    assert item["decided_at"] is None and item["worldbook_entry_id"] is None


def test_approve_prints_the_new_entry_id_and_adds_it(capsys: pytest.CaptureFixture[str], setup: dict[str, int]) -> None:
    assert worldbook_json(capsys, setup["one"]) == []
    code, out, err = run(capsys, "suggestions", "approve", str(setup["a"]))
    (entry,) = worldbook_json(capsys, setup["one"])
    assert code == 0 and err == ""
    assert out.strip().startswith(f"approved suggestion {setup['a']}: added world-book entry {entry['id']} (instance)")
    assert entry["content"].startswith("第3轮（转折点）") and "营地" in entry["keywords"]
    code, out, _ = run(capsys, "suggestions", "list", "--status", "approved")
    assert out.strip().endswith(f"→ world-book entry {entry['id']}")


def test_approve_with_edited_content_and_keywords(capsys: pytest.CaptureFixture[str], setup: dict[str, int]) -> None:
    code, _, _ = run(
        capsys, "suggestions", "approve", str(setup["c"]), "--content", "艾拉决定留在营地。", "--keyword", "营地"
    )
    (entry,) = worldbook_json(capsys, setup["two"])
    assert code == 0 and entry["content"] == "艾拉决定留在营地。" and entry["keywords"] == ["营地"]


def test_reject_leaves_the_world_book_alone(capsys: pytest.CaptureFixture[str], setup: dict[str, int]) -> None:
    code, out, _ = run(capsys, "suggestions", "reject", str(setup["a"]))
    assert code == 0 and out.strip() == f"rejected suggestion {setup['a']}"
    assert worldbook_json(capsys, setup["one"]) == []


@pytest.mark.parametrize("then", ["approve", "reject"])
def test_deciding_twice_is_one_error_line(capsys: pytest.CaptureFixture[str], setup: dict[str, int], then: str) -> None:
    run(capsys, "suggestions", "approve", str(setup["a"]))
    code, out, err = run(capsys, "suggestions", then, str(setup["a"]))
    assert code == 2 and out == ""
    assert f"suggestion {setup['a']} is already approved" in one_error_line(err)
    assert len(worldbook_json(capsys, setup["one"])) == 1


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (("suggestions", "approve", "999"), "suggestion 999 does not exist"),
        (("suggestions", "reject", "999"), "suggestion 999 does not exist"),
        (("suggestions", "approve", "abc"), "invalid int value"),
        (("suggestions", "list", "--status", "done"), "invalid choice"),
        (("suggestions", "list", "--instance", "999"), "instance 999 does not exist"),
        (("suggestions", "approve", "1", "--content", " "), "content is empty"),
        (("suggestions",), "required"),
    ],
)
def test_bad_input_is_one_error_line_exit_2(
    capsys: pytest.CaptureFixture[str], setup: dict[str, int], argv: tuple[str, ...], expected: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert expected in one_error_line(err)
    code, out, _ = run(capsys, "suggestions", "list", "--status", "pending")
    assert len(out.strip().splitlines()) == 3


def test_list_with_nothing_stored(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    code, out, _ = run(capsys, "suggestions", "list")
    assert code == 0 and out.strip() == "no world-book suggestions"
