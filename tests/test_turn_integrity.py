"""Turn integrity (issue 16), each failure reproduced as a user met it: a turn's input applies once, a failed turn
leaves nothing behind and frees the instance at once, two turns never overwrite each other, a cut stream stores
nothing, markers move the story only to the current or next point, other play-throughs reach the prompt only when
relevant. Real SQLite and PostgreSQL, the real checkpointer; the scripted model or ChatOpenAI against the stub."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from openai_stub import OpenAIStub, StubReply, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.runner import create_sample_instance, run_turn, turn_config, turn_graph
from personalab.nodes import director as director_node
from personalab.nodes import write_back as write_back_node
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InstanceBusy, InvalidInput
from personalab.stores.db import session_scope
from personalab.stores.events import StorySearch
from personalab.stores.tables import Line
from personalab.stores.turn_tables import TurnLock, TurnRecord
from personalab.stores.turns import acquire_turn_lock, release_turn_lock
from sqlmodel import col, select


def ctx_for(url: str, **overrides: Any) -> Context:
    return Context(database_url=url, **overrides)


def lines_of(url: str, instance: int) -> list[Line]:
    with session_scope(url) as s:
        return list(s.exec(select(Line).where(Line.save_id == instance).order_by(col(Line.id))).all())


def records_of(url: str, instance: int) -> list[TurnRecord]:
    with session_scope(url) as s:
        return list(s.exec(select(TurnRecord).where(TurnRecord.save_id == instance).order_by(col(TurnRecord.id))).all())


def lock_is_free(url: str, instance: int) -> bool:
    with session_scope(url) as s:
        return s.get(TurnLock, instance) is None


def replies(url: str, instance: int) -> int:
    return sum(1 for r in records_of(url, instance) if r.status == "ok")


# --- a turn's input applies once ----------------------------------------------------------------------------


def test_every_optional_input_lives_for_one_turn(db_url: str) -> None:
    instance = create_sample_instance(db_url)
    with turn_graph(ctx_for(db_url)) as (graph, ctx):
        first = run_turn(
            graph,
            ctx,
            instance,
            "甲",
            lines_before=[{"attribute": "system", "content": "旁白：风起了。"}],
            user_name="莱姆",
            selected_choice={"level": "important", "text": "跟上去"},
            time_gap="days",
        )
        second = run_turn(graph, ctx, instance, "乙")
        values = graph.get_state(turn_config(instance)).values
    assert first["error"] is None and second["error"] is None
    assert [line.content for line in lines_of(db_url, instance)].count("旁白：风起了。") == 1
    users = [line for line in lines_of(db_url, instance) if line.attribute == "user"]
    assert [(u.content, u.display_name) for u in users] == [("甲", "莱姆"), ("乙", None)]
    assert first["gap"] == "days" and second["gap"] == "none"  # computed: the turns were seconds apart
    assert first["review"]["choice_level"] == "important"
    assert second["review"]["choice_level"] is None
    for name in ("message", "lines_before", "user_name", "selected_choice", "time_gap"):
        assert name not in values  # never checkpointed


def test_a_bad_choice_fails_its_own_turn_only(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    with turn_graph(ctx_for(sqlite_url)) as (graph, ctx):
        with pytest.raises(InvalidInput, match="selected_choice"):
            run_turn(graph, ctx, instance, "x", selected_choice={"level": "nuclear"})
        assert run_turn(graph, ctx, instance, "y")["error"] is None
    assert lock_is_free(sqlite_url, instance)


def test_an_input_without_a_message_is_refused_instead_of_replaying_the_last(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    with turn_graph(ctx_for(sqlite_url)) as (graph, ctx):
        run_turn(graph, ctx, instance, "只说一次")
        with pytest.raises(InvalidInput, match="message is empty"):
            graph.invoke({"instance_id": instance}, turn_config(instance), context=ctx)  # type: ignore[typeddict-item]
    assert [line.content for line in lines_of(sqlite_url, instance)].count("只说一次") == 1


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({"user_name": "   "}, "user_name is blank"),
        ({"user_name": "名" * 65}, "user_name is 65 characters, over the limit of 64"),
        ({"lines_before": [{"attribute": "system", "content": "旁白"}] * 51}, "lines_before has 51 lines"),
    ],
)
def test_oversized_or_blank_inputs_are_refused_before_anything_is_written(
    sqlite_url: str, extra: dict[str, Any], problem: str
) -> None:
    instance = create_sample_instance(sqlite_url)
    with turn_graph(ctx_for(sqlite_url)) as (graph, ctx), pytest.raises(InvalidInput, match=problem):
        run_turn(graph, ctx, instance, "你好", **extra)
    assert lines_of(sqlite_url, instance) == [] and lock_is_free(sqlite_url, instance)


# --- a failed turn leaves nothing behind ----------------------------------------------------------------------


@pytest.mark.parametrize("reply", ["【开心】", "[PROGRESS:1:completed]"])
def test_a_reply_with_nothing_to_store_is_a_failed_turn(
    db_url: str, openai_stub: OpenAIStub, reply: str
) -> None:
    instance = create_sample_instance(db_url)
    openai_stub.queue(StubReply(reply))
    with turn_graph(ctx_for(db_url)) as (graph, ctx):
        failed = run_turn(graph, ctx, instance, "你好")
        assert failed["error"] and "no reply stored" in failed["error"]
        assert lock_is_free(db_url, instance)
        assert failed["plot_state"]["story_outline"][0]["status"] != "completed"  # its marker was not applied
        openai_stub.queue(StubReply("【平静】我在。"))
        after = run_turn(graph, ctx, instance, "还在吗？")
    assert after["error"] is None and after["turn"] == 1  # the failed turn did not count
    assert after["plot_state"]["story_outline"][0]["status"] != "completed"
    assert [line.attribute for line in lines_of(db_url, instance)] == ["user", "user", "assistant"]


def test_a_node_that_raises_frees_the_instance_and_its_changes_are_dropped(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = create_sample_instance(db_url)
    with turn_graph(ctx_for(db_url)) as (graph, ctx):
        run_turn(graph, ctx, instance, "第一轮")

        def broken(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError("the database went away")

        monkeypatch.setattr(write_back_node, "append_lines", broken)
        with pytest.raises(RuntimeError, match="went away"):
            run_turn(graph, ctx, instance, "第二轮")
        assert lock_is_free(db_url, instance)  # free at once, not after the lease
        monkeypatch.undo()
        after = run_turn(graph, ctx, instance, "第三轮")
    assert after["error"] is None and after["turn"] == 2  # the failed turn's counter was not kept
    assert [r.turn for r in records_of(db_url, instance) if r.status == "ok"] == [1, 2]


def test_ctrl_c_during_the_reply_frees_the_instance(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)

    def interrupt(_token: str) -> None:
        raise KeyboardInterrupt

    with turn_graph(ctx_for(sqlite_url)) as (graph, ctx):
        with pytest.raises(KeyboardInterrupt):
            run_turn(graph, ctx, instance, "你好", on_token=interrupt)
        assert lock_is_free(sqlite_url, instance)
        after = run_turn(graph, ctx, instance, "再来")
    assert after["error"] is None and after["turn"] == 1 and replies(sqlite_url, instance) == 1


def test_a_stream_cut_without_its_end_stores_no_reply(db_url: str, openai_stub: OpenAIStub) -> None:
    instance = create_sample_instance(db_url)
    openai_stub.queue(StubReply("【平静】我想说的是，这件事", cut=True))
    with turn_graph(ctx_for(db_url)) as (graph, ctx):
        cut = run_turn(graph, ctx, instance, "你好")
        assert cut["error"] and "cut off" in cut["error"]
        openai_stub.queue(StubReply("【平静】完整的回复。"))
        after = run_turn(graph, ctx, instance, "再说一遍")
    assert after["error"] is None and after["turn"] == 1
    assert [line.content for line in lines_of(db_url, instance) if line.attribute == "assistant"] == ["完整的回复。"]


def test_an_overlong_reply_is_cut_at_the_limit(sqlite_url: str, openai_stub: OpenAIStub) -> None:
    instance = create_sample_instance(sqlite_url)
    openai_stub.queue(StubReply("【平静】" + "很长" * 100, chunk=50))
    with turn_graph(ctx_for(sqlite_url, max_reply_chars=50)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, "说吧")
    assert state["error"] is None and len(state["reply"]) <= 50
    assert state["debug"]["reply_cut"] == {"chars": 204, "kept": 50}


# --- two turns never overwrite each other ---------------------------------------------------------------------


def test_threads_playing_one_instance_never_lose_a_turn(db_url: str) -> None:
    instance = create_sample_instance(db_url)
    threads_count, turns_each = 4, 3
    refused: list[int] = []
    errors: list[BaseException] = []

    def play(number: int) -> None:
        try:
            with turn_graph(ctx_for(db_url)) as (graph, ctx):
                done = 0
                while done < turns_each:
                    try:
                        run_turn(graph, ctx, instance, f"线程{number}第{done + 1}次")
                        done += 1
                    except InstanceBusy:
                        refused.append(number)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=play, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors
    stored = [r.turn for r in records_of(db_url, instance) if r.status == "ok"]
    assert len(stored) == threads_count * turns_each
    assert sorted(stored) == list(range(1, threads_count * turns_each + 1))  # unique turn numbers, none reused
    with turn_graph(ctx_for(db_url)) as (graph, _ctx):
        assert graph.get_state(turn_config(instance)).values["turn"] == len(stored)


def test_a_lost_checkpoint_write_reuses_no_turn_number_and_keeps_the_plot(sqlite_url: str, data_dir: Path) -> None:
    """As a kill between storing the reply and writing the checkpoint: the checkpoint file is put back as it was
    before turn 2; turn 3 must still be turn 3 and keep turn 2's plot progress."""
    instance = create_sample_instance(sqlite_url)
    checkpoints = data_dir / "checkpoints.sqlite"
    with turn_graph(ctx_for(sqlite_url)) as (graph, ctx):
        run_turn(graph, ctx, instance, "第一轮")  # the scripted model marks point 1 in progress
    saved = data_dir / "before-turn-2.sqlite"
    shutil.copy(checkpoints, saved)
    with turn_graph(ctx_for(sqlite_url)) as (graph, ctx):
        second = run_turn(graph, ctx, instance, "第二轮")  # ... and completes it
    assert second["plot_state"]["story_outline"][0]["status"] == "completed"
    for suffix in ("-wal", "-shm"):
        Path(f"{checkpoints}{suffix}").unlink(missing_ok=True)
    shutil.copy(saved, checkpoints)
    with turn_graph(ctx_for(sqlite_url)) as (graph, ctx):
        third = run_turn(graph, ctx, instance, "第三轮")
    assert third["turn"] == 3
    assert third["plot_state"]["story_outline"][0]["status"] == "completed"
    assert [r.turn for r in records_of(sqlite_url, instance)] == [1, 2, 3]


