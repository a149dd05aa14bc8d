"""Characters, backgrounds and instances through the Python API (issue 13; seed 002 角色/背景/会话实例, seed 004 导出),
on SQLite and PostgreSQL: what a host app creates, reads back, edits and deletes; bad input changes nothing; a deleted
instance leaves nothing in any store; an exported instance imports back the same; every character field reaches the
model in its region."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from personalab.graph import api
from personalab.graph.runner import run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InstanceNotFound, InvalidInput, NotFound
from personalab.stores import library as store
from personalab.stores.db import get_engine, session_scope
from personalab.stores.events import story_collection
from personalab.stores.history import get_chat_history
from personalab.stores.vectors import get_collection
from personalab.stores.worldbook import Scope, add_knowledge, add_worldbook_entry
from PIL import Image
from sqlalchemy import text

OUTLINE = [f"第{i}幕" for i in range(1, 11)]


def png(color: str = "red") -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), color).save(buffer, "PNG")
    return buffer.getvalue()


def character_data(**extra: Any) -> dict[str, Any]:
    return {
        "name": "雷娜",
        "description": "废土上的{{char}}，{{user}}的旧部",
        "persona": "表面冷酷，内心重情义",
        "traits": "冷静，寡言、枪法精准",
        "backstory": "前帮派二把手，在背叛之夜救下了{{user}}",
        "motives": "复仇\n守护旧部",
        "greetings": ["{{user}}，你醒了？我是{{char}}。", "又见面了。"],
        "example_dialogue": "{{user}}：你是谁？\n{{char}}：一个还欠你命的人。",
        "system_prompt": "{{char}}说话简短，从不解释自己。",
        "post_history_instructions": "回复不超过80字，保持{{char}}的语气。",
        "avatar": png(),
        **extra,
    }


def play(url: str, instance_id: int, *messages: str) -> list[dict[str, Any]]:
    with turn_graph(Context(database_url=url)) as (graph, ctx):
        return [run_turn(graph, ctx, instance_id, message) for message in messages]


@pytest.fixture
def url(db_url: str, data_dir: Path) -> str:
    """The database of the test, with its own data folder for Chroma and the checkpoint file."""
    return db_url


def setup(url: str) -> tuple[api.Character, api.BackgroundOut, api.Instance]:
    character = api.create_character(character_data(), database_url=url)
    background = api.create_background(
        {"name": "废土复仇记", "world_setting": "核战后的废土，{{char}}陪{{user}}复仇。", "outline": OUTLINE},
        database_url=url,
    )
    instance = api.create_instance({"character_id": character.id, "background_id": background.id}, database_url=url)
    return character, background, instance


def test_characters_are_created_listed_shown_edited_and_deleted(url: str) -> None:
    character = api.create_character(character_data(), database_url=url)
    assert character.name == "雷娜" and character.avatar_mime == "image/png" and character.avatar_bytes > 0
    assert character.greetings[0] == "{{user}}，你醒了？我是{{char}}。"  # stored as written, replaced when used
    assert [c.id for c in api.list_characters(database_url=url)] == [character.id]
    assert api.character_avatar(character.id, database_url=url) == (png(), "image/png")

    edited = api.edit_character(character.id, {"name": "雷娜·改", "traits": "果断"}, database_url=url)
    assert (edited.name, edited.traits, edited.backstory) == ("雷娜·改", "果断", character.backstory)
    assert edited.updated_at is not None
    gone = api.edit_character(character.id, {"remove_avatar": True}, database_url=url)
    assert gone.avatar_bytes == 0 and gone.avatar_mime is None
    with pytest.raises(NotFound, match=f"character {character.id} has no avatar"):
        api.character_avatar(character.id, database_url=url)

    deleted = api.delete_character(character.id, database_url=url)
    assert deleted.kind == "character" and deleted.instances_deleted == []
    assert api.list_characters(database_url=url) == []


def test_backgrounds_and_instances_are_listed_with_what_the_seed_shows(url: str) -> None:
    character, background, instance = setup(url)
    assert background.outline == OUTLINE and background.instances == []
    assert instance.title == "雷娜 · 废土复仇记"
    assert (instance.character_name, instance.background_name, instance.turns) == ("雷娜", "废土复仇记", 0)
    assert instance.plot is not None and (instance.plot.total, instance.plot.current) == (10, "第1幕")
    second = api.create_instance(
        {"character_id": character.id, "background_id": background.id, "title": "重玩", "greeting": 1},
        database_url=url,
    )
    assert [i.id for i in api.list_instances(database_url=url)] == [second.id, instance.id]
    assert api.get_background(background.id, database_url=url).instances == [instance.id, second.id]
    assert api.get_character(character.id, database_url=url).instances == [instance.id, second.id]

    play(url, instance.id, "我们先去据点看看。")
    shown = api.get_instance(instance.id, database_url=url)
    assert shown.turns == 1 and shown.last_turn_at is not None
    renamed = api.rename_instance(instance.id, "复仇之路", database_url=url)
    assert renamed.title == "复仇之路" and api.get_instance(instance.id, database_url=url).title == "复仇之路"
    # the greeting chosen is the instance's first line, its placeholders replaced
    with session_scope(url) as session:
        first = get_chat_history(session, second.id)
    assert [(line.attribute, line.content) for line in first] == [("assistant", "又见面了。")]


def test_listing_instances_takes_the_same_number_of_queries_for_one_or_many(url: str) -> None:
    """`instance list` reads each thing it shows for every instance at once (grouped), not once per instance,
    and shows for each what `instance show` does."""
    from personalab.stores.background import flush_event_writes
    from sqlalchemy import event

    character, background, first = setup(url)
    other_background = api.create_background(
        {"name": "另一片废土", "world_setting": "雪原。", "outline": ["雪原第一幕", "雪原第二幕"]}, database_url=url
    )
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(str(args[2]))

    def listed() -> tuple[int, list[api.Instance]]:
        flush_event_writes()  # the turns' background writes use the engine too
        statements.clear()
        event.listen(get_engine(url), "before_cursor_execute", count)
        try:
            found = api.list_instances(database_url=url)
        finally:
            event.remove(get_engine(url), "before_cursor_execute", count)
        return len(statements), found

    one, _ = listed()
    others = [
        api.create_instance({"character_id": character.id, "background_id": b.id}, database_url=url)
        for b in (background, other_background, background, other_background)
    ]
    play(url, first.id, "我们先去据点看看。", "继续。")
    play(url, others[1].id, "出发。")
    many, found = listed()
    assert many == one, [s.split("\n")[0][:90] for s in statements]
    assert [item.id for item in found] == [*(o.id for o in reversed(others)), first.id]
    assert found == [api.get_instance(item.id, database_url=url) for item in found]  # the same as one by one
    assert (found[-1].turns, found[2].turns, found[0].turns) == (2, 1, 0)  # first, others[1], others[3]
    assert found[0].background_name == "另一片废土" and found[0].plot is not None and found[-1].last_turn_at


def test_bad_input_names_the_field_or_id_and_changes_nothing(url: str) -> None:
    character, background, instance = setup(url)
    cases: list[tuple[Any, type[Exception], str]] = [
        (lambda: api.create_character({"name": "  "}, database_url=url), InvalidInput, "character.name: is empty"),
        (
            lambda: api.create_character(character_data(avatar=b"GIF89a no"), database_url=url),
            InvalidInput,
            "avatar: not an image",
        ),
        (lambda: api.create_character({"name": "x", "colour": 1}, database_url=url), InvalidInput, "character.colour"),
        (
            lambda: api.create_background({"name": "b", "outline": []}, database_url=url),
            InvalidInput,
            "background.outline: needs 1 to 50 points, got 0",
        ),
        (
            lambda: api.create_background({"name": "b", "outline": ["p"] * 51}, database_url=url),
            InvalidInput,
            "background.outline: needs 1 to 50 points, got 51",
        ),
        (
            lambda: api.edit_background(background.id, {"outline": []}, database_url=url),
            InvalidInput,
            "background.outline",
        ),
        (lambda: api.edit_character(character.id, {"name": ""}, database_url=url), InvalidInput, "character.name"),
        (
            lambda: api.edit_character(character.id, {"avatar": b"\x89PNG broken"}, database_url=url),
            InvalidInput,
            "avatar: not an image",
        ),
        (lambda: api.get_character(9999, database_url=url), NotFound, "character 9999"),
        (lambda: api.edit_background(9999, {"name": "x"}, database_url=url), NotFound, "background 9999"),
        (
            lambda: api.create_instance({"character_id": 9999, "background_id": background.id}, database_url=url),
            NotFound,
            "character 9999",
        ),
        (
            lambda: api.create_instance({"character_id": character.id, "background_id": 9999}, database_url=url),
            NotFound,
            "background 9999",
        ),
        (
            lambda: api.create_instance(
                {"character_id": character.id, "background_id": background.id, "greeting": 5}, database_url=url
            ),
            InvalidInput,
            "instance.greeting",
        ),
        (lambda: api.rename_instance(9999, "x", database_url=url), InstanceNotFound, "instance 9999"),
        (lambda: api.rename_instance(instance.id, " ", database_url=url), InvalidInput, "instance.title"),
        (lambda: api.delete_instance(9999, database_url=url), InstanceNotFound, "instance 9999"),
        (lambda: api.delete_character(character.id, database_url=url), api.InUse, f"instance\\(s\\) {instance.id}"),
        (lambda: api.delete_background(background.id, database_url=url), api.InUse, f"instance\\(s\\) {instance.id}"),
    ]
    before = snapshot(url)
    for call, kind, words in cases:
        with pytest.raises(kind, match=words):
            call()
    assert snapshot(url) == before


def snapshot(url: str) -> Any:
    return (
        [c.model_dump() for c in api.list_characters(database_url=url)],
        [b.model_dump() for b in api.list_backgrounds(database_url=url)],
        [i.model_dump() for i in api.list_instances(database_url=url)],
    )


def test_every_character_field_reaches_the_model_in_its_region(url: str) -> None:
    character, _background, instance = setup(url)
    [state] = play(url, instance.id, "你好")
    regions: dict[str, list[str]] = {}
    for message in state["prompt"]:
        regions.setdefault(message["region"], []).append(message["content"])
    head, middle, tail = "\n".join(regions["head"]), "\n".join(regions["middle"]), regions["tail"]
    assert "雷娜说话简短，从不解释自己。" in head  # system prompt, {{char}} replaced
    assert "表面冷酷，内心重情义" in head and "性格特征：冷静，寡言、枪法精准" in head and "核心动机：复仇" in head
    assert "背景故事：前帮派二把手，在背叛之夜救下了用户" in head  # {{user}} replaced, nothing cut at 200 characters
    assert "废土上的雷娜，用户的旧部" in head  # the description
    assert "用户：你是谁？\n雷娜：一个还欠你命的人。" in middle  # example dialogue
    assert "用户，你醒了？我是雷娜。" in middle  # the greeting opens the dialogue
    # the turn's state first (issue 30: after the stable head), then post-history, then the input
    assert tail[0].startswith("【当前轮次】第1轮")
    assert tail[-2].endswith("回复不超过80字，保持雷娜的语气。") and tail[-1] == "你好"
    assert [m["content"] for m in state["prompt"] if "{{" in m["content"]] == []
    # the core memory is seeded from the persona
    core = state["core_memory"]
    assert core["traits"] == ["冷静", "寡言", "枪法精准"] and core["goals"] == ["复仇", "守护旧部"]
    assert core["identity"].startswith("前帮派二把手")
    assert api.initial_core_memory_of(instance.id, database_url=url)["traits"] == core["traits"]


def test_a_long_definition_is_sent_whole_and_what_the_budget_drops_is_named(sqlite_url: str) -> None:
    url = sqlite_url
    backstory = "她在废土上长大。" * 100  # 800 characters: once cut to 200
    # the head keeps what it needs while head and tail use at most half the window (issue 30): a description of
    # 200,000 characters is past that at the default 128k window
    character = api.create_character(
        {"name": "雷娜", "backstory": backstory, "description": "描述" * 100000, "example_dialogue": "例" * 60000},
        database_url=url,
    )
    background = api.create_background({"name": "b", "outline": ["p"]}, database_url=url)
    instance = api.create_instance({"character_id": character.id, "background_id": background.id}, database_url=url)
    [state] = play(url, instance.id, "你好")
    head = state["prompt"][0]["content"]
    assert backstory in head and "描述描述" not in head
    dropped = state["debug"]["prompt"]
    assert [item["item"] for item in dropped["head"]["dropped"]] == ["character description"]
    assert [item["item"] for item in dropped["middle"]["dropped"]] == ["example dialogue"]


def _stored_everywhere(url: str, instance_id: int, role_id: int, background_id: int) -> dict[str, Any]:
    with session_scope(url) as session:
        rows = {name: count for name, count in store.instance_row_counts(session, instance_id).items() if count}
    vectors = {}
    for name in store.instance_vector_collections(instance_id):
        count = len(get_collection(name)._collection.get(include=[])["ids"])
        if count:
            vectors[name] = count
    events = get_collection(story_collection(role_id, background_id))._collection.get(
        where={"instance_id": instance_id}, include=[]
    )["ids"]
    return {
        "rows": rows,
        "vectors": vectors,
        "events": len(events),
        "checkpoints": store.has_checkpoints(instance_id, url),
    }


def test_a_deleted_instance_leaves_nothing_in_any_store(url: str) -> None:
    character, background, instance = setup(url)
    other = api.create_instance({"character_id": character.id, "background_id": background.id}, database_url=url)
    play(url, instance.id, "我们先去据点看看。", "那个叛徒叫什么？")
    play(url, other.id, "另一条路。")
    with session_scope(url) as session:
        add_worldbook_entry(session, "据点在北边", scope=Scope(save_id=instance.id), keywords=["据点"])
        add_knowledge(session, "地点", "北方据点", scope=Scope(save_id=instance.id))
    present = _stored_everywhere(url, instance.id, character.id, background.id)
    for table in ("line", "story_state", "turn_record", "memory_entry", "worldbook_entry", "knowledge_entry"):
        assert present["rows"].get(table), (table, present)
    assert present["vectors"] and present["events"] == 2 and present["checkpoints"]

    deleted = api.delete_instance(instance.id, database_url=url)
    assert deleted.rows_deleted["line"] == present["rows"]["line"]
    assert _stored_everywhere(url, instance.id, character.id, background.id) == {
        "rows": {},
        "vectors": {},
        "events": 0,
        "checkpoints": False,
    }
    # every table with an instance column was asked: the list is the schema's, not a hand-kept one
    with session_scope(url) as session:
        asked = set(store.instance_row_counts(session, instance.id))
    assert {"line", "play_session", "memory_entry", "story_state", "turn_record", "worldbook_suggestion"} <= asked
    # the other instance is untouched and plays on
    assert _stored_everywhere(url, other.id, character.id, background.id)["events"] == 1
    play(url, other.id, "继续。")
    # a cascade delete of the character takes its remaining instance with it
    result = api.delete_character(character.id, cascade=True, database_url=url)
    assert result.instances_deleted == [other.id]
    assert _stored_everywhere(url, other.id, character.id, background.id)["rows"] == {}
    assert api.delete_background(background.id, database_url=url).instances_deleted == []


def _without_ids(document: dict[str, Any]) -> dict[str, Any]:
    """The export with what a new copy may renumber left out: ids and the columns that hold them."""

    def clean(row: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in row.items() if k != "id" and not k.endswith("_id") and k != "last_message_id"}

    return {
        "instance": clean(document["instance"]),
        "tables": {name: [clean(row) for row in rows] for name, rows in document["tables"].items()},
        "events": [(e["text"], e["metadata"]["turn"]) for e in document["events"]],
    }


def test_an_exported_instance_imports_back_the_same(url: str, tmp_path: Path) -> None:
    character, background, instance = setup(url)
    play(url, instance.id, "我们先去据点看看。", "那个叛徒叫什么？")
    path = api.export_instance(instance.id, tmp_path / "instance.json", database_url=url)
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["format"] == "personalab-instance" and document["character"]["name"] == "雷娜"
    with pytest.raises(InvalidInput, match="exists"):
        api.export_instance(instance.id, path, database_url=url)

    result = api.import_instance(path, database_url=url)
    copy = result.instance
    assert copy.id != instance.id and not result.character_created and not result.background_created
    assert (copy.title, copy.turns, copy.character_id) == (instance.title, 2, character.id)
    again = api.export_instance_data(copy.id, database_url=url)
    assert _without_ids(again) == _without_ids(document)
    # the dialogue tree is the same shape: the same lines from root to leaf
    with session_scope(url) as session:
        original = [(line.attribute, line.content) for line in get_chat_history(session, instance.id)]
        copied = [(line.attribute, line.content) for line in get_chat_history(session, copy.id)]
    assert copied == original and len(original) >= 5
    # and it plays on from where it was
    [state] = play(url, copy.id, "继续。")
    assert state["turn"] == 3 and not state.get("error")

    # into an empty database the character and background come along
    api.delete_character(character.id, cascade=True, database_url=url)
    api.delete_background(background.id, database_url=url)
    fresh = api.import_instance(path, database_url=url)
    assert fresh.character_created and fresh.background_created
    assert _without_ids(api.export_instance_data(fresh.instance.id, database_url=url)) == _without_ids(document)
    assert api.get_character(fresh.instance.character_id or 0, database_url=url).avatar_bytes == len(png())


def test_an_imported_instance_has_its_own_sessions_turn_records_and_branch_events(url: str) -> None:
    """Two sittings and a regenerated turn: the copy's turn records name the copy's sessions (one each, as in
    the original), and each archived event keeps its reply's line, mapped to the copy's lines."""
    from personalab.graph.api import dialogue
    from personalab.stores.tables import PlaySession
    from personalab.stores.turn_tables import TurnRecord
    from sqlmodel import col, select

    _character, _background, instance = setup(url)
    play(url, instance.id, "我们先去据点看看。")
    dialogue.new_session(instance.id, database_url=url)
    play(url, instance.id, "那个叛徒叫什么？")
    dialogue.regenerate(instance.id, context=Context(database_url=url))  # a second event for turn 2
    document = api.export_instance_data(instance.id, database_url=url)
    copy = api.import_instance_data(document, database_url=url).instance

    def sittings(instance_id: int) -> tuple[list[int], list[tuple[int, int | None]]]:
        with session_scope(url) as session:
            plays = session.exec(select(PlaySession.id).where(col(PlaySession.save_id) == instance_id)).all()
            records = session.exec(
                select(TurnRecord.turn, TurnRecord.session_id)
                .where(col(TurnRecord.save_id) == instance_id)
                .order_by(col(TurnRecord.id))
            ).all()
        return [int(p) for p in plays if p is not None], [(int(t), s) for t, s in records]

    old_sessions, old_records = sittings(instance.id)
    new_sessions, new_records = sittings(copy.id)
    assert len(old_sessions) == len(new_sessions) == 2 and not set(old_sessions) & set(new_sessions)
    back = dict(zip(old_sessions, new_sessions, strict=True))
    assert new_records == [(turn, back[session]) for turn, session in old_records]
    assert [item["turns"] for item in dialogue.sessions(copy.id, database_url=url)] == [1, 2]

    copied = api.export_instance_data(copy.id, database_url=url)
    lines = {row["id"] for row in copied["tables"]["line"]}
    events = [event["metadata"] for event in copied["events"]]
    assert len(events) == 3 and all(event["line_id"] in lines for event in events)
    assert len({event["line_id"] for event in events}) == 3  # the two turn-2 events stay apart


def test_a_bad_import_file_is_one_error_and_stores_nothing(url: str, tmp_path: Path) -> None:
    _character, _background, instance = setup(url)
    document = api.export_instance_data(instance.id, database_url=url)
    before = snapshot(url)
    for change, words in (
        ({"format": "other"}, "file.format"),
        ({"tables": {"nonsense": []}}, "unknown table"),
        ({"tables": {"line": [{"id": 1, "content": "x", "colour": 2}]}}, "unknown column"),
    ):
        with pytest.raises(InvalidInput, match=words):
            api.import_instance_data({**document, **change}, database_url=url)
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(InvalidInput, match="not valid JSON"):
        api.import_instance(bad, database_url=url)
    assert snapshot(url) == before


def test_editing_a_background_keeps_running_plots_unless_asked(url: str) -> None:
    _character, background, instance = setup(url)
    play(url, instance.id, "出发。")
    new_outline = ["新的开端", *OUTLINE[1:5]]
    api.edit_background(background.id, {"outline": new_outline}, database_url=url)
    assert api.get_background(background.id, database_url=url).outline == new_outline
    [state] = play(url, instance.id, "继续。")
    assert [p["content"] for p in state["plot_state"]["story_outline"]] == OUTLINE  # the running story keeps its own

    api.edit_background(background.id, {"outline": new_outline, "apply_to_instances": True}, database_url=url)
    shown = api.get_instance(instance.id, database_url=url)
    assert shown.plot is not None and shown.plot.total == 5
    assert shown.plot.current == new_outline[shown.plot.current_index - 1]  # the point it was at, kept by index
    [state] = play(url, instance.id, "再继续。")
    assert [p["content"] for p in state["plot_state"]["story_outline"]] == new_outline


def test_a_database_made_before_the_new_columns_gains_them(sqlite_url: str) -> None:
    from personalab.stores.db import dispose_engines

    engine = get_engine(sqlite_url)
    with engine.begin() as conn:  # the role table as the version before issue 13 made it
        conn.execute(text("DROP TABLE role"))
        conn.execute(
            text(
                "CREATE TABLE role (id INTEGER PRIMARY KEY, name VARCHAR NOT NULL, description VARCHAR "
                "NOT NULL, avatar VARCHAR, persona VARCHAR NOT NULL, created_at DATETIME NOT NULL)"
            )
        )
        conn.execute(text("INSERT INTO role VALUES (1, '旧角色', '', NULL, '老设定', '2025-01-01 00:00:00')"))
    dispose_engines()
    [old] = api.list_characters(database_url=sqlite_url)
    assert (old.name, old.persona, old.traits, old.greetings) == ("旧角色", "老设定", "", [])
    edited = api.edit_character(1, {"traits": "沉稳"}, database_url=sqlite_url)
    assert edited.traits == "沉稳"


def test_a_characters_own_entries_go_with_it_and_lines_of_other_instances_keep_their_text(url: str) -> None:
    from personalab.stores.saves import append_lines
    from personalab.stores.worldbook_tables import KnowledgeEntryRow, WorldbookEntryRow
    from sqlmodel import select

    character, background, instance = setup(url)
    guest = api.create_character({"name": "守卫"}, database_url=url)
    with session_scope(url) as session:
        add_worldbook_entry(session, "守卫的口头禅", scope=Scope(role_id=guest.id), keywords=["守卫"])
        add_knowledge(session, "人物", "守卫守着北门", scope=Scope(role_id=guest.id))
        append_lines(
            session,
            instance.id,
            [{"attribute": "assistant", "content": "站住！", "role_id": guest.id, "display_name": "守卫"}],
        )
    deleted = api.delete_character(guest.id, database_url=url)
    assert deleted.rows_deleted == {"worldbook_entry": 1, "knowledge_entry": 1}
    with session_scope(url) as session:
        for model in (WorldbookEntryRow, KnowledgeEntryRow):
            assert session.exec(select(model).where(model.role_id == guest.id)).all() == []
        last = get_chat_history(session, instance.id)[-1]
    assert (last.content, last.display_name, last.role_id) == ("站住！", "守卫", None)


def test_an_instance_is_not_deleted_while_a_turn_runs_on_it(url: str) -> None:
    from personalab.nodes.rules.errors import InstanceBusy
    from personalab.stores.turns import acquire_turn_lock, release_turn_lock

    _character, _background, instance = setup(url)
    token = acquire_turn_lock(instance.id, 60, url)
    try:
        with pytest.raises(InstanceBusy, match=f"instance {instance.id} is busy"):
            api.delete_instance(instance.id, database_url=url)
    finally:
        release_turn_lock(instance.id, token, url)
    assert api.get_instance(instance.id, database_url=url).id == instance.id
    api.delete_instance(instance.id, database_url=url)


def test_the_prompt_places_the_character_fields_by_region_and_names_what_it_drops() -> None:
    from personalab.nodes.rules.character import definition_parts, substitute
    from personalab.nodes.rules.plot import new_plot_state
    from personalab.nodes.rules.prompt_assembly import RegionBudgets, assemble_prompt

    assert substitute("{{char}}见到{{ User }}", "雷娜", None) == "雷娜见到用户"
    parts = definition_parts({"system_prompt": "只说中文", "persona": "冷静", "description": "描述" * 3000})
    assert [name for name, _ in parts] == ["system_prompt", "persona", "description"]
    prompt = assemble_prompt(
        system_instruction="扮演雷娜",
        character_parts=parts,
        example_dialogue="示例" * 50,
        post_history="回复要短",
        core_memory={},
        plot_state=new_plot_state(["开始"]),
        relationship=None,
        world_setting="废土",
        recent_messages=[{"role": "user", "content": "在吗"}, {"role": "assistant", "content": "在"}],
        retrieved_blocks=[],
        user_input="走吧",
        budgets=RegionBudgets(head=1000, middle=60),
    )
    head = prompt.messages[0]["content"]
    assert "只说中文" in head and "冷静" in head and "描述描述" not in head
    assert [d["item"] for d in prompt.debug["head"]["dropped"]] == ["character description"]
    assert [d["item"] for d in prompt.debug["middle"]["dropped"]] == ["example dialogue"]
    assert [m["content"] for m in prompt.messages[-2:]] == ["回复要短", "走吧"]
    assert prompt.regions[-2:] == ["tail", "tail"]


def test_list_and_show_report_the_current_branchs_story_after_a_rewind_or_swipe(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seed 000 + 002: after a rewind the instance is listed and shown as its story stands at the branch point
    (turns, plot progress, last turn time), as `dialogue.story_state` says; a swipe back shows the later branch
    again. The same from the Python API, the CLI's `--json` and the HTTP routes."""
    from cli_helpers import cli
    from fastapi.testclient import TestClient
    from personalab.graph.api import dialogue
    from personalab.graph.http.app import app

    monkeypatch.setenv("PERSONALAB_DATABASE_URL", url)  # the CLI and the routes read the test's database
    _character, _background, instance = setup(url)
    first, second = play(url, instance.id, "我们先去据点看看。", "继续。")  # point 1: in progress, then completed
    client = TestClient(app)

    def views() -> list[dict[str, Any]]:
        code, out, err = cli(capsys, "instance", "show", str(instance.id), "--json")
        assert code == 0, err
        shown = json.loads(out)
        code, out, err = cli(capsys, "instance", "list", "--json")
        assert code == 0, err
        [listed] = [item for item in json.loads(out) if item["id"] == instance.id]
        over_http = client.get(f"/instances/{instance.id}").json()
        [http_listed] = [item for item in client.get("/instances").json() if item["id"] == instance.id]
        api_shown = api.get_instance(instance.id, database_url=url).model_dump(mode="json")
        [api_listed] = [i.model_dump(mode="json") for i in api.list_instances(database_url=url) if i.id == instance.id]
        return [shown, listed, over_http, http_listed, api_shown, api_listed]

    def agree(expected_turns: int, completed: int) -> dict[str, Any]:
        branch = dialogue.story_state(instance.id, database_url=url)
        found = views()
        assert all(view == found[0] for view in found), found
        view = found[0]
        assert view["turns"] == branch["turn"] == expected_turns
        assert view["plot"]["completed"] == completed
        plot = branch["story_state"]["plot_state"]
        assert view["plot"]["completed"] == sum(p["status"] == "completed" for p in plot["story_outline"])
        assert view["plot"]["current_index"] == plot["current_plot_index"]
        return view

    latest = agree(2, 1)
    dialogue.rewind(instance.id, first["debug"]["reply_line_ids"][-1], database_url=url)
    rewound = agree(1, 0)
    assert rewound["last_turn_at"] < latest["last_turn_at"]  # the time of the branch's last turn, turn 1
    assert dialogue.story_state(instance.id, database_url=url)["story_state_id"] is not None

    # a new turn on the rewound branch, then a swipe back to the first branch: its story again
    (other,) = play(url, instance.id, "改去河边。")
    assert agree(2, 1)["last_turn_at"] > latest["last_turn_at"]
    dialogue.swipe(instance.id, second["user_line_id"], database_url=url)
    assert agree(2, 1) == latest
    dialogue.swipe(instance.id, other["user_line_id"], database_url=url)
    assert agree(2, 1)["last_turn_at"] > latest["last_turn_at"]

    # rewound to the greeting, before any reply: the story as it was created
    greeting = dialogue.history(instance.id, database_url=url)["lines"][0]["id"]
    dialogue.rewind(instance.id, greeting, database_url=url)
    fresh = views()[0]
    assert (fresh["turns"], fresh["last_turn_at"], fresh["plot"]["completed"]) == (0, None, 0)
    assert dialogue.story_state(instance.id, database_url=url)["turn"] == 0


def test_a_new_outline_applied_to_instances_goes_to_their_current_branch(url: str) -> None:
    from personalab.graph.api import dialogue

    _character, background, instance = setup(url)
    first, second = play(url, instance.id, "出发。", "继续。")
    dialogue.rewind(instance.id, first["debug"]["reply_line_ids"][-1], database_url=url)
    api.edit_background(background.id, {"outline": ["新一", "新二"], "apply_to_instances": True}, database_url=url)
    shown = api.get_instance(instance.id, database_url=url)
    assert shown.plot is not None and (shown.plot.total, shown.turns) == (2, 1)
    (again,) = play(url, instance.id, "改道。")
    assert [p["content"] for p in again["plot_state"]["story_outline"]] == ["新一", "新二"]
    dialogue.swipe(instance.id, second["user_line_id"], database_url=url)  # the branch left keeps its outline
    shown = api.get_instance(instance.id, database_url=url)
    assert shown.plot is not None and (shown.plot.total, shown.turns) == (10, 2)
