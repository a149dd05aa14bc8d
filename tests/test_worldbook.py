"""World book (seed 004): the trigger rules one by one, then the store (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.worldbook import (
    MAX_CONTENT_CHARS,
    TemporalWindow,
    WorldbookConfig,
    WorldbookContext,
    WorldbookEntry,
    contains_keyword,
    context_from_lines,
    emotions_in_text,
    explain_worldbook,
    trigger_worldbook,
    validate_entry,
)
from personalab.stores.db import session_scope
from personalab.stores.saves import create_role, create_save
from personalab.stores.worldbook import (
    Scope,
    add_worldbook_entry,
    list_worldbook,
    with_semantic_vectors,
    worldbook_for_instance,
)
from personalab.stores.worldbook_files import ImportFormatError, export_worldbook, import_worldbook, parse_worldbook
from personalab.stores.worldbook_tables import WorldbookEntryRow
from sqlmodel import select

FIXTURES = Path(__file__).parent / "fixtures"


def kw(entry_id: str, content: str, *keywords: str, **fields: Any) -> WorldbookEntry:
    return WorldbookEntry(entry_id, content, keywords=keywords, **fields)


def ids(entries: list[Any]) -> list[str]:
    return [t.entry.id for t in entries]


def fire(entries: list[WorldbookEntry], text: str = "", **ctx: Any) -> list[str]:
    config = ctx.pop("config", None)
    return ids(trigger_worldbook(entries, WorldbookContext(text=text, **ctx), config))


# --- keyword matching -----------------------------------------------------------------------------


def test_cjk_keyword_matches_inside_a_sentence_without_word_boundaries() -> None:
    assert fire([kw("1", "长安是都城", "长安")], "我们明天去长安城看看吧") == ["1"]


def test_ascii_keyword_matches_whole_words_only_case_insensitively() -> None:
    entries = [kw("1", "about cats", "cat")]
    assert fire(entries, "concatenate the strings") == []
    assert fire(entries, "My CAT is asleep.") == ["1"]


def test_ascii_keyword_next_to_chinese_characters_still_matches() -> None:
    assert contains_keyword("Alice说她累了", "Alice")
    assert fire([kw("1", "Alice is a witch", "Alice")], "今天alice来了") == ["1"]


def test_regex_keyword_in_sillytavern_slash_form() -> None:
    entries = [kw("1", "dragons", "/drag(o|oo)ns?/i")]
    assert fire(entries, "A DRAGOON appears") == ["1"]
    assert fire(entries, "a dragnet") == []


@pytest.mark.parametrize(
    ("logic", "text", "fires"),
    [
        ("and_any", "长安的夜晚", True),
        ("and_any", "长安的白天", False),
        ("and_all", "长安的夜晚，宵禁开始", True),
        ("and_all", "长安的夜晚", False),
        ("not_any", "长安的白天", True),
        ("not_any", "长安的夜晚", False),
        ("not_all", "长安的夜晚", True),
        ("not_all", "长安的夜晚，宵禁开始", False),
    ],
)
def test_secondary_keywords_follow_sillytavern_logic(logic: str, text: str, fires: bool) -> None:
    entry = kw("1", "宵禁", "长安", secondary_keywords=("夜晚", "宵禁"), selective_logic=logic)
    assert fire([entry], text) == (["1"] if fires else [])


def test_more_keywords_hit_scores_higher() -> None:
    entries = [kw("1", "a", "长安", "皇城", "禁军"), kw("2", "b", "长安", "西市", "东市")]
    result = trigger_worldbook(entries, WorldbookContext(text="长安皇城的禁军"))
    scores = {t.entry.id: t.score for t in result}
    assert scores["1"] == pytest.approx(1.0)
    assert scores["2"] == pytest.approx(0.5 + 0.5 / 3)
    assert "长安" in result[0].reason


# --- constant, disabled, order, threshold, maxima --------------------------------------------------


def test_constant_entry_always_fires_first_and_ignores_threshold_and_maxima() -> None:
    entries = [
        kw("1", "lore", "长安"),
        WorldbookEntry("2", "always", constant=True, kind="trait", relevance_weight=0.0),
    ]
    config = WorldbookConfig(max_per_kind={"trait": 0})
    result = trigger_worldbook(entries, WorldbookContext(text="长安"), config)
    assert ids(result) == ["2", "1"]
    assert result[0].trigger == "constant"


def test_disabled_entry_never_fires() -> None:
    assert (
        fire([kw("1", "x", "长安", enabled=False), WorldbookEntry("2", "y", constant=True, enabled=False)], "长安")
        == []
    )


def test_higher_priority_comes_first_then_score() -> None:
    entries = [
        kw("1", "a", "长安", "x", priority=100),
        kw("2", "b", "长安", priority=100),
        kw("3", "c", "长安", priority=5),
    ]
    assert fire(entries, "长安") == ["2", "1", "3"]


def test_relevance_threshold_drops_weak_entries_and_says_why() -> None:
    entries = [kw("1", "weak", "长安", relevance_weight=0.2), kw("2", "strong", "长安")]
    result = explain_worldbook(entries, WorldbookContext(text="长安"), WorldbookConfig(relevance_threshold=0.3))
    assert ids(result.triggered) == ["2"]
    assert [s.entry_id for s in result.skipped] == ["1"]
    assert "threshold" in result.skipped[0].reason


def test_per_kind_maximum_keeps_the_best_and_reports_the_rest() -> None:
    entries = [kw(str(i), f"trait {i}", "长安", kind="trait", priority=i) for i in range(3)]
    entries.append(kw("g", "goal", "长安", kind="goal"))
    result = explain_worldbook(entries, WorldbookContext(text="长安"), WorldbookConfig(max_per_kind={"trait": 2}))
    assert ids(result.triggered) == ["g", "2", "1"]
    assert [(s.entry_id, "maximum of 2 'trait'" in s.reason) for s in result.skipped] == [("0", True)]


def test_strategy_switches_turn_a_trigger_type_off() -> None:
    entries = [kw("1", "a", "长安"), WorldbookEntry("2", "b", trigger_type="emotional", emotions=("开心",))]
    config = WorldbookConfig(keyword_matching=False)
    assert fire(entries, "长安", emotions=["开心"], config=config) == ["2"]
    assert fire(entries, "长安", emotions=["开心"], config=WorldbookConfig(enabled=False)) == []


# --- semantic -------------------------------------------------------------------------------------


def test_semantic_entry_fires_at_or_above_the_similarity_threshold() -> None:
    entries = [WorldbookEntry("1", "a", trigger_type="semantic"), WorldbookEntry("2", "b", trigger_type="semantic")]
    sims = {"1": 0.6, "2": 0.2}
    result = trigger_worldbook(entries, WorldbookContext(text="q", similarity=lambda e: sims[e.id]))
    assert ids(result) == ["1"]
    assert result[0].score == pytest.approx(0.6)
    assert "similarity 0.600" in result[0].reason


def test_semantic_entry_with_precomputed_vectors_uses_cosine() -> None:
    entries = [WorldbookEntry("1", "a", trigger_type="semantic"), WorldbookEntry("2", "b", trigger_type="semantic")]
    ctx = WorldbookContext(text="q", query_vector=[1.0, 0.0], entry_vectors={"1": [1.0, 1.0], "2": [0.0, 1.0]})
    result = trigger_worldbook(entries, ctx)
    assert ids(result) == ["1"]
    assert result[0].score == pytest.approx(1 / math.sqrt(2))


def test_semantic_entry_without_vectors_is_reported_not_fired() -> None:
    result = explain_worldbook([WorldbookEntry("1", "a", trigger_type="semantic")], WorldbookContext(text="q"))
    assert result.triggered == []
    assert "embedding" in result.skipped[0].reason


def test_semantic_entry_also_fires_on_its_keywords() -> None:
    entry = WorldbookEntry("1", "a", trigger_type="semantic", keywords=("长安",))
    assert fire([entry], "长安", similarity=lambda e: 0.0) == ["1"]


def test_semantic_trigger_with_the_real_embedding_model() -> None:
    entries = [
        WorldbookEntry("capital", "长安是大唐的都城，皇城位于城北。", trigger_type="semantic"),
        WorldbookEntry("magic", "魔法需要消耗灵力，灵力耗尽会昏迷。", trigger_type="semantic"),
    ]
    ctx = with_semantic_vectors(entries, WorldbookContext(text="我们明天去长安城的皇宫看看吧"))
    assert fire(entries, ctx.text, query_vector=ctx.query_vector, entry_vectors=ctx.entry_vectors) == ["capital"]


# --- temporal -------------------------------------------------------------------------------------


def temporal(entry_id: str, **window: Any) -> WorldbookEntry:
    return WorldbookEntry(entry_id, "time", trigger_type="temporal", temporal=TemporalWindow(**window))


def test_temporal_entry_fires_inside_its_turn_window() -> None:
    entry = temporal("1", min_turn=10, max_turn=20)
    assert fire([entry], current_turn=9) == []
    assert fire([entry], current_turn=10) == ["1"]
    assert fire([entry], current_turn=21) == []


def test_temporal_entry_fires_on_a_long_wall_clock_gap() -> None:
    entry = temporal("1", min_gap_seconds=86_400)
    assert fire([entry], gap_seconds=3_600) == []
    assert fire([entry], gap_seconds=3 * 86_400) == ["1"]
    assert fire([entry]) == []  # gap unknown


def test_temporal_entry_waits_turns_since_it_last_fired() -> None:
    entry = temporal("1", min_turns_since_fired=5)
    assert fire([entry], current_turn=7) == ["1"]
    assert fire([entry], current_turn=7, last_fired_turns={"1": 4}) == []
    assert fire([entry], current_turn=9, last_fired_turns={"1": 4}) == ["1"]


# --- emotional ------------------------------------------------------------------------------------


def emotional(entry_id: str, *emotions: str) -> WorldbookEntry:
    return WorldbookEntry(entry_id, "feel", trigger_type="emotional", emotions=emotions)


def test_emotional_entry_fires_on_a_recent_lines_emotion() -> None:
    assert fire([emotional("1", "担心")], emotions=["开心", "担心"]) == ["1"]
    assert fire([emotional("1", "担心")], emotions=["开心"]) == []


def test_emotion_synonyms_of_one_family_match() -> None:
    assert fire([emotional("1", "悲伤")], emotions=["难过"]) == ["1"]


def test_emotion_words_in_the_text_count_unless_negated() -> None:
    assert emotions_in_text("我今天不开心，有点难过") == ["难过"]
    assert fire([emotional("1", "开心")], "我今天不开心") == []
    assert fire([emotional("1", "悲伤")], "我今天有点难过") == ["1"]


def test_older_emotions_weigh_less() -> None:
    entry = emotional("1", "开心")
    newest = trigger_worldbook([entry], WorldbookContext(emotions=["担心", "开心"]))[0].score
    older = trigger_worldbook([entry], WorldbookContext(emotions=["开心", "担心"]))[0].score
    assert newest == pytest.approx(1.0)
    assert older == pytest.approx(0.8)


def test_emotional_boost_raises_keyword_entries_that_share_the_mood() -> None:
    entries = [kw("1", "sad memory", "长安", emotions=("悲伤",), emotional_weight=0.5), kw("2", "other", "长安")]
    ctx = WorldbookContext(text="长安", emotions=["难过"])
    scores = {t.entry.id: t.score for t in trigger_worldbook(entries, ctx)}
    assert scores == {"1": pytest.approx(1.5), "2": pytest.approx(1.0)}
    off = trigger_worldbook(entries, ctx, WorldbookConfig(emotional_boost_enabled=False))
    assert {t.entry.id: t.score for t in off} == {"1": pytest.approx(1.0), "2": pytest.approx(1.0)}


# --- time decay -----------------------------------------------------------------------------------


def test_time_decay_lowers_old_entries() -> None:
    now = 1_000_000_000.0
    entries = [
        kw("old", "a", "长安", time_decay_factor=0.1, created_at=now - 10 * 86_400),
        kw("new", "b", "长安", time_decay_factor=0.1, created_at=now),
    ]
    result = trigger_worldbook(entries, WorldbookContext(text="长安", now=now), WorldbookConfig(relevance_threshold=0))
    scores = {t.entry.id: t.score for t in result}
    assert scores["new"] == pytest.approx(1.0)
    assert scores["old"] == pytest.approx(math.exp(-1.0))
    off = trigger_worldbook(entries, WorldbookContext(text="长安", now=now), WorldbookConfig(time_decay_enabled=False))
    assert [t.score for t in off] == [pytest.approx(1.0), pytest.approx(1.0)]


# --- context and validation -----------------------------------------------------------------------


def test_context_from_lines_scans_names_contents_and_emotions_of_the_last_lines() -> None:
    lines = [
        {"content": "很久以前", "original_emotion": "平静"},
        {"content": "你来了", "display_name": "钦灵", "original_emotion": "开心"},
        {"content": "嗯", "display_name": "莱姆"},
    ]
    ctx = context_from_lines(lines, user_message="去长安吧", depth=2, current_turn=3, gap_seconds=60)
    assert ctx.text == "钦灵: 你来了\n莱姆: 嗯\n去长安吧"
    assert list(ctx.emotions) == ["开心"]
    assert fire([kw("1", "她", "钦灵")], ctx.text) == ["1"]


def test_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="entry 3: field 'content' has .* over the limit"):
        validate_entry({"id": "1", "content": "x" * (MAX_CONTENT_CHARS + 1), "keywords": ["a"]}, "entry 3")
    with pytest.raises(ValueError, match="needs at least one keyword"):
        validate_entry(WorldbookEntry("1", "x"), "entry 1")
    with pytest.raises(ValueError, match="field 'keywords'.*regular expression"):
        validate_entry(kw("1", "x", "/([a/"), "entry 1")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"temporal": {"min_turn": "5"}}, "world-book entry: field 'temporal.min_turn' must be a whole number"),
        ({"temporal": {"min_turn": 5, "max_turn": 3}}, "field 'temporal': min_turn is after max_turn"),
        ({"temporal": {"every": 3}}, "field 'temporal': unknown key"),
        ({"kind": "dream"}, "field 'kind' is 'dream'; expected 'episodic'"),
        ({"relevance_weight": -1}, "field 'relevance_weight' must be a finite number >= 0"),
        ({"keywords": ["a"] * 101}, "field 'keywords' has 101 keywords, over the limit of 100"),
        ({"keywords": "长安"}, "field 'keywords' must be a list of strings, got string"),
        ({"constant": "yes"}, "field 'constant' must be true or false, got string"),
        ({"role_id": 1, "save_id": 2}, "character or to an instance, not both"),
        ({"colour": 1}, r"unknown field\(s\) colour"),
    ],
)
def test_an_entry_is_checked_when_it_is_made_and_names_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        WorldbookEntry("1", "x", **fields)


def test_an_entry_strips_its_text_and_reads_rows_files_and_calls_alike() -> None:
    entry = kw("1", "  长安  ", " 长安 ", "", priority=7.0, emotions=[" 开心 "])
    assert (entry.content, entry.keywords, entry.priority, entry.emotions) == ("长安", ("长安",), 7, ("开心",))
    row = WorldbookEntryRow(id=5, content="长安", keywords=["长安"], min_turn=3, created_at=datetime(2024, 1, 1))
    from_row = WorldbookEntry.model_validate(row)
    assert (from_row.id, from_row.temporal.min_turn) == ("5", 3)
    assert from_row.created_at == datetime(2024, 1, 1, tzinfo=UTC).timestamp()  # naive rows are UTC
    assert (
        WorldbookEntry.parse({"id": "5", **from_row.fields_dict()}, "entry 1").fields_dict() == from_row.fields_dict()
    )
    with pytest.raises(InvalidInput, match=r"^entry 9: field 'priority' must be a whole number, got 7.5$"):
        WorldbookEntry.parse({"id": "1", "content": "x", "priority": 7.5}, "entry 9")


def test_config_rejects_unknown_template_placeholders() -> None:
    with pytest.raises(ValueError, match="template"):
        WorldbookConfig(template="{nope}")


# --- store ----------------------------------------------------------------------------------------


@pytest.fixture
def world(db_url: str) -> dict[str, int]:
    with session_scope(db_url) as s:
        alice, bob = create_role(s, "Alice"), create_role(s, "Bob")
        save = create_save(s, alice.id, None)
        other = create_save(s, alice.id, None)
        return {"alice": alice.id, "bob": bob.id, "save": save.id, "other": other.id}  # type: ignore[dict-item]


def test_instance_sees_global_its_characters_and_its_own_entries(db_url: str, world: dict[str, int]) -> None:
    with session_scope(db_url) as s:
        add_worldbook_entry(s, "global", keywords=["g"])
        add_worldbook_entry(s, "alice", keywords=["a"], scope=Scope(role_id=world["alice"]))
        add_worldbook_entry(s, "bob", keywords=["b"], scope=Scope(role_id=world["bob"]))
        add_worldbook_entry(s, "mine", keywords=["m"], scope=Scope(save_id=world["save"]))
        add_worldbook_entry(s, "other instance", keywords=["o"], scope=Scope(save_id=world["other"]))
    with session_scope(db_url) as s:
        seen = [e.content for e in worldbook_for_instance(s, world["save"])]
        own = [e.content for e in list_worldbook(s, Scope(role_id=world["alice"]))]
    assert seen == ["global", "alice", "mine"]
    assert own == ["alice"]


def test_add_refuses_unknown_scope_and_bad_entries(db_url: str, world: dict[str, int]) -> None:
    with session_scope(db_url) as s:
        with pytest.raises(LookupError, match="character 999"):
            add_worldbook_entry(s, "x", keywords=["a"], scope=Scope(role_id=999))
        with pytest.raises(ValueError, match="time window"):
            add_worldbook_entry(s, "x", trigger_type="temporal")
        with pytest.raises(ValueError, match="character or an instance"):
            Scope(role_id=1, save_id=1)


def stored(db_url: str) -> list[tuple[str, tuple[str, ...]]]:
    with session_scope(db_url) as s:
        return [(e.content, e.keywords) for e in list_worldbook(s)]


def test_import_is_all_or_nothing_when_the_third_entry_is_bad(db_url: str, world: dict[str, int]) -> None:
    with session_scope(db_url) as s:
        add_worldbook_entry(s, "already here", keywords=["x"])
        add_worldbook_entry(s, "also here", keywords=["y"])
    before = stored(db_url)
    bad = {
        "entries": {
            "10": {"uid": 10, "key": ["a"], "content": "one"},
            "11": {"uid": 11, "key": ["b"], "content": "two"},
            "12": {"uid": 12, "key": "c", "content": "three"},
            "13": {"uid": 13, "key": ["d"], "content": "four"},
        }
    }
    with pytest.raises(ImportFormatError, match=r"entry 3 \(uid 12\): field 'key' must be a list of strings"):
        with session_scope(db_url) as s:
            import_worldbook(s, bad)
    assert stored(db_url) == before


def test_import_sillytavern_lorebook_file(db_url: str, world: dict[str, int]) -> None:
    data = json.loads((FIXTURES / "sillytavern_lorebook.json").read_text("utf-8"))
    with session_scope(db_url) as s:
        report = import_worldbook(s, data, Scope(role_id=world["alice"]))
    assert report.imported == 5
    assert report.skipped == ["entry 6 (uid 5) has empty content"]
    assert report.ignored_fields == ["depth"]
    with session_scope(db_url) as s:
        entries = {e.title: e for e in list_worldbook(s, Scope(role_id=world["alice"]))}
        uids = s.exec(select(WorldbookEntryRow.uid).order_by(WorldbookEntryRow.id)).all()
    assert entries["世界观"].constant and entries["世界观"].priority == 200
    assert entries["皇城"].keywords == ("长安", "皇城")
    assert entries["皇城"].secondary_keywords == ("夜晚", "宵禁")
    assert entries["悄悄话"].position == "user"  # at-depth entry with the user role
    assert not entries["旧设定"].enabled
    assert list(uids) == ["0", "1", "2", "3", "4"]


def test_import_accepts_entries_as_a_list_and_character_books(db_url: str) -> None:
    st_list = {"entries": [{"uid": 1, "key": ["长安"], "content": "都城", "order": 50}]}
    card = {
        "spec": "chara_card_v2",
        "data": {
            "character_book": {
                "entries": [
                    {
                        "keys": ["Alice"],
                        "secondary_keys": [],
                        "content": "a witch",
                        "enabled": True,
                        "insertion_order": 7,
                        "extensions": {},
                        "id": 3,
                        "comment": "Alice",
                    },
                ]
            }
        },
    }
    assert parse_worldbook(st_list).entries[0][0].priority == 50
    parsed = parse_worldbook(card)
    assert parsed.format == "character card lorebook"
    assert (parsed.entries[0][0].keywords, parsed.entries[0][0].priority, parsed.entries[0][1]) == (("Alice",), 7, "3")
    with session_scope(db_url) as s:
        assert import_worldbook(s, st_list).imported == 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("just text", "top level must be an object or a list"),
        ({"name": "book"}, "no 'entries'"),
        ({"entries": [{"uid": 1, "key": ["a"]}]}, r"entry 1 \(uid 1\): missing field 'content'"),
        ({"entries": [{"key": ["a"], "content": "x", "constant": "yes"}]}, "field 'constant' must be true or false"),
        ({"entries": [{"key": ["a"], "content": "x" * (MAX_CONTENT_CHARS + 1)}]}, "over the limit"),
        ({"entries": [{"key": ["a"], "content": "x", "order": "high"}]}, "field 'order' must be a number"),
        (
            {"format": "personalab.worldbook", "entries": [{"content": "x", "keywords": ["a"], "colour": 1}]},
            "unknown field",
        ),
        ({"format": "personalab.knowledge", "entries": []}, "not 'personalab.worldbook'"),
    ],
)
def test_malformed_files_raise_a_clear_error(data: Any, message: str) -> None:
    with pytest.raises(ImportFormatError, match=message):
        parse_worldbook(data)


def test_export_then_import_round_trips_every_field(db_url: str, world: dict[str, int]) -> None:
    with session_scope(db_url) as s:
        add_worldbook_entry(
            s,
            "长安",
            keywords=["长安"],
            secondary_keywords=["夜"],
            selective_logic="and_all",
            kind="episodic",
            priority=7,
            position="assistant",
            title="t",
            relevance_weight=0.9,
            emotional_weight=0.2,
            time_decay_factor=0.01,
            emotions=["开心"],
        )
        add_worldbook_entry(s, "久别", trigger_type="temporal", temporal=TemporalWindow(min_gap_seconds=10, max_turn=5))
        exported = export_worldbook(s)
    with session_scope(db_url) as s:
        report = import_worldbook(s, json.loads(json.dumps(exported)), Scope(save_id=world["save"]))
        copied = export_worldbook(s, Scope(save_id=world["save"]))
    assert report.imported == 2
    strip = [{k: v for k, v in e.items() if k != "uid"} for e in exported["entries"]]
    assert [{k: v for k, v in e.items() if k != "uid"} for e in copied["entries"]] == strip


def test_reimporting_the_same_file_adds_nothing(db_url: str) -> None:
    data = {"entries": {"1": {"uid": 1, "key": ["a"], "content": "x"}}}
    with session_scope(db_url) as s:
        import_worldbook(s, data)
    with session_scope(db_url) as s:
        report = import_worldbook(s, data)
    assert (report.imported, report.duplicates) == (0, 1)
    assert len(stored(db_url)) == 1
