"""Backup and restore as docs/operations.md says (issue 27): stop what writes, copy the data folder (SQLite database
with its WAL, checkpoints, embedded Chroma), restore it elsewhere, `db upgrade`, `doctor`, and the next turn goes on
from where the story stood, with its memories."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
from cli_helpers import cli
from personalab.stores.background import flush_event_writes
from personalab.stores.db import dispose_engines


def test_a_data_folder_backed_up_and_restored_elsewhere_plays_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "site-a" / "data"
    first.mkdir(parents=True)
    monkeypatch.delenv("PERSONALAB_DATABASE_URL", raising=False)
    monkeypatch.setenv("PERSONALAB_DATA_DIR", str(first))
    code, out, _ = cli(capsys, "instance", "create", "--sample", "--json")
    instance = str(json.loads(out)["id"])
    for message in ("你好，雷娜。", "我妹妹今年十二岁，她叫小雨。"):
        assert cli(capsys, "turn", "--instance", instance, message)[0] == 0
    assert cli(capsys, "memory", "add", "--instance", instance, "小雨怕打雷")[0] == 0
    _, memories_before, _ = cli(capsys, "memory", "list", "--instance", instance)
    _, history_before, _ = cli(capsys, "history", "--instance", instance)

    # 1. stop what writes (here: this process's queued writes and open connections)
    flush_event_writes()
    dispose_engines()
    # 2. the whole data folder into one archive
    archive = tmp_path / "personalab-backup.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(first, arcname="data")
    shutil.rmtree(tmp_path / "site-a")  # the first site is gone

    # restore elsewhere: unpack, point PERSONALAB_DATA_DIR at it, db upgrade, doctor
    second = tmp_path / "site-b"
    second.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(second, filter="data")
    monkeypatch.setenv("PERSONALAB_DATA_DIR", str(second / "data"))
    assert cli(capsys, "db", "upgrade")[0] == 0
    code, out, _ = cli(capsys, "doctor", "--json")
    assert code == 0 and json.loads(out)["healthy"], out
    assert cli(capsys, "history", "--instance", instance)[1] == history_before
    assert cli(capsys, "memory", "list", "--instance", instance)[1] == memories_before

    # the next turn goes on from the third turn, and finds what was remembered. This test is about the restore,
    # not the retrieval cap: the first retrieval of the restored folder opens its index cold, and with the other
    # test process busy it took 2.5 s once (a CI run) — time enough, as tests/test_turn_graph.py gives a cold turn
    monkeypatch.setenv("PERSONALAB_RAG_TIMEOUT", "60")
    code, out, err = cli(capsys, "turn", "--instance", instance, "小雨最怕什么？", "--json")
    assert code == 0, err
    state = json.loads(out)
    assert state["turn"] == 3
    assert any("打雷" in (item.get("content") or "") for item in state["retrieved_events"] or []), state["debug"].get(
        "retrieval"
    )


def test_a_rewind_into_turns_from_before_story_states_finds_their_state(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns played by a version that kept their story state only in checkpoints (no `story_state` rows), then the
    first turn after the upgrade prunes the old checkpoints: a rewind to a line of those turns finds the state they
    left (turn, plot, core memory), not the story's start (issue 27)."""
    from personalab.graph.api import dialogue
    from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
    from personalab.nodes import end_turn as end_turn_node
    from personalab.nodes.context import Context
    from personalab.stores.checkpoints import prune_thread, thread_id_for
    from personalab.stores.db import session_scope
    from personalab.stores.turn_tables import StoryState
    from sqlalchemy import delete
    from sqlmodel import col

    instance = create_sample_instance(db_url)
    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        with monkeypatch.context() as old_version:
            old_version.setattr(end_turn_node, "prune_after_turn", lambda *_args, **_kw: None)
            played = [
                run_turn(graph, ctx, instance, message)
                for message in ("你好，雷娜。", "我们去北边的废墟。", "那里有人吗？")
            ]
        first_reply = played[0]["debug"]["reply_line_ids"][-1]
        with session_scope(db_url) as session:  # the old version stored no state for its turns 1 and 2
            session.exec(delete(StoryState).where(col(StoryState.save_id) == instance, col(StoryState.turn) < 3))
        run_turn(graph, ctx, instance, "我们继续走。")  # the first turn after the upgrade
    flush_event_writes()
    prune_thread(thread_id_for(instance), db_url)  # as that turn's prune does (again: idempotent)
    branch = dialogue.rewind(instance, first_reply, database_url=db_url)
    assert branch["turn"] == 1
    story = branch["story_state"]
    assert story["plot_state"] == played[0]["plot_state"] and story["core_memory"] == played[0]["core_memory"]
    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        assert run_turn(graph, ctx, instance, "换条路吧。")["turn"] == 2


