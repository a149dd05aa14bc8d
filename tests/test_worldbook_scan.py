"""The world-book scan of a big book (issue 28): one pass over every key (an automaton), the entries a turn does not
match never looked at, the prepared book built once per book version and rebuilt when an entry changes (in any
process), on SQLite and PostgreSQL."""

from __future__ import annotations

import random
from typing import Any

import pytest
from personalab.nodes.rules import worldbook as rules
from personalab.nodes.rules.worldbook import (
    PreparedWorldbook,
    WorldbookConfig,
    WorldbookContext,
    WorldbookEntry,
    context_from_lines,
    explain_worldbook,
)
from personalab.stores.db import session_scope
from personalab.stores.saves import create_role, create_save
from personalab.stores.tables import utcnow
from personalab.stores.worldbook import (
    Scope,
    add_worldbook_entry,
    delete_worldbook_entry,
    list_worldbook,
    prepared_worldbook_for_instance,
    worldbook_for_instance,
)
from personalab.stores.worldbook_files import import_worldbook
from personalab.stores.worldbook_tables import WorldbookEntryRow
from sqlalchemy import create_engine
from sqlmodel import Session


def kw(entry_id: str, content: str, *keywords: str, **fields: Any) -> WorldbookEntry:
    return WorldbookEntry(entry_id, content, keywords=keywords, **fields)


def fired(entries: Any, text: str, **fields: Any) -> list[str]:
    config = fields.pop("config", None)
    return [
        item.entry.id for item in explain_worldbook(entries, WorldbookContext(text=text, **fields), config).triggered
    ]


def big_book(size: int) -> list[WorldbookEntry]:
    rng = random.Random(3)
    return [
        kw(str(i), f"entry {i}", f"key{i}x", "".join(rng.choice("山河星月风雪林海") for _ in range(4)) + str(i))
        for i in range(size)
    ]


def test_chinese_keys_match_inside_text_and_english_keys_stay_whole_words() -> None:
    book = PreparedWorldbook(
        [
            kw("cjk", "长安", "长安"),
            kw("cat", "a cat", "cat"),
            kw("alice", "Alice", "Alice"),
            kw("umlaut", "Ärger", "Ärger"),
            kw("case", "Case", "Rome", source={"caseSensitive": True}, source_format="world info"),
        ]
    )
    assert fired(book, "我们明天去长安城看看吧") == ["cjk"]
    assert fired(book, "concatenate the strings") == []
    assert fired(book, "my CAT sleeps") == ["cat"]
    assert fired(book, "Alice说她累了") == ["alice"]
    assert fired(book, "so much ärger today") == ["umlaut"]
    assert fired(book, "all roads lead to rome") == []
    assert fired(book, "all roads lead to Rome") == ["case"]


def test_regex_keys_and_secondary_keys_still_work_through_the_index() -> None:
    book = PreparedWorldbook(
        [
            kw("rx", "sigil", "/sig(il|ul)\\d+/i"),
            kw("sec", "guarded", "gate", secondary_keywords=("night",), selective_logic="and_any"),
        ]
    )
    assert fired(book, "the SIGUL42 glows") == ["rx"]
    assert fired(book, "the gate at noon") == []
    assert fired(book, "the gate at night") == ["sec"]


def test_a_prepared_book_gives_what_the_entries_give() -> None:
    """Recursion, constants, probability rolls, per-entry scan depth and timers: the prepared book's result equals
    the result of the same entries given as a list (which is prepared on the spot), and is the same on reuse."""
    entries = [
        kw("c", "always here", constant=True),
        kw("a", "she remembers 青云山", "Mira"),
        kw("b", "the mountain 青云山 is cold", "青云山"),
        kw("p", "maybe", "Mira", source={"probability": 50, "useProbability": True}, source_format="world info"),
        kw("d", "deep", "lantern", source={"scanDepth": 1}, source_format="world info"),
        kw("s", "sticky", "nothing-here", source={"sticky": 3}, source_format="world info"),
    ]
    book = PreparedWorldbook(entries)
    context = context_from_lines(
        [{"content": "a lantern burns"}, {"content": "quiet"}], user_message="Mira waves", current_turn=5
    )
    context = WorldbookContext(**{**context.__dict__, "last_fired_turns": {"s": 4}, "roll": iter([0.9, 0.1]).__next__})
    first = [(t.entry.id, t.trigger, t.reason) for t in explain_worldbook(book, context).triggered]
    context = WorldbookContext(**{**context.__dict__, "roll": iter([0.9, 0.1]).__next__})
    again = [(t.entry.id, t.trigger, t.reason) for t in explain_worldbook(entries, context).triggered]
    assert first == again
    assert [entry_id for entry_id, _, _ in first] == ["c", "a", "s", "b"]  # p lost its roll; d's lantern is too deep
    assert any("recursion step 1" in reason for entry_id, _, reason in first if entry_id == "b")


