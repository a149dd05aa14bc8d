"""The dialogue-tree store: recursive history fetch and appends, on SQLite and PostgreSQL."""

from __future__ import annotations

import random
from typing import Any

import personalab.stores.history as history_store
import pytest
from personalab.nodes.history_fetch import read_recall_window
from personalab.nodes.rules.errors import InstanceNotFound
from personalab.nodes.rules.memory_builder import recall_window
from personalab.stores.db import get_engine, session_scope
from personalab.stores.history import (
    EXTEND_STEPS,
    ForeignParentError,
    HistoryCycleError,
    LineNotInSaveError,
    MissingParentError,
    get_chat_history,
    get_lines,
    get_path_ids,
    get_path_to_line,
)
from personalab.stores.saves import append_lines, create_background, create_role, create_save
from personalab.stores.tables import Line, Save
from sqlalchemy import text
from sqlmodel import Session, select


def new_save(url: str) -> int:
    with session_scope(url) as s:
        role = create_role(s, "钦灵")
        bg = create_background(s, "圣诞节", "冬日", ["相遇", "换衣服"])
        return create_save(s, role.id, bg.id).id  # type: ignore[return-value]


def say(n: int) -> list[dict[str, str]]:
    return [{"attribute": "user" if i % 2 == 0 else "assistant", "content": f"第{i}句"} for i in range(n)]


def contents(lines: list[Line]) -> list[str]:
    return [line.content for line in lines]


def test_history_is_root_to_last_message(db_url: str) -> None:
    save_id = new_save(db_url)
    with session_scope(db_url) as s:
        append_lines(s, save_id, say(5))
    with session_scope(db_url) as s:
        assert contents(get_chat_history(s, save_id)) == [f"第{i}句" for i in range(5)]


def test_history_reads_only_the_current_branch(db_url: str) -> None:
    """A regenerated reply is a sibling; only the branch ending at last_message_id is history."""
    save_id = new_save(db_url)
    with session_scope(db_url) as s:
        first = append_lines(s, save_id, say(3))
        old_reply = append_lines(s, save_id, [{"attribute": "assistant", "content": "旧回复"}])[0]
        new_reply = append_lines(
            s, save_id, [{"attribute": "assistant", "content": "新回复"}], parent_line_id=first[-1].id
        )[0]
    with session_scope(db_url) as s:
        assert contents(get_chat_history(s, save_id)) == ["第0句", "第1句", "第2句", "新回复"]
        assert contents(get_path_to_line(s, save_id, old_reply.id))[-1] == "旧回复"  # type: ignore[arg-type]
        assert s.get(Save, save_id).last_message_id == new_reply.id  # type: ignore[union-attr]


def test_history_of_a_save_without_lines_is_empty(db_url: str) -> None:
    save_id = new_save(db_url)
    with session_scope(db_url) as s:
        assert get_chat_history(s, save_id) == []


def test_unknown_save_raises(db_url: str) -> None:
    with session_scope(db_url) as s, pytest.raises(InstanceNotFound, match="instance 999"):
        get_chat_history(s, 999)


def test_last_message_in_another_save_raises(db_url: str) -> None:
    a, b = new_save(db_url), new_save(db_url)
    with session_scope(db_url) as s:
        foreign = append_lines(s, b, say(2))[-1]
        save = s.get(Save, a)
        save.last_message_id = foreign.id  # type: ignore[union-attr]
    with session_scope(db_url) as s, pytest.raises(LineNotInSaveError, match=f"belongs to save {b}"):
        get_chat_history(s, a)


def test_last_message_that_does_not_exist_raises(db_url: str) -> None:
    save_id = new_save(db_url)
    with session_scope(db_url) as s:
        s.get(Save, save_id).last_message_id = 123456  # type: ignore[union-attr]
    with session_scope(db_url) as s, pytest.raises(LineNotInSaveError, match="line 123456 does not exist"):
        get_chat_history(s, save_id)


def test_parent_in_another_save_raises(db_url: str) -> None:
    a, b = new_save(db_url), new_save(db_url)
    with session_scope(db_url) as s:
        foreign = append_lines(s, b, say(1))[0]
        mine = append_lines(s, a, say(2))
        mine[0].parent_line_id = foreign.id
        s.add(mine[0])
    with session_scope(db_url) as s, pytest.raises(ForeignParentError, match=f"in save {b}"):
        get_chat_history(s, a)


def test_cycle_raises_in_bounded_time(db_url: str) -> None:
    save_id = new_save(db_url)
    with session_scope(db_url) as s:
        lines = append_lines(s, save_id, say(4))
        lines[0].parent_line_id = lines[2].id  # 0 → 2 → 1 → 0 …
        s.add(lines[0])
    with session_scope(db_url) as s, pytest.raises(HistoryCycleError, match="loops"):
        get_chat_history(s, save_id)