def test_a_prune_reads_the_checkpoints_only_while_a_turn_has_no_story_state_of_its_own(db_url: str) -> None:
    """The check that spares each turn's prune reading every checkpoint of its thread (issue 27): false while every
    stored turn has its story state, true once one has none (a turn of a version that kept it only in checkpoints),
    for that instance only."""
    from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
    from personalab.nodes.context import Context
    from personalab.stores.checkpoints import turns_without_story_state
    from personalab.stores.db import session_scope
    from personalab.stores.turn_tables import StoryState
    from sqlalchemy import delete
    from sqlmodel import col

    old, other = create_sample_instance(db_url), create_sample_instance(db_url)
    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        for instance in (old, other):
            run_turn(graph, ctx, instance, "你好，雷娜。")
            run_turn(graph, ctx, instance, "我们去北边的废墟。")
    flush_event_writes()
    assert not turns_without_story_state(old, db_url) and not turns_without_story_state(other, db_url)
    with session_scope(db_url) as session:
        session.exec(delete(StoryState).where(col(StoryState.save_id) == old, col(StoryState.turn) == 1))
    assert turns_without_story_state(old, db_url) and not turns_without_story_state(other, db_url)


def test_after_an_upgrade_the_instance_list_shows_turns_kept_only_in_checkpoints(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An instance played by a version that kept its story state only in checkpoints: right after `db upgrade`
    the list shows its turns, plot progress and last turn, not "0 turn(s), plot 0/10, never" (issue 27)."""
    from personalab.graph.api import library
    from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
    from personalab.nodes import end_turn as end_turn_node
    from personalab.nodes.context import Context
    from personalab.stores import migrate
    from personalab.stores.db import session_scope
    from personalab.stores.turn_tables import StoryState
    from sqlalchemy import delete
    from sqlmodel import col

    instance = create_sample_instance(db_url)
    monkeypatch.setattr(end_turn_node, "prune_after_turn", lambda *_args, **_kw: None)
    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        played = [run_turn(graph, ctx, instance, message) for message in ("你好，雷娜。", "我们去北边的废墟。")]
    flush_event_writes()
    with session_scope(db_url) as session:  # the old version stored no story states
        session.exec(delete(StoryState).where(col(StoryState.save_id) == instance))
    assert library.get_instance(instance, database_url=db_url).turns == 0  # what the operator saw
    migrate.upgrade(db_url)
    shown = library.get_instance(instance, database_url=db_url)
    assert shown.turns == 2 and shown.last_turn_at is not None
    assert shown.plot is not None and played[-1]["plot_state"]["current_plot_index"] == shown.plot.current_index


def test_core_show_after_an_import_shows_the_imported_core_memory(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`core show` printed `{}` until the first turn after `instance import` (issue 27): it reads the branch's
    stored story state, which the import brings, not only the graph's checkpoint, which it does not."""
    code, out, _ = cli(capsys, "instance", "create", "--sample", "--json")
    instance = str(json.loads(out)["id"])
    assert cli(capsys, "turn", "--instance", instance, "你好，雷娜。")[0] == 0
    code, shown, _ = cli(capsys, "core", "show", "--instance", instance)
    assert code == 0 and json.loads(shown)
    exported = tmp_path / "instance.json"
    assert cli(capsys, "instance", "export", instance, str(exported))[0] == 0
    code, out, err = cli(capsys, "instance", "import", str(exported))
    assert code == 0, err
    imported = out.strip().split()[-1]
    code, after, _ = cli(capsys, "core", "show", "--instance", imported)
    assert code == 0 and json.loads(after) == json.loads(shown)
