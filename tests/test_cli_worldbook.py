"""`personalab knowledge|worldbook add|list|import|export`, run through `graph.cli.main` in a tmp data dir."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from personalab.graph.cli import main
from personalab.stores.db import session_scope
from personalab.stores.saves import create_role, create_save

FIXTURES = Path(__file__).parent / "fixtures"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def listed(capsys: pytest.CaptureFixture[str], group: str, *scope: str) -> list[dict[str, Any]]:
    code, out, _ = run(capsys, group, "list", "--json", *scope)
    assert code == 0
    return json.loads(out)


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def roles(data_dir: Path) -> dict[str, int]:
    with session_scope() as s:
        alice = create_role(s, "Alice")
        save = create_save(s, alice.id, None)
        return {"alice": alice.id, "save": save.id}  # type: ignore[dict-item]


# --- knowledge ------------------------------------------------------------------------------------


def test_knowledge_add_and_list(capsys: pytest.CaptureFixture[str], roles: dict[str, int]) -> None:
    code, out, _ = run(
        capsys,
        "knowledge",
        "add",
        "这是一个位于温带森林的殖民地。",
        "--tag",
        "世界设定",
        "--importance",
        "0.8",
        "--keyword",
        "森林",
    )
    assert code == 0 and out.startswith("added knowledge entry 1 (global)")
    run(capsys, "knowledge", "add", "Alice擅长种植。", "--tag", "角色背景", "--character", str(roles["alice"]))
    code, out, _ = run(capsys, "knowledge", "list")
    assert out == "#1 [世界设定] 这是一个位于温带森林的殖民地。 (global, order 1, importance 0.80, keywords: 森林)\n"
    rows = listed(capsys, "knowledge", "--instance", str(roles["save"]), "--visible")
    assert [(r["tag"], r["scope"]) for r in rows] == [
        ("世界设定", "global"),
        ("角色背景", f"character {roles['alice']}"),
    ]
    assert rows[0]["keywords"] == ["森林"] and rows[0]["importance"] == 0.8


def test_knowledge_export_import_round_trip(
    capsys: pytest.CaptureFixture[str], roles: dict[str, int], tmp_path: Path
) -> None:
    run(capsys, "knowledge", "add", "温带森林", "--tag", "世界设定", "--keyword", "森林")
    target = tmp_path / "knowledge.json"
    code, out, _ = run(capsys, "knowledge", "export", str(target), "--with-keywords")
    assert (code, out) == (0, f"exported 1 knowledge entries to {target}\n")
    code, out, _ = run(capsys, "knowledge", "import", str(target), "--character", str(roles["alice"]))
    assert code == 0 and "imported 1 entries" in out
    rows = listed(capsys, "knowledge", "--character", str(roles["alice"]))
    assert [(r["content"], r["keywords"]) for r in rows] == [("温带森林", ["森林"])]


def test_knowledge_export_to_stdout_without_keywords(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    run(capsys, "knowledge", "add", "温带森林", "--tag", "世界设定", "--keyword", "森林")
    code, out, _ = run(capsys, "knowledge", "export")
    assert code == 0
    assert json.loads(out)["entries"] == [
        {"tag": "世界设定", "content": "温带森林", "importance": 0.5, "enabled": True, "user_edited": True}
    ]


# --- world book -----------------------------------------------------------------------------------


def test_worldbook_add_and_list(capsys: pytest.CaptureFixture[str], roles: dict[str, int]) -> None:
    code, out, _ = run(
        capsys,
        "worldbook",
        "add",
        "长安实行宵禁。",
        "--keyword",
        "长安",
        "--keyword",
        "宵禁",
        "--title",
        "长安",
        "--priority",
        "120",
    )
    assert (code, out) == (0, "added world-book entry 1 (global, keyword): 长安实行宵禁。\n")
    run(
        capsys,
        "worldbook",
        "add",
        "好久不见的寒暄。",
        "--trigger",
        "temporal",
        "--min-gap",
        "86400",
        "--instance",
        str(roles["save"]),
    )
    run(
        capsys,
        "worldbook",
        "add",
        "她难过时会哼歌。",
        "--trigger",
        "emotional",
        "--emotion",
        "悲伤",
        "--character",
        str(roles["alice"]),
        "--position",
        "assistant",
    )
    code, out, _ = run(capsys, "worldbook", "list", "--instance", str(roles["save"]), "--visible")
    assert out.splitlines() == [
        "#1 长安: 长安实行宵禁。 (global, keyword, semantic, priority 120, keys: 长安, 宵禁)",
        f"#2 好久不见的寒暄。 (instance {roles['save']}, temporal, semantic, priority 100, min_gap_seconds=86400)",
        f"#3 她难过时会哼歌。 (character {roles['alice']}, emotional, semantic, priority 100, emotions: 悲伤, "
        "position assistant)",
    ]
    rows = listed(capsys, "worldbook", "--character", str(roles["alice"]))
    assert [(r["trigger_type"], r["emotions"], r["position"]) for r in rows] == [("emotional", ["悲伤"], "assistant")]


def test_worldbook_import_sillytavern_lorebook(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    code, out, _ = run(capsys, "worldbook", "import", str(FIXTURES / "sillytavern_lorebook.json"))
    assert code == 0
    assert "imported 5 entries (SillyTavern world info)" in out
    assert "entry 6 (uid 5) has empty content" in out
    rows = listed(capsys, "worldbook")
    assert [r["title"] for r in rows] == ["世界观", "皇城", "Alice", "悄悄话", "旧设定"]
    assert rows[0]["constant"] and not rows[4]["enabled"]


def test_worldbook_export_import_round_trip(
    capsys: pytest.CaptureFixture[str], roles: dict[str, int], tmp_path: Path
) -> None:
    run(capsys, "worldbook", "import", str(FIXTURES / "sillytavern_lorebook.json"))
    target = tmp_path / "book.json"
    code, out, _ = run(capsys, "worldbook", "export", str(target))
    assert (code, out) == (0, f"exported 5 world-book entries to {target}\n")
    code, _, _ = run(capsys, "worldbook", "import", str(target), "--instance", str(roles["save"]))
    assert code == 0
    strip = ["id", "scope"]
    original = [{k: v for k, v in r.items() if k not in strip} for r in listed(capsys, "worldbook")]
    copied = [
        {k: v for k, v in r.items() if k not in strip}
        for r in listed(capsys, "worldbook", "--instance", str(roles["save"]))
    ]
    assert copied == original


# --- bad input ------------------------------------------------------------------------------------


def write(tmp_path: Path, data: Any, name: str = "bad.json") -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return str(path)


def test_bad_third_entry_changes_nothing(capsys: pytest.CaptureFixture[str], data_dir: Path, tmp_path: Path) -> None:
    run(capsys, "worldbook", "add", "已有条目", "--keyword", "旧")
    before = listed(capsys, "worldbook")
    bad = {
        "entries": {
            "0": {"uid": 0, "key": ["a"], "content": "one"},
            "1": {"uid": 1, "key": ["b"], "content": "two"},
            "2": {"uid": 2, "key": ["c"], "content": "three", "constant": "yes"},
        }
    }
    code, out, err = run(capsys, "worldbook", "import", write(tmp_path, bad))
    assert code == 2 and out == ""
    assert one_error_line(err) == (
        "personalab: error: entry 3 (uid 2): field 'constant' must be true or false, got string"
    )
    assert listed(capsys, "worldbook") == before


@pytest.mark.parametrize(
    ("group", "content", "message"),
    [
        ("worldbook", '{"entries": [', "is not valid JSON: Expecting"),
        ("worldbook", {"entries": [{"key": ["a"], "content": "x" * 10_001}]}, "entry 1: field 'content' has 10001"),
        ("worldbook", {"entries": [{"content": "x"}]}, "entry 1: missing field 'key'"),
        ("worldbook", {"entries": 5}, "'entries' must be an object keyed by uid or a list, got number"),
        ("knowledge", [{"tag": "a", "content": "x", "importance": 2}], "entry 1: field 'importance' must be between"),
        ("knowledge", [{"tag": "a", "content": 3}], "entry 1: field 'content' must be a string, got number"),
    ],
)
def test_malformed_imports_print_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], data_dir: Path, tmp_path: Path, group: str, content: Any, message: str
) -> None:
    code, _, err = run(capsys, group, "import", write(tmp_path, content))
    assert code == 2
    assert message in one_error_line(err)
    assert listed(capsys, group) == []


def test_missing_file_unknown_scope_and_conflicting_options_exit_2(
    capsys: pytest.CaptureFixture[str], data_dir: Path, tmp_path: Path
) -> None:
    code, _, err = run(capsys, "worldbook", "import", str(tmp_path / "nope.json"))
    assert code == 2 and "cannot read" in one_error_line(err)
    code, _, err = run(capsys, "knowledge", "add", "x", "--tag", "t", "--character", "42")
    assert code == 2 and one_error_line(err) == "personalab: error: character 42 does not exist"
    code, _, err = run(capsys, "worldbook", "list", "--instance", "7")
    assert code == 2 and "instance 7 does not exist" in one_error_line(err)
    code, _, err = run(capsys, "worldbook", "list", "--character", "1", "--instance", "1")
    assert code == 2 and "not allowed with argument" in one_error_line(err)
    code, _, err = run(capsys, "worldbook", "add", "x", "--trigger", "temporal")
    assert code == 2 and "needs a time window" in one_error_line(err)
