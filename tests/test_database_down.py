"""The database down in the middle of a turn, in a process that outlives the outage (issue 14 fault tests; the
served graph and batch runs are such processes; `bench faults` covers the CLI's one-turn processes): PostgreSQL is
reached through a relay (`evals/outage.py`) that takes it away at a phase of a turn and brings it back after.
The turn fails with `StoreUnavailable`; then, in the same process, with the same compiled graph and checkpointer,
the next turn plays at once and the failed turn's queued writes (its review included) are applied once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from personalab.evals.outage import postgres_link
from personalab.graph.runner import create_sample_instance, run_turn, turn_config, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import StoreUnavailable
from personalab.stores.background import flush_event_writes


@pytest.mark.parametrize(("module", "point"), [("generate", "before_model"), ("write_back", "after_reply")])
def test_the_next_turn_of_the_same_process_plays_at_once_when_the_database_is_back(
    postgres_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch, module: str, point: str
) -> None:
    from personalab.stores.db import session_scope
    from personalab.stores.memory import MemoryStore
    from personalab.stores.outbox_tables import OutboxWrite
    from personalab.stores.tables import Line
    from personalab.stores.turn_tables import TurnRecord
    from sqlmodel import col, select

    fact = "我把编号7的钥匙藏在了旧水塔下面。"
    with postgres_link(postgres_url) as link:
        url = link.url_through(postgres_url)
        monkeypatch.setenv("PERSONALAB_DATABASE_URL", url)
        instance = create_sample_instance(url)

        def outage(name: str) -> None:
            if name == point:
                link.down()

        with turn_graph(Context(database_url=url)) as (graph, ctx):
            assert not run_turn(graph, ctx, instance, "你好。").get("error")
            monkeypatch.setattr(f"personalab.nodes.{module}.failpoint", outage)
            with pytest.raises(StoreUnavailable, match="cannot be reached"):
                run_turn(graph, ctx, instance, fact, selected_choice={"level": "important"})  # the review writes
            monkeypatch.setattr(f"personalab.nodes.{module}.failpoint", lambda name: None)
            link.up()
            # the same graph: its checkpointer's connection and the engine's pool were cut; this process's own lock
            # of the failed turn (its release failed) is taken over, not waited out for the 30 s lease
            state = run_turn(graph, ctx, instance, "我们接着走吧。")
        assert not state.get("error"), state.get("error")
        flush_event_writes()
        with session_scope(url) as session:
            users = session.exec(select(Line).where(col(Line.save_id) == instance, col(Line.content) == fact)).all()
            under = session.exec(select(Line).where(col(Line.parent_line_id) == users[0].id)).all()
            replies = [line for line in under if line.attribute != "user"]  # the next turn's user line is kept there
            records = session.exec(
                select(TurnRecord).where(
                    col(TurnRecord.user_line_id) == users[0].id, col(TurnRecord.reply_line_id).is_not(None)
                )
            ).all()
            pending = session.exec(
                select(OutboxWrite).where(
                    col(OutboxWrite.instance_id) == instance, col(OutboxWrite.applied_at).is_(None)
                )
            ).all()
        assert len(users) == 1
        assert pending == []  # queued writes retried; the failed turn's review too, not held for 120 s
        if point == "after_reply":
            assert len(replies) == 1 and len(records) == 1  # stored before the outage, once
            memories = MemoryStore(db_url=url).list_memories(instance)
            assert [m for m in memories if m.line_id == records[0].reply_line_id and m.type != "record"]  # its review's
        else:
            assert replies == [] and records == []  # a turn that failed before its reply stored none of it


def test_the_served_checkpointer_outlives_a_database_outage(
    postgres_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make_checkpointer` (langgraph.json): the server's one checkpointer connection is made again after the
    database came back, instead of failing every later run."""
    from personalab.stores.checkpoints import make_checkpointer

    with postgres_link(postgres_url) as link:
        monkeypatch.setenv("PERSONALAB_DATABASE_URL", link.url_through(postgres_url))

        async def outlive() -> list[Any]:
            seen = []
            async with make_checkpointer() as saver:
                seen.append(await saver.aget_tuple(turn_config(1)))
                link.down()
                with pytest.raises(Exception, match="Connection refused|connection"):
                    await saver.aget_tuple(turn_config(1))
                link.up()
                seen.append(await saver.aget_tuple(turn_config(1)))
            return seen

        assert asyncio.run(outlive()) == [None, None]
