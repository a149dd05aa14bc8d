"""`personalab memory ...` on the embedded defaults (SQLite + Chroma in the tmp data dir) and on PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from personalab.graph.cli import main
from personalab.stores.db import session_scope
from personalab.stores.memory import MemoryStore
from personalab.stores.saves import create_role, create_save


@pytest.fixture
def instance(db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    with session_scope(db_url) as session:
        role = create_role(session, "白小喵")
        return create_save(session, role.id, None).id  # type: ignore[return-value]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def add(capsys: pytest.CaptureFixture[str], instance: int, *argv: str) -> int:
    code, out, _ = run(capsys, "memory", "add", "--instance", str(instance), *argv)
    assert code == 0
    return int(out.strip())


def test_add_prints_the_new_id_and_list_shows_it(capsys: pytest.CaptureFixture[str], instance: int) -> None:
    first = add(
        capsys, instance, "--type", "relationship", "--importance", "0.9", "--tags", "朋友,Mary", "和Mary是好朋友"
    )
    second = add(capsys, instance, "--layer", "archive", "上周建造了新的防御塔")
    assert second > first
    code, out, _ = run(capsys, "memory", "list", "--instance", str(instance))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2
    assert (
        "relationship" in lines[0] and "imp 0.90" in lines[0] and "#朋友" in lines[0] and "和Mary是好朋友" in lines[0]
    )
    assert "archive" in lines[1]
    code, out, _ = run(capsys, "memory", "list", "--instance", str(instance), "--layer", "archive", "--json")
    assert [m["id"] for m in json.loads(out)] == [second]


def test_search_prints_ranked_memories_with_score_breakdowns(capsys: pytest.CaptureFixture[str], instance: int) -> None:
    target = add(capsys, instance, "--tags", "种植", "昨天和John讨论了种植计划")
    add(capsys, instance, "我最喜欢吃鱼干")
    code, out, _ = run(capsys, "memory", "search", "--instance", str(instance), "你还记得种植计划吗？")
    assert code == 0
    assert out.splitlines()[0].startswith("scene work_discussion")
    assert f"1. #{target} " in out and "relevance" in out and "paths bm25#1" in out

    code, out, _ = run(capsys, "memory", "search", "--instance", str(instance), "--json", "种植计划")
    items = json.loads(out)
    assert isinstance(items, list) and items[0]["id"] == target
    assert items[0]["content"] == "昨天和John讨论了种植计划"
    assert items[0]["score"] > 0
    assert set(items[0]["breakdown"]) >= {
        "context_relevance",
        "recency",
        "importance",
        "diversity",
        "layer_priority",
        "mention_penalty",
        "keyword",
        "vector",
        "paths",
    }
    assert items[0]["breakdown"]["mention_penalty"] == pytest.approx(0.8)  # the first search marked it


def test_search_no_mark_leaves_mentions_alone(capsys: pytest.CaptureFixture[str], instance: int) -> None:
    memory = add(capsys, instance, "我最喜欢吃鱼干")
    run(capsys, "memory", "search", "--instance", str(instance), "--no-mark", "鱼干")
    assert MemoryStore().get_memory(instance, memory).mention_count == 0


def test_edit_pin_unpin_delete(capsys: pytest.CaptureFixture[str], instance: int) -> None:
    memory = add(capsys, instance, "原来的内容")
    code, out, _ = run(
        capsys, "memory", "edit", "--instance", str(instance), str(memory), "新的内容", "--notes", "改过"
    )
    assert code == 0 and "[edited]" in out and "新的内容" in out
    got = MemoryStore().get_memory(instance, memory)
    assert got.user_edited and got.content == "新的内容" and got.notes == "改过"
    code, out, _ = run(capsys, "memory", "pin", "--instance", str(instance), str(memory))
    assert code == 0 and "pinned" in out and MemoryStore().get_memory(instance, memory).pinned
    code, out, _ = run(capsys, "memory", "unpin", "--instance", str(instance), str(memory))
    assert code == 0 and not MemoryStore().get_memory(instance, memory).pinned
    code, out, _ = run(capsys, "memory", "delete", "--instance", str(instance), str(memory))
    assert code == 0 and MemoryStore().list_memories(instance) == []


def test_maintain_runs_one_step(capsys: pytest.CaptureFixture[str], instance: int) -> None:
    add(capsys, instance, "--turn", "0", "聊了聊今天的晚饭")
    code, out, _ = run(capsys, "memory", "maintain", "--instance", str(instance), "--turn", "50")
    assert code == 0 and "active → situational (decayed)" in out
    assert MemoryStore().list_memories(instance)[0].layer == "situational"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["memory", "add", "--instance", "999", "x"], "instance 999 does not exist"),
        (["memory", "add", "--instance", "{i}", "   "], "memory content is empty"),
        (["memory", "add", "--instance", "{i}", "--importance", "1.5", "x"], "importance 1.5"),
        (["memory", "add", "--instance", "{i}", "--importance", "high", "x"], "invalid float value: 'high'"),
        (["memory", "add", "--instance", "{i}", "--type", "dream", "x"], "invalid choice: 'dream'"),
        (["memory", "add", "--instance", "{i}", "--layer", "deep", "x"], "invalid choice: 'deep'"),
        (["memory", "edit", "--instance", "{i}", "{m}", "--importance", "-1"], "importance -1.0"),
        (["memory", "edit", "--instance", "{i}", "4242", "x"], "memory 4242 does not exist in instance"),
        (["memory", "delete", "--instance", "{i}", "4242"], "memory 4242 does not exist in instance"),
        (["memory", "pin", "--instance", "{i}", "abc"], "'abc' is not a whole number"),
        (["memory", "search", "--instance", "{i}", "  "], "query is empty"),
        (["memory", "list", "--instance", "999"], "instance 999 does not exist"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], instance: int, argv: list[str], message: str
) -> None:
    memory = add(capsys, instance, "和Mary是好朋友")
    before = [m.model_dump() for m in MemoryStore().list_memories(instance)]
    code, out, err = run(capsys, *[a.replace("{i}", str(instance)).replace("{m}", str(memory)) for a in argv])
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and message in err
    assert [m.model_dump() for m in MemoryStore().list_memories(instance)] == before


def test_show_lists_versions_and_stats_counts(capsys: pytest.CaptureFixture[str], instance: int) -> None:
    memory = add(capsys, instance, "--type", "goal", "想要离开废土")
    add(capsys, instance, "--type", "relationship", "和Mary是好朋友")
    assert run(capsys, "memory", "edit", "--instance", str(instance), str(memory), "想要找到妹妹")[0] == 0
    code, out, _ = run(capsys, "memory", "show", "--instance", str(instance), str(memory))
    assert code == 0 and "version 1" in out and "想要离开废土" in out and "made at turn 0" in out
    code, out, _ = run(capsys, "memory", "list", "--instance", str(instance), "--kind", "semantic", "--json")
    assert [m["type"] for m in json.loads(out)] == ["relationship"]
    code, out, _ = run(capsys, "memory", "stats", "--instance", str(instance), "--json")
    stats = json.loads(out)
    assert code == 0 and stats["total"] == 2 and stats["by_kind"] == {"goal": 1, "semantic": 1} and stats["edited"] == 1
    code, out, _ = run(capsys, "memory", "stats", "--instance", str(instance))
    assert code == 0 and "by kind: goal 1, semantic 1" in out


def test_a_pinned_memory_is_not_edited(capsys: pytest.CaptureFixture[str], instance: int) -> None:
    memory = add(capsys, instance, "原来的内容")
    run(capsys, "memory", "pin", "--instance", str(instance), str(memory))
    code, _, err = run(capsys, "memory", "edit", "--instance", str(instance), str(memory), "新的内容")
    assert code == 2 and f"memory {memory} is pinned" in err and len(err.strip().splitlines()) == 1
    assert MemoryStore().get_memory(instance, memory).content == "原来的内容"