def test_missing_parent_raises_on_sqlite(sqlite_url: str) -> None:
    """SQLite databases written without foreign keys can hold a dangling parent id."""
    save_id = new_save(sqlite_url)
    with session_scope(sqlite_url) as s:
        last = append_lines(s, save_id, say(2))[-1]
    with get_engine(sqlite_url).connect() as conn:
        conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
        conn.execute(text("UPDATE line SET parent_line_id = 999 WHERE id = :id"), {"id": last.id - 1})
        conn.commit()
    for read in (get_chat_history, get_path_ids):
        with session_scope(sqlite_url) as s, pytest.raises(MissingParentError, match="parent 999"):
            read(s, save_id)


def test_missing_parent_is_refused_at_write_time(db_url: str) -> None:
    save_id = new_save(db_url)
    with session_scope(db_url) as s, pytest.raises(ValueError, match="parent line 999"):
        append_lines(s, save_id, say(1), parent_line_id=999)


def test_append_validates_everything_before_writing(db_url: str) -> None:
    save_id = new_save(db_url)
    with session_scope(db_url) as s:
        append_lines(s, save_id, say(2))
    bad = [{"attribute": "user", "content": "好"}, {"attribute": "narrator", "content": "坏"}]
    with pytest.raises(ValueError, match="line 2 of 2: attribute 'narrator'"), session_scope(db_url) as s:
        append_lines(s, save_id, bad)
    with pytest.raises(ValueError, match="line 1 of 1: no content"), session_scope(db_url) as s:
        append_lines(s, save_id, [{"attribute": "user", "content": " "}])
    with pytest.raises(ValueError, match="unknown field"), session_scope(db_url) as s:
        append_lines(s, save_id, [{"attribute": "user", "content": "x", "mood": "?"}])
    with Session(get_engine(db_url)) as s:
        assert len(s.exec(select(Line)).all()) == 2
        assert contents(get_chat_history(s, save_id)) == ["第0句", "第1句"]


def test_failure_after_append_rolls_the_whole_append_back(db_url: str) -> None:
    save_id = new_save(db_url)
    with pytest.raises(RuntimeError), session_scope(db_url) as s:
        append_lines(s, save_id, say(3))
        raise RuntimeError("generation failed")
    with session_scope(db_url) as s:
        assert get_chat_history(s, save_id) == []
        assert s.exec(select(Line)).all() == []


def test_append_to_unknown_instance_raises(db_url: str) -> None:
    with pytest.raises(InstanceNotFound, match="instance 77"), session_scope(db_url) as s:
        append_lines(s, 77, say(1))


def test_history_query_reads_only_the_path(sqlite_url: str) -> None:
    """One recursive statement, whose rows are the path's lines, not the save's other lines."""
    from sqlalchemy import event

    save_id = new_save(sqlite_url)
    with session_scope(sqlite_url) as s:
        trunk = append_lines(s, save_id, say(3))
        for i in range(50):  # many swipes under the first line
            append_lines(s, save_id, [{"attribute": "assistant", "content": f"swipe{i}"}], parent_line_id=trunk[0].id)
        s.get(Save, save_id).last_message_id = trunk[-1].id  # type: ignore[union-attr]
    statements: list[str] = []
    engine = get_engine(sqlite_url)
    listener = lambda *a: statements.append(a[2])  # noqa: E731
    event.listen(engine, "before_cursor_execute", listener)
    try:
        with Session(engine) as s:
            history = get_chat_history(s, save_id)
    finally:
        event.remove(engine, "before_cursor_execute", listener)
    assert contents(history) == ["第0句", "第1句", "第2句"]
    recursive = [st for st in statements if "RECURSIVE" in st.upper()]
    assert len(recursive) == 1


def test_path_ids_and_lines_are_the_path_as_plain_dicts(db_url: str) -> None:
    save_id = new_save(db_url)
    with session_scope(db_url) as s:
        append_lines(s, save_id, say(4))
    with session_scope(db_url) as s:
        path = get_path_ids(s, save_id)
        # every column but the line's time (issue 26: `line_times` reads it)
        assert get_lines(s, path) == [line.model_dump(exclude={"created_at"}) for line in get_chat_history(s, save_id)]


@pytest.mark.parametrize("read", [get_chat_history, get_path_ids])
def test_every_path_reader_checks_the_tree(db_url: str, read: Any) -> None:
    save_id = new_save(db_url)
    with session_scope(db_url) as s:
        lines = append_lines(s, save_id, say(3))
        lines[0].parent_line_id = lines[2].id
        s.add(lines[0])
    with session_scope(db_url) as s, pytest.raises(HistoryCycleError):
        read(s, save_id)
    with session_scope(db_url) as s, pytest.raises(InstanceNotFound):
        read(s, 4242)


