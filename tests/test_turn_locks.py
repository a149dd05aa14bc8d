"""The instance's turn lock (issue 14): a short lease renewed by a heartbeat while the turn runs, taken over soon
after its holder died, freed by an operator (`personalab instance unlock`), and a turn that lost it ends in one
line, not a traceback. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from cli_helpers import cli, one_line
from openai_stub import OpenAIStub, StubReply, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InstanceBusy, TurnLockLost
from personalab.stores.db import session_scope
from personalab.stores.turn_tables import TurnLock
from personalab.stores.turns import acquire_turn_lock, release_turn_lock, unlock_instance

SLOW = StubReply("【平静】" + "慢慢地说。" * 8, chunk=2, chunk_delay=0.15)  # about 3 s of streaming


def _dead_holder(url: str, instance: int, lease: float) -> None:
    """The row a process leaves when it dies holding the lock: nobody renews it any more."""
    now = time.time()
    with session_scope(url) as session:
        session.add(
            TurnLock(save_id=instance, token="dead", expires_at=now + lease, holder="gone:4242", acquired_at=now)
        )


def _lock(url: str, instance: int) -> TurnLock | None:
    with session_scope(url) as session:
        lock = session.get(TurnLock, instance)
        if lock is not None:
            session.expunge(lock)
        return lock


def _wait_for(predicate: Any, limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {limit} s: {what}")
        time.sleep(0.05)


def test_a_dead_holders_lock_is_taken_over_after_its_short_lease(db_url: str) -> None:
    instance = create_sample_instance(db_url)
    _dead_holder(db_url, instance, lease=3.0)
    with pytest.raises(InstanceBusy):
        acquire_turn_lock(instance, 1.0, db_url)  # the lease still runs: refused at once
    with turn_graph(Context(database_url=db_url, lock_lease_s=1.0)) as (graph, ctx):

        def played() -> bool:
            try:
                return run_turn(graph, ctx, instance, "在吗？")["error"] is None
            except InstanceBusy:
                return False

        _wait_for(played, 10.0, "a turn on the instance whose holder died")
    assert _lock(db_url, instance) is None


def test_a_long_turn_keeps_its_lock_past_the_lease(db_url: str, openai_stub: OpenAIStub) -> None:
    instance = create_sample_instance(db_url)
    openai_stub.queue(SLOW)
    outcome: dict[str, Any] = {}
    with turn_graph(Context(database_url=db_url, lock_lease_s=1.0)) as (graph, ctx):
        turn = threading.Thread(target=lambda: outcome.update(run_turn(graph, ctx, instance, "慢慢说。")))
        turn.start()
        _wait_for(lambda: _lock(db_url, instance) is not None, 30.0, "the turn takes its lock")
        first = _lock(db_url, instance)
        time.sleep(2.5)  # more than two leases: without the heartbeat the lock would have lapsed
        assert turn.is_alive(), "the stub model is slow enough to outlive the lease"
        with pytest.raises(InstanceBusy):
            acquire_turn_lock(instance, 1.0, db_url)
        renewed = _lock(db_url, instance)
        assert first is not None and renewed is not None and renewed.token == first.token
        assert renewed.expires_at > first.expires_at
        turn.join(60)
    assert outcome["error"] is None and outcome["reply"]
    assert _lock(db_url, instance) is None


def test_instance_unlock_frees_a_stuck_instance(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    instance = create_sample_instance(db_url)
    _dead_holder(db_url, instance, lease=3600.0)
    code, out, err = cli(capsys, "instance", "unlock", str(instance))
    assert code == 0, err
    assert f"instance {instance} unlocked: held by gone:4242 since" in out and "lease live" in out
    assert _lock(db_url, instance) is None
    code, out, _ = cli(capsys, "instance", "unlock", str(instance), "--json")
    assert code == 0 and json.loads(out) == {"instance_id": instance, "unlocked": False, "lock": None}
    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        assert run_turn(graph, ctx, instance, "你好。")["error"] is None

    _dead_holder(db_url, instance, lease=3600.0)
    code, out, _ = cli(capsys, "instance", "unlock", str(instance), "--json")
    shown = json.loads(out)
    assert code == 0 and shown["unlocked"] and shown["lock"]["holder"] == "gone:4242"
    code, _, err = cli(capsys, "instance", "unlock", "999999")
    assert code == 2 and "999999" in one_line(err)


def test_a_turn_that_loses_its_lock_stores_nothing_and_says_so_in_one_line(
    db_url: str, openai_stub: OpenAIStub, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    instance = create_sample_instance(db_url)
    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        openai_stub.queue(SLOW)
        outcome: dict[str, Any] = {}

        def play() -> None:
            try:
                run_turn(graph, ctx, instance, "慢慢说。")
            except TurnLockLost as exc:
                outcome["lost"] = exc

        turn = threading.Thread(target=play)
        turn.start()
        _wait_for(lambda: openai_stub.requests and _lock(db_url, instance) is not None, 30.0, "the reply streams")
        assert unlock_instance(instance, db_url) is not None  # an operator (or a taker-over) frees it mid-turn
        turn.join(60)
    assert "lost its lock" in str(outcome.get("lost"))
    assert _lock(db_url, instance) is None

    # the CLI: one line on stderr, exit 2
    openai_stub.queue(SLOW)
    before = len(openai_stub.requests)
    stopper = threading.Thread(
        target=lambda: (
            _wait_for(
                lambda: len(openai_stub.requests) > before and _lock(db_url, instance) is not None, 30.0, "streams"
            ),
            unlock_instance(instance, db_url),
        )
    )
    stopper.start()
    code, _, err = cli(capsys, "turn", "--instance", str(instance), "再说一遍。")
    stopper.join(30)
    assert code == 2 and "lost its lock" in one_line(err), err


def test_release_stops_the_heartbeat(db_url: str) -> None:
    instance = create_sample_instance(db_url)
    token = acquire_turn_lock(instance, 1.0, db_url)
    release_turn_lock(instance, token, db_url)
    time.sleep(0.8)  # a beat after the release must not bring the lock back
    assert _lock(db_url, instance) is None


def test_a_release_that_fails_still_stops_the_heartbeat(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The database went away as the turn ended: the lock is left to lapse, not renewed for ever by this process."""
    from personalab.stores import turns

    instance = create_sample_instance(sqlite_url)
    token = acquire_turn_lock(instance, 1.0, sqlite_url)

    def gone(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(turns, "drop_turn_lock", gone)
    with pytest.raises(RuntimeError):
        release_turn_lock(instance, token, sqlite_url)
    monkeypatch.undo()
    assert token not in turns._beats
    _wait_for(
        lambda: _lock(sqlite_url, instance) is None or _lock(sqlite_url, instance).expires_at < time.time(),
        5.0,
        "lapse",
    )