@pytest.fixture
def scored(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the entries the scan scores (`_score_entry`), in order."""
    seen: list[str] = []
    real = rules._score_entry

    def counting(entry: WorldbookEntry, *args: Any) -> Any:
        seen.append(entry.id)
        return real(entry, *args)

    monkeypatch.setattr(rules, "_score_entry", counting)
    return seen


def test_the_entries_a_turn_does_not_match_are_never_scored(scored: list[str]) -> None:
    book = PreparedWorldbook(big_book(20_000))
    result = explain_worldbook(book, WorldbookContext(text="we talk about key123x and key19999x today"))
    assert [item.entry.id for item in result.triggered] == ["123", "19999"]
    assert sorted(scored) == ["123", "19999"]


def test_regex_entries_and_keys_inside_other_words_are_not_scored(scored: list[str]) -> None:
    """A big book's regex entries are scored only on a turn holding the literal their pattern needs, and an English
    key occurring inside a longer word ("kalo" in "Kalomira") does not make its whole-words entry scored; an entry
    that matches anywhere (its own matchWholeWords false, or the book's setting) still is, and fires."""
    book = PreparedWorldbook(
        [
            *big_book(2_000),
            *(kw(f"rx{i}", f"sigil {i}", f"/\\bsigil{i}\\w*/i") for i in range(20)),
            kw("alt", "either", "/(Alice|Bob)/"),
            kw("kalo", "the kalo", "Kalo"),
            kw("part", "part of words", "Mira", source={"matchWholeWords": False}, source_format="world info"),
        ]
    )
    assert sorted(fired(book, "Kalomira waves at key7x")) == ["7", "part"]
    assert sorted(scored) == ["7", "part"]
    scored.clear()
    assert sorted(fired(book, "the SIGIL7b glows, and Bob nods")) == ["alt", "rx7"]
    assert sorted(scored) == ["alt", "rx7"]
    assert sorted(fired(book, "Kalomira waves", config=WorldbookConfig(match_whole_words=False))) == ["kalo", "part"]


def test_a_regex_key_is_found_whatever_case_folding_does() -> None:
    """Under IGNORECASE "i" matches the Turkish dotted and dotless I, whose case-folding is not "i": the regex entry
    still fires (its literal cannot be looked up in the folded text, so it is scored); so does a key whose whole
    word stands next to a letter that folds into two ("ß")."""
    book = PreparedWorldbook([kw("rx", "dik", "/dik\\d/i"), kw("w", "kalo", "Kalo"), *big_book(50)])
    assert fired(book, "DİK7 stands") == ["rx"]
    assert fired(book, "groß Kalo") == ["w"]
    assert fired(book, "großKalo") == ["w"]  # ß is no ASCII word character: a whole word as `_plain_search` says


@pytest.mark.parametrize(
    ("pattern", "flags", "needed"),
    [
        (r"\bsigil\d+", 2, {"sigil"}),
        (r"(Alice|Bob)", 0, {"alice", "bob"}),
        (r"龙(王|女)", 0, {"龙"}),
        (r"(?:ab)+c?", 0, {"ab"}),
        (r"a(bc)d", 0, {"abcd"}),
        (r"\w+ing\b", 0, {"ing"}),
        (r"\d{4}", 0, None),
        (r"x*|y", 0, None),
        (r"foo|\d", 0, None),
        (r"dı", 2, None),
    ],
)
def test_the_literals_a_regex_key_needs(pattern: str, flags: int, needed: set[str] | None) -> None:
    from personalab.nodes.rules.worldbook_keys import required_literals

    found = required_literals(pattern, flags)
    assert (None if found is None else set(found)) == needed


def test_the_index_never_misses_a_regex_match() -> None:
    """Whatever the pattern and the text, an item whose regex key matches is among the index's candidates (random
    patterns over a small alphabet, so matches are frequent)."""
    import re

    from personalab.nodes.rules.worldbook_keys import KeyIndex, key_matches

    rng = random.Random(7)
    atoms = ["a", "b", "İ", "i", "ß", "龙", "(a|bb)", "[ab]", "\\d", "x?", "(?:ba)+", "\\b", ".", "c*"]
    for _ in range(300):
        pattern = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 4)))
        key = f"/{pattern}/{rng.choice(['', 'i'])}"
        try:
            re.compile(pattern)
        except re.error:
            continue
        index = KeyIndex([(key,)])
        for _ in range(20):
            text = "".join(rng.choice("abİiıßSS龙 1x") for _ in range(rng.randint(0, 8)))
            if key_matches(text, key):
                assert index.candidates(text) == {0}, (key, text)


def test_recursion_stays_bounded_on_a_chain_through_a_big_book() -> None:
    chain = [kw(str(i), f"next is link{i + 1}", f"link{i}") for i in range(50)]
    result = explain_worldbook(
        PreparedWorldbook(chain), WorldbookContext(text="start at link0"), WorldbookConfig(max_recursion_steps=3)
    )
    assert [item.entry.id for item in result.triggered] == ["0", "1", "2", "3"]
    assert [item.entry_id for item in result.skipped] == ["4"]
    assert "limit of 3 steps" in result.skipped[0].reason


