"""SillyTavern lorebook fidelity (issue 15): export to world info and back without loss, entries reaching the model
as written, and SillyTavern's world-info meaning in the trigger (selective logic, regex keys with a time bound, case
and whole words per entry, probability, the budget as a share of the context, token counts for English and
Chinese). Pure rules except the round trip through the store (SQLite)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from personalab.nodes.rules.injection import build_injection, worldbook_items
from personalab.nodes.rules.plot import new_plot_state
from personalab.nodes.rules.prompt_assembly import assemble_prompt
from personalab.nodes.rules.worldbook import (
    TriggeredEntry,
    WorldbookConfig,
    WorldbookContext,
    WorldbookEntry,
    context_from_lines,
    count_script_tokens,
    explain_worldbook,
)
from personalab.stores.db import session_scope
from personalab.stores.saves import create_role
from personalab.stores.worldbook import Scope, add_worldbook_entry, list_worldbook
from personalab.stores.worldbook_files import export_sillytavern, import_worldbook, parse_worldbook


def st_entry(uid: int, keys: list[str], content: str, **fields: Any) -> dict[str, Any]:
    """A SillyTavern world-info entry with the fields SillyTavern writes (newWorldInfoEntryDefinition)."""
    entry = {
        "uid": uid,
        "key": keys,
        "keysecondary": [],
        "comment": f"entry {uid}",
        "content": content,
        "constant": False,
        "vectorized": False,
        "selective": True,
        "selectiveLogic": 0,
        "addMemo": True,
        "order": 100,
        "position": 0,
        "disable": False,
        "excludeRecursion": False,
        "preventRecursion": False,
        "delayUntilRecursion": False,
        "probability": 100,
        "useProbability": True,
        "depth": 4,
        "group": "",
        "groupOverride": False,
        "groupWeight": 100,
        "scanDepth": None,
        "caseSensitive": None,
        "matchWholeWords": None,
        "useGroupScoring": None,
        "automationId": "",
        "role": None,
        "sticky": 0,
        "cooldown": 0,
        "delay": 0,
        "displayIndex": uid,
        "extensions": {},
    }
    entry.update(fields)
    return entry


def world_info() -> dict[str, Any]:
    entries = [
        st_entry(0, ["灯塔"], "灯塔建于百年前。\n塔顶的灯从未熄灭。"),
        st_entry(1, ["fog"], "{{user}} hears a bell in the fog.", position=4, depth=2, role=1, sticky=3),
        st_entry(2, [], "雾港没有白天。", constant=True, position=2, group="weather", groupWeight=40),
        st_entry(5, ["/ship(s)?/i"], "Ships wait.", keysecondary=["harbor"], selectiveLogic=3, caseSensitive=True),
        st_entry(7, ["Bell"], "A bell.", probability=30, matchWholeWords=False, extensions={"other_tool": {"x": 1}}),
    ]
    return {"entries": {str(e["uid"]): e for e in entries}}


def entry(entry_id: str, content: str, *keys: str, **fields: Any) -> WorldbookEntry:
    return WorldbookEntry(id=entry_id, content=content, keywords=keys, **fields)


def fired(entries: list[WorldbookEntry], text: str, **context: Any) -> list[str]:
    return [t.entry.id for t in explain_worldbook(entries, WorldbookContext(text=text, **context)).triggered]


def from_st(raw: dict[str, Any]) -> WorldbookEntry:
    parsed = parse_worldbook({"entries": [raw]})
    return parsed.entries[0][0].model_copy(update={"id": str(raw["uid"])})


# --- export and import ------------------------------------------------------------------------------


def test_world_info_export_gives_back_the_imported_file(sqlite_url: str) -> None:
    original = world_info()
    with session_scope(sqlite_url) as s:
        report = import_worldbook(s, copy.deepcopy(original))
        assert report.imported == 5
        assert report.positions["at depth 2 as user → tail (user position)"] == 1
        # kept with the entry, named as without effect here (depth 2: the tail has one place)
        assert set(report.ignored_fields) == {"depth"}  # sticky has its effect (in turns)
        exported = export_sillytavern(s)
    assert exported == original


def test_our_entries_go_through_world_info_and_back_unchanged(sqlite_url: str) -> None:
    with session_scope(sqlite_url) as s:
        role = create_role(s, "灯守").id
        assert role is not None
        add_worldbook_entry(s, "重逢时的旧事。", trigger_type="temporal", temporal={"min_gap_seconds": 86400})
        add_worldbook_entry(s, "她难过时想起海。", trigger_type="emotional", emotions=["悲伤"], kind="episodic")
        add_worldbook_entry(s, "密码是七。", keywords=["密码"], position="assistant", priority=7, title="密码")
        add_worldbook_entry(s, "Always on.", constant=True, position="system", relevance_weight=2.0)
        import_worldbook(s, world_info())
        first = export_sillytavern(s)
        import_worldbook(s, json.loads(json.dumps(first)), Scope(role_id=role))
        mine = list_worldbook(s)
        theirs = list_worldbook(s, Scope(role_id=role))
        assert [e.fields_dict() for e in theirs] == [e.fields_dict() for e in mine]
        assert export_sillytavern(s, Scope(role_id=role)) == first  # export(import(export(book))) == export(book)


# --- what reaches the model -------------------------------------------------------------------------


def test_a_multi_line_entry_is_one_item_with_its_macros_replaced() -> None:
    item = TriggeredEntry(entry("1", "{{user}}问：灯塔？\n{{char}}答：百年了。", "灯塔"), 1.0, "keyword", "")
    injection = build_injection(triggered=[item], budget=1000, char_name="灯守", user_name="阿蓝")
    world = list(injection.plan.items["world_knowledge"])
    assert world == ["【世界书】", "- 阿蓝问：灯塔？\n灯守答：百年了。"]
    prompt = assemble_prompt(
        system_instruction="s",
        core_memory={},
        plot_state=new_plot_state(["灯塔"]),
        relationship=None,
        world_setting="",
        recent_messages=[],
        retrieved_blocks=[{"title": "=== 世界知识 ===", "items": world}],
        user_input="灯塔？",
    )
    text = "\n".join(m["content"] for m in prompt.messages)
    assert "2. - 阿蓝问：灯塔？\n灯守答：百年了。" in text and "{{" not in text


# --- the trigger ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("logic", "text", "fires"),
    [
        ("and_any", "fog, ship", True),
        ("and_any", "fog", False),
        ("and_all", "fog, ship", False),
        ("and_all", "fog, ship, bell", True),
        ("not_any", "fog", True),
        ("not_any", "fog, bell", False),
        ("not_all", "fog, ship", True),
        ("not_all", "fog, ship, bell", False),
    ],
)
def test_selective_logic_of_secondary_keys(logic: str, text: str, fires: bool) -> None:
    e = entry("1", "x", "fog", secondary_keywords=("ship", "bell"), selective_logic=logic)
    assert fired([e], text) == (["1"] if fires else [])


def test_regex_keys_with_flags_and_a_time_bound() -> None:
    assert fired([entry("1", "x", "/ship(s)?/i")], "Two SHIPS") == ["1"]
    assert fired([entry("1", "x", "/ship(s)?/")], "Two SHIPS") == []
    slow = entry("2", "x", "/(a|aa)+$/")  # backtracks for ever on a run of a and a b
    result = explain_worldbook([slow], WorldbookContext(text="a" * 40 + "b"))
    assert result.triggered == [] and "ran over" in result.skipped[0].reason


def test_case_sensitivity_and_whole_words_per_entry_never_whole_words_for_cjk() -> None:
    case = from_st(st_entry(1, ["Bell"], "x", caseSensitive=True))
    assert fired([case], "a Bell rings") == ["1"] and fired([case], "a bell rings") == []
    parts = from_st(st_entry(2, ["bell"], "x", matchWholeWords=False))
    assert fired([parts], "the doorbell") == ["2"]
    whole = from_st(st_entry(3, ["bell"], "x", matchWholeWords=True))
    assert fired([whole], "the doorbell") == [] and fired([whole], "the bell") == ["3"]
    cjk = from_st(st_entry(4, ["灯塔"], "x", matchWholeWords=True))
    assert fired([cjk], "那座灯塔下") == ["4"]


def test_probability_rolls_and_names_the_roll() -> None:
    maybe = from_st(st_entry(1, ["fog"], "x", probability=30))
    assert fired([maybe], "fog", roll=lambda: 0.1) == ["1"]
    result = explain_worldbook([maybe], WorldbookContext(text="fog", roll=lambda: 0.9))
    assert result.triggered == [] and result.skipped[0].reason == "probability 30%: rolled 90"
    off = from_st(st_entry(2, ["fog"], "x", probability=30, useProbability=False))
    assert fired([off], "fog", roll=lambda: 0.99) == ["2"]


def test_an_entry_scans_its_own_depth_of_lines() -> None:
    lines = [{"content": "灯塔亮了", "display_name": "灯守"}, {"content": "风很大"}]
    context = context_from_lines(lines, user_message="我们走吧")
    near = from_st(st_entry(1, ["灯塔"], "x", scanDepth=1))  # the user's line only
    far = from_st(st_entry(2, ["灯塔"], "x", scanDepth=3))
    default = from_st(st_entry(3, ["灯塔"], "x"))  # the context's depth (4 lines)
    nothing = from_st(st_entry(4, ["我们"], "x", scanDepth=0))
    found = [t.entry.id for t in explain_worldbook([near, far, default, nothing], context).triggered]
    assert found == ["2", "3"]


def test_one_entry_of_an_inclusion_group_goes_in() -> None:
    a = from_st(st_entry(1, ["fog"], "a", group="weather", groupWeight=10))
    b = from_st(st_entry(2, ["fog"], "b", group="weather, sea", groupWeight=30))
    c = from_st(st_entry(3, ["fog"], "c", group="sea"))
    assert fired([a, b], "fog", roll=lambda: 0.1) == ["1"]  # 0.1 x 40 = 4 < 10: the first
    result = explain_worldbook([a, b], WorldbookContext(text="fog", roll=lambda: 0.5))
    assert [t.entry.id for t in result.triggered] == ["2"]
    assert result.skipped[0].reason == "inclusion group 'weather': entry 2 went in (drawn by weight 30 of 40)"
    first = from_st(st_entry(4, ["fog"], "d", group="weather", groupOverride=True, order=5))
    assert fired([a, b, first], "fog", roll=lambda: 0.0) == ["4"]  # prioritised beats the draw
    assert sorted(fired([b, c], "fog", roll=lambda: 0.0)) == ["2"]  # b and c share 'sea'


def test_imported_entries_are_not_capped_per_kind() -> None:
    many = [from_st(st_entry(i, ["fog"], f"entry {i}")) for i in range(12)]
    assert len(fired(many, "fog")) == 12  # the budget decides, not "at most 5 semantic entries"


# --- the budget and token counts -------------------------------------------------------------------


def test_budget_is_a_share_of_the_context_keyed_before_constants_and_every_drop_named() -> None:
    constant = TriggeredEntry(entry("c", "常" * 300, constant=True, priority=1000), 1.0, "constant", "")
    keyed = TriggeredEntry(entry("k", "键" * 300, "键", priority=1), 0.9, "keyword", "")
    other = TriggeredEntry(entry("o", "other " * 10, "o", priority=50), 0.8, "keyword", "")
    config = WorldbookConfig(context_tokens=1600)  # 25 % → 400 tokens
    assert config.budget_tokens() == 400
    items, skipped = worldbook_items([constant, keyed, other], config)
    assert [i.key for i in items] == ["worldbook:k", "worldbook:o"]
    assert [s.key for s in skipped] == ["worldbook:c"] and "constant" in skipped[0].reason
    assert WorldbookConfig(context_tokens=100_000, max_total_tokens=900).budget_tokens() == 900


def test_token_counts_for_english_and_chinese() -> None:
    english = "The lighthouse keeper rings the bell whenever the fog rolls in from the sea. " * 10
    assert 150 <= count_script_tokens(english) <= 220  # about 4 characters a token (770 characters)
    assert count_script_tokens("灯塔建于百年前，塔顶的灯从未熄灭。") == 17  # about a token a character


def test_real_world_quirks_import_and_export_back_unchanged(sqlite_url: str) -> None:
    """Seen in public Chinese lorebooks: a title written as a list of strings, a card entry whose `position` is
    SillyTavern's number; a depth only reported where it matters (at depth)."""
    quirky = {
        "entries": {
            "0": st_entry(0, ["魔素体系"], "魔素是世间唯一本源能量。", comment=["全局·世界底层核心规则"], depth=2)
        }
    }
    card_book = {
        "entries": [{"id": 1, "keys": ["修为"], "content": "境界分十层。", "position": 1, "insertion_order": 100}]
    }
    with session_scope(sqlite_url) as s:
        report = import_worldbook(s, copy.deepcopy(quirky))
        assert report.ignored_fields == []  # depth 2 before the character: nothing lost, nothing to say
        assert list_worldbook(s)[0].title == "全局·世界底层核心规则"
        assert export_sillytavern(s) == quirky
        role = create_role(s, "林尘").id
        import_worldbook(s, {"data": {"character_book": card_book}}, Scope(role_id=role))
        assert export_sillytavern(s, Scope(role_id=role))["entries"]["1"]["position"] == 1


# --- through a turn ------------------------------------------------------------------------------------


def test_a_multi_line_entry_reaches_the_model_whole_through_a_turn(sqlite_url: str) -> None:
    """The served path: the instance's world book, the trigger, the injection and the prompt, with the offline
    scripted model. The entry is one numbered item with its two lines, `{{char}}` / `{{user}}` replaced."""
    from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
    from personalab.nodes.context import Context

    instance = create_sample_instance(sqlite_url)
    with session_scope(sqlite_url) as s:
        add_worldbook_entry(
            s, "{{char}}记得那座灯塔。\n{{user}}曾在塔下等了一夜。", keywords=["灯塔"], scope=Scope(save_id=instance)
        )
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, "你还记得灯塔吗？", user_name="阿蓝")
    sent = "\n".join(message["content"] for message in state["prompt"])
    assert "雷娜记得那座灯塔。\n阿蓝曾在塔下等了一夜。" in sent
    assert "{{char}}" not in sent and "{{user}}" not in sent
