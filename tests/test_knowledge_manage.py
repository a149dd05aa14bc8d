"""Knowledge library management (issue 15; seed 001 常识知识库 知识管理功能): edit, delete, enable / disable and tags
through the Python API (SQLite and PostgreSQL) and the CLI; knowledge found by vector similarity as well as keywords
(seed 001 CommonKnowledgeLibrary 向量检索)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from personalab.graph.api import knowledge as api
from personalab.graph.cli import main
from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.nodes.rules.knowledge import KnowledgeEntry, select_knowledge
from personalab.stores.db import session_scope
from personalab.stores.worldbook import knowledge_similarities, list_knowledge


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_edit_enable_tag_and_delete_through_the_api(db_url: str) -> None:
    made = api.add_knowledge_entry("武器", "雷娜擅长狙击。", keywords=["狙击"], database_url=db_url)
    entry_id = made["id"]
    edited = api.edit_knowledge(entry_id, content="雷娜擅长狙击，百米外弹无虚发。", importance=0.9, database_url=db_url)
    assert (edited["content"], edited["importance"], edited["user_edited"]) == (
        "雷娜擅长狙击，百米外弹无虚发。",
        0.9,
        True,
    )
    assert api.set_knowledge_enabled(entry_id, False, database_url=db_url)["enabled"] is False
    tagged = api.tag_knowledge(entry_id, add=["人物", "战斗"], remove=["武器"], database_url=db_url)
    assert (tagged["tag"], tagged["tags"]) == ("人物,战斗", ["人物", "战斗"])
    assert [v["id"] for v in api.list_knowledge_entries(tag="战斗", database_url=db_url)] == [entry_id]
    assert api.list_knowledge_entries(tag="武器", database_url=db_url) == []
    with pytest.raises(InvalidInput, match="no tag left"):
        api.tag_knowledge(entry_id, remove=["人物", "战斗"], database_url=db_url)
    with pytest.raises(InvalidInput, match="importance"):
        api.edit_knowledge(entry_id, importance=3, database_url=db_url)
    with pytest.raises(InvalidInput, match="'role_id'"):
        api.edit_knowledge(entry_id, role_id=1, database_url=db_url)
    assert api.get_knowledge_entry(entry_id, database_url=db_url)["importance"] == 0.9  # bad edits changed nothing
    api.delete_knowledge_entry(entry_id, database_url=db_url)
    with pytest.raises(NotFound):
        api.get_knowledge_entry(entry_id, database_url=db_url)
    with pytest.raises(NotFound):
        api.delete_knowledge_entry(entry_id, database_url=db_url)


def test_the_cli_manages_entries(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    assert main(["knowledge", "add", "荒原上常年刮着沙尘暴。", "--tag", "天气"]) == 0
    with session_scope() as s:
        entry_id = str(list_knowledge(s)[0].id)
    capsys.readouterr()
    assert main(["knowledge", "edit", entry_id, "--importance", "0.8", "--keyword", "沙尘暴", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["importance"], shown["keywords"]) == (0.8, ["沙尘暴"])
    assert main(["knowledge", "disable", entry_id]) == 0
    assert "disabled" in capsys.readouterr().out
    assert main(["knowledge", "enable", entry_id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["enabled"] is True
    assert main(["knowledge", "tag", entry_id, "--add", "环境"]) == 0
    assert "[天气,环境]" in capsys.readouterr().out
    assert main(["knowledge", "edit", entry_id, "--importance", "2"]) == 2
    assert "importance" in one_line(capsys.readouterr().err)
    assert main(["knowledge", "delete", entry_id]) == 0
    capsys.readouterr()
    assert main(["knowledge", "delete", entry_id]) == 2
    assert one_line(capsys.readouterr().err).endswith(f"knowledge entry {entry_id} does not exist")


# --- vector search ------------------------------------------------------------------------------------------


def entries() -> list[KnowledgeEntry]:
    texts = {
        "武器": "雷娜擅长使用狙击步枪，百米之外弹无虚发。",
        "天气": "荒原上常年刮着沙尘暴，白天酷热，夜里寒冷。",
        "食物": "聚居地的主食是发酵的仙人掌和罐头。",
        "货币": "废土上用瓶盖当钱，一瓶干净的水值十个瓶盖。",
        "交通": "商队骑着变异的大蜥蜴穿越沙漠。",
        "医疗": "诊所里只有过期的抗生素和酒精。",
    }
    return [KnowledgeEntry(id=str(i), tag=tag, content=text) for i, (tag, text) in enumerate(texts.items())]


def test_similarity_ranks_an_entry_without_a_shared_keyword() -> None:
    known = entries()
    plain = select_knowledge(known, "她的枪法怎么样？", max_knowledge=1)
    assert plain[0].entry.tag == "武器" or plain[0].score == pytest.approx(0.25)  # equal scores: the given order
    found = select_knowledge(known, "她的枪法怎么样？", max_knowledge=1, similarity={"0": 0.1, "3": 0.6})
    assert found[0].entry.tag == "货币" and found[0].breakdown["similarity"] == pytest.approx(0.6)
    below = select_knowledge(known, "x", max_knowledge=6, similarity={"3": 0.1})  # under the floor: no part
    assert below[3].breakdown["similarity"] == 0.0


def test_the_embeddings_find_the_entry_the_question_is_about() -> None:
    """The default offline embeddings: a question finds the entry it is about (marksmanship the sniper, money the
    bottle caps, ...), with no keyword on any entry and every entry of the same importance."""
    known = entries()
    questions = {
        "她的枪法准不准？": "武器",
        "买东西要付多少钱？": "货币",
        "外面的天气怎么样": "天气",
        "有什么吃的吗": "食物",
        "我受伤了，哪里能治疗？": "医疗",
    }
    for question, tag in questions.items():
        similar = knowledge_similarities(known, question)
        best = select_knowledge(known, question, max_knowledge=1, similarity=similar)[0]
        assert best.entry.tag == tag, similar
    disabled = [entry.model_copy(update={"enabled": False}) for entry in known]
    assert knowledge_similarities(disabled, "她的枪法准不准？") == {}