def test_the_recall_window_is_found_reading_only_the_ends_of_a_long_path(db_url: str) -> None:
    """A long preamble (no clean point among the first lines read) makes the reader look further, and the
    window is the one the whole path gives."""
    save_id = new_save(db_url)
    me = {"attribute": "assistant", "role_id": None, "display_name": "钦灵"}
    opening = [{"attribute": "system", "content": f"设定{n}"} for n in range(40)] + [{**me, "content": "你好。"}]
    played = [
        line for n in range(60) for line in ({"attribute": "user", "content": f"问{n}"}, {**me, "content": f"答{n}"})
    ]
    with session_scope(db_url) as s:
        append_lines(s, save_id, opening + played)
    with session_scope(db_url) as s:
        path = get_path_ids(s, save_id)
        whole = get_lines(s, path)
        window, lines = read_recall_window(s, path, 5, None, "钦灵")
        assert window == recall_window(whole, 5, display_name="钦灵") == (41, 151)
        assert lines == get_lines(s, path[:41] + path[151:])


def test_get_lines_reads_whole_lines_in_the_order_asked(db_url: str) -> None:
    save_id = new_save(db_url)
    with session_scope(db_url) as s:
        append_lines(s, save_id, say(1000))  # more ids than one statement may bind on SQLite
    with session_scope(db_url) as s:
        whole = [line.model_dump(exclude={"created_at"}) for line in get_chat_history(s, save_id)]  # `line_times`
        wanted = [row["id"] for row in whole[::-1]]
        assert get_lines(s, wanted) == whole[::-1]
        assert get_lines(s, []) == []
        some = [{"id": row["id"], "attribute": row["attribute"]} for row in whole[::-1][:3]]
        assert get_lines(s, wanted[:3], ["id", "attribute"]) == some
        with pytest.raises(ValueError, match="first column must be id"):
            get_lines(s, wanted[:3], ["attribute"])
        with pytest.raises(LookupError, match="line 987654 does not exist"):
            get_lines(s, [wanted[0], 987654])


def whole_walk(url: str, save_id: int) -> list[int]:
    """The path as the uncached recursive query reads it."""
    with session_scope(url) as s:
        return [line.id for line in get_chat_history(s, save_id)]  # type: ignore[misc]


def path_ids(url: str, save_id: int) -> list[int]:
    with session_scope(url) as s:
        return get_path_ids(s, save_id)


def test_kept_paths_follow_every_change_of_the_tree(db_url: str) -> None:
    """Appends at the leaf (short and longer than the short walk), branches from any line, the leaf moved
    back: the path `get_path_ids` joins from its kept path is always the one the whole walk reads."""
    rng = random.Random(5)
    save_id = new_save(db_url)
    with session_scope(db_url) as s:
        lines = [line.id for line in append_lines(s, save_id, say(150))]
    assert path_ids(db_url, save_id) == whole_walk(db_url, save_id)
    for step in range(40):
        action = rng.choice(["append", "append", "long append", "branch", "move leaf"])
        with session_scope(db_url) as s:
            if action == "move leaf":
                save = s.get(Save, save_id)
                save.last_message_id = rng.choice(lines)  # type: ignore[union-attr]
                s.add(save)
            else:
                count = rng.randint(EXTEND_STEPS, 2 * EXTEND_STEPS) if action == "long append" else rng.randint(1, 4)
                parent = rng.choice(lines) if action == "branch" else None
                written = append_lines(s, save_id, say(count), parent_line_id=parent)
                lines += [line.id for line in written]  # type: ignore[misc]
        assert path_ids(db_url, save_id) == whole_walk(db_url, save_id), f"step {step}: {action}"


