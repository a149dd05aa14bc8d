"""World-book settings as data (issue 15): per scope (global, a character's book, an instance; the instance's over its
character's over the global ones over the defaults), stored (SQLite and PostgreSQL), set from the CLI and applied in
a turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from personalab.graph.cli import main
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.worldbook import (
    DEFAULT_SETTINGS,
    WorldbookContext,
    WorldbookEntry,
    WorldbookSettings,
    explain_worldbook,
)
from personalab.stores.db import session_scope
from personalab.stores.saves import create_role, create_save
from personalab.stores.worldbook import Scope, add_worldbook_entry
from personalab.stores.worldbook_settings import (
    effective_worldbook_settings,
    get_worldbook_settings,
    set_worldbook_settings,
    worldbook_settings_for_instance,
)


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# --- pure rules -----------------------------------------------------------------------------------------


def test_settings_layer_and_become_the_triggers_config() -> None:
    book = WorldbookSettings(budget_share=0.1, recursive=False, case_sensitive=True)
    instance = WorldbookSettings(recursive=True, max_tokens=300)
    used = instance.over(book).over(DEFAULT_SETTINGS)
    assert used.as_dict() == {
        "budget_share": 0.1,
        "max_tokens": 300,
        "scan_depth": 4,
        "recursive": True,
        "max_recursion_steps": 3,
        "case_sensitive": True,
        "match_whole_words": True,
    }
    config = used.config(context_tokens=10_000)
    assert config.budget_tokens() == 300  # the lower of 10 % of 10,000 and the cap
    assert (config.recursive, config.case_sensitive) == (True, True)


@pytest.mark.parametrize(
    ("field", "value"),
    [("budget_share", 0), ("budget_share", 1.5), ("max_tokens", -1), ("scan_depth", 101), ("recursive", "yes")],
)
def test_a_bad_setting_is_refused_naming_it(field: str, value: object) -> None:
    with pytest.raises(InvalidInput, match=field):
        WorldbookSettings(**{field: value})  # type: ignore[arg-type]


def test_case_and_whole_words_of_the_book_apply_to_entries_that_do_not_say() -> None:
    ours = WorldbookEntry(id="a", content="x", keywords=("Cat",))
    st = WorldbookEntry(
        id="b", content="y", keywords=("Cat",), source={"caseSensitive": False}, source_format="world info"
    )
    case = WorldbookSettings(case_sensitive=True).config()
    fired = explain_worldbook([ours, st], WorldbookContext(text="a cat"), case).triggered
    assert [t.entry.id for t in fired] == ["b"]  # the entry's own "not case-sensitive" wins over the book's
    parts = WorldbookSettings(match_whole_words=False).config()
    assert [t.entry.id for t in explain_worldbook([ours], WorldbookContext(text="concatenate"), parts).triggered] == [
        "a"
    ]


# --- stored -----------------------------------------------------------------------------------------------


def test_settings_are_stored_per_scope_and_the_instance_overrides_its_book(db_url: str) -> None:
    with session_scope(db_url) as s:
        role = create_role(s, "Alice")
        save = create_save(s, role.id, None)
        role_id, save_id = role.id, save.id
        assert role_id is not None and save_id is not None
        set_worldbook_settings(s, Scope(), {"max_tokens": 900, "scan_depth": 6})
        set_worldbook_settings(s, Scope(role_id=role_id), {"budget_share": 0.1, "recursive": False})
        set_worldbook_settings(s, Scope(save_id=save_id), {"recursive": True})
    with session_scope(db_url) as s:
        used = worldbook_settings_for_instance(s, save_id)
        assert (used.max_tokens, used.scan_depth, used.budget_share, used.recursive) == (900, 6, 0.1, True)
        assert get_worldbook_settings(s, Scope(role_id=role_id)).max_tokens is None  # only what is set there
        assert effective_worldbook_settings(s, Scope(role_id=role_id)).recursive is False
        with pytest.raises(InvalidInput, match="budget_share"):
            set_worldbook_settings(s, Scope(save_id=save_id), {"budget_share": 3, "scan_depth": 2})
        assert get_worldbook_settings(s, Scope(save_id=save_id)).scan_depth is None  # nothing changed
        set_worldbook_settings(s, Scope(save_id=save_id), {"scan_depth": 2}, clear=True)
        assert get_worldbook_settings(s, Scope(save_id=save_id)).as_dict()["recursive"] is None
        with pytest.raises(InvalidInput, match="unknown world-book setting"):
            set_worldbook_settings(s, Scope(), {"depth": 3})


# --- CLI ----------------------------------------------------------------------------------------------------


def test_cli_sets_and_shows_settings(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    with session_scope() as s:
        role = create_role(s, "Alice")
        save = create_save(s, role.id, None)
        role_id, save_id = str(role.id), str(save.id)
    assert main(["worldbook", "settings", "--book", role_id, "--budget-share", "0.1", "--no-recursive"]) == 0
    assert main(["worldbook", "settings", "--instance", save_id, "--recursive", "--max-tokens", "500"]) == 0
    capsys.readouterr()
    assert main(["worldbook", "settings", "--instance", save_id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["set"]["recursive"] is True and shown["set"]["budget_share"] is None
    assert shown["effective"] == {**DEFAULT_SETTINGS.as_dict(), "budget_share": 0.1, "max_tokens": 500}
    assert main(["worldbook", "settings", "--instance", save_id, "--unset", "max_tokens"]) == 0
    assert "max_tokens: - → none" in capsys.readouterr().out
    assert main(["worldbook", "settings", "--scan-depth", "500"]) == 2
    assert one_line(capsys.readouterr().err).endswith("scan_depth must be a whole number from 0 to 100, got 500")
    assert main(["worldbook", "settings", "--instance", "999"]) == 2
    assert "999" in one_line(capsys.readouterr().err)


# --- through a turn -------------------------------------------------------------------------------------------


def test_the_turn_applies_the_books_settings_and_the_instances_override(sqlite_url: str) -> None:
    """Recursion off in the character's book: the entry named only in another entry's content stays out; the
    instance turns it back on."""
    from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
    from personalab.nodes.context import Context
    from personalab.stores.saves import get_save

    instance = create_sample_instance(sqlite_url)
    with session_scope(sqlite_url) as s:
        role_id = get_save(s, instance).role_id
        add_worldbook_entry(s, "灯塔由守夜人看管。", keywords=["灯塔"], scope=Scope(save_id=instance))
        add_worldbook_entry(s, "守夜人的暗号是三短一长。", keywords=["守夜人"], scope=Scope(save_id=instance))

    def prompt(state: dict[str, object]) -> str:
        return "\n".join(message["content"] for message in state["prompt"])  # type: ignore[attr-defined]

    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        assert "三短一长" in prompt(run_turn(graph, ctx, instance, "说说灯塔。"))  # by recursion (the default)
        with session_scope(sqlite_url) as s:
            set_worldbook_settings(s, Scope(role_id=role_id), {"recursive": False})
        assert "三短一长" not in prompt(run_turn(graph, ctx, instance, "说说灯塔。"))
        with session_scope(sqlite_url) as s:
            set_worldbook_settings(s, Scope(save_id=instance), {"recursive": True})
        assert "三短一长" in prompt(run_turn(graph, ctx, instance, "说说灯塔。"))


def test_a_cards_book_settings_become_its_characters_settings(db_url: str) -> None:
    """The card's character_book says scan depth 3, a 500-token budget, no recursive scanning: the character's world
    book has them (and the import report lists them as used)."""
    from personalab.stores.cards import import_card, parse_card_json

    card = json.loads((Path(__file__).parent / "fixtures" / "card_v2_lantern.json").read_text(encoding="utf-8"))
    with session_scope(db_url) as s:
        done = import_card(s, parse_card_json(card, "lantern.json"))
        own = get_worldbook_settings(s, Scope(role_id=done.role_id))
    assert (own.scan_depth, own.max_tokens, own.recursive) == (3, 500, False)
    assert "character_book.token_budget" in done.report.used
    card["data"]["character_book"]["scan_depth"] = 1000  # not a setting here: kept for export, named
    with session_scope(db_url) as s:
        other = import_card(s, parse_card_json(card, "lantern.json"))
        assert get_worldbook_settings(s, Scope(role_id=other.role_id)).scan_depth is None
    assert "character_book.scan_depth" in other.report.no_effect
