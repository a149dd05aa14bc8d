"""World-book time in turns (issue 15, seed 004 时间邻近性): the elapsed wall-clock time reaches the trigger in every
turn; SillyTavern's sticky, cooldown and delay (in turns, per instance, following the branch); recursion (exclude,
prevent, delay until recursion, a step limit). Pure rules, and through the turn graph on SQLite with the offline
scripted model."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from personalab.nodes.rules.worldbook import (
    WorldbookConfig,
    WorldbookContext,
    WorldbookEntry,
    elapsed_seconds,
    explain_worldbook,
)
from personalab.stores.db import session_scope
from personalab.stores.history import get_path_ids
from personalab.stores.turn_tables import TurnRecord
from personalab.stores.worldbook import Scope, add_worldbook_entry
from sqlmodel import col, select


def sent(state: dict[str, Any]) -> str:
    return "\n".join(message["content"] for message in state["prompt"])


def retrieval_said(state: dict[str, Any]) -> str:
    """The turn's retrieval status and what the book scan fired: named when a keyed entry is missing (a fresh-clone CI
    run under heavy load left the entry out twice; the status tells a cut or failed search from a scan that missed)."""
    retrieval = (state.get("debug") or {}).get("retrieval") or {}
    return (
        f"retrieval {retrieval.get('status')!r} in {retrieval.get('ms')} ms, fired {retrieval.get('worldbook_fired')!r}"
    )


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
    # the retrieval (which scans the book) gets time on a loaded machine: a cut search would leave the entry out
    with turn_graph(Context(database_url=sqlite_url, rag_timeout_s=30.0)) as (graph, ctx):
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


# --- sticky, cooldown, delay (pure rules) ------------------------------------------------------------


def st(entry_id: str, content: str, *keys: str, **fields: Any) -> WorldbookEntry:
    """An entry imported from SillyTavern world info with `fields` (sticky, cooldown, delay, recursion flags)."""
    source = {"uid": entry_id, "key": list(keys), "content": content, **fields}
    return WorldbookEntry(
        id=entry_id, content=content, keywords=keys, source=source, source_format="world info", priority=100
    )


def card(entry_id: str, content: str, *keys: str, **extensions: Any) -> WorldbookEntry:
    """An entry of a card's character_book with `extensions` (the card's names: exclude_recursion, ...)."""
    source = {"id": entry_id, "keys": list(keys), "content": content, "extensions": extensions}
    return WorldbookEntry(id=entry_id, content=content, keywords=keys, source=source, source_format="character book")


def run(entries: list[WorldbookEntry], text: str, **context: Any) -> tuple[dict[str, str], dict[str, str]]:
    """(fired id → trigger, skipped id → reason)."""
    result = explain_worldbook(entries, WorldbookContext(text=text, **context))
    return {t.entry.id: t.trigger for t in result.triggered}, {s.entry_id: s.reason for s in result.skipped}


def test_sticky_keeps_an_entry_in_for_its_turns_without_its_keys() -> None:
    lamp = st("lamp", "灯塔的灯在雾里闪。", "灯塔", sticky=2)
    assert run([lamp], "灯塔", current_turn=5)[0] == {"lamp": "keyword"}
    for turn in (6, 7):  # fired at turn 5: in for two more turns, with or without its keys
        assert run([lamp], "别的事", current_turn=turn, last_fired_turns={"lamp": 5})[0] == {"lamp": "sticky"}
    assert run([lamp], "别的事", current_turn=8, last_fired_turns={"lamp": 5})[0] == {}


def test_cooldown_holds_an_entry_back_after_it_was_active_and_names_it() -> None:
    bell = st("bell", "钟声。", "钟", cooldown=2)
    fired, skipped = run([bell], "钟", current_turn=6, last_fired_turns={"bell": 5})
    assert fired == {} and "cooldown" in skipped["bell"] and "turn 7" in skipped["bell"]
    assert run([bell], "钟", current_turn=7, last_fired_turns={"bell": 5})[0] == {}
    assert run([bell], "钟", current_turn=8, last_fired_turns={"bell": 5})[0] == {"bell": "keyword"}
    # with sticky, the cooldown starts when the sticky turns end
    both = st("both", "钟声。", "钟", sticky=1, cooldown=1)
    assert run([both], "x", current_turn=6, last_fired_turns={"both": 5})[0] == {"both": "sticky"}
    assert run([both], "钟", current_turn=7, last_fired_turns={"both": 5})[0] == {}
    assert run([both], "钟", current_turn=8, last_fired_turns={"both": 5})[0] == {"both": "keyword"}


def test_delay_waits_for_the_chat_to_have_its_lines() -> None:
    late = card("late", "后来的事。", "雾", delay=10)
    fired, skipped = run([late], "雾", chat_lines=4)
    assert fired == {} and skipped["late"] == "delay: the chat has 4 of the 10 lines it waits for"
    assert run([late], "雾", chat_lines=10)[0] == {"late": "keyword"}


# --- recursion (pure rules) ---------------------------------------------------------------------------


def test_an_entry_named_in_a_fired_entrys_content_comes_in_by_recursion() -> None:
    harbour = st("harbour", "雾港的灯塔由守夜人看管。", "雾港")
    keeper = st("keeper", "守夜人叫老陈。", "守夜人")
    result = explain_worldbook([harbour, keeper], WorldbookContext(text="去雾港"))
    assert [t.entry.id for t in result.triggered] == ["harbour", "keeper"]
    assert result.triggered[1].reason.startswith("recursion step 1: keyword: 守夜人")


def test_exclude_prevent_and_delay_until_recursion() -> None:
    harbour = st("harbour", "雾港的灯塔由守夜人看管。", "雾港")
    excluded = st("keeper", "守夜人叫老陈。", "守夜人", excludeRecursion=True)
    assert run([harbour, excluded], "去雾港")[0] == {"harbour": "keyword"}
    assert run([harbour, excluded], "守夜人")[0] == {"keeper": "keyword"}  # its own keys in the chat still fire it
    silent = st("harbour", "雾港的灯塔由守夜人看管。", "雾港", preventRecursion=True)
    keeper = st("keeper", "守夜人叫老陈。", "守夜人")
    assert run([silent, keeper], "去雾港")[0] == {"harbour": "keyword"}
    only = card("only", "老陈的秘密。", "守夜人", delay_until_recursion=True)
    assert run([only], "守夜人")[0] == {}  # the chat alone does not activate it
    assert run([harbour, only], "去雾港")[0] == {"harbour": "keyword", "only": "keyword"}


def test_a_chain_stops_at_the_step_limit_named_and_a_loop_ends() -> None:
    chain = [st(f"e{i}", f"第{i}站，下一站是站{i + 1}。", f"站{i}") for i in range(6)]
    result = explain_worldbook(chain, WorldbookContext(text="站0"), WorldbookConfig(max_recursion_steps=2))
    assert [t.entry.id for t in result.triggered] == ["e0", "e1", "e2"]
    assert {s.entry_id: s.reason for s in result.skipped} == {"e3": "recursion stopped at its limit of 2 steps"}
    off = explain_worldbook(chain, WorldbookContext(text="站0"), WorldbookConfig(recursive=False))
    assert [t.entry.id for t in off.triggered] == ["e0"]
    loop = [st("a", "甲提到乙。", "甲"), st("b", "乙提到甲。", "乙")]  # each names the other: each fires once
    assert run(loop, "甲")[0] == {"a": "keyword", "b": "keyword"}


# --- through the graph ----------------------------------------------------------------------------------


def test_sticky_and_cooldown_through_turns_and_they_follow_the_branch(sqlite_url: str) -> None:
    """A sticky entry stays in the turn after its key, then cools down; its firing turn is kept with the story state,
    so a turn on a branch taken where it had just fired is its sticky turn again."""
    from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
    from personalab.nodes.context import Context
    from personalab.stores.worldbook_files import import_worldbook

    instance = create_sample_instance(sqlite_url)
    book = {"entries": {"0": {"uid": 0, "key": ["灯塔"], "content": "灯塔守夜人的暗号是三短一长。", "sticky": 1,
                              "cooldown": 1}}}  # fmt: skip
    with session_scope(sqlite_url) as s:
        import_worldbook(s, book, scope=Scope(save_id=instance))
    # the retrieval (which scans the book) gets time on a loaded machine: a cut search would leave the entry out
    with turn_graph(Context(database_url=sqlite_url, rag_timeout_s=30.0)) as (graph, ctx):
        first = run_turn(graph, ctx, instance, "你好。")
        assert "三短一长" not in sent(first)
        keyed = run_turn(graph, ctx, instance, "说说灯塔。")
        assert "三短一长" in sent(keyed), retrieval_said(keyed)  # keyed (turn 2)
        with session_scope(sqlite_url) as s:
            branch_point = get_path_ids(s, instance)[-1]  # turn 2's reply
        assert "三短一长" in sent(run_turn(graph, ctx, instance, "然后呢？"))  # sticky
        assert "三短一长" not in sent(run_turn(graph, ctx, instance, "灯塔还在吗？"))  # cooling down
        assert "三短一长" in sent(run_turn(graph, ctx, instance, "灯塔！"))  # cooled down: keyed again (turn 5)
        assert "三短一长" in sent(run_turn(graph, ctx, instance, "嗯。"))  # sticky (turn 6)
        assert "三短一长" not in sent(run_turn(graph, ctx, instance, "嗯。"))  # cooling down (turn 7)
        # back to turn 2's reply: on that branch the entry fired at turn 2, so the next turn there is its sticky turn
        back = run_turn(graph, ctx, instance, "然后呢？", branch_from=branch_point)
        assert back["turn"] == 3 and "三短一长" in sent(back)