def test_a_turn_walks_only_the_new_end_of_a_long_path(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    save_id = new_save(db_url)
    with session_scope(db_url) as s:
        append_lines(s, save_id, say(500))
    path_ids(db_url, save_id)  # the first read of the process walks the whole path
    walks: list[Any] = []
    real_walk = history_store._walk
    monkeypatch.setattr(
        history_store, "_walk", lambda s, statement, params: walks.append(statement) or real_walk(s, statement, params)
    )
    with session_scope(db_url) as s:
        append_lines(s, save_id, say(3))
    assert path_ids(db_url, save_id) == whole_walk(db_url, save_id)
    assert walks == [history_store._ID_STEPS]


@pytest.mark.parametrize("ending", ["error", "rollback, then a commit of the same session"])
def test_a_path_read_in_a_rolled_back_transaction_is_not_kept(db_url: str, ending: str) -> None:
    """A turn that read its path and then rolled back read lines that were never stored; on SQLite the next
    lines get their ids back, here under another parent, and the walk of the next read meets one of them."""
    save_id = new_save(db_url)
    with session_scope(db_url) as s:
        base = [line.id for line in append_lines(s, save_id, say(200))]
    path_ids(db_url, save_id)
    if ending == "error":
        with pytest.raises(RuntimeError), session_scope(db_url) as s:
            append_lines(s, save_id, say(3))
            get_path_ids(s, save_id)
            raise RuntimeError("the turn failed")
    else:
        with Session(get_engine(db_url)) as s:
            append_lines(s, save_id, say(3))
            get_path_ids(s, save_id)
            s.rollback()
            s.commit()
    with session_scope(db_url) as s:  # a branch from line 100, then more lines than the short walk covers
        append_lines(s, save_id, say(3), parent_line_id=base[99])
        append_lines(s, save_id, say(EXTEND_STEPS + 1))
    assert path_ids(db_url, save_id) == whole_walk(db_url, save_id)
    assert len(path_ids(db_url, save_id)) == 100 + 3 + EXTEND_STEPS + 1


@pytest.mark.parametrize("problem", ["foreign parent", "loop"])
def test_a_bad_parent_near_the_leaf_is_reported_with_a_kept_path(db_url: str, problem: str) -> None:
    a, b = new_save(db_url), new_save(db_url)
    with session_scope(db_url) as s:
        old = [line.id for line in append_lines(s, a, say(100))]
        other = append_lines(s, b, say(2))
    path_ids(db_url, a)
    with session_scope(db_url) as s:
        new = append_lines(s, a, say(10))
        if problem == "foreign parent":
            new[0].parent_line_id = other[-1].id
            s.add(new[0])
        else:  # an old line, within the short walk, now hangs below a new one
            loop = s.get(Line, old[-5])
            loop.parent_line_id = new[5].id  # type: ignore[union-attr]
            s.add(loop)
    expected = ForeignParentError if problem == "foreign parent" else HistoryCycleError
    with session_scope(db_url) as s, pytest.raises(expected):
        get_path_ids(s, a)


def test_lines_on_current_branches_answer_for_several_instances_in_one_query(db_url: str) -> None:
    """`lines_on_current_branches` (the director's reference layer) and `line_parents` (the event-log summaries)
    agree with the paths one instance at a time, in one statement each; unknown instances and foreign lines are
    on no branch; parents that loop end the walk."""
    from sqlalchemy import event

    first, second, empty = new_save(db_url), new_save(db_url), new_save(db_url)
    with session_scope(db_url) as s:
        trunk = append_lines(s, first, say(4))
        left = append_lines(s, first, say(2))  # a branch the instance leaves
        right = append_lines(s, first, say(3), parent_line_id=trunk[1].id)
        other = append_lines(s, second, say(5))
    ids = lambda lines: {line.id for line in lines}  # noqa: E731
    wanted = {first: ids(trunk) | ids(left) | ids(right), second: ids(other) | ids(left), empty: {1}, 424242: {1}}
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(str(args[2]))

    event.listen(get_engine(db_url), "before_cursor_execute", count)
    try:
        with session_scope(db_url) as s:
            found = history_store.lines_on_current_branches(s, wanted)  # type: ignore[arg-type]
    finally:
        event.remove(get_engine(db_url), "before_cursor_execute", count)
    assert len([sql for sql in statements if "current_branches" in sql]) == 1
    with session_scope(db_url) as s:
        expected = {save: set(get_path_ids(s, save)) & lines for save, lines in wanted.items() if save != 424242}
    assert found == {save: lines for save, lines in expected.items() if lines}
    assert found[first] == ids(trunk[:2]) | ids(right)
    with session_scope(db_url) as s:
        parents = history_store.line_parents(s, first, [left[-1].id, right[-1].id, other[0].id])
    assert set(parents) == ids(trunk) | ids(left) | ids(right)  # the two paths, their shared part once
    assert parents[right[0].id] == trunk[1].id and parents[trunk[0].id] is None and other[0].id not in parents

    with session_scope(db_url) as s:  # a loop (possible when written outside PersonaLab)
        s.exec(text("UPDATE line SET parent_line_id = :b WHERE id = :a").bindparams(a=trunk[0].id, b=trunk[1].id))
    with session_scope(db_url) as s:
        looped = history_store.line_parents(s, first, [trunk[1].id])
    assert looped == {trunk[0].id: trunk[1].id, trunk[1].id: trunk[0].id}
