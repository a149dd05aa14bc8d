"""SillyTavern character cards (issue 15): V1 / V2 / V3 JSON and PNG in, V2 / V3 / PNG out, nothing lost.

Fixtures are made here: `tests/fixtures/card_v2_lantern.json` (hand-written, with a character_book) and PNGs
generated with Pillow at test time."""

from __future__ import annotations

import base64
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli, one_line
from personalab.graph.api.cards import import_card_file
from personalab.graph.api.library import delete_character
from personalab.nodes.rules.errors import InvalidInput
from personalab.stores.card_tables import CardRow
from personalab.stores.cards import (
    MAX_CARD_BYTES,
    Card,
    card_of_character,
    export_png,
    export_v2,
    export_v3,
    import_card,
    import_report,
    parse_card_bytes,
    read_card,
    write_card,
)
from personalab.stores.db import session_scope
from personalab.stores.tables import Role
from personalab.stores.worldbook import Scope, list_worldbook
from personalab.stores.worldbook_tables import WorldbookEntrySourceRow
from PIL import Image
from PIL.PngImagePlugin import PngInfo
from sqlmodel import select

FIXTURES = Path(__file__).parent / "fixtures"


def lantern() -> dict[str, Any]:
    return json.loads((FIXTURES / "card_v2_lantern.json").read_text(encoding="utf-8"))


def b64(value: Any) -> str:
    return base64.b64encode(json.dumps(value, ensure_ascii=False).encode("utf-8")).decode("ascii")


def png(chunks: dict[str, str], size: tuple[int, int] = (8, 12)) -> bytes:
    """A small RGBA image with the given tEXt chunks (the card generator of these tests)."""
    info = PngInfo()
    for key, value in chunks.items():
        info.add_text(key, value)
    out = io.BytesIO()
    Image.new("RGBA", size, (10, 120, 200, 255)).save(out, format="PNG", pnginfo=info)
    return out.getvalue()


def v3_of(card: dict[str, Any]) -> dict[str, Any]:
    v3 = copy.deepcopy(card)
    v3["spec"], v3["spec_version"] = "chara_card_v3", "3.0"
    v3["data"].update(
        nickname="阿灯",
        group_only_greetings=["（群聊）灯亮了。"],
        assets=[{"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"}],
        creation_date=1_700_000_000,
        source=["https://example.invalid/card"],
    )
    return v3


def same(a: Card, b: Card) -> None:
    assert a.data.model_dump() == b.data.model_dump()
    assert a.data.model_extra == b.data.model_extra
    assert a.top_level == b.top_level


# --- reading ----------------------------------------------------------------------------------------


def test_a_v1_card_reads_its_flat_fields() -> None:
    v1 = {"name": "Mira", "description": "A courier.", "first_mes": "Hi!", "mes_example": "", "avatar": "none"}
    card = parse_card_bytes(json.dumps(v1).encode(), "mira.json")
    assert card.spec == "chara_card_v1"
    assert (card.name, card.data.description, card.data.first_mes) == ("Mira", "A courier.", "Hi!")
    assert card.data.model_extra == {"avatar": "none"}  # an unknown field is kept


def test_a_v2_card_reads_data_and_keeps_unknown_fields_and_extensions() -> None:
    card = read_card(FIXTURES / "card_v2_lantern.json")
    assert card.spec == "chara_card_v2"
    assert card.data.alternate_greetings == ["*他递来一杯热茶* 喝吧。"]
    assert card.data.extensions["world"] == "雾港"
    assert card.data.model_extra == {"x_unknown_field": {"kept": True}}
    assert card.top_level == {"create_date": "2026-11-1 @10h 00m 00s"}  # the V1 copies are not kept twice
    assert card.data.character_book is not None and len(card.data.character_book["entries"]) == 3


def test_a_png_card_prefers_ccv3_over_chara() -> None:
    v2, v3 = lantern(), v3_of(lantern())
    v3["data"]["name"] = "灯守·三"
    card = parse_card_bytes(png({"chara": b64(v2), "ccv3": b64(v3)}), "both.png")
    assert (card.spec, card.name, card.source) == ("chara_card_v3", "灯守·三", "PNG chunk ccv3")
    assert card.data.nickname == "阿灯"
    assert card.avatar is not None and card.avatar.startswith(b"\x89PNG")
    only_v2 = parse_card_bytes(png({"chara": b64(v2)}), "v2.png")
    assert (only_v2.spec, only_v2.source) == ("chara_card_v2", "PNG chunk chara")


