"""`personalab character|background|instance …` as a user runs them (issue 13): JSON output, the plain listing,
export and import through files, and bad input as one line with exit code 2 that changes nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli, one_line
from PIL import Image


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    code, out, err = cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def library(data_dir: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> dict[str, int]:
    avatar = tmp_path / "avatar.png"
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "blue").save(buffer, "PNG")
    avatar.write_bytes(buffer.getvalue())
    character = run_json(
        capsys,
        "character",
        "create",
        "--name",
        "雷娜",
        "--traits",
        "冷静，寡言",
        "--greeting",
        "{{user}}，走吧。",
        "--system-prompt",
        "{{char}}说话简短。",
        "--avatar",
        str(avatar),
    )
    outline = tmp_path / "outline.txt"
    outline.write_text("发现线索\n潜入据点\n\n与仇人对峙\n", encoding="utf-8")
    background = run_json(
        capsys,
        "background",
        "create",
        "--name",
        "废土复仇记",
        "--world-setting",
        "核战后",
        "--outline-file",
        str(outline),
    )
    instance = run_json(
        capsys, "instance", "create", "--character", str(character["id"]), "--background", str(background["id"])
    )
    return {"character": character["id"], "background": background["id"], "instance": instance["id"]}


def test_a_user_builds_a_library_and_plays_an_instance(
    library: dict[str, int], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    character = run_json(capsys, "character", "show", str(library["character"]))
    assert character["avatar_mime"] == "image/png" and character["traits"] == "冷静，寡言"
    assert character["instances"] == [library["instance"]]
    background = run_json(capsys, "background", "show", str(library["background"]))
    assert background["outline"] == ["发现线索", "潜入据点", "与仇人对峙"]

    code, out, _ = cli(capsys, "turn", "--instance", str(library["instance"]), "出发")
    assert code == 0
    [listed] = run_json(capsys, "instance", "list")
    assert (listed["title"], listed["turns"], listed["plot"]["total"]) == ("雷娜 · 废土复仇记", 1, 3)
    code, out, _ = cli(capsys, "instance", "list")
    assert code == 0 and "雷娜 · 废土复仇记" in out and "1 turn(s)" in out

    renamed = run_json(capsys, "instance", "rename", str(library["instance"]), "复仇之路")
    assert renamed["title"] == "复仇之路"
    edited = run_json(capsys, "character", "edit", str(library["character"]), "--backstory", "前二把手")
    assert edited["backstory"] == "前二把手" and edited["traits"] == "冷静，寡言"
    applied = run_json(
        capsys,
        "background",
        "edit",
        str(library["background"]),
        "--outline",
        "一",
        "--outline",
        "二",
        "--apply-to-instances",
    )
    assert applied["outline"] == ["一", "二"]
    assert run_json(capsys, "instance", "show", str(library["instance"]))["plot"]["total"] == 2

    exported = tmp_path / "instance.json"
    run_json(capsys, "instance", "export", str(library["instance"]), str(exported))
    imported = run_json(capsys, "instance", "import", str(exported))
    assert imported["instance"]["title"] == "复仇之路" and imported["instance"]["turns"] == 1
    code, out, _ = cli(capsys, "instance", "export", str(library["instance"]), "-")
    assert code == 0 and json.loads(out)["format"] == "personalab-instance"

    avatar = tmp_path / "out.png"
    run_json(capsys, "character", "avatar", str(library["character"]), str(avatar))
    assert avatar.read_bytes().startswith(b"\x89PNG")

    deleted = run_json(capsys, "character", "delete", str(library["character"]), "--cascade")
    assert sorted(deleted["instances_deleted"]) == sorted([library["instance"], imported["instance"]["id"]])
    assert run_json(capsys, "instance", "list") == []
    assert run_json(capsys, "background", "delete", str(library["background"]))["kind"] == "background"


def test_the_sample_still_makes_an_instance(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "instance", "create", "--sample")
    assert code == 0 and out.strip() == "1"
    [listed] = run_json(capsys, "instance", "list")
    assert listed["character_name"] == "雷娜" and listed["plot"]["total"] == 10


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["character", "create", "--name", " "], "character.name: is empty"),
        (["character", "create"], "character.name: Field required"),
        (["character", "create", "--name", "x", "--avatar", "{not_image}"], "avatar: not an image"),
        (["character", "show", "999"], "character 999 does not exist"),
        (["character", "edit", "999", "--name", "x"], "character 999 does not exist"),
        (["character", "delete", "{character}"], "is used by instance(s) {instance}"),
        (["background", "create", "--name", "b"], "background.outline: Field required"),
        (["background", "create", "--name", "b", "--outline-file", "{empty}"], "needs 1 to 50 points, got 0"),
        (["background", "create", "--name", "b", "--outline-file", "{many}"], "needs 1 to 50 points, got 51"),
        (["background", "delete", "{background}"], "is used by instance(s) {instance}"),
        (["background", "show", "x"], "invalid int value"),
        (["instance", "create", "--background", "{background}"], "give --character ID"),  # issue 28: a background alone
        (["instance", "create", "--character", "999", "--background", "{background}"], "character 999 does not exist"),
        (["instance", "rename", "{instance}", ""], "instance.title: is empty"),
        (["instance", "delete", "999"], "instance 999 does not exist"),
        (["instance", "import", "{not_json}"], "is not valid JSON"),
        (["instance", "export", "{instance}", "{existing}"], "it exists"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    library: dict[str, int], capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], expected: str
) -> None:
    files = {
        "not_image": tmp_path / "x.png",
        "empty": tmp_path / "empty.txt",
        "many": tmp_path / "many.txt",
        "not_json": tmp_path / "x.json",
        "existing": tmp_path / "existing.json",
    }
    files["not_image"].write_bytes(b"not an image")
    files["empty"].write_text("\n", encoding="utf-8")
    files["many"].write_text("\n".join(f"点{n}" for n in range(51)), encoding="utf-8")
    files["not_json"].write_text("{", encoding="utf-8")
    files["existing"].write_text("{}", encoding="utf-8")
    names = {**{key: str(path) for key, path in files.items()}, **{key: str(value) for key, value in library.items()}}
    before = [run_json(capsys, kind, "list") for kind in ("character", "background", "instance")]
    code, _out, err = cli(capsys, *[arg.format(**names) for arg in argv])
    assert code == 2
    assert expected.format(**names) in one_line(err)
    assert [run_json(capsys, kind, "list") for kind in ("character", "background", "instance")] == before
