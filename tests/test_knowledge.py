"""Knowledge library (seed 001 常识知识库): relevance, selection and block format, then the store."""

from __future__ import annotations

import json
from typing import Any

import pytest
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.knowledge import (
    KnowledgeEntry,
    format_knowledge_block,
    knowledge_relevance,
    select_knowledge,
    validate_knowledge,
)
from personalab.stores.db import session_scope
from personalab.stores.saves import create_role, create_save
from personalab.stores.worldbook import (
    GLOBAL,
    Scope,
    add_knowledge,
    knowledge_for_instance,
    list_knowledge,
    update_knowledge,
)
from personalab.stores.worldbook_files import ImportFormatError, export_knowledge, import_knowledge
from personalab.stores.worldbook_tables import KnowledgeEntryRow


def k(entry_id: str, content: str = "内容", *keywords: str, **fields: Any) -> KnowledgeEntry:
    return KnowledgeEntry(entry_id, fields.pop("tag", "设定"), content, keywords=keywords, **fields)


def test_relevance_is_half_per_keyword_in_context_plus_half_the_importance() -> None:
    scored = knowledge_relevance(k("1", "x", "森林", "春季", "冬季", importance=0.8), "春季的森林")
    assert scored.score == pytest.approx(0.5 * 2 + 0.8 * 0.5)
    assert scored.matched == ("森林", "春季")


def test_keywords_match_chinese_as_substrings_and_english_as_whole_words() -> None:
    assert knowledge_relevance(k("1", "x", "土豆", importance=0), "我们种了很多土豆和玉米").score == 0.5
    assert knowledge_relevance(k("1", "x", "corn", importance=0), "popcorn time").score == 0
    assert knowledge_relevance(k("1", "x", "corn", importance=0), "the Corn field").score == 0.5


def test_only_enabled_global_and_own_character_knowledge_applies() -> None:
    entries = [
        k("global"),
        k("mine", role_id=1),
        k("theirs", role_id=2),
        k("off", enabled=False),
        k("this instance", save_id=10),
        k("other instance", save_id=11),
    ]
    chosen = select_knowledge(entries, "", role_id=1, save_id=10, max_knowledge=10)
    assert [s.entry.id for s in chosen] == ["global", "mine", "this instance"]


def test_top_n_by_relevance_ties_in_given_order() -> None:
    entries = [k(str(i), "x", importance=0.1) for i in range(7)] + [k("hit", "x", "长安", importance=0.1)]
    chosen = select_knowledge(entries, "去长安")
    assert [s.entry.id for s in chosen] == ["hit", "0", "1", "2", "3"]


def test_block_is_the_seeds_world_knowledge_format() -> None:
    entries = [k("1", "这是一个位于温带森林的殖民地。", tag="世界设定"), k("2", "Alice擅长种植。", tag="角色背景")]
    assert format_knowledge_block(select_knowledge(entries, "")) == (
        "=== 世界知识 ===\n[世界设定] 这是一个位于温带森林的殖民地。\n[角色背景] Alice擅长种植。\n"
    )
    assert format_knowledge_block([]) == ""


def test_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="entry 2: field 'importance' must be between 0 and 1"):
        validate_knowledge({"id": "1", "tag": "设定", "content": "内容", "importance": 1.5}, "entry 2")
    with pytest.raises(ValueError, match="field 'tag' is empty"):
        validate_knowledge(k("1", tag=" "), "entry 1")