def test_the_import_report_names_every_field_without_effect() -> None:
    report = import_report(parse_card_bytes(png({"ccv3": b64(v3_of(lantern()))}), "c.png"))
    assert set(report.used) >= {"name", "description", "personality", "first_mes", "character_book"}
    # issue 28: the scenario and the depth prompt reach the prompt
    assert {"scenario", "extensions.depth_prompt"} <= set(report.used)
    for name in (
        "creator_notes",
        "tags",
        "extensions.world",
        "x_unknown_field",
        "nickname",
        "group_only_greetings",
        "assets",
        "(top level) create_date",
    ):
        assert name in report.no_effect, name
    # the book's own settings become the character's world-book settings
    assert {"character_book.scan_depth", "character_book.token_budget", "character_book.recursive_scanning"} <= set(
        report.used
    )
    assert "雾港" in report.no_effect["extensions.world"]


# --- round trips ------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["v1", "v2", "v3", "png"])
def test_import_of_each_export_keeps_every_field(source: str) -> None:
    if source == "v1":
        raw = json.dumps({"name": "Mira", "description": "d", "personality": "p", "scenario": "s", "x": 1}).encode()
    elif source == "v2":
        raw = json.dumps(lantern(), ensure_ascii=False).encode()
    elif source == "v3":
        raw = json.dumps(v3_of(lantern()), ensure_ascii=False).encode()
    else:
        raw = png({"chara": b64(lantern()), "ccv3": b64(v3_of(lantern()))})
    card = parse_card_bytes(raw, f"card.{source}")
    for exported in (export_v2(card), export_v3(card)):
        same(parse_card_bytes(json.dumps(exported, ensure_ascii=False).encode(), "again.json"), card)
    again = parse_card_bytes(export_png(card), "again.png")
    same(again, card)
    assert again.spec == "chara_card_v3"  # both chunks written: the V3 one is read
    image = Image.open(io.BytesIO(export_png(card)))
    assert {"chara", "ccv3"} <= set(image.text)  # type: ignore[attr-defined]
    assert json.loads(base64.b64decode(image.text["chara"]))["spec"] == "chara_card_v2"  # type: ignore[attr-defined]


def test_a_png_export_keeps_the_avatar_pixels(tmp_path: Path) -> None:
    card = parse_card_bytes(png({"chara": b64(lantern())}, size=(5, 7)), "a.png")
    write_card(card, tmp_path / "out.png", "png")
    image = Image.open(tmp_path / "out.png")
    assert image.size == (5, 7) and image.getpixel((0, 0)) == (10, 120, 200, 255)


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"entries": {"0": {"key": ["a"], "content": "b"}}}', "is a world book, not a character card"),
        (b'{"hello": "world"}', "is not a character card"),
        (b'{"spec": "chara_card_v9", "data": {}}', "unknown card spec"),
        (b'{"spec": "chara_card_v2", "data": {"name": 5}}', "data.name' must be"),
        (b"[1, 2]", "is not a character card"),
        (b"\xff\xfe garbage", "neither a PNG card nor UTF-8"),
        (b"\x89PNG\r\n\x1a\nnot really", "not a readable PNG"),
    ],
)
def test_bad_cards_are_one_error_naming_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.card"
    path.write_bytes(content)
    with pytest.raises(InvalidInput) as caught:
        read_card(path)
    assert str(path) in str(caught.value) and message in str(caught.value), str(caught.value)


def test_png_problems_are_named(tmp_path: Path) -> None:
    cases = {
        "plain.png": (png({"Title": "just a picture"}), "no 'chara' or 'ccv3' text chunk"),
        "b64.png": (png({"chara": "@@@ not base64 !!!"}), "is not base64"),
        "utf8.png": (png({"chara": base64.b64encode(b"\xff\xfe\xfa").decode()}), "does not decode to UTF-8"),
        "json.png": (png({"chara": base64.b64encode(b"{not json").decode()}), "is not valid JSON"),
    }
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(InvalidInput, match=message) as caught:
            read_card(tmp_path / name)
        assert name in str(caught.value)


def test_a_file_over_20_mb_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.png"
    with big.open("wb") as handle:
        handle.truncate(MAX_CARD_BYTES + 1)
    with pytest.raises(InvalidInput, match="over the card import limit"):
        read_card(big)


# --- a card as a character ------------------------------------------------------------------------


