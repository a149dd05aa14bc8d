"""World-book time in turns (issue 15, seed 004 时间邻近性): the elapsed wall-clock time reaches the trigger in every
turn; SillyTavern's sticky, cooldown and delay (in turns, per instance, following the branch); recursion (exclude,
prevent, delay until recursion, a step limit). Pure rules, and through the turn graph on SQLite with the offline
scripted model."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from personalab.nodes.rules.worldbook import WorldbookContext, WorldbookEntry, elapsed_seconds, explain_worldbook
from personalab.stores.db import session_scope
from personalab.stores.turn_tables import TurnRecord
from personalab.stores.worldbook import Scope, add_worldbook_entry
from sqlmodel import col, select


def sent(state: dict[str, Any]) -> str:
    return "\n".join(message["content"] for message in state["prompt"])


def age_last_turn(url: str, instance: int, seconds: float) -> None:
    """Move the instance's last turn `seconds` into the past (as if the user came back that much later)."""
    with session_scope(url) as s:
        row = s.exec(
            select(TurnRecord).where(TurnRecord.save_id == instance).order_by(col(TurnRecord.id).desc())
        ).first()
        assert row is not None
        row.created_at = row.created_at - timedelta(seconds=seconds)
        s.add(row)


# --- elapsed time ------------------------------------------------------------------------------------


def test_the_elapsed_time_is_measured_or_the_hosts_gap() -> None:
    assert elapsed_seconds(None, None) is None  # the first turn: no previous one
    assert elapsed_seconds(12.5, None) == 12.5
    assert elapsed_seconds(5.0, "days") == 86_400.0  # the host says days: at least a day
    assert elapsed_seconds(90_000.0, "days") == 90_000.0  # measured, and in the host's gap
    assert elapsed_seconds(90_000.0, "none") == 0.0


def test_a_time_window_entry_fires_only_when_the_elapsed_time_is_in_its_window_through_the_graph(
    sqlite_url: str,
) -> None:
    from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
    from personalab.nodes.context import Context

    instance = create_sample_instance(sqlite_url)
    with session_scope(sqlite_url) as s:
        add_worldbook_entry(
            s,
            "久别重逢：雷娜会先问用户这些天去了哪里。",
            trigger_type="temporal",
            temporal={"min_gap_seconds": 3_600, "max_gap_seconds": 3 * 86_400},
            scope=Scope(save_id=instance),
        )
    with turn_graph(Context(database_url=sqlite_url)) as (graph, ctx):
        first = run_turn(graph, ctx, instance, "你好。")
        assert "久别重逢" not in sent(first)  # no previous turn: no elapsed time
        soon = run_turn(graph, ctx, instance, "我回来了。")
        assert "久别重逢" not in sent(soon)  # seconds later: below the window
        age_last_turn(sqlite_url, instance, 2 * 3_600)
        later = run_turn(graph, ctx, instance, "我回来了。")
        assert "久别重逢" in sent(later)  # two hours later: in the window
        age_last_turn(sqlite_url, instance, 10 * 86_400)
        too_late = run_turn(graph, ctx, instance, "我回来了。")
        assert "久别重逢" not in sent(too_late)  # ten days: past the window
        hosted = run_turn(graph, ctx, instance, "过了几天。", time_gap="days")
        assert "久别重逢" in sent(hosted)  # the host's gap, seconds after the last turn


def test_the_pure_rule_reads_the_gap() -> None:
    window = WorldbookEntry(
        id="w", content="x", trigger_type="temporal", temporal={"min_gap_seconds": 60, "max_gap_seconds": 120}
    )
    assert [t.entry.id for t in explain_worldbook([window], WorldbookContext(gap_seconds=90)).triggered] == ["w"]
    assert explain_worldbook([window], WorldbookContext(gap_seconds=30)).triggered == []