def test_an_entry_is_a_validated_model_read_from_rows_and_calls_alike() -> None:
    entry = KnowledgeEntry("1", " 世界设定 ", " 温带森林 ", 1, keywords=["森林", " "])
    assert (entry.tag, entry.content, entry.importance, entry.keywords) == ("世界设定", "温带森林", 1.0, ("森林",))
    row = KnowledgeEntryRow(id=3, tag="t", content="c", importance=0.2, keywords=["k"], role_id=4)
    assert KnowledgeEntry.model_validate(row) == KnowledgeEntry("3", "t", "c", 0.2, ("k",), role_id=4)
    for fields, message in [
        ({"importance": True}, "knowledge entry: field 'importance' must be a number, got boolean"),
        ({"importance": float("nan")}, "field 'importance' must be a finite number"),
        ({"tag": "t" * 201}, "field 'tag' has 201 characters, over the limit of 200"),
        ({"keywords": ["/[a/"]}, "field 'keywords': keyword '/\\[a/' is not a valid regular expression"),
        ({"enabled": 1}, "field 'enabled' must be true or false, got number"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            KnowledgeEntry(**{"id": "1", "tag": "t", "content": "c", **fields})


# --- store ----------------------------------------------------------------------------------------


@pytest.fixture
def world(db_url: str) -> dict[str, int]:
    with session_scope(db_url) as s:
        alice, bob = create_role(s, "Alice"), create_role(s, "Bob")
        save = create_save(s, alice.id, None)
        return {"alice": alice.id, "bob": bob.id, "save": save.id}  # type: ignore[dict-item]


def contents(db_url: str, scope: Scope = GLOBAL) -> list[str]:
    with session_scope(db_url) as s:
        return [e.content for e in list_knowledge(s, scope)]


def test_instance_sees_global_its_characters_and_its_own_knowledge(db_url: str, world: dict[str, int]) -> None:
    with session_scope(db_url) as s:
        add_knowledge(s, "世界设定", "温带森林")
        add_knowledge(s, "角色背景", "Alice擅长种植", scope=Scope(role_id=world["alice"]))
        add_knowledge(s, "角色背景", "Bob是猎人", scope=Scope(role_id=world["bob"]))
        add_knowledge(s, "剧情", "这一局在下雪", scope=Scope(save_id=world["save"]))
    with session_scope(db_url) as s:
        seen = knowledge_for_instance(s, world["save"])
    assert [e.content for e in seen] == ["温带森林", "Alice擅长种植", "这一局在下雪"]
    assert [e.scope for e in seen] == ["global", f"character {world['alice']}", f"instance {world['save']}"]


def test_import_is_all_or_nothing_when_the_third_entry_is_bad(db_url: str, world: dict[str, int]) -> None:
    with session_scope(db_url) as s:
        add_knowledge(s, "世界设定", "温带森林")
        add_knowledge(s, "世界设定", "四季分明")
    before = contents(db_url)
    bad = {
        "entries": [
            {"tag": "a", "content": "one"},
            {"tag": "b", "content": "two"},
            {"tag": "c", "content": "three", "importance": "high"},
            {"tag": "d", "content": "four"},
        ]
    }
    with pytest.raises(ImportFormatError, match="entry 3: field 'importance' must be a number"):
        with session_scope(db_url) as s:
            import_knowledge(s, bad)
    assert contents(db_url) == before


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"entries": [{"tag": "a"}]}, "entry 1: missing field 'content'"),
        ({"entries": [{"tag": "a", "content": "x", "keywords": "森林"}]}, "field 'keywords' must be a list"),
        ({"entries": [{"tag": "a", "content": "x" * 10_001}]}, "over the limit of 10000"),
        ({"entries": [{"tag": "a", "content": "x", "isEnabled": True}]}, "unknown field"),
        ({"entries": {"a": 1}}, "'entries' must be a list"),
        ({"format": "personalab.worldbook", "entries": []}, "not 'personalab.knowledge'"),
    ],
)
def test_malformed_knowledge_files_raise_a_clear_error(db_url: str, data: Any, message: str) -> None:
    with pytest.raises(ImportFormatError, match=message):
        with session_scope(db_url) as s:
            import_knowledge(s, data)
    assert contents(db_url) == []


def test_export_leaves_keywords_out_unless_asked(db_url: str, world: dict[str, int]) -> None:
    with session_scope(db_url) as s:
        add_knowledge(s, "世界设定", "温带森林", importance=0.8, keywords=["森林"], scope=Scope(role_id=world["alice"]))
        plain = export_knowledge(s, Scope(role_id=world["alice"]))
        full = export_knowledge(s, Scope(role_id=world["alice"]), with_keywords=True)
    assert plain["entries"] == [
        {"tag": "世界设定", "content": "温带森林", "importance": 0.8, "enabled": True, "user_edited": True}
    ]
    assert full["entries"][0]["keywords"] == ["森林"]
    with session_scope(db_url) as s:
        report = import_knowledge(s, json.loads(json.dumps(full)), Scope(role_id=world["bob"]))
        copied = list_knowledge(s, Scope(role_id=world["bob"]))
    assert report.imported == 1
    assert (copied[0].content, copied[0].keywords, copied[0].importance) == ("温带森林", ("森林",), 0.8)


def test_automatic_updates_may_not_change_a_user_edited_entry(db_url: str) -> None:
    with session_scope(db_url) as s:
        typed = add_knowledge(s, "世界设定", "温带森林")
        imported = import_knowledge(s, [{"tag": "季节", "content": "春季"}])
        auto_id = int(list_knowledge(s)[-1].id)
    assert imported.imported == 1
    with session_scope(db_url) as s:
        with pytest.raises(ValueError, match="edited by the user"):
            update_knowledge(s, int(typed.id), by_user=False, content="寒带森林")
        changed = update_knowledge(s, auto_id, by_user=False, content="夏季")
        assert not changed.user_edited
        edited = update_knowledge(s, auto_id, content="秋季")
        assert edited.user_edited
    assert contents(db_url) == ["温带森林", "秋季"]


def test_reimporting_the_same_entries_adds_nothing(db_url: str) -> None:
    data = [{"tag": "a", "content": "x"}]
    with session_scope(db_url) as s:
        import_knowledge(s, data)
        report = import_knowledge(s, data)
    assert (report.imported, report.duplicates) == (0, 1)
    assert contents(db_url) == ["x"]
