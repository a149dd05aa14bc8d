"""Memory files and batch search (issue 11; seed 004 记忆导出和备份): `personalab memory export|import` (JSON Lines,
every field, import all or nothing) and `memory search --queries FILE` / `--context`, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import cli, one_line
from personalab.stores.db import session_scope
from personalab.stores.memory import MemoryStore
from personalab.stores.memory_files import EXPORT_FIELDS
from personalab.stores.saves import create_role, create_save


@pytest.fixture
def instances(db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    with session_scope(db_url) as session:
        role = create_role(session, "雷娜")
        a = create_save(session, role.id, None).id
        b = create_save(session, role.id, None).id
    return a, b  # type: ignore[return-value]


def _fill(db_url: str, instance: int) -> None:
    store = MemoryStore(db_url=db_url)
    first = store.add_memory(
        instance, "莱姆的妹妹今年十二岁", type="relationship", importance=0.8, tags=["家人"], turn=2
    )
    store.add_memories(instance, [{"content": "莱姆：我妹妹叫小雨", "type": "record", "turn": 2, "line_id": 17}])
    store.set_pinned(instance, first.id)
    store.mark_mentioned(instance, [first.id], 5)


def test_export_then_import_keeps_every_field(
    capsys: pytest.CaptureFixture[str], db_url: str, instances: tuple[int, int], tmp_path: Path
) -> None:
    a, b = instances
    _fill(db_url, a)
    path = tmp_path / "memories.jsonl"
    code, _, err = cli(capsys, "memory", "export", "--instance", str(a), str(path))
    assert code == 0 and "exported 2 memories" in err
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [set(line) for line in lines] == [set(EXPORT_FIELDS)] * 2
    code, out, _ = cli(capsys, "memory", "import", "--instance", str(b), str(path))
    assert code == 0 and "imported 2 memories" in out
    code, again, _ = cli(capsys, "memory", "export", "--instance", str(b))  # to stdout
    copied = [json.loads(line) for line in again.splitlines()]
    source = {"id", "instance_id", "character_id"}
    for old, new in zip(lines, copied, strict=True):
        assert {k: v for k, v in old.items() if k not in source} == {k: v for k, v in new.items() if k not in source}
    assert copied[0]["pinned"] is True and copied[0]["mention_count"] == 1 and copied[1]["line_id"] == 17
    assert copied[1]["layer"] == "record"


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ('{"content": "x", "importance": 2}', "line 2: importance 2"),
        ('{"content": "x", "colour": "red"}', "line 2: unknown field(s) colour"),
        ('{"content": "x", "activity": "high"}', "line 2: activity 'high'"),
        ('{"content": "x", "created_at": "yesterday"}', "line 2: created_at 'yesterday'"),
        ("[1, 2]", "line 2: must be a JSON object"),
        ('{"content": "x",', "line 2 is not valid JSON"),
        ('{"type": "event"}', "line 2: memory content is empty"),
    ],
)
def test_a_bad_line_is_one_error_naming_line_and_field_and_nothing_is_stored(
    capsys: pytest.CaptureFixture[str], db_url: str, instances: tuple[int, int], tmp_path: Path, bad: str, named: str
) -> None:
    a, _ = instances
    path = tmp_path / "bad.jsonl"
    path.write_text('{"content": "第一条是好的"}\n' + bad + '\n{"content": "第三条也是好的"}\n', encoding="utf-8")
    code, _, err = cli(capsys, "memory", "import", "--instance", str(a), str(path))
    assert code == 2 and named in one_line(err)
    assert MemoryStore(db_url=db_url).list_memories(a) == []


def test_search_queries_file_gives_one_json_result_per_line_and_context_is_used(
    capsys: pytest.CaptureFixture[str], db_url: str, instances: tuple[int, int], tmp_path: Path
) -> None:
    a, _ = instances
    _fill(db_url, a)
    queries = tmp_path / "queries.txt"
    queries.write_text("妹妹几岁？\n\n妹妹叫什么名字？\n", encoding="utf-8")
    # the record entry's line 17 is on no branch of the instance: searched with every branch's memories (issue 23)
    code, out, _ = cli(
        capsys, "memory", "search", "--instance", str(a), "--no-mark", "--all-branches", "--queries", str(queries)
    )
    assert code == 0
    results = [json.loads(line) for line in out.splitlines()]
    assert [r["query"] for r in results] == ["妹妹几岁？", "妹妹叫什么名字？"]
    assert any("十二岁" in i["content"] for i in results[0]["items"])
    assert any("小雨" in i["content"] for i in results[1]["items"])
    code, out, _ = cli(
        capsys, "memory", "search", "--instance", str(a), "--json", "--no-mark", "--context", "我们以前那时候", "妹妹"
    )
    assert code == 0 and json.loads(out)[0]["breakdown"]
    code, _, err = cli(capsys, "memory", "search", "--instance", str(a), "--queries", str(queries), "妹妹")
    assert code == 2 and "either a QUERY or --queries" in one_line(err)