def test_a_card_becomes_a_character_with_its_book_and_exports_back_whole(db_url: str) -> None:
    card = parse_card_bytes(png({"chara": b64(lantern())}), "lantern.png")
    with session_scope(db_url) as s:
        done = import_card(s, card)
    assert done.book is not None and done.book.imported == 3
    assert "extensions.sticky" not in done.book.ignored_fields  # sticky has its effect (in turns)
    with session_scope(db_url) as s:
        role = s.get(Role, done.role_id)
        assert role is not None and (role.name, role.persona) == ("灯守", "沉默，可靠")
        book = list_worldbook(s, Scope(role_id=done.role_id))
        assert [e.position for e in book] == [None, "user", None]  # at depth 2 as user → the tail's user position
        assert book[1].source is not None and book[1].source["extensions"]["depth"] == 2
        again = card_of_character(s, done.role_id)
    same(again, card)
    assert again.avatar is not None and card.avatar is not None
    assert Image.open(io.BytesIO(again.avatar)).tobytes() == Image.open(io.BytesIO(card.avatar)).tobytes()


def test_a_bad_character_book_stores_nothing(sqlite_url: str) -> None:
    db_url = sqlite_url
    bad = lantern()
    bad["data"]["character_book"]["entries"][1]["keys"] = "雾"  # a string, not a list
    card = parse_card_bytes(json.dumps(bad, ensure_ascii=False).encode(), "bad.json")
    with pytest.raises(InvalidInput, match="bad.json: character_book: entry 2 .*keys"):
        with session_scope(db_url) as s:
            import_card(s, card, "bad.json")
    with session_scope(db_url) as s:
        assert s.exec(select(Role)).all() == []


# --- the command line ---------------------------------------------------------------------------------


def test_card_import_and_export_through_the_cli(
    capsys: pytest.CaptureFixture[str], data_dir: Path, tmp_path: Path
) -> None:
    source = tmp_path / "lantern.png"
    source.write_bytes(png({"chara": b64(lantern()), "ccv3": b64(v3_of(lantern()))}))
    code, out, err = cli(capsys, "card", "import", str(source), "--json")
    assert code == 0, err
    done = json.loads(out)
    assert (done["name"], done["spec"], done["source"]) == ("灯守", "chara_card_v3", "PNG chunk ccv3")
    assert done["book"]["imported"] == 3 and "scenario" in done["used"]
    character = done["character_id"]
    code, out, _ = cli(capsys, "worldbook", "list", "--character", str(character), "--json")
    assert [e["title"] for e in json.loads(out)] == ["灯塔", "雾与船", "常驻"]
    for fmt in ("v2", "v3", "png"):
        target = tmp_path / f"out.{fmt}"
        code, out, err = cli(capsys, "card", "export", str(character), str(target), "--format", fmt)
        assert code == 0, err
        same(read_card(target), read_card(source))