def test_a_busy_instance_is_refused_and_freed_by_the_holder(sqlite_url: str) -> None:
    instance = create_sample_instance(sqlite_url)
    token = acquire_turn_lock(instance, 60, sqlite_url)
    with turn_graph(ctx_for(sqlite_url)) as (graph, ctx):
        with pytest.raises(InstanceBusy):
            run_turn(graph, ctx, instance, "你好")
        release_turn_lock(instance, token, sqlite_url)
        assert run_turn(graph, ctx, instance, "你好")["turn"] == 1


# --- the director ---------------------------------------------------------------------------------------------


def test_a_marker_may_move_the_story_only_to_the_current_or_next_point(
    sqlite_url: str, openai_stub: OpenAIStub
) -> None:
    instance = create_sample_instance(sqlite_url)
    openai_stub.queue(
        StubReply("【坚定】一切都结束了。[PROGRESS:10:completed]"),
        StubReply("下一步的计划"),  # turn 2's query rewrite
        StubReply("【平静】走吧。[PROGRESS:2:in_progress]"),
    )
    with turn_graph(ctx_for(sqlite_url)) as (graph, ctx):
        jump = run_turn(graph, ctx, instance, "结局吧")
        step = run_turn(graph, ctx, instance, "下一步")
    assert jump["plot_state"]["story_outline"][9]["status"] == "pending"
    assert jump["plot_state"]["current_plot_index"] == 1
    (ignored,) = jump["debug"]["progress"]["ignored"]
    assert "out of reach" in ignored["reason"] and "points 1..2" in ignored["reason"]
    assert step["plot_state"]["current_plot_index"] == 2  # the next point is in reach