@pytest.fixture
def instance(db_url: str) -> dict[str, int]:
    with session_scope(db_url) as s:
        role = create_role(s, "Mira")
        save = create_save(s, role.id, None)
        return {"role": role.id, "save": save.id}  # type: ignore[dict-item]


def test_the_prepared_book_is_built_once_per_book_version(db_url: str, instance: dict[str, int]) -> None:
    with session_scope(db_url) as s:
        add_worldbook_entry(s, "the harbour", keywords=["harbour"], scope=Scope(role_id=instance["role"]))
        second = add_worldbook_entry(s, "the tower", keywords=["tower"], scope=Scope(save_id=instance["save"]))
    with session_scope(db_url) as s:
        book = prepared_worldbook_for_instance(s, instance["save"])
    with session_scope(db_url) as s:
        assert prepared_worldbook_for_instance(s, instance["save"]) is book  # reused across turns
        assert len(book) == 2
    with session_scope(db_url) as s:
        add_worldbook_entry(s, "the bridge", keywords=["bridge"])  # global: this instance sees it too
    with session_scope(db_url) as s:
        added = prepared_worldbook_for_instance(s, instance["save"])
    assert added is not book and [e.content for e in added.entries] == ["the harbour", "the tower", "the bridge"]
    with session_scope(db_url) as s:
        delete_worldbook_entry(s, int(second.id))
    with session_scope(db_url) as s:
        assert [e.content for e in prepared_worldbook_for_instance(s, instance["save"]).entries] == [
            "the harbour",
            "the bridge",
        ]


def test_an_edit_made_by_another_process_rebuilds_the_book(db_url: str, instance: dict[str, int]) -> None:
    with session_scope(db_url) as s:
        entry = add_worldbook_entry(s, "the harbour", keywords=["harbour"], scope=Scope(role_id=instance["role"]))
    with session_scope(db_url) as s:
        assert fired(prepared_worldbook_for_instance(s, instance["save"]), "the lighthouse") == []
    # another process: its own engine, the row edited as an edit does (its keys and its updated_at)
    engine = create_engine(db_url)
    try:
        with Session(engine) as other:
            row = other.get(WorldbookEntryRow, int(entry.id))
            assert row is not None
            row.keywords = ["lighthouse"]
            row.updated_at = utcnow()
            other.add(row)
            other.commit()
    finally:
        engine.dispose()
    with session_scope(db_url) as s:
        assert fired(prepared_worldbook_for_instance(s, instance["save"]), "the lighthouse") == [entry.id]


def test_an_entry_with_an_invalid_regex_key_is_named_and_the_rest_imported(db_url: str) -> None:
    book = {
        "entries": {
            "0": {"uid": 0, "key": ["harbour"], "content": "the harbour"},
            "1": {"uid": 1, "key": ["/([a/"], "content": "broken pattern"},
            "2": {"uid": 2, "key": ["/tow(er)?/i"], "content": "the tower"},
        }
    }
    with session_scope(db_url) as s:
        report = import_worldbook(s, book)
    assert report.imported == 2
    assert len(report.skipped) == 1 and "uid 1" in report.skipped[0] and "regular expression" in report.skipped[0]
    with session_scope(db_url) as s:
        assert [e.content for e in list_worldbook(s)] == ["the harbour", "the tower"]


def test_the_prepared_book_reads_every_field_as_the_store_does(db_url: str, instance: dict[str, int]) -> None:
    book = {
        "entries": {
            "0": {"uid": 0, "key": ["harbour", " pier "], "keysecondary": ["night"], "content": " the harbour ",
                  "selective": True, "selectiveLogic": 3, "order": 7, "probability": 40, "useProbability": True,
                  "sticky": 2, "group": "docks", "comment": "Harbour", "position": 4, "depth": 2, "role": 1},
            "1": {"uid": 1, "key": [], "content": "always", "constant": True, "disable": True},
        }
    }  # fmt: skip
    with session_scope(db_url) as s:
        import_worldbook(s, book, Scope(role_id=instance["role"]))
        add_worldbook_entry(
            s,
            "a quiet evening",
            trigger_type="temporal",
            temporal={"min_turn": 3, "max_gap_seconds": 60.0},
            emotions=["平静"],
            time_decay_factor=0.1,
            scope=Scope(save_id=instance["save"]),
        )
    with session_scope(db_url) as s:
        prepared = prepared_worldbook_for_instance(s, instance["save"]).entries
        stored = worldbook_for_instance(s, instance["save"])
    assert [e.model_dump() for e in prepared] == [e.model_dump() for e in stored]
    assert rules.sillytavern_options(prepared[0]) == rules.sillytavern_options(stored[0])