def test_card_import_of_bad_files_is_one_line_and_stores_nothing(
    capsys: pytest.CaptureFixture[str], data_dir: Path, tmp_path: Path
) -> None:
    bad_book = lantern()
    bad_book["data"]["character_book"]["entries"][0]["content"] = 7
    cases = {
        "plain.png": png({}),
        "book.json": json.dumps(bad_book, ensure_ascii=False),
        "lorebook.json": '{"entries": {}}',
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        code, _, err = cli(capsys, "card", "import", str(path))
        assert code == 2 and name in one_line(err), err
    code, _, err = cli(capsys, "card", "export", "999", str(tmp_path / "x.png"))
    assert code == 2 and "character 999 does not exist" in one_line(err)
    with session_scope() as s:
        assert s.exec(select(Role)).all() == []


def test_deleting_an_imported_character_takes_its_card_and_book(db_url: str) -> None:
    done = import_card_file(Path(__file__).parent / "fixtures" / "card_v2_lantern.json", database_url=db_url)
    delete_character(done.character_id, database_url=db_url)
    with session_scope(db_url) as s:
        assert s.exec(select(CardRow)).all() == []
        assert s.exec(select(WorldbookEntrySourceRow)).all() == []


def test_a_character_made_here_goes_through_a_card_and_back(db_url: str, tmp_path: Path) -> None:
    """Every field of the characters API survives export and import; the ones a card has no place for (traits,
    backstory, motives) travel in `data.extensions.personalab`."""
    from personalab.graph.api.cards import export_card_file
    from personalab.graph.api.library import create_character, get_character

    fields = {
        "name": "灯守",
        "description": "守灯人。",
        "persona": "沉默。",
        "traits": "可靠、固执",
        "backstory": "在雾港守了三十年灯。",
        "motives": "让每条船回家",
        "greetings": ["你醒了。", "喝茶吗？"],
        "example_dialogue": "{{user}}: 这是哪里？\n{{char}}: 雾港。",
        "system_prompt": "只用中文。",
        "post_history_instructions": "保持角色。",
        "avatar": png({}),
    }
    made = create_character(fields, database_url=db_url)
    for fmt in ("png", "v3", "v2"):
        target = tmp_path / f"card.{fmt}"
        export_card_file(made.id, target, fmt, database_url=db_url)
        again = get_character(import_card_file(target, database_url=db_url).character_id, database_url=db_url)
        for name, value in fields.items():
            if name != "avatar":
                assert getattr(again, name) == value, (fmt, name)
        assert (again.avatar_bytes > 0) == (fmt == "png")


def test_importing_the_same_card_again_reuses_its_character_unless_copy(
    db_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28: a second import of the same card (same definition, the character unchanged) is reported and
    makes no duplicate; `copy` makes one; a changed card or an edited character is a new import."""
    from personalab.graph.api import PersonaLab

    api = PersonaLab(database_url=db_url)
    source = tmp_path / "lantern.png"
    source.write_bytes(png({"chara": b64(lantern())}))
    first = api.cards.import_file(source)
    again = api.cards.import_file(source)
    assert not first.reused and again.reused and again.character_id == first.character_id
    assert "already imported" in again.summary() and again.book is None
    assert [c.id for c in api.characters.list()] == [first.character_id]
    assert len(api.worldbook.list(character_id=first.character_id)) == 3  # the book was not imported twice
    copied = api.cards.import_file(source, copy=True)
    assert not copied.reused and copied.character_id != first.character_id
    # a JSON card of the same data has no avatar: another definition
    as_json = tmp_path / "lantern.json"
    as_json.write_text(json.dumps(lantern(), ensure_ascii=False), encoding="utf-8")
    assert not api.cards.import_file(as_json).reused
    # the character edited since: a new import
    api.characters.edit(first.character_id, {"description": "改过了"})
    api.characters.delete(copied.character_id)
    assert not api.cards.import_file(source).reused
    # another user's character is never reused
    assert not PersonaLab(owner="bob", database_url=db_url).cards.import_file(source).reused
    # the CLI says so, and --copy imports again
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    code, out, _ = cli(capsys, "card", "import", str(as_json))
    assert code == 0 and "already imported" in out
    code, out, _ = cli(capsys, "card", "import", str(as_json), "--copy", "--json")
    assert code == 0 and json.loads(out)["reused"] is False


def test_a_card_book_entry_with_an_invalid_regex_key_is_named_and_the_rest_imported(
    db_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 28 (bad input): a card whose embedded lorebook has a key that is not a valid regular expression is
    imported — the character and the other entries — and the import's report names the skipped entry (the API's
    report and the CLI's lines)."""
    from personalab.graph.api import PersonaLab

    card = copy.deepcopy(lantern())
    card["data"]["character_book"] = {
        "entries": [
            {"id": 0, "keys": ["harbour"], "content": "the harbour", "enabled": True, "insertion_order": 1},
            {"id": 1, "keys": ["/([a/"], "content": "broken pattern", "enabled": True, "insertion_order": 2},
            {"id": 2, "keys": ["tower"], "content": "the tower", "enabled": True, "insertion_order": 3},
        ]
    }
    api = PersonaLab(database_url=db_url)
    report = api.cards.import_bytes(json.dumps(card).encode(), "broken-book.json")
    assert report.book is not None and report.book["imported"] == 2
    (skipped,) = report.book["skipped"]
    assert "entry 2 (uid 1)" in skipped and "'/([a/' is not a valid regular expression" in skipped
    entries = api.worldbook.list(character_id=report.character_id)
    assert sorted(e["content"] for e in entries) == ["the harbour", "the tower"]
    # the CLI says the same in its report and exits 0: the card is imported
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    source = tmp_path / "broken-book.json"
    card["data"]["name"] = "Lantern II"  # another card: not the same one again
    source.write_text(json.dumps(card), encoding="utf-8")
    code, out, _err = cli(capsys, "card", "import", str(source))
    assert code == 0 and "entry 2 (uid 1) skipped" in out and "not a valid regular expression" in out