def test_other_play_throughs_below_the_relevance_floor_are_not_injected(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = (
        [{"text": "本局事件", "score": 0.12, "instance_id": 1}],
        [
            {"text": "别人的秘密：保险箱密码4827", "score": 0.14, "instance_id": 2},
            {"text": "另一局里潜入了敌人据点", "score": 0.41, "instance_id": 3},
        ],
    )
    monkeypatch.setattr(StorySearch, "run", lambda self, path=None: found)
    instance = create_sample_instance(sqlite_url)
    with turn_graph(ctx_for(sqlite_url, stall_turns=1)) as (graph, ctx):
        state = run_turn(graph, ctx, instance, "接下来呢？")
    events = state["director_events"]
    assert events is not None and [e["text"] for e in events["others"]] == ["另一局里潜入了敌人据点"]
    assert events["current"] == found[0]  # this play-through's own events are facts, not filtered
    assert state["debug"]["director"]["others_below_floor"] == 1
    prompt = "\n".join(m["content"] for m in state["debug"]["prompt"].get("messages", []))
    assert "4827" not in prompt
    assert director_node is not None


def test_cli_turn_inputs_live_for_one_turn(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from personalab.graph.cli import main

    assert main(["instance", "create", "--sample"]) == 0
    instance = int(capsys.readouterr().out.strip())
    narration = '[{"attribute": "system", "content": "旁白：雨停了。"}]'
    assert main(["turn", "--instance", str(instance), "--lines-before", narration, "--user-name", "莱姆", "甲"]) == 0
    assert main(["turn", "--instance", str(instance), "乙"]) == 0
    with session_scope() as s:
        lines = list(s.exec(select(Line).where(Line.save_id == instance).order_by(col(Line.id))).all())
    assert [line.content for line in lines].count("旁白：雨停了。") == 1
    assert [(line.content, line.display_name) for line in lines if line.attribute == "user"] == [
        ("甲", "莱姆"),
        ("乙", None),
    ]
    assert main(["turn", "--instance", str(instance), "--user-name", " ", "丙"]) == 2
    assert "user_name is blank" in capsys.readouterr().err
