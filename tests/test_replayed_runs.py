"""A killed server replays turns (issue 27, found as an operator would): `langgraph dev` killed under load and
restarted runs its unfinished runs again. A run carries an identity (a served run's `configurable.run_id`, an
in-process run's key) that its stored user line keeps (`turn_run`), so a replayed run finds its turn done and
answers with the stored reply, or, when only the user line was stored, answers that line: never a user line stored
twice, never a second different reply. `doctor` reports duplicated user lines. Real SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli
from personalab.graph.graph import TURN_GRAPH_NAME, ReleaseOnCancel
from personalab.graph.runner import create_sample_instance, run_turn, turn_config, turn_graph
from personalab.nodes import generate as generate_node
from personalab.nodes import history_fetch as history_fetch_node
from personalab.nodes import write_back as write_back_node
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InstanceBusy, RunOvertaken, TurnLockLost
from personalab.stores.db import session_scope
from personalab.stores.tables import Line, Save
from personalab.stores.turn_tables import TurnRecord
from personalab.stores.turns import acquire_turn_lock, release_held_lock, release_turn_lock
from sqlmodel import col, select


def lines_of(url: str, instance: int) -> list[Line]:
    with session_scope(url) as s:
        return list(s.exec(select(Line).where(Line.save_id == instance).order_by(col(Line.id))).all())


def answered(url: str, instance: int) -> list[TurnRecord]:
    with session_scope(url) as s:
        rows = s.exec(select(TurnRecord).where(TurnRecord.save_id == instance, TurnRecord.status == "ok")).all()
        return list(rows)


def dies_at(point: str) -> Callable[[str], None]:
    """A failpoint that ends the turn at `point` as kill -9 would: nothing after it runs."""

    def die(name: str) -> None:
        if name == point:
            raise SystemExit("killed")

    return die


def killed_before_its_reply(
    graph: Any, ctx: Context, monkeypatch: pytest.MonkeyPatch, instance: int, message: str, run_id: str
) -> None:
    """Run `run_id` stores its user line and dies before the model answers (its lock is left held)."""
    monkeypatch.setattr(generate_node, "failpoint", dies_at("before_model"))
    with pytest.raises(SystemExit):
        run_turn(graph, ctx, instance, message, run_id=run_id)
    monkeypatch.undo()


def test_a_run_played_again_answers_with_its_stored_reply(db_url: str) -> None:
    instance = create_sample_instance(db_url)
    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        first = run_turn(graph, ctx, instance, "我们去北边的废墟看看。", run_id="run-1")
        assert run_turn(graph, ctx, instance, "我们去北边的废墟看看。", run_id="run-1")["reply"] == first["reply"]
        second = run_turn(graph, ctx, instance, "那就出发。", run_id="run-2")
        assert second["turn"] == 2
        # replayed after another run wrote the checkpoint: the turn is found done by its run's identity
        again = run_turn(graph, ctx, instance, "我们去北边的废墟看看。", run_id="run-1")
        assert again["debug"].get("replayed_run")
        assert again["reply"] == first["reply"] and again["reply_lines"] == first["reply_lines"]
        assert again["turn"] == 1 and again["plot_state"] == first["plot_state"]
        users = [line for line in lines_of(db_url, instance) if line.attribute == "user"]
        assert [line.content for line in users] == ["我们去北边的废墟看看。", "那就出发。"]
        assert len(answered(db_url, instance)) == 2
        # the next run goes on from the story's latest state, not the replayed answer's
        third = run_turn(graph, ctx, instance, "我们去北边的废墟看看。", run_id="run-3")
        assert third["turn"] == 3 and not third["debug"].get("replayed_run")
        assert len([line for line in lines_of(db_url, instance) if line.attribute == "user"]) == 3


def test_a_run_killed_after_its_reply_was_stored_answers_with_it(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server dies after the reply was stored, before the run ended (its client may have seen the reply)."""
    instance = create_sample_instance(db_url)

    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        monkeypatch.setattr(write_back_node, "failpoint", dies_at("after_reply"))
        with pytest.raises(SystemExit):
            run_turn(graph, ctx, instance, "你还记得那座桥吗？", run_id="served-run-7")
        monkeypatch.undo()
        stored = [line for line in lines_of(db_url, instance) if line.attribute == "assistant"]
        again = run_turn(graph, ctx, instance, "你还记得那座桥吗？", run_id="served-run-7")
        assert again["reply"] and [segment["content"] for segment in again["reply_lines"]] == [
            line.content for line in stored
        ]
        all_lines = lines_of(db_url, instance)
        assert [line.content for line in all_lines if line.attribute == "user"] == ["你还记得那座桥吗？"]
        assert len([line for line in all_lines if line.attribute == "assistant"]) == len(stored)
        assert len(answered(db_url, instance)) == 1
        following = run_turn(graph, ctx, instance, "走吧。")
        assert following["turn"] == 2


def test_a_served_run_resumed_past_its_reply_stores_no_second_reply(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A served run's id (`configurable.run_id`): LangGraph resumes the run from the checkpoint it left, past the
    nodes that ran; its write_back finds the reply stored by the run and stores none."""
    instance = create_sample_instance(db_url)

    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        config: Any = {"configurable": {**turn_config(instance)["configurable"], "run_id": "served-run-9"}}
        payload: Any = {"instance_id": instance, "message": "火快灭了。"}
        monkeypatch.setattr(write_back_node, "failpoint", dies_at("after_reply"))
        with pytest.raises(SystemExit):
            for _ in graph.stream(payload, config, context=ctx, durability="exit"):
                pass
        monkeypatch.undo()
        release_held_lock(instance, db_url)  # as the runner does for a run that raised
        stored = [line.content for line in lines_of(db_url, instance) if line.attribute == "assistant"]
        for _ in graph.stream(payload, config, context=ctx, durability="exit"):
            pass
        all_lines = lines_of(db_url, instance)
        assert [line.content for line in all_lines if line.attribute == "user"] == ["火快灭了。"]
        assert [line.content for line in all_lines if line.attribute == "assistant"] == stored
        assert len(answered(db_url, instance)) == 1
        assert run_turn(graph, ctx, instance, "添点柴。")["turn"] == 2


def test_a_run_killed_before_its_reply_answers_its_stored_line_once(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = create_sample_instance(db_url)

    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        killed_before_its_reply(graph, ctx, monkeypatch, instance, "天快黑了。", "served-run-8")
        again: dict[str, Any] = run_turn(graph, ctx, instance, "天快黑了。", run_id="served-run-8")
        assert again["reply"] and again["turn"] == 1
        users = [line for line in lines_of(db_url, instance) if line.attribute == "user"]
        assert [line.content for line in users] == ["天快黑了。"]
        assert len(answered(db_url, instance)) == 1
        third = run_turn(graph, ctx, instance, "天快黑了。", run_id="served-run-8")
        assert third["reply"] == again["reply"]


def test_a_run_replayed_after_a_later_turn_is_refused_and_moves_nothing(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27 (kill -9 of one Aegra worker): the next turn of the instance takes the dead worker's lock over at
    once and plays after the killed run's unanswered line; the killed run, replayed later by Aegra's lease reaper,
    must not answer its old line (that moved the instance's leaf back under it: the later turn fell off the
    current branch) but fail to its client, storing nothing."""
    instance = create_sample_instance(db_url)

    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        killed_before_its_reply(graph, ctx, monkeypatch, instance, "天快黑了。", "served-run-caught")
        later = run_turn(graph, ctx, instance, "走吧。", run_id="served-run-next")
        assert later["reply"]
        before = lines_of(db_url, instance)
        with pytest.raises(RunOvertaken, match="served-run-caught"):
            run_turn(graph, ctx, instance, "天快黑了。", run_id="served-run-caught")
        after = lines_of(db_url, instance)
        assert [line.id for line in after] == [line.id for line in before]  # nothing stored
        assert [line.content for line in after if line.attribute == "user"] == ["天快黑了。", "走吧。"]
        assert len(answered(db_url, instance)) == 1
        # the instance still ends with the later turn's reply, and plays on after it
        with session_scope(db_url) as s:
            leaf = s.get(Save, instance).last_message_id  # type: ignore[union-attr]
        assert leaf == after[-1].id and after[-1].attribute == "assistant"
        assert run_turn(graph, ctx, instance, "好。", run_id="served-run-third")["reply"]


def test_doctor_reports_a_user_line_stored_twice(
    db_url: str, data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a server without run identities left it: the same user line twice under one parent, each answered."""
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    instance = create_sample_instance(db_url)
    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        run_turn(graph, ctx, instance, "你好，雷娜。")
        code, out, _ = cli(capsys, "doctor", "--json")
        assert not [f for f in json.loads(out)["findings"] if f["check"] == "duplicates" and f["status"] == "problem"]
        (user,) = [line for line in lines_of(db_url, instance) if line.attribute == "user"]
        with session_scope(db_url) as session:
            session.add(
                Line(save_id=instance, attribute="user", content=user.content, parent_line_id=user.parent_line_id)
            )
    code, out, _ = cli(capsys, "doctor", "--json")
    report = json.loads(out)
    (found,) = [f for f in report["findings"] if f["check"] == "duplicates" and f["status"] == "problem"]
    assert code == 1 and f"instance {instance}" in found["message"] and "stored 2 times" in found["message"]


def cancelled(url: str, instance: int, run_id: str) -> None:
    """The server cancels the served run `run_id` (Aegra's `runs.cancel`, or its lease loss): what
    `ReleaseOnCancel` sees of it, in a server whose database is `url`."""
    cancel, root = ReleaseOnCancel(), uuid.uuid4()
    cancel.on_chain_start({}, {"instance_id": instance}, run_id=root, name=TURN_GRAPH_NAME, metadata={"run_id": run_id})
    with pytest.MonkeyPatch.context() as served:
        served.setenv("PERSONALAB_DATABASE_URL", url)
        cancel.on_chain_error(asyncio.CancelledError(), run_id=root)


def test_a_run_cancelled_while_taking_its_lock_gives_the_lock_back(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A served run cancelled while its `history_fetch` is still taking the instance's lock in a worker thread
    (issue 27, found on Aegra: a client gone right after asking; the cancel's release found no lock yet, and the
    heartbeat then kept the instance busy for as long as the process lived): the turn gives the lock back as soon
    as it has it, plays nothing, and the next run plays."""
    instance = create_sample_instance(db_url)
    taking = history_fetch_node.acquire_turn_lock

    def cancelled_meanwhile(*args: Any, **kwargs: Any) -> str:
        cancelled(db_url, instance, "r-9")  # no lock held yet: nothing to free
        return taking(*args, **kwargs)

    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        monkeypatch.setattr(history_fetch_node, "acquire_turn_lock", cancelled_meanwhile)
        with pytest.raises(TurnLockLost, match="r-9 was cancelled"):
            run_turn(graph, ctx, instance, "走吧。", run_id="r-9")
        monkeypatch.undo()
        assert not [line for line in lines_of(db_url, instance) if line.attribute == "assistant"]
        assert run_turn(graph, ctx, instance, "走吧。", run_id="r-10")["turn"] == 1


def held_by_a_live_twin(
    graph: Any, ctx: Context, monkeypatch: pytest.MonkeyPatch, instance: int, message: str, run_id: str
) -> None:
    """Run `run_id` stored its user line and is still running, holding the instance's lock (the execution whose
    Aegra lease lapsed on a loaded machine while its worker lived: Aegra queues the run again, the worker learns it
    at its next heartbeat and cancels it then)."""
    killed_before_its_reply(graph, ctx, monkeypatch, instance, message, run_id)
    acquire_turn_lock(instance, 60, ctx.database_url, run_key=run_id)


def test_a_run_replayed_after_its_cancel_answers_its_stored_line(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27 (kill -9 load on Aegra, a burst of lease losses): the cancelled execution's lock is freed, and the
    replay of the same run in the same process (started after the cancel) answers the stored line once; it was
    refused "was cancelled" and the line stayed unanswered."""
    instance = create_sample_instance(db_url)
    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        held_by_a_live_twin(graph, ctx, monkeypatch, instance, "起风了。", "served-run-lease")
        cancelled(db_url, instance, "served-run-lease")
        again = run_turn(graph, ctx, instance, "起风了。", run_id="served-run-lease")
        assert again["reply"] and again["turn"] == 1
        assert [line.content for line in lines_of(db_url, instance) if line.attribute == "user"] == ["起风了。"]
        assert len(answered(db_url, instance)) == 1
        assert run_turn(graph, ctx, instance, "走吧。")["turn"] == 2


def test_a_run_replayed_while_it_still_runs_waits_and_answers_once(
    db_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 27: the replay starts while the earlier execution of the same run still holds the lock (in this process
    or another); it waits for that lock instead of failing "instance is busy" (the earlier execution was cancelled
    a moment later and nothing answered the line), then answers the stored line once."""
    instance = create_sample_instance(db_url)
    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        held_by_a_live_twin(graph, ctx, monkeypatch, instance, "雨停了。", "served-run-twin")
        result: dict[str, Any] = {}

        def replay() -> None:
            try:
                result["state"] = run_turn(graph, ctx, instance, "雨停了。", run_id="served-run-twin")
            except Exception as exc:  # noqa: BLE001 - the test reads it
                result["error"] = exc

        with caplog.at_level(logging.INFO, logger="personalab.stores.turns"):
            thread = threading.Thread(target=replay)
            thread.start()
            for _ in range(200):  # until the replay meets the earlier execution's lock (or fails)
                if "error" in result or "waits for its earlier execution" in caplog.text:
                    break
                thread.join(0.05)
            cancelled(db_url, instance, "served-run-twin")
            thread.join(60)
        assert "error" not in result, result.get("error")
        assert result["state"]["reply"] and result["state"]["turn"] == 1
        assert [line.content for line in lines_of(db_url, instance) if line.attribute == "user"] == ["雨停了。"]
        assert len(answered(db_url, instance)) == 1
        # another run is still refused at once while a turn holds the instance
        token = acquire_turn_lock(instance, 60, db_url, run_key="served-run-other-holder")
        with pytest.raises(InstanceBusy):
            run_turn(graph, ctx, instance, "走吧。", run_id="served-run-next")
        release_turn_lock(instance, token, db_url)
